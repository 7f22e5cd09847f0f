// The scheduler's rounds against a fake store and a manual clock: leadership, admission under
// the per-user limits and the fleet's capacity, budgets, housekeeping's interval, and a write
// that fails giving every grant's charge back. The Postgres side of each call is proved in
// tests/pg; the fleet tests prove the wiring.

#include "dispatcher/scheduler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/adapters/metrics/dispatcher_metrics.hpp"
#include "core/adapters/metrics/metrics_registry.hpp"
#include "core/config/config.hpp"
#include "core/limits/clock.hpp"

namespace agentfleet::dispatcher {
namespace {

config::Config test_config() {
  return config::load_config_text(R"(
postgres: {url: x}
kafka: {bootstrap_servers: b}
models: [{name: m1, endpoints: [{url: "http://h/x"}]}, {name: m2, endpoints: [{url: "http://h/y"}]}]
billing:
  prices:
    - {model: m1, effective_from: "2026-01-01", input_per_million: "1"}
    - {model: m2, currency: USD, effective_from: "2026-01-01", input_per_million: "1"}
  exchange_rates: {USD: "7.2"}
task_defaults: {tier: standard}
tiers:
  - {tier: standard, max_concurrency: 3, requests_per_minute: 100, tokens_per_minute: 200000,
     max_queued: 10000, monthly_budget: "0", weight: 1}
  - {tier: capped, max_concurrency: 3, requests_per_minute: 100, monthly_budget: "2.5"}
  - {tier: slow, max_concurrency: 10, requests_per_minute: 2}
dispatcher: {housekeeping_interval_ms: 500}
)",
                                  "test.yaml");
}

// The store in memory: what each pass reads is set by the test; what it writes is recorded.
class FakeSchedulerStore final : public ports::SchedulerStore {
 public:
  bool try_lead() override {
    ++lead_tries;
    if (store_away)
      throw std::runtime_error("postgres connection: connection refused");
    return lock_free;
  }
  void reset() override { ++resets; }
  bool wait(std::chrono::milliseconds, int) override { return false; }
  ports::Heard take_heard() override { return std::exchange(heard, {}); }
  void refresh_plans() override { ++plan_refreshes; }
  ports::Housekeeping housekeep(const ports::SchedulerPass& pass) override {
    ++housekeepings;
    calls.push_back("housekeep");
    recover_lapsed.push_back(pass.recover_lapsed);
    return housekeeping;
  }
  ports::Backlog read_backlog(int limit, int max_active) override {
    // As the store counts: each queue up to the cap, from the room it reads with them.
    ports::Backlog capped = backlog;
    capped.count_cap =
        ports::backlog_count_cap(limit, max_active, backlog.fleet_capacity, backlog.fleet_active);
    count_caps.push_back(capped.count_cap);
    calls.push_back("read");
    for (auto& u : capped.users) {
      u.queued_interactive = std::min(u.queued_interactive, capped.count_cap);
      u.queued_batch = std::min(u.queued_batch, capped.count_cap);
    }
    return capped;
  }
  std::map<std::string, ports::SpendByCurrency> month_spend_micros(
      const std::vector<std::string>& users, const std::string&) override {
    std::map<std::string, ports::SpendByCurrency> out;
    for (const auto& u : users) {
      if (spent.count(u))
        out[u] = spent[u];
    }
    return out;
  }
  std::map<std::string, ports::RecentUsage> recent_usage(const std::vector<std::string>&) override {
    return {};
  }
  ports::PassWrites write_pass(const std::vector<ports::EndQueued>& end_queued,
                               const std::vector<ports::DispatchGrant>& grants,
                               const ports::SchedulerPass& pass) override {
    if (fail_writes)
      throw std::runtime_error("postgres connection: connection reset");
    ++writes;
    calls.push_back("write");
    handoffs.push_back(pass.handoff_s);
    ended.insert(ended.end(), end_queued.begin(), end_queued.end());
    granted.insert(granted.end(), grants.begin(), grants.end());
    ports::PassWrites done;
    for (const auto& end : end_queued)
      done.ended.emplace_back(end.user_id, static_cast<std::size_t>(end.count));
    for (const auto& grant : grants) {
      for (int i = 0; i < grant.tasks; ++i) {
        ports::DispatchedTask task;
        task.task_id = grant.user_id + "-" + std::to_string(next_task++);
        task.user_id = grant.user_id;
        task.priority = grant.priority;
        task.outbox_id = 1000 + next_task;
        task.message = ports::OutMessage{pass.dispatch_topic, task.task_id, "{}", {}};
        done.dispatched.push_back(task);
      }
    }
    return done;
  }

  void record_waiting(const ports::WaitingChanges& changes) override {
    if (fail_writes || fail_waiting)
      throw std::runtime_error("postgres connection: connection reset");
    waiting_writes.push_back(changes);
    if (changes.replace)
      waiting.clear();
    for (const auto& key : changes.cleared)
      waiting.erase(key);
    for (const auto& row : changes.set)
      waiting[{row.user_id, row.priority}] = row.reason;
  }

  // Tasks granted to `user` over every write so far.
  int granted_to(const std::string& user) const {
    int n = 0;
    for (const auto& g : granted)
      n += g.user_id == user ? g.tasks : 0;
    return n;
  }

  ports::Heard heard;              // what the next take_heard() answers
  std::vector<std::string> calls;  // housekeep, read, write: in the order made
  bool lock_free = true;
  bool store_away = false;
  bool fail_writes = false;
  bool fail_waiting = false;         // only the waiting reasons' write fails
  std::vector<bool> recover_lapsed;  // per housekeeping
  ports::Backlog backlog;
  ports::Housekeeping housekeeping;
  std::map<std::string, ports::SpendByCurrency> spent;
  int lead_tries = 0, resets = 0, plan_refreshes = 0, housekeepings = 0, writes = 0;
  std::vector<std::int64_t> count_caps;
  std::vector<ports::EndQueued> ended;
  std::vector<ports::DispatchGrant> granted;
  std::vector<int> handoffs;  // per write: pass.handoff_s
  int next_task = 0;
  std::vector<ports::WaitingChanges> waiting_writes;
  std::map<std::pair<std::string, Priority>, std::string> waiting;  // what the table holds
};

ports::BacklogUser waiting(const std::string& user, std::int64_t queued, int active = 0,
                           const std::string& tier = "") {
  ports::BacklogUser u;
  u.user_id = user;
  u.queued_interactive = queued;
  u.active = active;
  u.overrides.user_id = user;
  u.overrides.tier = tier;
  return u;
}

struct Harness {
  config::Config config = test_config();
  limits::ManualClock clock;
  FakeSchedulerStore store;
  metrics::MetricsRegistry registry{metrics::RegistryOptions{.process_metrics = false}};
  metrics::DispatcherMetrics metrics{registry, config};
  int relay_wakes = 0;                       // outbox_written: rows due now
  std::vector<ports::OutboxMessage> handed;  // handoff: dispatch messages handed over
  Scheduler scheduler{config,
                      store,
                      metrics,
                      clock,
                      [this] { ++relay_wakes; },
                      [this](std::vector<ports::OutboxMessage> messages) {
                        for (auto& m : messages)
                          handed.push_back(std::move(m));
                      }};

  // Rounds on time (each after the wait the last one asked for) until `until`, the last at
  // `until` itself; whether each let recovery take lapsed workers' tasks over.
  std::vector<bool> rounds_on_time_until(limits::Clock::time_point until) {
    std::vector<bool> recovered;
    while (clock.now() < until) {
      clock.advance(std::min<limits::Clock::duration>(scheduler.wait_after(), until - clock.now()));
      scheduler.round();
      recovered.push_back(store.recover_lapsed.back());
    }
    return recovered;
  }

  void queue(std::vector<ports::BacklogUser> users, std::int64_t capacity = 100) {
    store.backlog.users = std::move(users);
    store.backlog.fleet_capacity = capacity;
    store.backlog.fleet_active = 0;
    for (const auto& u : store.backlog.users)
      store.backlog.fleet_active += u.active;
  }
};

TEST(SchedulerRounds, AReplicaThatDoesNotHoldTheLockRunsNoPass) {
  Harness h;
  h.store.lock_free = false;
  h.queue({waiting("a", 5)});
  EXPECT_FALSE(h.scheduler.round());
  EXPECT_FALSE(h.scheduler.leader());
  EXPECT_EQ(h.store.housekeepings, 0);
  EXPECT_EQ(h.store.writes, 0);
  h.store.lock_free = true;
  h.scheduler.round();
  EXPECT_TRUE(h.scheduler.leader());
  EXPECT_EQ(h.store.granted_to("a"), 3) << "its tier's max_concurrency";
  h.scheduler.round();
  EXPECT_EQ(h.store.lead_tries, 2) << "not tried again while it holds the lock";
}

TEST(SchedulerRounds, GrantsStayWithinEachUsersConcurrencyAndTheFleetsCapacity) {
  Harness h;
  h.queue({waiting("a", 10, /*active=*/2), waiting("b", 10), waiting("c", 1)}, /*capacity=*/5);
  h.scheduler.round();
  EXPECT_EQ(h.store.granted_to("a"), 1) << "3 at once, 2 already active";
  EXPECT_EQ(h.store.granted_to("a") + h.store.granted_to("b") + h.store.granted_to("c"), 3)
      << "the fleet has room for 5, 2 of them taken";
  EXPECT_EQ(h.store.count_caps.back(), 4)
      << "the backlog is read up to the room left, and one more to see who still waits";
}

TEST(SchedulerRounds, TheBacklogIsCountedToOneMoreThanAPassCouldAdmit) {
  EXPECT_EQ(ports::backlog_count_cap(200, 0, -1, 7), 201) << "no worker reports: the batch";
  EXPECT_EQ(ports::backlog_count_cap(200, 0, 64, 2), 63) << "the room the workers report";
  EXPECT_EQ(ports::backlog_count_cap(200, 10, 64, 2), 9) << "max_active_tasks binds first";
  EXPECT_EQ(ports::backlog_count_cap(3, 10, 64, 2), 4) << "the scheduler batch binds first";
  EXPECT_EQ(ports::backlog_count_cap(200, 0, 5, 9), 1)
      << "a full fleet still counts one: who waits is known";
}

TEST(SchedulerRounds, APassHandsItsDispatchMessagesToTheRelayAsItCommits) {
  Harness h;
  h.queue({waiting("a", 2), waiting("b", 1)});
  h.scheduler.round();
  ASSERT_EQ(h.store.handoffs.size(), 1u);
  EXPECT_EQ(h.store.handoffs[0], Scheduler::kHandoffS)
      << "the rows wait for the hand-off before the relay may publish them itself";
  ASSERT_EQ(h.handed.size(), 3u);
  std::set<std::string> keys;
  std::set<std::int64_t> rows;
  for (const ports::OutboxMessage& m : h.handed) {
    keys.insert(m.message.key);
    rows.insert(m.outbox_id);
    EXPECT_EQ(m.message.topic, h.config.kafka.topics.dispatch);
  }
  EXPECT_EQ(keys.size(), 3u) << "one message per task dispatched";
  EXPECT_EQ(rows.size(), 3u) << "each with the row that holds it";
  EXPECT_EQ(h.relay_wakes, 0) << "no row is due: the relay is not sent to look";

  // Tasks ended over budget: their result events are due at once.
  h.queue({waiting("spender", 4, 0, "capped")});
  h.store.spent["spender"]["CNY"] = 2500000;
  h.scheduler.wake();
  h.scheduler.round();
  EXPECT_EQ(h.relay_wakes, 1);
}

TEST(SchedulerRounds, ASpentBudgetEndsTheUsersQueuedTasksInsteadOfRunningThem) {
  Harness h;
  h.queue({waiting("spender", 4, 0, "capped"), waiting("b", 1)});
  h.store.spent["spender"]["CNY"] = 2500000;  // the tier's 2.5 a month, all of it
  h.scheduler.round();
  EXPECT_EQ(h.store.granted_to("spender"), 0);
  ASSERT_EQ(h.store.ended.size(), 1u);
  const ports::EndQueued& end = h.store.ended[0];
  EXPECT_EQ(end.user_id, "spender");
  EXPECT_EQ(end.count, 4);
  EXPECT_EQ(end.ending.status, TaskStatus::kFailed);
  EXPECT_EQ(end.ending.error_code, ErrorCode::kQuotaExceeded);
  ASSERT_TRUE(end.ending.result.has_value());
  EXPECT_EQ(end.ending.result->type, ResultType::kError);
  EXPECT_NE(end.ending.result->message.find("monthly budget of 2.5"), std::string::npos)
      << end.ending.result->message;
  EXPECT_EQ(h.store.granted_to("b"), 1) << "others are admitted in the same pass";
}

TEST(SchedulerRounds, SpendInAnotherCurrencyCountsAgainstTheBudgetAtItsRate) {
  // The budget is 2.5 CNY; m2 is priced in USD at 7.2 CNY to the dollar. Spend in USD used
  // to count for nothing.
  Harness under;
  under.queue({waiting("spender", 1, 0, "capped")});
  under.store.spent["spender"] = {{"CNY", 1'000'000}, {"USD", 200'000}};  // 1 + 1.44
  under.scheduler.round();
  EXPECT_EQ(under.store.granted_to("spender"), 1) << "2.44 CNY of 2.5 spent";

  Harness over;
  over.queue({waiting("spender", 1, 0, "capped")});
  over.store.spent["spender"] = {{"CNY", 1'000'000}, {"USD", 210'000}};  // 1 + 1.512
  over.scheduler.round();
  EXPECT_EQ(over.store.granted_to("spender"), 0);
  ASSERT_EQ(over.store.ended.size(), 1u);
  EXPECT_NE(over.store.ended[0].ending.error.find("(2.512000 CNY used this month"),
            std::string::npos)
      << over.store.ended[0].ending.error;

  Harness dollars_only;
  dollars_only.queue({waiting("spender", 1, 0, "capped")});
  dollars_only.store.spent["spender"] = {{"USD", 350'000}};  // 2.52 CNY
  dollars_only.scheduler.round();
  EXPECT_EQ(dollars_only.store.granted_to("spender"), 0) << "a budget holds in any currency";
}

TEST(SchedulerRounds, HousekeepingRunsOncePerIntervalNotOncePerWakeUp) {
  Harness h;
  h.queue({waiting("a", 0, /*active=*/3)});  // tasks under way: their leases are about time
  h.scheduler.round();
  EXPECT_EQ(h.store.housekeepings, 1) << "a new term looks at once";
  h.scheduler.round();
  h.scheduler.round();
  EXPECT_EQ(h.store.housekeepings, 1);
  h.clock.advance(std::chrono::milliseconds(500));
  h.scheduler.round();
  EXPECT_EQ(h.store.housekeepings, 2);
  // A full housekeeping (as much work as a pass may do) looks again at once.
  h.store.housekeeping.recovery.lease_expired = h.config.dispatcher.scheduler_batch;
  h.clock.advance(std::chrono::milliseconds(500));
  h.scheduler.round();
  h.store.housekeeping.recovery.lease_expired = 0;
  h.scheduler.round();
  EXPECT_EQ(h.store.housekeepings, 4);
}

TEST(SchedulerRounds, AnIdleFleetsSchedulerWaitsLongAndQueuedWorkIsLookedAtOften) {
  using std::chrono::milliseconds;
  Harness h;
  const auto& d = h.config.dispatcher;
  // A user whose queue is more than its limit lets it run: work waits, passes run often.
  h.queue({waiting("a", 10)});
  h.scheduler.round();
  EXPECT_EQ(h.scheduler.wait_after(), milliseconds(d.scheduler_interval_ms));
  // Nothing queued, tasks under way: only their leases are about time.
  h.queue({waiting("a", 0, /*active=*/3)});
  h.scheduler.round();
  EXPECT_EQ(h.scheduler.wait_after(), milliseconds(d.housekeeping_interval_ms));
  // Everything queued admitted by this pass: under way now, so not the long wait either.
  h.queue({waiting("b", 2)});
  h.scheduler.round();
  ASSERT_EQ(h.store.granted_to("b"), 2);
  EXPECT_EQ(h.scheduler.wait_after(), milliseconds(d.housekeeping_interval_ms));
  // Nothing queued, nothing under way: the long wait (a submission's NOTIFY wakes it).
  h.queue({});
  h.scheduler.round();
  EXPECT_EQ(h.scheduler.wait_after(), milliseconds(d.scheduler_idle_ms));
  EXPECT_LT(2 * d.scheduler_idle_ms, d.leader_silence_s * 1000)
      << "the session is never silent long enough to lose the lock";
  // Housekeeping that found a full pass of work looks again soon, idle or not.
  h.store.housekeeping.recovery.lease_expired = d.scheduler_batch;
  h.rounds_on_time_until(h.clock.now() + Scheduler::kIdleHousekeepingEvery);
  EXPECT_EQ(h.scheduler.wait_after(), milliseconds(d.scheduler_interval_ms));
}

TEST(SchedulerRounds, AnIdleFleetsTimedRoundIsOneReadAndHousekeepingComesOncePerIdleInterval) {
  using std::chrono::milliseconds;
  Harness h;
  const auto& d = h.config.dispatcher;
  h.queue({});
  h.scheduler.round();  // a new term: a whole pass
  ASSERT_EQ(h.store.housekeepings, 1);
  const auto housekept_at = h.clock.now();
  const auto reads = h.store.count_caps.size();
  const int refreshes = h.store.plan_refreshes, writes = h.store.writes;
  // Rounds nothing woke, each after the long wait, until housekeeping comes again: each
  // reads the backlog once (the session, and so the lock, stays alive) and does nothing else.
  int rounds = 0;
  while (h.store.housekeepings == 1 && rounds < 1000) {
    h.clock.advance(h.scheduler.wait_after());
    EXPECT_FALSE(h.scheduler.round());
    ++rounds;
    if (h.store.housekeepings == 1) {
      EXPECT_EQ(h.store.count_caps.size(), reads + rounds) << "one read a round";
      EXPECT_EQ(h.store.plan_refreshes, refreshes) << "no plans are dropped while nothing runs";
      EXPECT_EQ(h.store.writes, writes);
      EXPECT_EQ(h.scheduler.wait_after(), milliseconds(d.scheduler_idle_ms));
    }
  }
  ASSERT_EQ(h.store.housekeepings, 2);
  EXPECT_GE(h.clock.now() - housekept_at, Scheduler::kIdleHousekeepingEvery);
  EXPECT_LT(h.clock.now() - housekept_at,
            Scheduler::kIdleHousekeepingEvery + milliseconds(d.scheduler_idle_ms))
      << "housekeeping comes with the first round once the idle interval has passed";
  h.clock.advance(h.scheduler.wait_after());
  h.scheduler.round();
  EXPECT_EQ(h.store.housekeepings, 2);
}

TEST(SchedulerRounds, AnIdleFleetsSchedulerAdmitsWorkThatCameWithoutAWakeUpInTheRoundThatSawIt) {
  Harness h;
  h.queue({});
  h.scheduler.round();
  h.clock.advance(h.scheduler.wait_after());
  h.scheduler.round();
  ASSERT_EQ(h.store.housekeepings, 1);
  // A task queued whose notification was lost: the idle round's read finds it and the same
  // round admits it.
  h.queue({waiting("a", 1)});
  h.clock.advance(h.scheduler.wait_after());
  h.scheduler.round();
  EXPECT_EQ(h.store.granted_to("a"), 1);
  EXPECT_EQ(h.store.housekeepings, 2) << "a whole pass, its housekeeping due";
  // Under way now: the rounds are passes again, housekeeping at its interval.
  h.queue({waiting("a", 0, /*active=*/1)});
  h.clock.advance(h.scheduler.wait_after());
  h.scheduler.round();
  EXPECT_EQ(h.store.housekeepings, 3);
}

TEST(SchedulerRounds, AWakeUpMakesAnIdleFleetsNextRoundAPass) {
  using std::chrono::milliseconds;
  Harness h;
  h.queue({});
  h.scheduler.round();
  h.clock.advance(milliseconds(h.config.dispatcher.housekeeping_interval_ms));
  h.scheduler.round();
  ASSERT_EQ(h.store.housekeepings, 1) << "idle and not woken: no pass";
  const auto reads = h.store.count_caps.size();
  h.scheduler.wake();  // as a submission's NOTIFY heard by the store does
  h.scheduler.round();
  EXPECT_EQ(h.store.housekeepings, 2) << "a pass, its housekeeping due";
  EXPECT_EQ(h.store.count_caps.size(), reads + 1) << "the pass reads the backlog once";
  h.scheduler.round();
  EXPECT_EQ(h.store.count_caps.size(), reads + 2);
  EXPECT_EQ(h.store.housekeepings, 2) << "the wake-up was used by one pass";
}

TEST(SchedulerRounds, AfterTheStoreWasAwayLapsedWorkersGetALeaseBeforeTheirTasksAreTakenOver) {
  Harness h;
  h.queue({waiting("a", 0, /*active=*/3)});  // tasks under way, their workers' leases lapsed
  h.scheduler.round();
  ASSERT_EQ(h.store.recover_lapsed.size(), 1u);
  EXPECT_TRUE(h.store.recover_lapsed[0]) << "a term that saw no failure recovers at once";

  // Postgres goes away: this replica's session breaks and it competes for the lock again.
  Harness after;
  after.queue({waiting("a", 0, /*active=*/3)});
  after.store.store_away = true;
  EXPECT_THROW(after.scheduler.round(), std::runtime_error);
  after.store.store_away = false;
  after.scheduler.round();  // the store is back: a new term
  ASSERT_EQ(after.store.recover_lapsed.size(), 1u);
  EXPECT_FALSE(after.store.recover_lapsed[0])
      << "no worker could renew while the store was away: their leases say nothing yet";
  // Rounds on time (one late by a lease less a heartbeat is a stall: the test below) until
  // one lease later.
  auto held = after.rounds_on_time_until(after.clock.now() +
                                         std::chrono::seconds(after.config.worker.lease_s));
  ASSERT_FALSE(held.empty());
  EXPECT_TRUE(held.back()) << "one lease later, a lapsed lease means gone";
  held.pop_back();
  for (bool recovered : held)
    EXPECT_FALSE(recovered);
  for (int i = 0; i < 10; ++i) {
    after.clock.advance(after.scheduler.wait_after());
    after.scheduler.round();
    EXPECT_TRUE(after.store.recover_lapsed.back()) << "the hold is once per outage";
  }
}

// Issue 39, item 3: a scheduler that merely stalled (a paused process, a frozen machine whose
// workers stalled with it) recovered at once on resuming, taking every lapsed lease for a
// death. A round that begins late by a lease less a heartbeat or more (a stall that long
// lapses the lease of a worker that stalled with it) holds recovery back for one lease, as
// after an outage; a round on time, or late by less, holds nothing.
TEST(SchedulerRounds, AReplicaThatResumesFromAStallGivesLapsedWorkersALeaseFirst) {
  Harness h;
  h.queue({waiting("a", 0, /*active=*/3)});  // tasks under way: a pass every housekeeping
  h.scheduler.round();
  ASSERT_TRUE(h.store.recover_lapsed.back());
  // On time, and late by less than a lease less a heartbeat: recovery as usual.
  h.clock.advance(h.scheduler.wait_after());
  h.scheduler.round();
  EXPECT_TRUE(h.store.recover_lapsed.back());
  const auto bound = std::chrono::seconds(h.config.worker.lease_s - h.config.worker.heartbeat_s);
  ASSERT_GT(bound, std::chrono::seconds(h.config.worker.heartbeat_s));
  h.clock.advance(h.scheduler.wait_after() + bound - std::chrono::milliseconds(1));
  h.scheduler.round();
  EXPECT_TRUE(h.store.recover_lapsed.back()) << "late by less than a lease less a heartbeat";
  // Stalled for a minute.
  h.clock.advance(h.scheduler.wait_after() + std::chrono::seconds(60));
  h.scheduler.round();
  EXPECT_FALSE(h.store.recover_lapsed.back())
      << "the workers may have stalled too: their lapsed leases say nothing yet";
  // Then rounds on time: held until one lease after the stall, and not after.
  auto held = h.rounds_on_time_until(h.clock.now() + std::chrono::seconds(h.config.worker.lease_s));
  ASSERT_FALSE(held.empty());
  EXPECT_TRUE(held.back()) << "one lease later, a lapsed lease means gone";
  held.pop_back();
  for (bool recovered : held)
    EXPECT_FALSE(recovered);
}

TEST(SchedulerRounds, ARoundThatFailsAndANewTermAtOnceHoldNoRecovery) {
  // A statement that timed out under load ends the term; the next round begins a new one at
  // once. No worker missed a renewal because of it: a lapsed lease still means gone.
  Harness h;
  h.queue({waiting("u1", 1)});
  h.scheduler.round();
  ASSERT_TRUE(h.scheduler.leader());
  h.store.fail_writes = true;
  EXPECT_THROW(h.scheduler.round(), std::runtime_error);
  EXPECT_FALSE(h.scheduler.leader()) << "a failed round ends the term";
  h.store.fail_writes = false;
  h.clock.advance(std::chrono::milliseconds(200));
  std::size_t looked = h.store.recover_lapsed.size();
  h.scheduler.round();
  ASSERT_TRUE(h.scheduler.leader());
  ASSERT_EQ(h.store.recover_lapsed.size(), looked + 1) << "a new term looks at once";
  EXPECT_TRUE(h.store.recover_lapsed.back()) << "a moment's failure holds no recovery back";

  // The store away for longer than a heartbeat: every worker may have missed its renewal.
  h.store.store_away = true;
  h.store.fail_writes = true;
  EXPECT_THROW(h.scheduler.round(), std::runtime_error);
  h.clock.advance(std::chrono::seconds(h.config.worker.heartbeat_s));
  EXPECT_THROW(h.scheduler.round(), std::runtime_error);
  h.store.store_away = false;
  h.store.fail_writes = false;
  looked = h.store.recover_lapsed.size();
  h.scheduler.round();
  ASSERT_EQ(h.store.recover_lapsed.size(), looked + 1);
  EXPECT_FALSE(h.store.recover_lapsed.back()) << "after an outage, lapsed workers get a lease";
}

TEST(SchedulerRounds, AWriteThatFailsGivesEveryGrantsChargeBack) {
  // A user allowed 2 admissions a minute: a pass whose write failed dispatched nothing, so
  // the next one (on a new session) may admit both again.
  Harness h;
  h.queue({waiting("slow", 5, 0, "slow")});
  h.store.fail_writes = true;
  EXPECT_THROW(h.scheduler.round(), std::runtime_error);
  h.store.fail_writes = false;
  h.scheduler.round();
  EXPECT_EQ(h.store.granted_to("slow"), 2) << "the failed pass's charges were given back";
  h.scheduler.round();
  EXPECT_EQ(h.store.granted_to("slow"), 2) << "and the limit holds afterwards";
}

TEST(SchedulerRounds, WhyTasksWaitIsWrittenWhenItChangesAndANewTermStartsItOver) {
  Harness h;
  // "slow" may start 2 a minute, "a" 3 at once (3 already running): both wait, each for its
  // own limit; "b" gets everything it asked for and waits for nothing.
  h.queue({waiting("slow", 5, 0, "slow"), waiting("a", 4, /*active=*/3), waiting("b", 1)});
  h.scheduler.round();
  using Key = std::pair<std::string, Priority>;
  const std::map<Key, std::string> both = {
      {{"a", Priority::kInteractive}, "concurrency"},
      {{"slow", Priority::kInteractive}, "requests_per_minute"}};
  EXPECT_EQ(h.store.waiting, both);
  ASSERT_EQ(h.store.waiting_writes.size(), 1u);
  EXPECT_TRUE(h.store.waiting_writes[0].replace) << "a term's first write starts over";

  // Nothing changed: nothing is written.
  h.scheduler.round();
  EXPECT_EQ(h.store.waiting_writes.size(), 1u);

  // "a" no longer waits (its tasks ended, the rest admitted): its row goes, alone, at most
  // a second after the last write (a busy fleet's passes do not each write).
  h.queue({waiting("slow", 5, 0, "slow")});
  h.scheduler.round();
  EXPECT_EQ(h.store.waiting_writes.size(), 1u) << "not within the second of the last write";
  h.clock.advance(std::chrono::seconds(1));
  h.scheduler.round();
  ASSERT_EQ(h.store.waiting_writes.size(), 2u);
  EXPECT_FALSE(h.store.waiting_writes[1].replace);
  EXPECT_TRUE(h.store.waiting_writes[1].set.empty());
  EXPECT_EQ(h.store.waiting_writes[1].cleared, (std::vector<Key>{{"a", Priority::kInteractive}}));
  EXPECT_EQ(
      h.store.waiting,
      (std::map<Key, std::string>{{{"slow", Priority::kInteractive}, "requests_per_minute"}}));

  // A failed round ends the term; the next term writes everything again, from scratch.
  h.store.fail_writes = true;
  EXPECT_THROW(h.scheduler.round(), std::runtime_error);
  h.store.fail_writes = false;
  h.scheduler.round();
  ASSERT_EQ(h.store.waiting_writes.size(), 3u);
  EXPECT_TRUE(h.store.waiting_writes[2].replace);
  EXPECT_EQ(h.store.waiting_writes[2].set.size(), 1u);
}

TEST(SchedulerRounds, AUserWithMoreQueuedThanTheFleetHasRoomForIsSaidToWaitForIt) {
  // Room for one: "a" gets it and the rest of its queue, which the pass counted only up to
  // the room and one more, waits for the fleet's capacity; so does all of it once full.
  Harness h;
  h.queue({waiting("a", 50)}, /*capacity=*/1);
  h.scheduler.round();
  EXPECT_EQ(h.store.granted_to("a"), 1);
  using Key = std::pair<std::string, Priority>;
  EXPECT_EQ(h.store.waiting,
            (std::map<Key, std::string>{{{"a", Priority::kInteractive}, "fleet_capacity"}}));
  h.queue({waiting("a", 49, /*active=*/1)}, /*capacity=*/1);
  h.clock.advance(std::chrono::seconds(1));
  h.scheduler.round();
  EXPECT_EQ(h.store.granted_to("a"), 1);
  EXPECT_EQ(h.store.waiting,
            (std::map<Key, std::string>{{{"a", Priority::kInteractive}, "fleet_capacity"}}));
}

TEST(SchedulerRounds, AFailedWriteOfWhyTasksWaitNeitherStopsAdmissionNorEndsTheTerm) {
  Harness h;
  h.queue({waiting("a", 5, /*active=*/3)});
  h.scheduler.round();
  ASSERT_EQ(h.store.waiting_writes.size(), 1u);
  // "c" starts waiting too, and the write of that fails: the pass's admissions stand and
  // the term goes on.
  h.clock.advance(std::chrono::seconds(1));
  h.queue({waiting("a", 5, /*active=*/3), waiting("c", 5, /*active=*/3)});
  h.store.fail_waiting = true;
  h.scheduler.round();
  EXPECT_TRUE(h.scheduler.leader());
  EXPECT_EQ(h.store.resets, 0);
  h.store.fail_waiting = false;
  h.queue({waiting("a", 5, /*active=*/3), waiting("c", 5, /*active=*/3), waiting("b", 2)});
  h.scheduler.round();
  EXPECT_EQ(h.store.granted_to("b"), 2) << "admission went on";
  ASSERT_EQ(h.store.waiting_writes.size(), 2u);
  EXPECT_TRUE(h.store.waiting_writes.back().replace) << "the next write starts the table over";
  EXPECT_EQ(h.store.waiting.size(), 2u);
}

// Admitting what was heard (dispatcher/scheduler.hpp): a submission's notification names its
// user, and a user the last read listed is admitted from what that read said.
ports::Heard heard_from(std::vector<std::string> users) {
  ports::Heard heard;
  for (auto& user : users)
    heard.submitted.emplace_back(std::move(user), Priority::kInteractive);
  return heard;
}

TEST(SchedulerHeard, ASubmissionOfAUserTheLastReadListedIsAdmittedWithoutAReadOfTheBacklog) {
  Harness h;
  h.queue({waiting("a", 1)});
  h.scheduler.round();
  ASSERT_EQ(h.store.granted_to("a"), 1);
  h.store.calls.clear();
  // Submissions heard from here on come one at a time; the store's backlog is left as the
  // test set it: a read would show it.
  for (int i = 0; i < 2; ++i) {
    h.clock.advance(std::chrono::milliseconds(40));
    h.store.heard = heard_from({"a"});
    EXPECT_FALSE(h.scheduler.round());
  }
  EXPECT_EQ(h.store.calls, (std::vector<std::string>{"write", "write"}))
      << "each admitted by the admission's statement alone";
  EXPECT_EQ(h.store.granted_to("a"), 3);
  EXPECT_EQ(h.handed.size(), 3u) << "their messages handed to the relay as before";
}

TEST(SchedulerHeard, WhatIsKnownOfTasksUnderWayNeverAdmitsPastALimitAReadWouldHold) {
  // The standard tier runs 3 at once; the read says 1 is under way.
  Harness h;
  h.queue({waiting("a", 1, /*active=*/1)});
  h.scheduler.round();
  ASSERT_EQ(h.store.granted_to("a"), 1) << "2 under way now";
  h.clock.advance(std::chrono::milliseconds(20));
  h.store.heard = heard_from({"a"});
  h.scheduler.round();
  ASSERT_EQ(h.store.granted_to("a"), 2) << "3 under way now";
  // The task under way before the read ended: its result cannot tell whether the read
  // counted it, so it frees nothing of what is known, and the next submission is read for.
  h.scheduler.task_ended("a", "a-before-the-read", 10);
  h.store.calls.clear();
  h.queue({waiting("a", 1, /*active=*/2)});
  h.clock.advance(std::chrono::milliseconds(20));
  h.store.heard = heard_from({"a"});
  h.scheduler.round();
  EXPECT_EQ(h.store.calls, (std::vector<std::string>{"read", "write"}))
      << "at its limit by what is known: the round reads the backlog";
  EXPECT_EQ(h.store.granted_to("a"), 3) << "the read found the place its end freed";
}

TEST(SchedulerHeard, AResultOfATaskDispatchedSinceTheReadFreesItsPlace) {
  Harness h;
  h.queue({waiting("a", 1, /*active=*/2)});
  h.scheduler.round();
  ASSERT_EQ(h.store.granted_to("a"), 1);
  ASSERT_EQ(h.store.granted.size(), 1u);
  // The task that pass dispatched ended (the fake names tasks user-number, from 0).
  h.scheduler.task_ended("a", "a-0", 10);
  h.store.calls.clear();
  h.clock.advance(std::chrono::milliseconds(20));
  h.store.heard = heard_from({"a"});
  h.scheduler.round();
  EXPECT_EQ(h.store.calls, (std::vector<std::string>{"write"}));
  EXPECT_EQ(h.store.granted_to("a"), 2);
  // And only once: a result heard again frees nothing more.
  h.scheduler.task_ended("a", "a-0", 10);
  h.store.calls.clear();
  h.clock.advance(std::chrono::milliseconds(20));
  h.store.heard = heard_from({"a"});
  h.scheduler.round();
  EXPECT_EQ(h.store.calls.front(), "read") << "3 under way by what is known";
}

TEST(SchedulerHeard, AUserAnEarlierReadListedIsKnownUntilOtherWorkIsHeardOrTheirReadIsOld) {
  Harness h;
  h.queue({waiting("a", 1, /*active=*/2)});
  h.scheduler.round();
  ASSERT_EQ(h.store.granted_to("a"), 1) << "3 under way, a's limit";
  // A later read lists only b: what is known of a stays (3 under way), and a's task of
  // before that read ends: it was dispatched after the read that counted a, so it frees a
  // place.
  h.queue({waiting("b", 1)});
  h.clock.advance(std::chrono::milliseconds(h.config.dispatcher.housekeeping_interval_ms));
  h.scheduler.round();
  h.scheduler.task_ended("a", "a-0", 10);
  h.store.calls.clear();
  h.clock.advance(std::chrono::milliseconds(20));
  h.store.heard = heard_from({"a"});
  h.scheduler.round();
  EXPECT_EQ(h.store.calls, (std::vector<std::string>{"write"}));
  EXPECT_EQ(h.store.granted_to("a"), 2);

  // Other work heard (a limits change among what it may be) forgets every user.
  h.queue({});
  h.store.heard.other = true;
  h.clock.advance(std::chrono::milliseconds(20));
  h.scheduler.round();
  h.store.calls.clear();
  h.clock.advance(std::chrono::milliseconds(20));
  h.store.heard = heard_from({"b"});
  h.scheduler.round();
  EXPECT_EQ(h.store.calls, (std::vector<std::string>{"read", "write"}))
      << "b was listed before the other work, not since";

  // A user listed only longer ago than kUserKnownFor is read for, fresh reads of the fleet
  // in between.
  h.queue({waiting("c", 1)});
  h.clock.advance(std::chrono::milliseconds(20));
  h.store.heard.other = true;
  h.scheduler.round();  // lists c
  h.queue({waiting("d", 0, /*active=*/1)});  // a task under way: every round a pass, a read
  const auto c_listed = h.clock.now();
  while (h.clock.now() - c_listed < Scheduler::kUserKnownFor) {
    h.clock.advance(std::chrono::milliseconds(h.config.dispatcher.housekeeping_interval_ms));
    h.scheduler.round();
  }
  h.store.calls.clear();
  h.store.heard = heard_from({"c"});
  h.scheduler.round();
  const auto& calls = h.store.calls;
  EXPECT_LT(std::find(calls.begin(), calls.end(), "read"),
            std::find(calls.begin(), calls.end(), "write"));
}

TEST(SchedulerHeard, AnythingElseHeardOrNotKnownMakesTheRoundAPassThatReads) {
  // Whether the round after a change reads the backlog before it writes anything.
  const auto reads_first = [](const std::function<void(Harness&)>& change) {
    Harness h;
    h.queue({waiting("a", 1), waiting("capped-user", 1, 0, "capped")});
    h.store.spent["capped-user"]["CNY"] = 0;
    h.scheduler.round();
    h.store.calls.clear();
    h.clock.advance(std::chrono::milliseconds(20));
    h.store.heard = heard_from({"a"});
    change(h);
    h.scheduler.round();
    const auto& calls = h.store.calls;
    return std::find(calls.begin(), calls.end(), "read") <
           std::find(calls.begin(), calls.end(), "write");
  };
  EXPECT_FALSE(reads_first([](Harness&) {})) << "the case the others differ from";
  EXPECT_TRUE(reads_first([](Harness& h) { h.store.heard.other = true; }))
      << "a hand-back, a limits change, a moved batch";
  EXPECT_TRUE(reads_first([](Harness& h) { h.store.heard = heard_from({"b"}); }))
      << "a user the last read did not list";
  EXPECT_TRUE(reads_first([](Harness& h) { h.store.heard = heard_from({"capped-user"}); }))
      << "a user with a budget: this month's spend is read";
  EXPECT_TRUE(reads_first([](Harness& h) { h.scheduler.wake(); })) << "a wake-up of this process";
  EXPECT_TRUE(reads_first([](Harness& h) { h.clock.advance(Scheduler::kHeardTrustFor); }))
      << "a read too old to trust (the fleet's capacity, the users' limits)";
}

TEST(SchedulerHeard, AHeardSubmissionGoesBeforeHousekeepingThatFellDue) {
  Harness h;
  h.queue({waiting("a", 1)});
  h.scheduler.round();
  h.store.calls.clear();
  h.clock.advance(std::chrono::milliseconds(h.config.dispatcher.housekeeping_interval_ms));
  h.store.heard = heard_from({"a"});
  h.scheduler.round();
  EXPECT_EQ(h.store.calls, (std::vector<std::string>{"write", "housekeep", "read", "write"}))
      << "the admission first; then the pass, its housekeeping and a new read";
}

TEST(SchedulerHeard, ANewTermReadsBeforeItAdmitsAnything) {
  Harness h;
  h.queue({waiting("a", 1)});
  h.scheduler.round();
  h.store.fail_writes = true;
  h.clock.advance(std::chrono::milliseconds(20));
  h.store.heard = heard_from({"a"});
  EXPECT_THROW(h.scheduler.round(), std::runtime_error);
  h.store.fail_writes = false;
  h.store.calls.clear();
  h.clock.advance(std::chrono::milliseconds(20));
  h.store.heard = heard_from({"a"});
  h.scheduler.round();
  ASSERT_FALSE(h.store.calls.empty());
  EXPECT_EQ(h.store.calls[0], "housekeep") << "a new term starts with a full pass";
  EXPECT_NE(std::find(h.store.calls.begin(), h.store.calls.end(), "read"), h.store.calls.end());
}

}  // namespace
}  // namespace agentfleet::dispatcher
