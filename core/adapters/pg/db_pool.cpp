#include "core/adapters/pg/db_pool.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include <boost/asio/post.hpp>
#include <thread>

namespace agentfleet::pg {

namespace {
// Each pool thread belongs to exactly one DbPool, so one slot per thread is enough; the
// non-pool callers of run_blocking get their own slot too.
thread_local std::unique_ptr<pqxx::connection> tls_connection;
}  // namespace

Error map_pg_error(const std::exception& e) {
  if (dynamic_cast<const pqxx::broken_connection*>(&e)) {
    return Error{ErrorKind::kTransient, std::string("postgres connection: ") + e.what()};
  }
  // libpqxx 6 raises deadlocks, serialization failures and statements of unknown outcome
  // as transaction_rollback, which is not an sql_error: all are worth another try.
  if (dynamic_cast<const pqxx::transaction_rollback*>(&e)) {
    return Error{ErrorKind::kTransient, std::string("postgres: ") + e.what()};
  }
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&e)) {
    const std::string state = sql->sqlstate();
    // 40001 serialization_failure, 40P01 deadlock, 57014 query_canceled (statement
    // timeout), 55P03 lock_not_available, 08xxx connection, 53xxx resources, 57P0x shutdown.
    if (state == "40001" || state == "40P01" || state == "55P03" || state.rfind("08", 0) == 0 ||
        state.rfind("53", 0) == 0 || state.rfind("57P", 0) == 0) {
      return Error{ErrorKind::kTransient, std::string("postgres: ") + e.what()};
    }
    if (state == "57014")
      return Error{ErrorKind::kTimeout, std::string("postgres: ") + e.what()};
    if (state == "23505")
      return Error{ErrorKind::kConflict, std::string("postgres: ") + e.what()};
    if (state.rfind("22", 0) == 0 || state.rfind("23", 0) == 0) {
      return Error{ErrorKind::kInvalid, std::string("postgres: ") + e.what()};
    }
  }
  if (dynamic_cast<const pqxx::in_doubt_error*>(&e)) {
    return Error{ErrorKind::kTransient, std::string("postgres commit in doubt: ") + e.what()};
  }
  return Error{ErrorKind::kFatal, std::string("postgres: ") + e.what()};
}

DbPool::DbPool(std::string url, int threads, int statement_timeout_ms, int connect_timeout_s,
               PlanCache plans)
    : url_(std::move(url)),
      threads_(threads),
      statement_timeout_ms_(statement_timeout_ms),
      connect_timeout_s_(connect_timeout_s),
      plans_(plans),
      call_deadline_(std::max(2 * statement_timeout_ms, statement_timeout_ms + 5000)),
      pool_(static_cast<std::size_t>(threads)) {}

DbPool::~DbPool() {
  join();
}

void DbPool::join() {
  pool_.join();
}

boost::asio::awaitable<Status> DbPool::ping() {
  auto answered = co_await run([](pqxx::connection& c) {
    pqxx::nontransaction(c).exec1("SELECT 1");
    return true;
  });
  if (!answered.ok())
    co_return answered.error();
  co_return Done{};
}

void DbPool::post_with_connection(std::function<void(pqxx::connection*, const Error*)> f) {
  const auto queued = std::chrono::steady_clock::now();
  boost::asio::post(pool_, [this, f = std::move(f), queued] {
    if (queue_wait_observer_) {
      queue_wait_observer_(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - queued).count());
    }
    ++in_use_;
    pqxx::connection* c = nullptr;
    std::optional<Error> error;
    try {
      c = &connection();
    } catch (const std::exception& e) {
      drop_connection();
      error = map_pg_error(e);
    }
    f(c, error ? &*error : nullptr);
    --in_use_;
  });
}

pqxx::connection* DbPool::reopen_connection(int attempt, std::optional<Error>& error) {
  drop_connection();
  if (attempt > 0)
    backoff(attempt - 1);
  try {
    return &connection();
  } catch (const std::exception& e) {
    drop_connection();
    error = map_pg_error(e);
    return nullptr;
  }
}

std::unique_ptr<pqxx::connection> open_connection(const std::string& url, int statement_timeout_ms,
                                                  int connect_timeout_s, PlanCache plans) {
  // connect_timeout bounds the TCP/handshake part; statement_timeout every statement.
  std::string options = url;
  const bool uri = options.rfind("postgres", 0) == 0 && options.find("://") != std::string::npos;
  // TCP keepalives: a peer that vanished without a FIN (a dead node, a partition) is
  // noticed in about 25 s, not the kernel's two hours; for the scheduler this is how long
  // its advisory lock outlives a lost leader.
  // tcp_user_timeout: data the peer never acknowledges (a partition while a statement is
  // being sent) fails the connection after 20 s. Neither helps when something on the path
  // still acknowledges (a half-open proxy): every call's client-side deadline does
  // (CallWatchdog).
  const std::vector<std::string> extras = {"connect_timeout=" + std::to_string(connect_timeout_s),
                                           "keepalives=1",
                                           "keepalives_idle=10",
                                           "keepalives_interval=5",
                                           "keepalives_count=3",
                                           "tcp_user_timeout=20000"};
  for (const std::string& extra : extras) {
    if (uri) {
      options += (options.find('?') == std::string::npos ? "?" : "&") + extra;
    } else {
      options += " " + extra;
    }
  }
  auto connection = std::make_unique<pqxx::connection>(options);
  {
    // A session that stops talking in the middle of a transaction (its client died, or the
    // path to it went silent) is ended by the server, so its row locks do not hold up the
    // fleet: twice the statement timeout, at least ten seconds.
    // No JIT compilation: every statement here is short, and the planner's estimates for the
    // JSON arrays they take (100 rows a function) pushed the scheduler's admission over the JIT
    // thresholds once `tasks` held a deep backlog with statistics: it was compiled, with
    // inlining and optimization, in every pass, which took 2 s a pass (docs/performance.md,
    // 2026-12-03). The plan cache's mode: PlanCache (db_pool.hpp). One round trip for all.
    const int idle_in_transaction_ms = std::max(10000, 2 * statement_timeout_ms);
    pqxx::nontransaction tx(*connection);
    tx.exec0("SET statement_timeout = " + std::to_string(statement_timeout_ms) +
             "; SET lock_timeout = " + std::to_string(statement_timeout_ms) +
             "; SET idle_in_transaction_session_timeout = " +
             std::to_string(idle_in_transaction_ms) + "; SET jit = off" +
             (plans == PlanCache::kGeneric ? "; SET plan_cache_mode = force_generic_plan" : ""));
  }
  return connection;
}

pqxx::connection& DbPool::connection() {
  if (!tls_connection || !tls_connection->is_open())
    tls_connection = open_connection(url_, statement_timeout_ms_, connect_timeout_s_, plans_);
  return *tls_connection;
}

void DbPool::drop_connection() {
  tls_connection.reset();
}

bool DbPool::is_broken() {
  return tls_connection && !tls_connection->is_open();
}

void DbPool::backoff(int attempt) {
  std::this_thread::sleep_for(std::chrono::milliseconds(50 << std::min(attempt, 4)));
}

}  // namespace agentfleet::pg
