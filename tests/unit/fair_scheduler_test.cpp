// The dispatcher's admission policy (core/limits/fair_scheduler): per-user concurrency,
// rate, token and budget limits, the fleet cap, interactive before batch with a batch
// share, and weighted round robin, driven by a ManualClock.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/domain/task.hpp"
#include "core/limits/clock.hpp"
#include "core/limits/fair_scheduler.hpp"

namespace agentfleet::limits {
namespace {

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

// Limits that never bind, so each test turns on only the limit it is about.
UserLimits open_limits() {
  UserLimits limits;
  limits.max_concurrency = 1000;
  limits.requests_per_minute = 0;
  limits.tokens_per_minute = 0;
  limits.monthly_budget_micros = 0;
  limits.weight = 1;
  return limits;
}

UserBacklog backlog(std::string user_id, std::int64_t interactive, std::int64_t batch = 0,
                    UserLimits limits = open_limits(), int active = 0) {
  UserBacklog user;
  user.user_id = std::move(user_id);
  user.limits = limits;
  user.active = active;
  user.queued_interactive = interactive;
  user.queued_batch = batch;
  return user;
}

FairSchedulerOptions options(int pass_limit, std::int64_t max_active = 0,
                             double batch_share = 0.2) {
  FairSchedulerOptions o;
  o.pass_limit = pass_limit;
  o.max_active = max_active;
  o.batch_share = batch_share;
  o.default_task_tokens = 4000;
  return o;
}

int granted(const PassPlan& plan, const std::string& user_id) {
  int tasks = 0;
  for (const auto& grant : plan.grants)
    if (grant.user_id == user_id)
      tasks += grant.tasks;
  return tasks;
}

int granted(const PassPlan& plan, const std::string& user_id, Priority priority) {
  int tasks = 0;
  for (const auto& grant : plan.grants)
    if (grant.user_id == user_id && grant.priority == priority)
      tasks += grant.tasks;
  return tasks;
}

int total(const PassPlan& plan) {
  int tasks = 0;
  for (const auto& grant : plan.grants)
    tasks += grant.tasks;
  return tasks;
}

int throttled(const PassPlan& plan, ThrottleCause cause) {
  return plan.throttled[static_cast<int>(cause)];
}

int throttled_total(const PassPlan& plan) {
  int n = 0;
  for (int count : plan.throttled)
    n += count;
  return n;
}

// The store dispatches every grant it was given.
void dispatch_all(FairScheduler& scheduler, const PassPlan& plan) {
  for (const auto& grant : plan.grants)
    scheduler.dispatched(grant, grant.tasks);
}

TEST(FairScheduler, ConcurrencyNeverGrantsBeyondTheUsersRoom) {
  ManualClock clock;
  FairScheduler scheduler(options(100), clock);
  UserLimits limits = open_limits();
  limits.max_concurrency = 5;

  auto plan = scheduler.plan({backlog("u", 10, 0, limits, /*active=*/3)}, 3);
  EXPECT_EQ(granted(plan, "u"), 2);
  EXPECT_EQ(throttled_total(plan), 0);  // it was served, then stopped: not counted

  // Interactive and batch share the same room.
  plan = scheduler.plan({backlog("u", 1, 10, limits, /*active=*/0)}, 0);
  EXPECT_EQ(granted(plan, "u", Priority::kInteractive), 1);
  EXPECT_EQ(granted(plan, "u", Priority::kBatch), 4);

  // No room left: nothing, counted as held back by concurrency.
  plan = scheduler.plan({backlog("u", 10, 0, limits, /*active=*/5)}, 5);
  EXPECT_TRUE(plan.grants.empty());
  EXPECT_EQ(throttled(plan, ThrottleCause::kConcurrency), 1);
  EXPECT_EQ(throttled_total(plan), 1);

  // More active than the limit (limits lowered) and a limit of zero admit nothing.
  plan = scheduler.plan({backlog("u", 10, 0, limits, /*active=*/9)}, 9);
  EXPECT_TRUE(plan.grants.empty());
  limits.max_concurrency = 0;
  plan = scheduler.plan({backlog("u", 10, 0, limits)}, 0);
  EXPECT_TRUE(plan.grants.empty());
  EXPECT_EQ(throttled(plan, ThrottleCause::kConcurrency), 1);
}

TEST(FairScheduler, RequestsPerMinuteAdmitSixThenOneEveryTenSeconds) {
  ManualClock clock;
  FairScheduler scheduler(options(100), clock);
  UserLimits limits = open_limits();
  limits.requests_per_minute = 6;

  auto plan = scheduler.plan({backlog("u", 20, 0, limits)}, 0);
  EXPECT_EQ(granted(plan, "u"), 6);
  dispatch_all(scheduler, plan);

  plan = scheduler.plan({backlog("u", 14, 0, limits)}, 6);
  EXPECT_EQ(granted(plan, "u"), 0);
  EXPECT_EQ(throttled(plan, ThrottleCause::kRpm), 1);

  clock.advance(milliseconds(9990));
  plan = scheduler.plan({backlog("u", 14, 0, limits)}, 6);
  EXPECT_EQ(granted(plan, "u"), 0);

  clock.advance(milliseconds(10));  // 10 s since the bucket emptied: one admission
  plan = scheduler.plan({backlog("u", 14, 0, limits)}, 6);
  EXPECT_EQ(granted(plan, "u"), 1);
  EXPECT_EQ(throttled_total(plan), 0);
  plan = scheduler.plan({backlog("u", 13, 0, limits)}, 7);
  EXPECT_EQ(granted(plan, "u"), 0);
}

TEST(FairScheduler, TokensPerMinuteChargeTheEstimateAndReconcileGivesBack) {
  ManualClock clock;
  FairScheduler scheduler(options(100), clock);
  UserLimits limits = open_limits();
  limits.tokens_per_minute = 10000;
  EXPECT_EQ(scheduler.estimate_tokens("u"), 4000);  // the default before any result

  auto plan = scheduler.plan({backlog("u", 20, 0, limits)}, 0);
  ASSERT_EQ(plan.grants.size(), 1u);
  EXPECT_EQ(granted(plan, "u"), 2);  // 2 x 4000 of 10000; a third does not fit
  const std::int64_t charged = scheduler.dispatched(plan.grants[0], 2);
  EXPECT_EQ(charged, 4000);

  plan = scheduler.plan({backlog("u", 18, 0, limits)}, 2);
  EXPECT_EQ(granted(plan, "u"), 0);
  EXPECT_EQ(throttled(plan, ThrottleCause::kTpm), 1);

  // Both tasks used 1000 tokens: 6000 come back and the estimate learns the real size.
  scheduler.reconcile("u", charged, 1000);
  scheduler.reconcile("u", charged, 1000);
  EXPECT_EQ(scheduler.estimate_tokens("u"), 1000);
  plan = scheduler.plan({backlog("u", 18, 0, limits)}, 0);
  EXPECT_EQ(granted(plan, "u"), 8);  // 8000 left, 1000 each
}

TEST(FairScheduler, TokenDebtFromALargerActualDelaysTheUser) {
  ManualClock clock;
  FairScheduler scheduler(options(100), clock);
  UserLimits limits = open_limits();
  limits.tokens_per_minute = 10000;

  auto plan = scheduler.plan({backlog("u", 1, 0, limits)}, 0);
  ASSERT_EQ(granted(plan, "u"), 1);
  const std::int64_t charged = scheduler.dispatched(plan.grants[0], 1);
  // Charged 4000 (6000 left), really used 20000: 16000 of debt, level -10000.
  scheduler.reconcile("u", charged, 20000);
  EXPECT_EQ(scheduler.estimate_tokens("u"), 20000);

  // The next task is charged the new estimate (above the capacity: it needs a full
  // bucket), so the user waits for the debt and a whole minute of refill.
  clock.advance(minutes(1));
  plan = scheduler.plan({backlog("u", 5, 0, limits)}, 0);
  EXPECT_EQ(granted(plan, "u"), 0);
  EXPECT_EQ(throttled(plan, ThrottleCause::kTpm), 1);
  clock.advance(seconds(55));
  plan = scheduler.plan({backlog("u", 5, 0, limits)}, 0);
  EXPECT_EQ(granted(plan, "u"), 0);
  clock.advance(seconds(6));  // 2 min 1 s after the debt: the bucket is full again
  plan = scheduler.plan({backlog("u", 5, 0, limits)}, 0);
  EXPECT_EQ(granted(plan, "u"), 1);
}

TEST(FairScheduler, RunningEstimateMovesTowardTheActualTotals) {
  ManualClock clock;
  FairScheduler scheduler(options(100), clock);
  EXPECT_EQ(scheduler.estimate_tokens("u"), 4000);
  scheduler.reconcile("u", 4000, 1000);
  EXPECT_EQ(scheduler.estimate_tokens("u"), 1000);  // the first result replaces the default
  scheduler.reconcile("u", 1000, 2000);
  EXPECT_EQ(scheduler.estimate_tokens("u"), 1200);
  scheduler.reconcile("u", 1200, 2000);
  EXPECT_EQ(scheduler.estimate_tokens("u"), 1360);
  for (int i = 0; i < 60; ++i)
    scheduler.reconcile("u", scheduler.estimate_tokens("u"), 2000);
  EXPECT_NEAR(static_cast<double>(scheduler.estimate_tokens("u")), 2000, 1);
  EXPECT_EQ(scheduler.estimate_tokens("someone else"), 4000);

  for (int i = 0; i < 100; ++i)
    scheduler.reconcile("u", scheduler.estimate_tokens("u"), 0);
  EXPECT_EQ(scheduler.estimate_tokens("u"), 1);  // never below one token
}

TEST(FairScheduler, SpentBudgetEndsQueuedTasksInsteadOfAdmittingThem) {
  ManualClock clock;
  FairScheduler scheduler(options(100), clock);
  UserLimits limits = open_limits();
  limits.monthly_budget_micros = 5'000'000;

  UserBacklog spent = backlog("spent", 4, 3, limits);
  spent.spent_micros = 5'000'000;
  UserBacklog below = backlog("below", 2, 0, limits);
  below.spent_micros = 4'999'999;
  UserBacklog no_budget = backlog("free", 2, 0, open_limits());
  no_budget.spent_micros = 900'000'000;  // no budget set: spending does not matter

  auto plan = scheduler.plan({spent, below, no_budget}, 0);
  EXPECT_EQ(granted(plan, "spent"), 0);
  EXPECT_EQ(granted(plan, "below"), 2);
  EXPECT_EQ(granted(plan, "free"), 2);
  ASSERT_EQ(plan.over_budget.size(), 1u);
  EXPECT_EQ(plan.over_budget[0], (std::pair<std::string, int>("spent", 7)));
  EXPECT_EQ(throttled(plan, ThrottleCause::kBudget), 1);
  EXPECT_EQ(throttled_total(plan), 1);

  // The budget is checked first: a user also at its concurrency limit counts as budget.
  spent.active = limits.max_concurrency;
  plan = scheduler.plan({spent}, spent.active);
  EXPECT_EQ(throttled(plan, ThrottleCause::kBudget), 1);
  EXPECT_EQ(throttled(plan, ThrottleCause::kConcurrency), 0);
}

TEST(FairScheduler, OverBudgetEndingsShareThePassLimitButNotTheFleetCap) {
  ManualClock clock;
  UserLimits limits = open_limits();
  limits.monthly_budget_micros = 1;
  UserBacklog a = backlog("a", 8, 0, limits);
  a.spent_micros = 1;
  UserBacklog b = backlog("b", 0, 8, limits);
  b.spent_micros = 2;

  {
    FairScheduler scheduler(options(10), clock);
    auto plan = scheduler.plan({a, b, backlog("c", 100)}, 0);
    // 10 pieces of work in the pass: 8 + 2 endings, nothing left to admit.
    ASSERT_EQ(plan.over_budget.size(), 2u);
    EXPECT_EQ(plan.over_budget[0], (std::pair<std::string, int>("a", 8)));
    EXPECT_EQ(plan.over_budget[1], (std::pair<std::string, int>("b", 2)));
    EXPECT_EQ(plan.slots, 0);
    EXPECT_TRUE(plan.grants.empty());
    EXPECT_EQ(throttled(plan, ThrottleCause::kBudget), 2);
    EXPECT_EQ(throttled_total(plan), 2);  // "c" waited for slots, not for a limit
  }
  {
    FairScheduler scheduler(options(12), clock);
    auto plan = scheduler.plan({a, backlog("c", 100)}, 0);
    EXPECT_EQ(plan.slots, 4);
    EXPECT_EQ(granted(plan, "c"), 4);
  }
  {
    // A full fleet still ends over-budget tasks: they never run.
    FairScheduler scheduler(options(20, /*max_active=*/10), clock);
    auto plan = scheduler.plan({a, backlog("c", 100)}, 10);
    ASSERT_EQ(plan.over_budget.size(), 1u);
    EXPECT_EQ(plan.over_budget[0].second, 8);
    EXPECT_EQ(plan.slots, 0);
    EXPECT_TRUE(plan.grants.empty());
  }
}

TEST(FairScheduler, TheTightestOfSeveralLimitsWins) {
  ManualClock clock;
  FairScheduler scheduler(options(100), clock);
  UserLimits rpm_tightest = open_limits();
  rpm_tightest.max_concurrency = 10;
  rpm_tightest.requests_per_minute = 4;
  rpm_tightest.tokens_per_minute = 6 * 4000;
  UserLimits tpm_tightest = rpm_tightest;
  tpm_tightest.tokens_per_minute = 3 * 4000;
  UserLimits concurrency_tightest = rpm_tightest;
  concurrency_tightest.max_concurrency = 2;

  auto plan =
      scheduler.plan({backlog("rpm", 50, 0, rpm_tightest), backlog("tpm", 50, 0, tpm_tightest),
                      backlog("conc", 50, 0, concurrency_tightest)},
                     0);
  EXPECT_EQ(granted(plan, "rpm"), 4);
  EXPECT_EQ(granted(plan, "tpm"), 3);
  EXPECT_EQ(granted(plan, "conc"), 2);
  dispatch_all(scheduler, plan);

  // Next pass, "conc" is at its concurrency limit and its rate bucket has room: counted
  // under concurrency. "rpm" is out of admissions (tokens left): rpm. "tpm": tokens.
  plan = scheduler.plan(
      {backlog("rpm", 46, 0, rpm_tightest, 4), backlog("tpm", 47, 0, tpm_tightest, 3),
       backlog("conc", 48, 0, concurrency_tightest, 2)},
      9);
  EXPECT_TRUE(plan.grants.empty());
  EXPECT_EQ(throttled(plan, ThrottleCause::kConcurrency), 1);
  EXPECT_EQ(throttled(plan, ThrottleCause::kRpm), 1);
  EXPECT_EQ(throttled(plan, ThrottleCause::kTpm), 1);

  // Out of concurrency and of admissions at once: concurrency is the first limit.
  plan = scheduler.plan({backlog("rpm", 46, 0, rpm_tightest, 10)}, 10);
  EXPECT_EQ(throttled(plan, ThrottleCause::kConcurrency), 1);
  EXPECT_EQ(throttled(plan, ThrottleCause::kRpm), 0);
}

TEST(FairScheduler, FleetCapAndPassLimitBoundTheGrants) {
  ManualClock clock;
  {
    FairScheduler scheduler(options(4), clock);
    auto plan = scheduler.plan({backlog("a", 10), backlog("b", 10), backlog("c", 10)}, 0);
    EXPECT_EQ(plan.slots, 4);
    EXPECT_EQ(total(plan), 4);
    EXPECT_EQ(throttled_total(plan), 0);  // slots ran out; no user limit held anyone
  }
  {
    FairScheduler scheduler(options(100, /*max_active=*/10), clock);
    auto plan = scheduler.plan({backlog("a", 10), backlog("b", 10)}, 7);
    EXPECT_EQ(plan.slots, 3);
    EXPECT_EQ(total(plan), 3);
    plan = scheduler.plan({backlog("a", 10), backlog("b", 10)}, 10);
    EXPECT_EQ(plan.slots, 0);
    EXPECT_TRUE(plan.grants.empty());
    plan = scheduler.plan({backlog("a", 10), backlog("b", 10)}, 25);  // above the cap
    EXPECT_EQ(plan.slots, 0);
    EXPECT_TRUE(plan.grants.empty());
    EXPECT_EQ(throttled_total(plan), 0);
  }
  {
    // Whichever is smaller binds.
    FairScheduler scheduler(options(2, /*max_active=*/10), clock);
    auto plan = scheduler.plan({backlog("a", 10)}, 0);
    EXPECT_EQ(plan.slots, 2);
    EXPECT_EQ(total(plan), 2);
  }
  {
    FairScheduler scheduler(options(0), clock);
    auto plan = scheduler.plan({backlog("a", 10)}, 0);
    EXPECT_TRUE(plan.grants.empty());
  }
}

TEST(FairScheduler, InteractiveFirstExceptTheGuaranteedBatchShare) {
  ManualClock clock;
  FairScheduler scheduler(options(10, 0, /*batch_share=*/0.2), clock);

  // Scarce slots: interactive work of any user goes before batch work of any user, but
  // waiting batch work keeps its share (2 of 10).
  auto plan =
      scheduler.plan({backlog("a", 0, 100), backlog("b", 100, 0), backlog("c", 100, 100)}, 0);
  EXPECT_EQ(plan.slots, 10);
  EXPECT_EQ(granted(plan, "b", Priority::kInteractive) + granted(plan, "c", Priority::kInteractive),
            8);
  EXPECT_EQ(granted(plan, "a", Priority::kBatch) + granted(plan, "c", Priority::kBatch), 2);
  ASSERT_FALSE(plan.grants.empty());
  EXPECT_EQ(plan.grants.front().priority, Priority::kInteractive);

  // The share is rounded up: 3 slots reserve 1 for batch.
  FairScheduler small(options(3, 0, 0.2), clock);
  plan = small.plan({backlog("a", 0, 100), backlog("b", 100, 0)}, 0);
  EXPECT_EQ(granted(plan, "a", Priority::kBatch), 1);
  EXPECT_EQ(granted(plan, "b", Priority::kInteractive), 2);

  // No batch work that could run: interactive takes every slot.
  UserLimits full = open_limits();
  full.max_concurrency = 3;
  plan = scheduler.plan({backlog("a", 0, 100, full, 3), backlog("b", 100, 0)}, 3);
  EXPECT_EQ(granted(plan, "b"), 10);

  // Little interactive work: batch takes what it leaves (work conserving).
  plan = scheduler.plan({backlog("a", 0, 100), backlog("b", 3, 0)}, 0);
  EXPECT_EQ(granted(plan, "b"), 3);
  EXPECT_EQ(granted(plan, "a"), 7);

  // Little batch work: interactive gets the share back.
  plan = scheduler.plan({backlog("a", 0, 1), backlog("b", 100, 0)}, 0);
  EXPECT_EQ(granted(plan, "a"), 1);
  EXPECT_EQ(granted(plan, "b"), 9);
}

TEST(FairScheduler, BatchNeverStarvesUnderFullInteractiveDemand) {
  ManualClock clock;
  FairScheduler scheduler(options(200, /*max_active=*/20, /*batch_share=*/0.2), clock);
  // In-flight tasks by user: pass index at which each finishes.
  std::map<std::string, std::vector<int>> running;
  std::map<std::string, int> admitted;
  int batch_total = 0, all_total = 0, task_counter = 0;
  int longest_batch_gap = 0, last_batch_pass = 0;

  for (int pass = 1; pass <= 100; ++pass) {
    clock.advance(seconds(1));
    std::int64_t fleet_active = 0;
    for (auto& [user, ends] : running) {
      std::erase_if(ends, [&](int end) { return end <= pass; });
      fleet_active += static_cast<std::int64_t>(ends.size());
    }
    std::vector<UserBacklog> users;
    for (const char* id : {"i1", "i2", "i3"})  // endless interactive demand
      users.push_back(backlog(id, 1000, 0, open_limits(), static_cast<int>(running[id].size())));
    users.push_back(
        backlog("batch", 0, 1000, open_limits(), static_cast<int>(running["batch"].size())));

    const auto plan = scheduler.plan(users, fleet_active);
    ASSERT_LE(fleet_active + total(plan), 20) << pass;
    for (const auto& grant : plan.grants) {
      scheduler.dispatched(grant, grant.tasks);
      for (int t = 0; t < grant.tasks; ++t)
        running[grant.user_id].push_back(pass + 1 + (task_counter++ % 3));  // 1 to 3 passes
      admitted[grant.user_id] += grant.tasks;
      all_total += grant.tasks;
      if (grant.priority == Priority::kBatch) {
        batch_total += grant.tasks;
        longest_batch_gap = std::max(longest_batch_gap, pass - last_batch_pass);
        last_batch_pass = pass;
      }
    }
  }
  ASSERT_GT(all_total, 0);
  const double batch_fraction = static_cast<double>(batch_total) / all_total;
  EXPECT_GE(batch_fraction, 0.2);
  EXPECT_LE(batch_fraction, 0.35);  // a guarantee, not a takeover
  EXPECT_LE(longest_batch_gap, 3);
  // The interactive users share the rest evenly.
  EXPECT_NEAR(admitted["i1"], admitted["i2"], 0.1 * admitted["i1"]);
  EXPECT_NEAR(admitted["i1"], admitted["i3"], 0.1 * admitted["i1"]);
}

TEST(FairScheduler, WeightsOneAndThreeShareScarceSlotsOneToThree) {
  ManualClock clock;
  UserLimits light = open_limits();
  UserLimits heavy = open_limits();
  heavy.weight = 3;
  for (int pass_limit : {1, 2, 3}) {
    FairScheduler scheduler(options(pass_limit), clock);
    int a = 0, b = 0;
    for (int pass = 0; pass < 240; ++pass) {
      // Tasks end before the next pass; both users always have more than the slots.
      const auto plan =
          scheduler.plan({backlog("a", 100, 0, light), backlog("b", 100, 0, heavy)}, 0);
      EXPECT_EQ(total(plan), pass_limit);
      a += granted(plan, "a");
      b += granted(plan, "b");
    }
    EXPECT_EQ(a + b, 240 * pass_limit);
    EXPECT_NEAR(static_cast<double>(b) / a, 3.0, 0.1) << "pass_limit " << pass_limit;
  }

  // Within one pass with enough slots, a round is 1 + 3.
  FairScheduler scheduler(options(8), clock);
  const auto plan = scheduler.plan({backlog("a", 100, 0, light), backlog("b", 100, 0, heavy)}, 0);
  EXPECT_EQ(granted(plan, "a"), 2);
  EXPECT_EQ(granted(plan, "b"), 6);
  EXPECT_EQ(plan.grants.size(), 2u);  // one Grant per (user, priority)
}

TEST(FairScheduler, EqualWeightsAlternate) {
  ManualClock clock;
  FairScheduler scheduler(options(1), clock);
  std::string served;
  for (int pass = 0; pass < 6; ++pass) {
    const auto plan = scheduler.plan({backlog("b", 10), backlog("a", 10)}, 0);
    ASSERT_EQ(plan.grants.size(), 1u);
    served += plan.grants[0].user_id;
  }
  EXPECT_EQ(served, "ababab");

  // With more slots, rounds alternate inside the pass and grants are merged, in the order
  // each user was first served.
  FairScheduler wide(options(5), clock);
  const auto plan = wide.plan({backlog("b", 10), backlog("a", 10)}, 0);
  ASSERT_EQ(plan.grants.size(), 2u);
  EXPECT_EQ(plan.grants[0].user_id, "a");
  EXPECT_EQ(plan.grants[0].tasks, 3);
  EXPECT_EQ(plan.grants[1].user_id, "b");
  EXPECT_EQ(plan.grants[1].tasks, 2);
  // The next pass starts after "a", the last one served.
  const auto next = wide.plan({backlog("b", 10), backlog("a", 10)}, 0);
  ASSERT_FALSE(next.grants.empty());
  EXPECT_EQ(next.grants[0].user_id, "b");
}

TEST(FairScheduler, CursorRotatesAScarceSlotAroundAllUsers) {
  ManualClock clock;
  FairScheduler scheduler(options(1), clock);
  const std::vector<UserBacklog> users = {backlog("u3", 10), backlog("u1", 10), backlog("u5", 10),
                                          backlog("u2", 10), backlog("u4", 10)};
  std::map<std::string, int> served;
  std::vector<std::string> order;
  for (int pass = 0; pass < 5; ++pass) {
    const auto plan = scheduler.plan(users, 0);
    ASSERT_EQ(plan.grants.size(), 1u);
    ++served[plan.grants[0].user_id];
    order.push_back(plan.grants[0].user_id);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"u1", "u2", "u3", "u4", "u5"}));
  for (const auto& [user, n] : served)
    EXPECT_EQ(n, 1) << user;

  // A user that leaves the backlog is skipped; the rotation goes on after the cursor.
  auto plan = scheduler.plan({backlog("u2", 10), backlog("u4", 10)}, 0);
  EXPECT_EQ(plan.grants[0].user_id, "u2");
  plan = scheduler.plan(users, 0);
  EXPECT_EQ(plan.grants[0].user_id, "u3");
}

TEST(FairScheduler, DispatchingFewerThanGrantedGivesBackRateAndTokens) {
  ManualClock clock;
  FairScheduler scheduler(options(100), clock);
  UserLimits limits = open_limits();
  limits.requests_per_minute = 5;
  limits.tokens_per_minute = 5 * 4000;

  auto plan = scheduler.plan({backlog("short", 5, 0, limits), backlog("full", 5, 0, limits)}, 0);
  ASSERT_EQ(granted(plan, "short"), 5);
  ASSERT_EQ(granted(plan, "full"), 5);
  for (const auto& grant : plan.grants) {
    const int really = grant.user_id == "short" ? 2 : grant.tasks;  // the store found 2 rows
    EXPECT_EQ(scheduler.dispatched(grant, really), 4000);
  }

  plan = scheduler.plan({backlog("short", 3, 0, limits, 2), backlog("full", 5, 0, limits, 5)}, 7);
  EXPECT_EQ(granted(plan, "short"), 3);  // 3 admissions and 3 x 4000 tokens came back
  EXPECT_EQ(granted(plan, "full"), 0);
  EXPECT_EQ(throttled(plan, ThrottleCause::kRpm), 1);

  // Only the tokens come back when rate is not the limit: unlimited rpm, tokens for 5.
  FairScheduler tokens_only(options(100), clock);
  limits.requests_per_minute = 0;
  plan = tokens_only.plan({backlog("u", 5, 0, limits)}, 0);
  ASSERT_EQ(granted(plan, "u"), 5);
  tokens_only.dispatched(plan.grants[0], 4);
  plan = tokens_only.plan({backlog("u", 5, 0, limits, 4)}, 4);
  EXPECT_EQ(granted(plan, "u"), 1);
}

TEST(FairScheduler, LimitChangesTakeEffectOnTheNextPass) {
  ManualClock clock;
  FairScheduler scheduler(options(100), clock);
  UserLimits limits = open_limits();
  limits.max_concurrency = 1;
  limits.requests_per_minute = 2;

  auto plan = scheduler.plan({backlog("u", 10, 0, limits)}, 0);
  EXPECT_EQ(granted(plan, "u"), 1);
  plan = scheduler.plan({backlog("u", 9, 0, limits, 1)}, 1);
  EXPECT_EQ(granted(plan, "u"), 0);
  EXPECT_EQ(throttled(plan, ThrottleCause::kConcurrency), 1);

  limits.max_concurrency = 3;  // the operator raised it
  plan = scheduler.plan({backlog("u", 9, 0, limits, 1)}, 1);
  EXPECT_EQ(granted(plan, "u"), 1);  // rpm 2: one admission was left
  plan = scheduler.plan({backlog("u", 8, 0, limits, 2)}, 2);
  EXPECT_EQ(granted(plan, "u"), 0);
  EXPECT_EQ(throttled(plan, ThrottleCause::kRpm), 1);

  // Raising rpm keeps the 2 admissions of this minute used: 5 - 2 = 3 more now.
  limits.max_concurrency = 100;
  limits.requests_per_minute = 5;
  plan = scheduler.plan({backlog("u", 8, 0, limits, 2)}, 2);
  EXPECT_EQ(granted(plan, "u"), 3);

  // Lowering it below what was used holds the user back until the refill.
  limits.requests_per_minute = 4;
  plan = scheduler.plan({backlog("u", 5, 0, limits, 5)}, 5);
  EXPECT_EQ(granted(plan, "u"), 0);
  EXPECT_EQ(throttled(plan, ThrottleCause::kRpm), 1);
  clock.advance(seconds(15));  // 4 per minute: one every 15 s
  plan = scheduler.plan({backlog("u", 5, 0, limits, 5)}, 5);
  EXPECT_EQ(granted(plan, "u"), 1);

  // A token limit set on a user that had none starts with a full bucket.
  limits.tokens_per_minute = 8000;
  limits.requests_per_minute = 0;
  plan = scheduler.plan({backlog("u", 5, 0, limits, 6)}, 6);
  EXPECT_EQ(granted(plan, "u"), 2);
}

TEST(FairScheduler, SeededUsageStartsFromTheLedgerInsteadOfFullBuckets) {
  ManualClock clock;
  FairScheduler scheduler(options(100), clock);
  UserLimits limits = open_limits();
  limits.requests_per_minute = 6;
  limits.tokens_per_minute = 10000;

  scheduler.seed_usage("rate", limits, 5, 0);
  scheduler.seed_usage("tokens", limits, 0, 15000);  // 5000 of debt
  scheduler.seed_usage("over", limits, 50, 0);       // never below empty for admissions
  EXPECT_EQ(scheduler.tracked_users(), 3u);

  auto plan = scheduler.plan({backlog("rate", 10, 0, limits), backlog("tokens", 10, 0, limits),
                              backlog("over", 10, 0, limits), backlog("fresh", 10, 0, limits)},
                             0);
  EXPECT_EQ(granted(plan, "rate"), 1);
  EXPECT_EQ(granted(plan, "tokens"), 0);
  EXPECT_EQ(granted(plan, "over"), 0);
  EXPECT_EQ(granted(plan, "fresh"), 2);
  EXPECT_EQ(throttled(plan, ThrottleCause::kTpm), 1);
  EXPECT_EQ(throttled(plan, ThrottleCause::kRpm), 1);

  clock.advance(seconds(10));  // one admission for "over": it was not put in debt
  plan = scheduler.plan({backlog("over", 10, 0, limits)}, 0);
  EXPECT_EQ(granted(plan, "over"), 1);
  clock.advance(seconds(45));  // 55 s of refill: -5000 + 9166 leaves room for one task
  plan = scheduler.plan({backlog("tokens", 10, 0, limits)}, 0);
  EXPECT_EQ(granted(plan, "tokens"), 1);
}

TEST(FairScheduler, ForgetIdleDropsFullIdleUsersAndKeepsIndebtedOnes) {
  ManualClock clock;
  FairScheduler scheduler(options(100), clock);
  UserLimits limits = open_limits();
  limits.requests_per_minute = 60;
  limits.tokens_per_minute = 10000;

  auto plan = scheduler.plan({backlog("idle", 1, 0, limits), backlog("debtor", 1, 0, limits)}, 0);
  dispatch_all(scheduler, plan);
  scheduler.reconcile("idle", 4000, 4000);
  scheduler.reconcile("debtor", 4000, 100000);  // 96000 of debt: ~10 minutes
  EXPECT_EQ(scheduler.tracked_users(), 2u);

  clock.advance(minutes(2));
  plan = scheduler.plan({backlog("recent", 1, 0, limits)}, 0);  // just used its buckets
  EXPECT_EQ(scheduler.tracked_users(), 3u);

  scheduler.forget_idle(minutes(1));
  EXPECT_EQ(scheduler.tracked_users(), 2u);            // "idle" went; "debtor" and "recent" stay
  EXPECT_EQ(scheduler.estimate_tokens("idle"), 4000);  // forgotten: the default again
  EXPECT_EQ(scheduler.estimate_tokens("debtor"), 100000);

  // The debt is still there: "debtor" is held back when it comes back.
  plan = scheduler.plan({backlog("debtor", 1, 0, limits)}, 0);
  EXPECT_EQ(granted(plan, "debtor"), 0);
  EXPECT_EQ(throttled(plan, ThrottleCause::kTpm), 1);

  // Once every bucket is full again and nobody touched them, everything goes.
  clock.advance(minutes(20));
  scheduler.forget_idle(minutes(1));
  EXPECT_EQ(scheduler.tracked_users(), 0u);
}

TEST(FairScheduler, NonsenseInputsAreTreatedSafely) {
  ManualClock clock;
  FairSchedulerOptions o = options(10, 0, /*batch_share=*/5.0);  // share clamped to all
  FairScheduler scheduler(o, clock);
  UserLimits zero_weight = open_limits();
  zero_weight.weight = 0;
  auto plan = scheduler.plan({backlog("a", 10, 0, zero_weight, -3), backlog("b", -5, -1),
                              backlog("a", 99, 0, open_limits())},  // listed twice: first wins
                             -10);
  EXPECT_EQ(granted(plan, "a"), 10);
  EXPECT_EQ(granted(plan, "b"), 0);
  EXPECT_EQ(throttled_total(plan), 0);
  EXPECT_EQ(plan.grants.size(), 1u);

  scheduler.dispatched(Grant{"nobody", Priority::kBatch, 3}, 7);  // unknown user: no-op
  EXPECT_EQ(scheduler.tracked_users(), 1u + 1u);  // "a" and "b" (b is in the backlog)
}

TEST(FairScheduler, SameInputsSamePlans) {
  auto run = [] {
    ManualClock clock;
    FairScheduler scheduler(options(7, 30), clock);
    UserLimits limits = open_limits();
    limits.requests_per_minute = 20;
    limits.tokens_per_minute = 30000;
    std::vector<std::string> log;
    for (int pass = 0; pass < 30; ++pass) {
      clock.advance(seconds(2));
      const auto plan = scheduler.plan(
          {backlog("x", 5, 5, limits), backlog("y", 3, 9, limits), backlog("z", 0, 20, limits)}, 0);
      for (const auto& grant : plan.grants) {
        log.push_back(grant.user_id + std::to_string(static_cast<int>(grant.priority)) + ":" +
                      std::to_string(grant.tasks));
        const auto charged = scheduler.dispatched(grant, grant.tasks);
        scheduler.reconcile(grant.user_id, charged, 3000 + pass * 10);
      }
    }
    return log;
  };
  EXPECT_EQ(run(), run());
}

TEST(FairScheduler, AdmitsNoMoreThanTheWorkersReportTheyCanStart) {
  ManualClock clock;
  FairScheduler scheduler(options(200), clock);
  // The live workers can run 30 at once; 24 are dispatched or running: 6 more go now, the
  // rest waits in the queue, and the users left out are counted as held by capacity.
  auto plan = scheduler.plan({backlog("a", 50), backlog("b", 50), backlog("c", 50)}, 24, 30);
  EXPECT_EQ(plan.slots, 6);
  EXPECT_EQ(granted(plan, "a") + granted(plan, "b") + granted(plan, "c"), 6);
  EXPECT_EQ(granted(plan, "a"), 2) << "round robin still shares what capacity there is";
  EXPECT_EQ(plan.throttled[static_cast<int>(ThrottleCause::kFleetCapacity)], 0)
      << "every user got some";
  // Full: nothing is admitted, and every user waiting is held by capacity.
  plan = scheduler.plan({backlog("a", 50), backlog("b", 50), backlog("c", 50)}, 30, 30);
  EXPECT_EQ(plan.slots, 0);
  EXPECT_TRUE(plan.grants.empty());
  EXPECT_EQ(plan.throttled[static_cast<int>(ThrottleCause::kFleetCapacity)], 3);
  // More active than the capacity (a worker left): no slot, never a negative one.
  plan = scheduler.plan({backlog("a", 50)}, 40, 30);
  EXPECT_EQ(plan.slots, 0);
}

TEST(FairScheduler, TheTighterOfTheFleetCapAndTheWorkersCapacityBinds) {
  ManualClock clock;
  FairScheduler scheduler(options(200, /*max_active=*/10), clock);
  EXPECT_EQ(scheduler.plan({backlog("a", 50)}, 0, 1000).slots, 10) << "the configured cap";
  EXPECT_EQ(scheduler.plan({backlog("a", 50)}, 0, 4).slots, 4) << "the workers' capacity";
  EXPECT_EQ(scheduler.plan({backlog("a", 50)}, 0, -1).slots, 10) << "capacity unknown";
}

TEST(FairScheduler, AUserHeldByItsOwnLimitIsCountedThereNotUnderCapacity) {
  ManualClock clock;
  FairScheduler scheduler(options(200), clock);
  UserLimits one = open_limits();
  one.max_concurrency = 1;
  auto plan = scheduler.plan({backlog("a", 5, 0, one, /*active=*/1), backlog("b", 5)}, 10, 10);
  EXPECT_EQ(plan.throttled[static_cast<int>(ThrottleCause::kConcurrency)], 1);
  EXPECT_EQ(plan.throttled[static_cast<int>(ThrottleCause::kFleetCapacity)], 1);
}

// The reason the pass gives for a (user, priority) it leaves waiting; "" when it leaves none.
std::string why(const PassPlan& plan, const std::string& user_id,
                Priority priority = Priority::kInteractive) {
  for (const Waiting& w : plan.waiting)
    if (w.user_id == user_id && w.priority == priority)
      return wait_reason_name(w.reason);
  return "";
}

TEST(FairSchedulerWaiting, EachLimitIsNamedAsTheReasonItsUsersTasksWait) {
  ManualClock clock;
  FairScheduler scheduler(options(200), clock);
  UserLimits concurrency = open_limits();
  concurrency.max_concurrency = 2;
  UserLimits rpm = open_limits();
  rpm.requests_per_minute = 1;
  UserLimits tpm = open_limits();
  tpm.tokens_per_minute = 4000;  // one task's default estimate
  UserLimits budget = open_limits();
  budget.monthly_budget_micros = 1'000'000;
  UserBacklog spent = backlog("d-budget", 3, 0, budget);
  spent.spent_micros = 1'000'000;

  auto plan =
      scheduler.plan({backlog("a-concurrency", 5, 0, concurrency), backlog("b-rpm", 5, 0, rpm),
                      backlog("c-tpm", 5, 0, tpm), spent, backlog("e-open", 5)},
                     0);
  // Each limited user got what its limit allows, and the rest waits for that limit.
  EXPECT_EQ(granted(plan, "a-concurrency"), 2);
  EXPECT_EQ(why(plan, "a-concurrency"), "concurrency");
  EXPECT_EQ(granted(plan, "b-rpm"), 1);
  EXPECT_EQ(why(plan, "b-rpm"), "requests_per_minute");
  EXPECT_EQ(granted(plan, "c-tpm"), 1);
  EXPECT_EQ(why(plan, "c-tpm"), "tokens_per_minute");
  EXPECT_EQ(granted(plan, "d-budget"), 0);
  EXPECT_EQ(why(plan, "d-budget"), "budget");
  // Everything of the user without limits was admitted: it waits for nothing.
  EXPECT_EQ(granted(plan, "e-open"), 5);
  EXPECT_EQ(why(plan, "e-open"), "");
  EXPECT_EQ(plan.waiting.size(), 4u);
  // A priority with nothing queued is never listed.
  EXPECT_EQ(why(plan, "a-concurrency", Priority::kBatch), "");
}

TEST(FairSchedulerWaiting, TheFleetsRoomTheBatchShareAndThePassLimitAreNamedWhenTheyRanOut) {
  ManualClock clock;
  // The workers can start 5 more: interactive takes 4, batch its share of 1; the rest of
  // both waits, interactive for the fleet's room and batch behind interactive work.
  FairScheduler scheduler(options(200), clock);
  auto plan = scheduler.plan({backlog("a", 10), backlog("b", 0, 10)}, 25, 30);
  EXPECT_EQ(granted(plan, "a"), 4);
  EXPECT_EQ(granted(plan, "b"), 1);
  EXPECT_EQ(why(plan, "a"), "fleet_capacity");
  EXPECT_EQ(why(plan, "b", Priority::kBatch), "batch_share");
  // Full: both wait for the fleet's room (no interactive work was served ahead of batch).
  plan = scheduler.plan({backlog("a", 10), backlog("b", 0, 10)}, 30, 30);
  EXPECT_EQ(why(plan, "a"), "fleet_capacity");
  EXPECT_EQ(why(plan, "b", Priority::kBatch), "fleet_capacity");

  // The fleet's own cap on active tasks counts as its room too.
  FairScheduler capped(options(200, /*max_active=*/3), clock);
  plan = capped.plan({backlog("a", 10)}, 0);
  EXPECT_EQ(granted(plan, "a"), 3);
  EXPECT_EQ(why(plan, "a"), "fleet_capacity");

  // Only the pass limit ran out: admitted by the next pass, which follows at once.
  FairScheduler small(options(4), clock);
  plan = small.plan({backlog("a", 10)}, 0, 1000);
  EXPECT_EQ(granted(plan, "a"), 4);
  EXPECT_EQ(why(plan, "a"), "pass_limit");
}

TEST(FairSchedulerWaiting, AUsersOwnLimitIsItsReasonEvenWhenTheFleetIsFull) {
  ManualClock clock;
  FairScheduler scheduler(options(200), clock);
  UserLimits one = open_limits();
  one.max_concurrency = 1;
  auto plan = scheduler.plan({backlog("a", 5, 5, one, /*active=*/1), backlog("b", 5)}, 10, 10);
  EXPECT_EQ(why(plan, "a"), "concurrency");
  EXPECT_EQ(why(plan, "a", Priority::kBatch), "concurrency");
  EXPECT_EQ(why(plan, "b"), "fleet_capacity");
}

}  // namespace
}  // namespace agentfleet::limits
