#include "core/adapters/pg/api_store.hpp"

namespace agentfleet::pg {

Awaitable<InsertResult> ApiStore::insert_task(const NewTask& task, const QueueLimit& limit,
                                              bool with_json, const ModelCheck& models) {
  co_return co_await db_.run([&](pqxx::connection& c) {
    return pg::insert_task(c, task, limit, with_json, models, &known_overrides_);
  });
}

Awaitable<std::optional<ParentRef>> ApiStore::find_parent(const std::string& user_id,
                                                          const std::string& parent_id,
                                                          const std::string& session_id,
                                                          const std::string& idempotency_key) {
  co_return co_await db_.run([&](pqxx::connection& c) {
    return pg::find_parent(c, user_id, parent_id, session_id, idempotency_key);
  });
}

Awaitable<std::optional<std::string>> ApiStore::task_json(const std::string& task_id) {
  co_return co_await db_.run([&](pqxx::connection& c) { return pg::task_json(c, task_id); });
}

Awaitable<std::optional<RetrySource>> ApiStore::retry_source(const std::string& task_id) {
  co_return co_await db_.run([&](pqxx::connection& c) { return pg::retry_source(c, task_id); });
}

Awaitable<std::vector<TaskOwner>> ApiStore::tasks_in_id_range(const std::string& first,
                                                              const std::string& last, int limit) {
  co_return co_await db_.run(
      [&](pqxx::connection& c) { return pg::tasks_in_id_range(c, first, last, limit); });
}

Awaitable<std::optional<std::string>> ApiStore::task_history_json(const std::string& task_id) {
  co_return co_await db_.run(
      [&](pqxx::connection& c) { return pg::task_history_json(c, task_id); });
}

Awaitable<QueueRoom> ApiStore::queue_room(const std::string& user_id, QueueLimit limit) {
  co_return co_await db_.run(
      [&](pqxx::connection& c) { return pg::queue_room_now(c, user_id, limit); });
}

Awaitable<std::vector<std::string>> ApiStore::ended_of_user(const std::string& user_id,
                                                            std::vector<std::string> task_ids) {
  co_return co_await db_.run(
      [&](pqxx::connection& c) { return pg::ended_of_user(c, user_id, task_ids); });
}

Awaitable<bool> ApiStore::record_replay(const ReplayRecord& record) {
  co_return co_await db_.run([&](pqxx::connection& c) {
    pg::record_replay(c, record);
    return true;
  });
}

Awaitable<std::map<LetterAt, LetterReplays>> ApiStore::letter_replays(
    const std::string& letter_topic, std::vector<LetterAt> letters) {
  co_return co_await db_.run(
      [&](pqxx::connection& c) { return pg::letter_replays(c, letter_topic, letters); });
}

Awaitable<TaskListPage> ApiStore::list_tasks(const TaskListQuery& query) {
  co_return co_await db_.run([&](pqxx::connection& c) { return pg::list_tasks(c, query); });
}

Awaitable<CancelOutcome> ApiStore::cancel_task(const std::string& task_id,
                                               const std::string& results_topic) {
  co_return co_await db_.run(
      [&](pqxx::connection& c) { return pg::cancel_task(c, task_id, results_topic); });
}

Awaitable<std::string> ApiStore::usage_json(const UsageQuery& query) {
  co_return co_await db_.run([&](pqxx::connection& c) { return pg::usage_json(c, query); });
}

Awaitable<std::optional<UserOverrides>> ApiStore::get_user_overrides(const std::string& user_id) {
  co_return co_await db_.run(
      [&](pqxx::connection& c) { return pg::get_user_overrides(c, user_id); });
}

Awaitable<bool> ApiStore::put_user_overrides(const UserOverrides& overrides) {
  co_return co_await db_.run([&](pqxx::connection& c) {
    pg::put_user_overrides(c, overrides, &known_overrides_);
    return true;
  });
}

Awaitable<std::string> ApiStore::list_batches(const BatchListQuery& query) {
  co_return co_await db_.run([&](pqxx::connection& c) { return pg::list_batches(c, query); });
}

Awaitable<std::vector<BatchHeader>> ApiStore::find_batches(const std::string& name,
                                                           const std::string& user_id, int limit) {
  co_return co_await db_.run(
      [&](pqxx::connection& c) { return pg::find_batches(c, name, user_id, limit); });
}

Awaitable<std::optional<std::string>> ApiStore::batch_json(const std::string& batch_id) {
  co_return co_await db_.run([&](pqxx::connection& c) { return pg::batch_json(c, batch_id); });
}

Awaitable<ResultsPage> ApiStore::batch_results_page(const BatchHeader& batch,
                                                    const ResultsCursor& after, int limit) {
  co_return co_await db_.run([&](pqxx::connection& c) {
    ResultsPage page;
    page.lines = pg::batch_results_page(c, batch, after, limit, page.last);
    return page;
  });
}

Awaitable<std::vector<std::string>> ApiStore::batch_failed_tasks(const BatchHeader& batch,
                                                                 const std::string& after,
                                                                 int limit) {
  co_return co_await db_.run(
      [&](pqxx::connection& c) { return pg::batch_failed_tasks(c, batch, after, limit); });
}

Awaitable<CancelSlice> ApiStore::cancel_batch_slice(const BatchHeader& batch,
                                                    const std::string& after, int limit,
                                                    const std::string& results_topic) {
  co_return co_await db_.run([&](pqxx::connection& c) {
    // A retried attempt starts again where the last committed slice ended.
    CancelSlice slice{0, after};
    slice.taken = pg::cancel_batch_slice(c, batch, slice.last, limit, results_topic);
    return slice;
  });
}

Awaitable<std::int64_t> ApiStore::insert_tool_audit(const ToolAuditEntry& entry) {
  co_return co_await db_.run([&](pqxx::connection& c) { return pg::insert_tool_audit(c, entry); });
}

Awaitable<bool> ApiStore::finish_tool_audit(std::int64_t id, const std::string& outcome,
                                            int http_status, int latency_ms,
                                            const std::string& error) {
  co_return co_await db_.run([&](pqxx::connection& c) {
    pg::finish_tool_audit(c, id, outcome, http_status, latency_ms, error);
    return true;
  });
}

Awaitable<std::string> ApiStore::fleet_json() {
  co_return co_await db_.run([](pqxx::connection& c) { return pg::fleet_json(c); });
}

Awaitable<std::string> ApiStore::stats_json(const StatsQuery& query) {
  co_return co_await db_.run([&](pqxx::connection& c) { return pg::stats_json(c, query); });
}

Awaitable<FleetCounts> ApiStore::fleet_counts() {
  co_return co_await db_.run([](pqxx::connection& c) {
    return FleetCounts{pg::count_live_tasks(c), pg::count_due_outbox(c)};
  });
}

Awaitable<ReplicationState> ApiStore::check_replication() {
  co_return co_await replication_.check(db_);
}

}  // namespace agentfleet::pg
