#pragma once
// The dispatcher's reads and writes of the API, the submit ingest, the direct tool calls and
// the fleet gauges, as coroutines over a DbPool: the dispatcher calls these and never holds a
// libpqxx connection itself. Each method is one DbPool::run of the statement functions in
// submission_store, usage_store, batch_store and directory_store (which say what each does),
// so a connection broken by a Postgres restart is reopened and the call tried again there.
//
// Lifecycle: borrows the pool, which outlives it. Thread-safety: as DbPool::run (any thread);
// arguments passed by reference must live until the awaited call returns.

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/adapters/pg/batch_store.hpp"
#include "core/adapters/pg/db_pool.hpp"
#include "core/adapters/pg/directory_store.hpp"
#include "core/adapters/pg/submission_store.hpp"
#include "core/adapters/pg/usage_store.hpp"

namespace agentfleet::pg {

// One page of a batch's results: JSON lines, and where it ended (an empty task id: none).
struct ResultsPage {
  std::string lines;
  ResultsCursor last;
};

// One slice of a batch cancel: the tasks it took, and the last task id it reached.
struct CancelSlice {
  int taken = 0;
  std::string last;
};

// The live tasks by status and the due outbox rows, for the dispatcher's gauges.
struct FleetCounts {
  LiveTaskCounts live;
  std::int64_t outbox_due = 0;
};

template <typename T>
using Awaitable = boost::asio::awaitable<Result<T>>;

class ApiStore {
 public:
  explicit ApiStore(DbPool& db) : db_(db) {}

  // Tasks.
  Awaitable<InsertResult> insert_task(const NewTask& task, const QueueLimit& limit, bool with_json,
                                      const ModelCheck& models = {});
  Awaitable<std::optional<ParentRef>> find_parent(const std::string& user_id,
                                                  const std::string& parent_id,
                                                  const std::string& session_id,
                                                  const std::string& idempotency_key);
  Awaitable<std::optional<std::string>> task_json(const std::string& task_id);
  Awaitable<std::optional<RetrySource>> retry_source(const std::string& task_id);
  Awaitable<std::vector<TaskOwner>> tasks_in_id_range(const std::string& first,
                                                      const std::string& last, int limit);
  Awaitable<std::optional<std::string>> task_history_json(const std::string& task_id);
  // The user's queue now (queued tasks counted up to the limit + 1, and the limit).
  Awaitable<QueueRoom> queue_room(const std::string& user_id, QueueLimit limit);
  // Of `task_ids` (uuids), those of `user_id` that have ended.
  Awaitable<std::vector<std::string>> ended_of_user(const std::string& user_id,
                                                    std::vector<std::string> task_ids);
  Awaitable<TaskListPage> list_tasks(const TaskListQuery& query);
  // Replayed dead letters (submission_store: record_replay, letter_replays).
  Awaitable<bool> record_replay(const ReplayRecord& record);
  Awaitable<std::map<LetterAt, LetterReplays>> letter_replays(const std::string& letter_topic,
                                                              std::vector<LetterAt> letters);
  Awaitable<CancelOutcome> cancel_task(const std::string& task_id,
                                       const std::string& results_topic);

  // GET /v1/fleet: live workers, queued tasks by priority, tasks in flight (JSON text).
  Awaitable<std::string> fleet_json();

  // Usage and limits.
  Awaitable<std::string> usage_json(const UsageQuery& query);
  Awaitable<std::optional<UserOverrides>> get_user_overrides(const std::string& user_id);
  Awaitable<bool> put_user_overrides(const UserOverrides& overrides);

  // Batches.
  // GET /v1/batches: the page as a JSON array (list_batches).
  Awaitable<std::string> list_batches(const BatchListQuery& query);
  // The batches named `name` there to be read (find_batches).
  Awaitable<std::vector<BatchHeader>> find_batches(const std::string& name,
                                                   const std::string& user_id, int limit);
  Awaitable<std::optional<std::string>> batch_json(const std::string& batch_id);
  // The page of up to `limit` results after `after` (an empty task id: from the first).
  Awaitable<ResultsPage> batch_results_page(const BatchHeader& batch, const ResultsCursor& after,
                                            int limit);
  // Up to `limit` of the batch's failed tasks after task id `after` (batch_failed_tasks).
  Awaitable<std::vector<std::string>> batch_failed_tasks(const BatchHeader& batch,
                                                         const std::string& after, int limit);
  // One cancel slice of up to `limit` tasks after task id `after` (empty: from the first).
  Awaitable<CancelSlice> cancel_batch_slice(const BatchHeader& batch, const std::string& after,
                                            int limit, const std::string& results_topic);

  // Direct tool calls and the tool catalogue's statistics.
  Awaitable<std::int64_t> insert_tool_audit(const ToolAuditEntry& entry);
  Awaitable<bool> finish_tool_audit(std::int64_t id, const std::string& outcome, int http_status,
                                    int latency_ms, const std::string& error);
  Awaitable<std::string> stats_json(const StatsQuery& query);

  // Gauges and readiness.
  Awaitable<FleetCounts> fleet_counts();
  boost::asio::awaitable<Status> ping() { return db_.ping(); }
  DbPool& pool() { return db_; }

 private:
  DbPool& db_;
  // What submissions believe of users' overrides (insert_task checks it under the lock).
  KnownOverrides known_overrides_;
};

}  // namespace agentfleet::pg
