#pragma once
// Blocking libpqxx work, kept off the I/O threads: a fixed set of threads, each with its
// own connection (opened lazily, reopened after it breaks). `run(f)` executes
// f(pqxx::connection&) on one of them and resumes the awaiting coroutine on its own
// executor. libpqxx exceptions are mapped to Error values here, in one place. Every call
// has a client-side deadline too (call_deadline(): twice the statement timeout, at least
// five seconds more than it): a call the server never answers is cut by a CallWatchdog and
// fails as a timeout.
//
// Thread-safety: run() may be called from any thread. Destruction joins the threads.
// For the metrics: in_use() and size(), and an observer of how long each run() waited
// for a thread (set it before the first run()).

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <pqxx/pqxx>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "core/adapters/pg/call_watchdog.hpp"
#include "core/domain/error.hpp"

namespace agentfleet::pg {

Error map_pg_error(const std::exception& e);

// How a session's statements are planned.
//   kAuto     Postgres's default: a plan for the arguments at each of a statement's first
//             five executions, and after them too whenever its generic plan's estimate is
//             the dearer. For sessions whose statements are planned for their filters (the
//             API's reads, sent with exec_text: a filter that is empty or not).
//   kGeneric  the generic plan, made once and kept until an ANALYZE or VACUUM of a table
//             it names invalidates it (plan_cache_mode = force_generic_plan). For the
//             fleet's write path (the workers' runs and liveness, the scheduler, the relay):
//             its statements take their rows as a JSON array or reach them by key, so a plan
//             for the arguments is no better, and under the default the claim was planned at
//             a third of its executions and the published rows' delete (an array of ids,
//             which a generic plan takes for ten) at three quarters (docs/performance.md,
//             2026-12-03).
enum class PlanCache { kAuto, kGeneric };

// A connection with connect_timeout added to `url` and statement and lock timeouts set:
// every statement on it has a deadline. Throws what libpqxx throws.
std::unique_ptr<pqxx::connection> open_connection(const std::string& url, int statement_timeout_ms,
                                                  int connect_timeout_s,
                                                  PlanCache plans = PlanCache::kAuto);

class DbPool {
 public:
  DbPool(std::string url, int threads, int statement_timeout_ms, int connect_timeout_s,
         PlanCache plans = PlanCache::kAuto);
  ~DbPool();
  // Waits for the queued work to finish and stops the threads; run() must not be called
  // afterwards. The destructor does it too.
  void join();
  DbPool(const DbPool&) = delete;
  DbPool& operator=(const DbPool&) = delete;

  int size() const { return threads_; }
  int in_use() const { return in_use_.load(std::memory_order_relaxed); }
  void set_queue_wait_observer(std::function<void(double seconds)> observer) {
    queue_wait_observer_ = std::move(observer);
  }

  template <typename F>
  auto run(F f) -> boost::asio::awaitable<Result<std::invoke_result_t<F, pqxx::connection&>>> {
    using R = std::invoke_result_t<F, pqxx::connection&>;
    const auto queued = std::chrono::steady_clock::now();
    co_return co_await boost::asio::co_spawn(
        pool_.get_executor(),
        [this, fn = std::move(f), queued]() mutable -> boost::asio::awaitable<Result<R>> {
          if (queue_wait_observer_) {
            queue_wait_observer_(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - queued).count());
          }
          ++in_use_;
          Result<R> result = run_here<R>(fn);
          --in_use_;
          co_return result;
        },
        boost::asio::use_awaitable);
  }

  // `SELECT 1` on a pool thread: ok when Postgres answers (the readiness probes).
  boost::asio::awaitable<Status> ping();

  // Fire and forget: f runs on a pool thread with that thread's connection, or with nullptr
  // and the error when no connection could be opened. f must not throw.
  void post_with_connection(std::function<void(pqxx::connection*, const Error*)> f);

  // Only inside a post_with_connection function, whose connection turned out broken (one
  // that Postgres closed in a restart looks open until it is used): drops it and opens a
  // new one for this thread, after a short backoff from the second try on (`attempt` > 0).
  // nullptr and `error` set when Postgres cannot be reached.
  pqxx::connection* reopen_connection(int attempt, std::optional<Error>& error);

  // Arms the pool's watchdog on `c` for one call_deadline() (callers that hold a connection
  // of post_with_connection for a call of their own, such as the write batcher).
  CallWatchdog::Armed arm(pqxx::connection& c) {
    return watchdog_.arm(c.sock(), std::chrono::steady_clock::now() + call_deadline_);
  }
  std::chrono::milliseconds call_deadline() const { return call_deadline_; }

  // The same on the calling thread (for start-up and dedicated loops).
  template <typename F>
  auto run_blocking(F f) -> Result<std::invoke_result_t<F, pqxx::connection&>> {
    using R = std::invoke_result_t<F, pqxx::connection&>;
    return run_here<R>(f);
  }

 private:
  template <typename R, typename F>
  Result<R> run_here(F& fn) {
    // A connection broken by a Postgres restart is reopened; a bounded number of tries,
    // with a short backoff, keeps a blip from failing the caller.
    for (int attempt = 0;; ++attempt) {
      std::optional<CallWatchdog::Armed> armed;
      try {
        pqxx::connection& c = connection();
        armed.emplace(arm(c));
        return Result<R>(fn(c));
      } catch (const pqxx::broken_connection& e) {
        const bool cut = armed && armed->fired();
        armed.reset();
        drop_connection();
        // Cut by the deadline: the peer does not answer; trying again would wait as long.
        if (cut) {
          return Error{ErrorKind::kTimeout, "postgres did not answer within " +
                                                std::to_string(call_deadline_.count()) +
                                                " ms (connection dropped)"};
        }
        if (attempt >= 3)
          return map_pg_error(e);
      } catch (const std::exception& e) {
        armed.reset();
        if (is_broken())
          drop_connection();
        return map_pg_error(e);
      }
      backoff(attempt);
    }
  }

  pqxx::connection& connection();
  void drop_connection();
  bool is_broken();
  static void backoff(int attempt);

  std::string url_;
  int threads_;
  std::atomic<int> in_use_{0};
  std::function<void(double)> queue_wait_observer_;
  int statement_timeout_ms_;
  int connect_timeout_s_;
  PlanCache plans_;
  std::chrono::milliseconds call_deadline_;
  CallWatchdog watchdog_;
  boost::asio::thread_pool pool_;
};

}  // namespace agentfleet::pg
