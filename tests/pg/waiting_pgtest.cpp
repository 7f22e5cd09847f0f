// Why queued tasks wait, on a private Postgres (tests/pg): the fleet's scheduler
// (dispatcher::Scheduler on pg::SchedulerSession) runs its passes over rows each test makes,
// and the API's reads (pg::task_json, pg::list_tasks, pg::batch_json) name the limit that
// holds each queued task: the user's concurrency, requests and tokens per minute, the
// fleet's capacity, the batch share, a follow-up's parent; and nothing once nothing waits.
// The passes are driven one by one (round()), so nothing here depends on timing.

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <pqxx/pqxx>

#include <chrono>
#include <string>

#include "core/adapters/metrics/dispatcher_metrics.hpp"
#include "core/adapters/metrics/metrics_registry.hpp"
#include "core/adapters/pg/batch_store.hpp"
#include "core/adapters/pg/scheduler_session.hpp"
#include "core/adapters/pg/submission_store.hpp"
#include "core/config/config.hpp"
#include "core/limits/clock.hpp"
#include "dispatcher/scheduler.hpp"
#include "tests/pg/pg_url.hpp"

namespace agentfleet {
namespace {

using pgtest::pg_url;

config::Config fleet_config() {
  return config::load_config_text(R"(
postgres: {url: x}
kafka: {bootstrap_servers: b}
models: [{name: sim-model, endpoints: [{url: "http://h/x"}]}]
billing:
  prices: [{model: sim-model, effective_from: "2026-01-01", input_per_million: "1"}]
task_defaults: {tier: standard}
tiers:
  - {tier: standard, max_concurrency: 100, requests_per_minute: 1000, max_queued: 10000}
)",
                                  "waiting.yaml");
}

void exec(pqxx::connection& db, const std::string& sql) {
  pqxx::work tx(db);
  tx.exec0(sql);
  tx.commit();
}

// A task of `user` in `status`; its id.
std::string insert_task(pqxx::connection& db, const std::string& user, const std::string& status,
                        const std::string& priority = "interactive", const std::string& parent = "",
                        const std::string& batch = "") {
  pqxx::work tx(db);
  auto row = tx.exec_params1(
      R"SQL(INSERT INTO tasks (task_id, user_id, text, model, timeout_s, schedule_timeout_s,
                               max_steps, priority, request_canonical, status, parent_task_id,
                               batch_id, started_at)
            VALUES (gen_random_uuid(), $1, 'x', 'sim-model', 30, 3600, 10, $3, '{}', $2,
                    NULLIF($4, '')::uuid, NULLIF($5, ''),
                    CASE WHEN $2 = 'running' THEN now() END)
            RETURNING task_id::text)SQL",
      user, status, priority, parent, batch);
  tx.commit();
  return row[0].as<std::string>();
}

void set_limits(pqxx::connection& db, const std::string& user, const std::string& columns,
                const std::string& values) {
  exec(db, "INSERT INTO user_limits (user_id, " + columns + ") VALUES ('" + user + "', " + values +
               ") ON CONFLICT (user_id) DO NOTHING");
}

// A live worker that takes work and can run `capacity` tasks at once.
void live_worker(pqxx::connection& db, int capacity) {
  exec(db,
       "INSERT INTO workers (worker_id, lease_until, capacity, dispatch_lag, draining, "
       "heartbeat_at) VALUES ('w', now() + interval '1 minute', " +
           std::to_string(capacity) + ", 0, false, now())");
}

// What a member of the JSON object `text` is, as text ("null" for null, "" when absent).
std::string member(const std::string& text, const char* name) {
  rapidjson::Document doc;
  doc.Parse(text.c_str());
  if (!doc.IsObject() || !doc.HasMember(name))
    return "";
  const auto& v = doc[name];
  return v.IsNull() ? "null" : v.IsString() ? v.GetString() : "?";
}

std::string waiting_reason(pqxx::connection& db, const std::string& task_id) {
  const auto json = pg::task_json(db, task_id);
  return json ? member(*json, "waiting_reason") : "(no task)";
}

class Waiting : public ::testing::Test {
 protected:
  void SetUp() override {
    // The scheduler sees every row of the cluster: each test starts from an empty queue.
    exec(db_,
         "DELETE FROM tasks WHERE status IN ('staged', 'queued', 'dispatched', 'running'); "
         "DELETE FROM workers; DELETE FROM waiting_reasons");
  }
  void round() {
    // Waiting reasons are written at most once a second.
    clock_.advance(std::chrono::seconds(1));
    scheduler_.round();
    ASSERT_TRUE(scheduler_.leader()) << "the test's scheduler holds the lock";
  }

  pqxx::connection db_{pg_url()};
  config::Config config_ = fleet_config();
  limits::ManualClock clock_;
  pg::SchedulerSession session_{pg::SchedulerSessionOptions{pg_url()}};
  metrics::MetricsRegistry registry_{metrics::RegistryOptions{.process_metrics = false}};
  metrics::DispatcherMetrics metrics_{registry_, config_};
  dispatcher::Scheduler scheduler_{config_, session_, metrics_, clock_};
};

TEST_F(Waiting, EachUsersOwnLimitIsNamedOnItsQueuedTasksAndAFollowUpWaitsForItsParent) {
  live_worker(db_, 1000);
  // One at a time, one running already.
  set_limits(db_, "wait-conc", "max_concurrency", "1");
  insert_task(db_, "wait-conc", "running");
  const std::string conc = insert_task(db_, "wait-conc", "queued");
  // One admission a minute.
  set_limits(db_, "wait-rpm", "requests_per_minute", "1");
  insert_task(db_, "wait-rpm", "queued");
  const std::string rpm = insert_task(db_, "wait-rpm", "queued");
  // 1,000 tokens a minute: the first task's estimate (4,000 before any result) takes them.
  set_limits(db_, "wait-tpm", "tokens_per_minute", "1000");
  insert_task(db_, "wait-tpm", "queued");
  const std::string tpm = insert_task(db_, "wait-tpm", "queued");
  // A follow-up of a task still running.
  const std::string parent = insert_task(db_, "wait-parent", "running");
  const std::string follow_up = insert_task(db_, "wait-parent", "queued", "interactive", parent);
  // A user no limit holds: nothing of theirs waits after the pass.
  const std::string free = insert_task(db_, "wait-free", "queued");
  // Before any pass: queued, nothing held them back yet.
  EXPECT_EQ(waiting_reason(db_, conc), "scheduling");

  round();
  EXPECT_EQ(waiting_reason(db_, conc), "concurrency");
  EXPECT_EQ(waiting_reason(db_, rpm), "requests_per_minute");
  EXPECT_EQ(waiting_reason(db_, tpm), "tokens_per_minute");
  EXPECT_EQ(waiting_reason(db_, follow_up), "parent");
  EXPECT_EQ(waiting_reason(db_, free), "null") << "dispatched: it waits for nothing";
  // The list shows the same.
  pg::TaskListQuery query;
  query.user_id = "wait-rpm";
  query.status = "queued";
  query.limit = 10;
  const std::string list = pg::list_tasks(db_, query).tasks;
  EXPECT_NE(list.find(R"("waiting_reason":"requests_per_minute")"), std::string::npos) << list;

  // The running task ends and its parent's follow-up, the concurrency user's next, start.
  exec(db_,
       "UPDATE tasks SET status = 'succeeded', finished_at = now() "
       "WHERE user_id IN ('wait-conc', 'wait-parent') AND status = 'running'");
  round();
  EXPECT_EQ(waiting_reason(db_, conc), "null");
  EXPECT_EQ(waiting_reason(db_, follow_up), "null");
  EXPECT_EQ(waiting_reason(db_, rpm), "requests_per_minute") << "still this minute";
  pqxx::work tx(db_);
  EXPECT_EQ(
      tx.exec1("SELECT count(*) FROM waiting_reasons WHERE user_id = 'wait-conc'")[0].as<int>(), 0)
      << "a user no longer waiting has no row";
}

TEST_F(Waiting, TheFleetsCapacityHoldsInteractiveWorkAndBatchWorkWaitsBehindIt) {
  // Room for 5: interactive work gets 4, batch work its guaranteed fifth.
  live_worker(db_, 5);
  exec(db_,
       "INSERT INTO batches (batch_id, user_id, priority, total) "
       "VALUES ('wait-batch', 'wait-b', 'batch', 10) ON CONFLICT DO NOTHING");
  std::string interactive, batch;
  for (int i = 0; i < 10; ++i) {
    interactive = insert_task(db_, "wait-i", "queued");
    batch = insert_task(db_, "wait-b", "queued", "batch", "", "wait-batch");
  }
  round();
  EXPECT_EQ(waiting_reason(db_, interactive), "fleet_capacity");
  EXPECT_EQ(waiting_reason(db_, batch), "batch_share");
  const auto shown = pg::batch_json(db_, "wait-batch");
  ASSERT_TRUE(shown);
  EXPECT_EQ(member(*shown, "waiting_reason"), "batch_share") << *shown;

  // Full: both wait for the fleet's room (nothing interactive went ahead of the batch).
  round();
  EXPECT_EQ(waiting_reason(db_, interactive), "fleet_capacity");
  EXPECT_EQ(waiting_reason(db_, batch), "fleet_capacity");

  // Everything ends or goes: nothing is queued, nothing is said to wait.
  exec(db_, "DELETE FROM tasks WHERE user_id IN ('wait-i', 'wait-b')");
  round();
  pqxx::work tx(db_);
  EXPECT_EQ(tx.exec1("SELECT count(*) FROM waiting_reasons")[0].as<int>(), 0);
}

}  // namespace
}  // namespace agentfleet
