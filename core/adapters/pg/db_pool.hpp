#pragma once
// Blocking libpqxx work, kept off the I/O threads: a fixed set of threads, each with its
// own connection (opened lazily, reopened after it breaks). `run(f)` executes
// f(pqxx::connection&) on one of them and resumes the awaiting coroutine on its own
// executor. libpqxx exceptions are mapped to Error values here, in one place.
//
// Thread-safety: run() may be called from any thread. Destruction joins the threads.

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <pqxx/pqxx>

#include <string>
#include <type_traits>

#include "core/domain/error.hpp"

namespace agentfleet::pg {

Error map_pg_error(const std::exception& e);

class DbPool {
 public:
  DbPool(std::string url, int threads, int statement_timeout_ms, int connect_timeout_s);
  ~DbPool();
  // Waits for the queued work to finish and stops the threads; run() must not be called
  // afterwards. The destructor does it too.
  void join();
  DbPool(const DbPool&) = delete;
  DbPool& operator=(const DbPool&) = delete;

  template <typename F>
  auto run(F f) -> boost::asio::awaitable<Result<std::invoke_result_t<F, pqxx::connection&>>> {
    using R = std::invoke_result_t<F, pqxx::connection&>;
    co_return co_await boost::asio::co_spawn(
        pool_.get_executor(),
        [this, fn = std::move(f)]() mutable -> boost::asio::awaitable<Result<R>> {
          co_return run_here<R>(fn);
        },
        boost::asio::use_awaitable);
  }

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
      try {
        return Result<R>(fn(connection()));
      } catch (const pqxx::broken_connection& e) {
        drop_connection();
        if (attempt >= 3)
          return map_pg_error(e);
      } catch (const std::exception& e) {
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
  int statement_timeout_ms_;
  int connect_timeout_s_;
  boost::asio::thread_pool pool_;
};

}  // namespace agentfleet::pg
