#pragma once
// Whether a commit on the fleet's Postgres waits for a synchronous standby. A step, a
// submission or a seal the fleet acknowledges is a committed row; with an asynchronous
// standby (or none) a failover can lose the last of them, and the exactness invariants
// with them (docs/deploy.md, "Replication"). Both processes read it from their own
// sessions (what their commits do), log it when it changes, show it in /readyz and as the
// gauge agentfleet_postgres_synchronous_replication; postgres.require_synchronous_replication
// makes a replica not ready without it.
//
// judge_replication is pure; ReplicationWatch keeps the last reading. Thread-safety:
// ReplicationWatch may be used from any thread.

#include <boost/asio/awaitable.hpp>
#include <pqxx/pqxx>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "core/adapters/pg/db_pool.hpp"
#include "core/domain/error.hpp"
#include "core/ports/api_store.hpp"

namespace agentfleet::pg {

// What a session of the fleet reads of the server's replication.
struct ReplicationSettings {
  std::string synchronous_commit;         // on, remote_apply, remote_write, local, off
  std::string synchronous_standby_names;  // empty: no synchronous standby
  // Standbys pg_stat_replication shows in sync (sync_state sync or quorum), and those whose
  // state this role may not see (it needs pg_monitor or pg_read_all_stats).
  std::int64_t standbys_in_sync = 0;
  std::int64_t standbys_hidden = 0;
};

using ports::ReplicationState;

ReplicationState judge_replication(const ReplicationSettings& settings);

// Why a process is not ready with `state` when synchronous replication is `required`
// (postgres.require_synchronous_replication); nullopt when it is ready.
std::optional<std::string> replication_refusal(const ReplicationState& state, bool required);

// One statement on `c`.
ReplicationSettings read_replication(pqxx::connection& c);

// A ready process's /readyz answer:
// {"status":"ready","postgres":{"synchronous_replication","detail"}}.
std::string ready_json(const ReplicationState& state);

class ReplicationWatch {
 public:
  explicit ReplicationWatch(std::string component) : component_(std::move(component)) {}
  // Reads it again on a pool thread (the readiness probe: it also proves Postgres answers);
  // logs it when it differs from the last reading (a warning when commits do not wait).
  boost::asio::awaitable<Result<ReplicationState>> check(DbPool& db);
  // The last reading; nullopt before the first.
  std::optional<ReplicationState> last() const;

 private:
  std::string component_;
  mutable std::mutex mutex_;
  std::optional<ReplicationState> last_;  // guarded by mutex_
};

}  // namespace agentfleet::pg
