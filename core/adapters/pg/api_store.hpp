#pragma once
// The dispatcher's store on Postgres (ports::ApiStore: the API, the direct tool calls, the
// fleet gauges, readiness; the submit ingest uses it too), as coroutines over a DbPool: the
// dispatcher calls these and never holds a libpqxx connection itself. Each method is one
// DbPool::run of the statement functions in submission_store, usage_store, batch_store and
// directory_store (which say what each does), so a connection broken by a Postgres restart is
// reopened and the call tried again there.
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
#include "core/adapters/pg/replication.hpp"
#include "core/adapters/pg/submission_store.hpp"
#include "core/adapters/pg/usage_store.hpp"
#include "core/ports/api_store.hpp"

namespace agentfleet::pg {

using ports::CancelSlice;
using ports::FleetCounts;
using ports::ResultsPage;

template <typename T>
using Awaitable = boost::asio::awaitable<Result<T>>;

class ApiStore final : public ports::ApiStore {
 public:
  explicit ApiStore(DbPool& db) : db_(db) {}

  Awaitable<InsertResult> insert_task(const NewTask& task, const QueueLimit& limit, bool with_json,
                                      const ModelCheck& models) override;
  Awaitable<std::optional<ParentRef>> find_parent(const std::string& user_id,
                                                  const std::string& parent_id,
                                                  const std::string& session_id,
                                                  const std::string& idempotency_key) override;
  Awaitable<std::optional<std::string>> task_json(const std::string& task_id) override;
  Awaitable<std::optional<RetrySource>> retry_source(const std::string& task_id) override;
  Awaitable<std::vector<TaskOwner>> tasks_in_id_range(const std::string& first,
                                                      const std::string& last, int limit) override;
  Awaitable<std::optional<std::string>> task_history_json(const std::string& task_id) override;
  Awaitable<QueueRoom> queue_room(const std::string& user_id, QueueLimit limit) override;
  Awaitable<std::vector<std::string>> ended_of_user(const std::string& user_id,
                                                    std::vector<std::string> task_ids) override;
  Awaitable<TaskListPage> list_tasks(const TaskListQuery& query) override;
  Awaitable<CancelOutcome> cancel_task(const std::string& task_id,
                                       const std::string& results_topic) override;
  Awaitable<bool> record_replay(const ReplayRecord& record) override;
  Awaitable<std::map<LetterAt, LetterReplays>> letter_replays(
      const std::string& letter_topic, std::vector<LetterAt> letters) override;

  Awaitable<std::string> usage_json(const UsageQuery& query) override;
  Awaitable<std::optional<UserOverrides>> get_user_overrides(const std::string& user_id) override;
  Awaitable<bool> put_user_overrides(const UserOverrides& overrides) override;

  Awaitable<std::string> list_batches(const BatchListQuery& query) override;
  Awaitable<std::vector<BatchHeader>> find_batches(const std::string& name,
                                                   const std::string& user_id, int limit) override;
  Awaitable<std::optional<std::string>> batch_json(const std::string& batch_id) override;
  Awaitable<ResultsPage> batch_results_page(const BatchHeader& batch, const ResultsCursor& after,
                                            int limit) override;
  Awaitable<std::vector<std::string>> batch_failed_tasks(const BatchHeader& batch,
                                                         const std::string& after,
                                                         int limit) override;
  Awaitable<CancelSlice> cancel_batch_slice(const BatchHeader& batch, const std::string& after,
                                            int limit, const std::string& results_topic) override;

  Awaitable<std::int64_t> insert_tool_audit(const ToolAuditEntry& entry) override;
  Awaitable<bool> finish_tool_audit(std::int64_t id, const std::string& outcome, int http_status,
                                    int latency_ms, const std::string& error) override;
  Awaitable<std::string> stats_json(const StatsQuery& query) override;

  Awaitable<std::string> fleet_json() override;
  Awaitable<FleetCounts> fleet_counts() override;
  Awaitable<ReplicationState> check_replication() override;

  // The last reading of check_replication (the dispatcher's gauge and periodic check).
  ReplicationWatch& replication() { return replication_; }
  DbPool& pool() { return db_; }

 private:
  DbPool& db_;
  // What submissions believe of users' overrides (insert_task checks it under the lock).
  KnownOverrides known_overrides_;
  ReplicationWatch replication_{"dispatcher"};
};

}  // namespace agentfleet::pg
