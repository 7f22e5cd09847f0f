// Upgrades without surprises (issue 18, item 10), on the embedded fleet: a dispatch message
// names what its task needs, and a worker that lacks one leaves the task for the scheduler
// to dispatch again instead of running it differently. (Migration checksums are pinned by
// tests/unit/migrations_pin_test.cpp; the migrator's online rules by tests/pg.)

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/integration/fleet_client.hpp"

namespace agentfleet::test {
namespace {

TEST(Upgrades, ATaskThatNeedsWhatNoWorkerCanDoIsLeftUnclaimedAndRunsOnceDispatchedAgain) {
  // A dispatched task as the scheduler leaves it, and the message a later version's
  // scheduler would send for it: it needs a feature no worker of this version has.
  const std::string user = "upgrade-" + run_tag();
  const std::string id = pg_row(R"SQL(
      INSERT INTO tasks (task_id, user_id, text, model, timeout_s, schedule_timeout_s, max_steps,
                         priority, request_canonical, status, dispatched_at)
      VALUES (gen_random_uuid(), $1, '删除2月30日的日程', 'sim-model', 30, 3600, 10, 'interactive',
              '{}', 'dispatched', now())
      RETURNING task_id::text)SQL",
                                user)[0]
                             .as<std::string>();
  const std::string declined = "agentfleet_worker_dispatches_declined_total";
  const double declined_before = metric_sum(worker_metrics_urls(), declined);
  produce("agent.tasks.dispatch", id,
          R"({"version":1,"task_id":")" + id + R"(","user_id":")" + user +
              R"(","priority":"interactive","dispatched_at":"2026-01-01T00:00:00.000Z"})",
          {{"agentfleet-needs", "strategy:react feature:from_a_later_version"}});

  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (metric_sum(worker_metrics_urls(), declined) < declined_before + 1 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GE(metric_sum(worker_metrics_urls(), declined), declined_before + 1)
      << "no worker declined the message";
  // Declined, not claimed: no attempt, no start, still dispatched.
  auto row =
      pg_row("SELECT status, attempt, started_at IS NULL FROM tasks WHERE task_id = $1::uuid", id);
  EXPECT_EQ(row[0].as<std::string>(), "dispatched");
  EXPECT_EQ(row[1].as<int>(), 0);
  EXPECT_TRUE(row[2].as<bool>());

  // Time passes (redispatch_after_s, five times over): the scheduler sends it again with
  // what it needs of this version, and a worker runs it.
  pg_row(
      "UPDATE tasks SET dispatched_at = now() - interval '10 minutes' WHERE task_id = $1::uuid "
      "RETURNING 1",
      id);
  auto task = wait_terminal(id);
  EXPECT_EQ(str(task, "status"), "succeeded") << str(task, "error");
  EXPECT_EQ(num(task, "attempt"), 1) << "the declined message cost no attempt";
}

}  // namespace
}  // namespace agentfleet::test
