// The worker's long-lived jobs with fakes: the lease keeper (liveness per worker, self-fencing,
// hand-back), the dispatch consumer (taking only what it can run, offsets after the claim,
// dead letters) and the drain. A manual clock and io_context::poll(): no sockets, no sleeps.
#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/adapters/metrics/metrics_registry.hpp"
#include "core/adapters/metrics/worker_metrics.hpp"
#include "core/config/config.hpp"
#include "worker/dispatch_consumer.hpp"
#include "worker/drain.hpp"
#include "worker/lease_keeper.hpp"

namespace agentfleet::worker {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// Waits until cancelled (or a day): what a fake uses to stay suspended.
asio::awaitable<void> suspend(std::shared_ptr<asio::steady_timer> timer) {
  boost::system::error_code ec;
  co_await timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

// The runs: claims succeed unless told otherwise; a run lasts until the test ends it.
class FakeRuns final : public Runs {
 public:
  explicit FakeRuns(asio::io_context& io) : io_(io) {}

  asio::awaitable<ClaimResult> claim(std::string task_id, std::string, std::string) override {
    claims.push_back(task_id);
    if (auto it = claim_outcome.find(task_id); it != claim_outcome.end())
      co_return ClaimResult{nullptr, it->second};
    auto run = std::make_shared<ClaimedRun>();
    run->task_id = task_id;
    run->attempt = 1;
    held_[task_id] = 1;
    co_return ClaimResult{run, RunOutcome::kFinished};
  }
  asio::awaitable<RunOutcome> execute(std::shared_ptr<ClaimedRun> run) override {
    auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::hours(24));
    running_[run->task_id] = timer;
    co_await suspend(timer);
    running_.erase(run->task_id);
    held_.erase(run->task_id);
    co_return end_outcome;
  }
  // Ends the run of `task_id` (it returns end_outcome).
  void end(const std::string& task_id) {
    if (auto it = running_.find(task_id); it != running_.end())
      it->second->cancel();
  }
  std::vector<ports::HeldTask> held() const override {
    std::vector<ports::HeldTask> out;
    for (const auto& [id, attempt] : held_)
      out.push_back({id, attempt});
    return out;
  }
  std::size_t running() const override { return held_.size(); }
  void cancel(const std::string& task_id) override { cancelled.push_back(task_id); }
  void fence() override { ++fences; }
  void unfence() override { ++unfences; }
  void drain() override { ++drains; }

  void hold(const std::string& task_id, int attempt) { held_[task_id] = attempt; }
  void release_all() { held_.clear(); }

  std::vector<std::string> claims, cancelled;
  std::map<std::string, RunOutcome> claim_outcome;
  RunOutcome end_outcome = RunOutcome::kFinished;
  int fences = 0, unfences = 0, drains = 0;

 private:
  asio::io_context& io_;
  std::map<std::string, int> held_;
  std::map<std::string, std::shared_ptr<asio::steady_timer>> running_;
};

// The liveness store: answers as scripted, records what it was asked.
class FakeLiveness final : public ports::LivenessStore {
 public:
  explicit FakeLiveness(asio::io_context& io) : io_(io) {}

  asio::awaitable<Result<std::int64_t>> register_worker(std::string,
                                                        ports::WorkerReport report) override {
    registrations.push_back(report);
    if (down)
      co_return Error{ErrorKind::kTransient, "connection refused"};
    co_return ++last_incarnation;
  }
  asio::awaitable<Result<ports::Heartbeat>> beat(ports::WorkerReport report) override {
    beats.push_back(report);
    if (hang) {
      auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::hours(24));
      hanging.push_back(timer);
      co_await suspend(timer);
    }
    if (down)
      co_return Error{ErrorKind::kTransient, "connection refused"};
    ports::Heartbeat heartbeat;
    heartbeat.alive = alive;
    heartbeat.cancelled = std::move(cancel_next);
    cancel_next.clear();
    co_return heartbeat;
  }
  asio::awaitable<Result<int>> hand_back(std::int64_t incarnation,
                                         std::vector<ports::HeldTask> tasks) override {
    if (down)
      co_return Error{ErrorKind::kTransient, "connection refused"};
    handed.push_back({incarnation, tasks});
    co_return static_cast<int>(tasks.size());
  }
  asio::awaitable<Status> retire(std::int64_t incarnation) override {
    retired.push_back(incarnation);
    co_return ok_status();
  }

  bool down = false, hang = false, alive = true;
  std::int64_t last_incarnation = 100;
  std::vector<std::string> cancel_next;
  std::vector<ports::WorkerReport> registrations, beats;
  std::vector<std::pair<std::int64_t, std::vector<ports::HeldTask>>> handed;
  std::vector<std::int64_t> retired;
  std::vector<std::shared_ptr<asio::steady_timer>> hanging;

 private:
  asio::io_context& io_;
};

LeaseKeeperOptions keeper_options() {
  LeaseKeeperOptions o;
  o.tick = 500ms;
  o.renew_every = 10s;
  o.lease = 30s;
  o.margin = 6s;
  return o;
}

struct KeeperHarness {
  asio::io_context io;
  limits::ManualClock clock;
  FakeRuns runs{io};
  FakeLiveness store{io};
  int capacity = 64;
  LeaseKeeper keeper{io.get_executor(), store, runs, clock, keeper_options(), "worker-t", [this] {
                       ports::WorkerReport r;
                       r.capacity = capacity;
                       return r;
                     }};
  std::vector<bool> fences;
  std::vector<std::int64_t> incarnations;

  KeeperHarness() {
    keeper.on_fence = [this](bool up) { fences.push_back(up); };
    keeper.on_incarnation = [this](std::int64_t i) { incarnations.push_back(i); };
  }
  bool start() {
    std::optional<bool> started;
    // No timer loop: the tests drive step() themselves.
    asio::co_spawn(io, keeper.register_first(), [&](std::exception_ptr, bool ok) { started = ok; });
    io.restart();
    io.poll();
    return started.value_or(false);
  }
  void step() {
    asio::co_spawn(io, keeper.step(), asio::detached);
    io.restart();
    io.poll();
  }
};

TEST(LeaseKeeper, RegistersAnIncarnationAndRenewsItOnlyAsOftenAsNeeded) {
  KeeperHarness h;
  ASSERT_TRUE(h.start());
  EXPECT_EQ(h.keeper.incarnation(), 101);
  EXPECT_EQ(h.incarnations, std::vector<std::int64_t>{101});
  ASSERT_EQ(h.store.registrations.size(), 1u);
  EXPECT_EQ(h.store.registrations[0].capacity, 64);
  EXPECT_EQ(h.store.registrations[0].lease_s, 30);
  // Ticks within renew_every only read (the cancellations), whatever the number of tasks.
  for (int i = 0; i < 5; ++i) {
    h.runs.hold("t" + std::to_string(i), 1);
    h.clock.advance(500ms);
    h.step();
  }
  ASSERT_EQ(h.store.beats.size(), 5u);
  for (const auto& beat : h.store.beats) {
    EXPECT_FALSE(beat.renew);
    EXPECT_EQ(beat.incarnation, 101);
  }
  h.clock.advance(10s);
  h.step();
  ASSERT_EQ(h.store.beats.size(), 6u);
  EXPECT_TRUE(h.store.beats.back().renew) << "renewed every heartbeat_s";
}

TEST(LeaseKeeper, ACapacityChangeOfATenthIsReportedAtOnce) {
  KeeperHarness h;
  ASSERT_TRUE(h.start());
  h.runs.hold("t1", 1);  // a worker running something beats every tick
  h.capacity = 68;       // +4 of 64: less than a tenth
  h.step();
  EXPECT_FALSE(h.store.beats.back().renew);
  h.capacity = 40;
  h.step();
  EXPECT_TRUE(h.store.beats.back().renew);
  EXPECT_EQ(h.store.beats.back().capacity, 40);
}

TEST(LeaseKeeper, AWorkerRunningNothingAsksTheStoreOnlyWhenItsRenewalIsDue) {
  KeeperHarness h;
  ASSERT_TRUE(h.start());
  // Idle: no cancellations to read, nothing to hand back; the renewal is the only call.
  for (int i = 0; i < 19; ++i) {
    h.clock.advance(500ms);
    h.step();
  }
  EXPECT_TRUE(h.store.beats.empty()) << "no call between renewals while nothing runs";
  h.clock.advance(500ms);
  h.step();
  ASSERT_EQ(h.store.beats.size(), 1u);
  EXPECT_TRUE(h.store.beats.back().renew);
  // A change of capacity is told at once, idle or not.
  h.capacity = 10;
  h.step();
  ASSERT_EQ(h.store.beats.size(), 2u);
  EXPECT_EQ(h.store.beats.back().capacity, 10);
  // Once a task runs, every tick reads its cancellations again.
  h.runs.hold("t1", 1);
  h.clock.advance(500ms);
  h.step();
  EXPECT_EQ(h.store.beats.size(), 3u);
  // A task abandoned with nothing running is handed back at the next tick, not the renewal.
  h.runs.release_all();
  h.keeper.abandoned({"t1", 1});
  h.clock.advance(500ms);
  h.step();
  EXPECT_EQ(h.store.beats.size(), 4u);
  ASSERT_EQ(h.store.handed.size(), 1u);
}

TEST(LeaseKeeper, CancellationsTheStoreReportsStopTheirRuns) {
  KeeperHarness h;
  ASSERT_TRUE(h.start());
  h.runs.hold("t1", 1);
  h.runs.hold("t2", 1);
  h.store.cancel_next = {"t1", "t2"};
  h.step();
  EXPECT_EQ(h.runs.cancelled, (std::vector<std::string>{"t1", "t2"}));
}

TEST(LeaseKeeper, WithoutARenewalForTheLeaseLessTheMarginItFencesItselfAndRecoversAfterwards) {
  KeeperHarness h;
  ASSERT_TRUE(h.start());
  h.runs.hold("t1", 3);
  h.runs.hold("t2", 1);
  h.store.down = true;
  // Failed beats are tried again at every tick; no fence while the lease still holds.
  for (int i = 0; i < 47; ++i) {
    h.clock.advance(500ms);
    h.step();
  }
  EXPECT_FALSE(h.keeper.fenced()) << "23.5 s: within 30 s less the 6 s margin";
  EXPECT_EQ(h.runs.fences, 0);
  h.clock.advance(600ms);
  h.step();
  EXPECT_TRUE(h.keeper.fenced());
  EXPECT_EQ(h.runs.fences, 1) << "every run stopped at once";
  EXPECT_EQ(h.fences, std::vector<bool>{true});
  EXPECT_EQ(h.incarnations.back(), 0) << "no claims while fenced";
  // While the store is down nothing more happens.
  h.runs.release_all();  // the fenced runs have stopped
  h.clock.advance(500ms);
  h.step();
  EXPECT_TRUE(h.store.handed.empty());
  // The store answers again: what the fenced runs held is handed back under the old
  // incarnation, a new one registered, the fence lifted.
  h.store.down = false;
  h.clock.advance(500ms);
  h.step();
  ASSERT_EQ(h.store.handed.size(), 1u);
  EXPECT_EQ(h.store.handed[0].first, 101);
  ASSERT_EQ(h.store.handed[0].second.size(), 2u);
  EXPECT_EQ(h.store.handed[0].second[0].task_id, "t1");
  EXPECT_EQ(h.store.handed[0].second[0].attempt, 3);
  EXPECT_FALSE(h.keeper.fenced());
  EXPECT_EQ(h.keeper.incarnation(), 102);
  EXPECT_EQ(h.runs.unfences, 1);
  EXPECT_EQ(h.fences, (std::vector<bool>{true, false}));
  EXPECT_EQ(h.incarnations.back(), 102);
}

TEST(LeaseKeeper, ABeatThatHangsDoesNotKeepTheFenceFromGoingUpInTime) {
  KeeperHarness h;
  ASSERT_TRUE(h.start());
  h.runs.hold("t1", 1);
  h.store.hang = true;  // a blackholed connection: the call never answers
  h.clock.advance(500ms);
  h.step();
  ASSERT_EQ(h.store.beats.size(), 1u);
  h.clock.advance(24s);
  h.step();
  EXPECT_TRUE(h.keeper.fenced()) << "the fence check does not wait for the hanging call";
  EXPECT_EQ(h.store.beats.size(), 1u) << "one store call at a time";
}

TEST(LeaseKeeper, AnIncarnationTheStoreSaysLapsedFencesAtOnce) {
  KeeperHarness h;
  ASSERT_TRUE(h.start());
  h.runs.hold("t1", 2);
  h.store.alive = false;
  h.step();
  EXPECT_TRUE(h.keeper.fenced());
  h.store.alive = true;
  h.runs.release_all();
  h.step();
  EXPECT_FALSE(h.keeper.fenced());
  ASSERT_EQ(h.store.handed.size(), 1u);
  EXPECT_EQ(h.store.handed[0].second[0].task_id, "t1");
}

TEST(LeaseKeeper, AbandonedTasksAreHandedBackAtTheNextBeatButNeverOneARunHoldsNow) {
  KeeperHarness h;
  ASSERT_TRUE(h.start());
  h.keeper.abandoned({"stuck", 4});
  h.keeper.abandoned({"in-doubt", -1});  // a claim in doubt: no attempt known
  h.keeper.abandoned({"mine-now", -1});
  h.runs.hold("mine-now", 2);  // claimed again since: the run holds it
  h.store.down = true;
  h.step();
  EXPECT_TRUE(h.store.handed.empty());
  h.store.down = false;
  h.step();
  ASSERT_EQ(h.store.handed.size(), 1u);
  const auto& tasks = h.store.handed[0].second;
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[0].task_id, "stuck");
  EXPECT_EQ(tasks[1].task_id, "in-doubt");
  EXPECT_EQ(tasks[1].attempt, -1);
  h.step();
  EXPECT_EQ(h.store.handed.size(), 1u) << "handed back once";
}

TEST(LeaseKeeper, ATaskReportedTwiceAtOneAttemptIsHandedBackOnce) {
  // Two claims in doubt of one task (two dispatch messages of it) both find it run by this
  // incarnation at attempt 3: one hand-back, since a hand-back of a task taken over meanwhile
  // counts a release each time it is made.
  KeeperHarness h;
  ASSERT_TRUE(h.start());
  h.keeper.abandoned({"doubtful", 3});
  h.keeper.abandoned({"doubtful", 3});
  h.keeper.abandoned({"other", 1});
  h.step();
  ASSERT_EQ(h.store.handed.size(), 1u);
  const auto& tasks = h.store.handed[0].second;
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[0].task_id, "doubtful");
  EXPECT_EQ(tasks[0].attempt, 3);
  EXPECT_EQ(tasks[1].task_id, "other");
  h.step();
  EXPECT_EQ(h.store.handed.size(), 1u) << "nothing left to hand back";
}

TEST(LeaseKeeper, ATaskAbandonedUnderAnEarlierIncarnationIsHandedBackUnderThatOne) {
  KeeperHarness h;
  ASSERT_TRUE(h.start());
  h.store.alive = false;  // the incarnation lapsed: fence, hand back, register anew
  h.clock.advance(10s);   // found at the renewal (a worker running nothing asks no sooner)
  h.step();
  ASSERT_TRUE(h.keeper.fenced());
  h.store.alive = true;
  h.step();
  ASSERT_FALSE(h.keeper.fenced());
  ASSERT_EQ(h.keeper.incarnation(), 102);
  // A claim made by incarnation 101 was answered only now.
  h.keeper.abandoned({"late-claim", 3, 101});
  h.keeper.abandoned({"stuck", 1});
  h.step();
  ASSERT_EQ(h.store.handed.size(), 2u);
  EXPECT_EQ(h.store.handed[0].first, 101);
  ASSERT_EQ(h.store.handed[0].second.size(), 1u);
  EXPECT_EQ(h.store.handed[0].second[0].task_id, "late-claim");
  EXPECT_EQ(h.store.handed[0].second[0].attempt, 3);
  EXPECT_EQ(h.store.handed[1].first, 102);
  EXPECT_EQ(h.store.handed[1].second[0].task_id, "stuck");
  h.step();
  EXPECT_EQ(h.store.handed.size(), 2u) << "handed back once";
}

TEST(LeaseKeeper, FinishHandsBackWhatIsLeftAndRetiresTheIncarnation) {
  KeeperHarness h;
  ASSERT_TRUE(h.start());
  std::optional<int> handed;
  asio::co_spawn(h.io, h.keeper.finish({{"t1", 1}, {"t2", 2}}),
                 [&](std::exception_ptr, int n) { handed = n; });
  h.io.restart();
  h.io.poll();
  EXPECT_EQ(handed, 2);
  EXPECT_EQ(h.store.retired, std::vector<std::int64_t>{101});
}

// ---- the dispatch consumer --------------------------------------------------------------

class FakeSubscription final : public ports::Subscription {
 public:
  void start(MessageHandler, RebalanceHandler) override { started = true; }
  void pause() override { pauses.push_back(true); }
  void resume() override { pauses.push_back(false); }
  void commit(const std::string& topic, std::int32_t partition, std::int64_t offset) override {
    commits.push_back({topic + "/" + std::to_string(partition), offset});
  }
  void stop() override { stopped = true; }
  std::int64_t backlog() const override { return 0; }

  bool started = false;
  std::atomic<bool> stopped{false};
  std::vector<bool> pauses;
  std::vector<std::pair<std::string, std::int64_t>> commits;
};

class RecordingPublisher final : public ports::Publisher {
 public:
  asio::awaitable<Status> publish(ports::OutMessage message) override {
    published.push_back(std::move(message));
    co_return ok_status();
  }
  void post(ports::OutMessage message) override { published.push_back(std::move(message)); }
  std::vector<ports::OutMessage> published;
};

config::Config minimal_config() {
  return config::load_config_text(R"(
postgres: {url: x}
kafka: {bootstrap_servers: b}
models: [{name: m1, endpoints: [{url: "http://h/x"}]}]
billing:
  prices:
    - {model: m1, effective_from: "2026-01-01", input_per_million: "1"}
)",
                                  "test.yaml");
}

ports::InMessage dispatch_message(std::int64_t offset, const std::string& task_id,
                                  int partition = 0) {
  ports::InMessage m;
  m.topic = "agent.tasks.dispatch";
  m.partition = partition;
  m.offset = offset;
  m.key = task_id;
  m.value =
      R"({"version":1,"task_id":")" + task_id +
      R"(","user_id":"u1","priority":"interactive","dispatched_at":"2026-11-25T10:00:00.000Z"})";
  return m;
}

std::string task_id(int i) {
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "00000000-0000-4000-8000-%012d", i);
  return buffer;
}

struct ConsumerHarness {
  asio::io_context io;
  config::Config config = minimal_config();
  metrics::MetricsRegistry registry;
  metrics::WorkerMetrics metrics{registry, config};
  FakeSubscription subscription;
  RecordingPublisher publisher;
  FakeRuns runs{io};
  int limit = 10;
  DispatchConsumer consumer{io.get_executor(),
                            subscription,
                            publisher,
                            runs,
                            metrics,
                            DispatchConsumerOptions{"dlq", 100},
                            [this] { return limit; }};
  ConsumerHarness() { consumer.rebalanced(true, {{"agent.tasks.dispatch", 0}}); }
  void feed(ports::InMessage m) {
    consumer.handle(std::move(m));
    io.restart();
    io.poll();
  }
};

TEST(DispatchConsumer, CommitsAnOffsetOnceItsClaimHasCommittedNotWhenTheRunEnds) {
  ConsumerHarness h;
  h.feed(dispatch_message(7, task_id(1)));
  EXPECT_EQ(h.consumer.in_flight(), 1u);
  ASSERT_EQ(h.subscription.commits.size(), 1u) << "the run is still going";
  EXPECT_EQ(h.subscription.commits[0].second, 8);
  h.runs.end(task_id(1));
  h.io.restart();
  h.io.poll();
  EXPECT_EQ(h.consumer.in_flight(), 0u);
}

// Ends the run of task_id(i) and lets the consumer react.
void end_run(ConsumerHarness& h, int i) {
  h.runs.end(task_id(i));
  h.io.restart();
  h.io.poll();
}

TEST(DispatchConsumer, RunsNoMoreThanItsLimitAndStartsWhatWaitsAsRunsEnd) {
  ConsumerHarness h;
  h.limit = 20;
  for (int i = 0; i < 25; ++i)
    h.feed(dispatch_message(i, task_id(i)));
  EXPECT_EQ(h.consumer.in_flight(), 20u);
  EXPECT_EQ(h.consumer.waiting(), 5u);
  EXPECT_EQ(h.runs.claims.size(), 20u) << "a waiting message is not claimed";
  EXPECT_FALSE(h.consumer.paused()) << "25 held of a capacity of 30: no pause";
  EXPECT_TRUE(h.subscription.pauses.empty());
  end_run(h, 0);
  EXPECT_EQ(h.consumer.in_flight(), 20u);
  EXPECT_EQ(h.consumer.waiting(), 4u);
  ASSERT_EQ(h.runs.claims.size(), 21u);
  EXPECT_EQ(h.runs.claims.back(), task_id(20)) << "in the order they arrived";
  // Offsets follow claims: 0..20 claimed, 21 waits, so the commit stops at 21.
  ASSERT_FALSE(h.subscription.commits.empty());
  EXPECT_EQ(h.subscription.commits.back().second, 21);
}

TEST(DispatchConsumer, PausesOnlyAtItsCapacityAndResumesATenthBelowIt) {
  EXPECT_EQ(DispatchConsumer::capacity(20), 30);
  EXPECT_EQ(DispatchConsumer::capacity(1), 2);
  ConsumerHarness h;
  h.limit = 20;
  for (int i = 0; i < 30; ++i)
    h.feed(dispatch_message(i, task_id(i)));
  EXPECT_TRUE(h.consumer.paused()) << "20 running and 10 waiting: the capacity";
  EXPECT_EQ(h.subscription.pauses, std::vector<bool>{true});
  end_run(h, 0);
  end_run(h, 1);
  EXPECT_EQ(h.consumer.in_flight(), 20u) << "waiting messages took the slots";
  EXPECT_TRUE(h.consumer.paused()) << "28 of 30: not a tenth below";
  end_run(h, 2);
  EXPECT_FALSE(h.consumer.paused()) << "27 of 30";
  EXPECT_EQ(h.subscription.pauses, (std::vector<bool>{true, false}));
  // A lower limit starts nothing and pauses at once; a higher one starts what waits.
  h.limit = 5;
  h.consumer.limit_changed();
  EXPECT_TRUE(h.consumer.paused());
  EXPECT_EQ(h.consumer.in_flight(), 20u) << "runs under way are not stopped";
  h.limit = 50;
  h.consumer.limit_changed();
  EXPECT_FALSE(h.consumer.paused());
  EXPECT_EQ(h.consumer.waiting(), 0u);
  EXPECT_EQ(h.consumer.in_flight(), 27u);
}

TEST(DispatchConsumer, WhileFencedNothingStartsAndWhatWaitedStartsOnceTheFenceIsDown) {
  ConsumerHarness h;
  h.consumer.set_fenced(true);
  h.feed(dispatch_message(0, task_id(0)));
  h.feed(dispatch_message(1, task_id(1)));
  EXPECT_TRUE(h.runs.claims.empty());
  EXPECT_EQ(h.consumer.waiting(), 2u);
  h.consumer.set_fenced(false);
  h.io.restart();
  h.io.poll();
  EXPECT_EQ(h.runs.claims, (std::vector<std::string>{task_id(0), task_id(1)}));
  EXPECT_FALSE(h.consumer.paused());
}

TEST(DispatchConsumer, WaitingMessagesOfARevokedPartitionOrADrainAreLeftForTheNextOwner) {
  ConsumerHarness h;
  h.consumer.rebalanced(true, {{"agent.tasks.dispatch", 1}});
  h.limit = 1;
  h.feed(dispatch_message(0, task_id(0), 0));
  h.feed(dispatch_message(0, task_id(1), 1));
  h.feed(dispatch_message(1, task_id(2), 0));
  ASSERT_EQ(h.consumer.waiting(), 2u);
  h.consumer.rebalanced(false, {{"agent.tasks.dispatch", 1}});
  EXPECT_EQ(h.consumer.waiting(), 1u) << "partition 1's message dropped";
  h.consumer.stop_consuming();
  EXPECT_EQ(h.consumer.waiting(), 0u);
  end_run(h, 0);
  EXPECT_EQ(h.runs.claims, std::vector<std::string>{task_id(0)}) << "nothing new while draining";
}

TEST(DispatchConsumer, AMessageThatIsNotADispatchGoesToTheDeadLetterTopicAndThePartitionMovesOn) {
  ConsumerHarness h;
  ports::InMessage bad = dispatch_message(3, task_id(1));
  bad.value = "{not json";
  h.feed(bad);
  ASSERT_EQ(h.publisher.published.size(), 1u);
  EXPECT_EQ(h.publisher.published[0].topic, "dlq");
  bool reason = false;
  for (const auto& [k, v] : h.publisher.published[0].headers)
    reason = reason || (k == "dlq-reason" && v.find("invalid dispatch message") == 0);
  EXPECT_TRUE(reason);
  ASSERT_EQ(h.subscription.commits.size(), 1u);
  EXPECT_EQ(h.subscription.commits[0].second, 4);
  EXPECT_EQ(h.consumer.in_flight(), 0u);
  EXPECT_TRUE(h.runs.claims.empty());
}

TEST(DispatchConsumer, AnUnknownTaskIsADeadLetter) {
  ConsumerHarness h;
  h.runs.claim_outcome[task_id(9)] = RunOutcome::kUnknownTask;
  h.feed(dispatch_message(0, task_id(9)));
  ASSERT_EQ(h.publisher.published.size(), 1u);
  EXPECT_EQ(h.publisher.published[0].topic, "dlq");
  ASSERT_EQ(h.subscription.commits.size(), 1u);
  EXPECT_EQ(h.consumer.in_flight(), 0u);
}

TEST(DispatchConsumer, ATaskThatNeedsWhatThisVersionCannotDoIsLeftUnclaimedAndThePartitionMovesOn) {
  ConsumerHarness h;
  ports::InMessage later = dispatch_message(4, task_id(1));
  later.headers = {{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
                   {"agentfleet-needs", "strategy:plan_only feature:teleport"}};
  h.feed(later);
  EXPECT_TRUE(h.runs.claims.empty()) << "a version that cannot run it must not claim it";
  EXPECT_TRUE(h.publisher.published.empty()) << "not a dead letter: it is run later";
  ASSERT_EQ(h.subscription.commits.size(), 1u);
  EXPECT_EQ(h.subscription.commits[0].second, 5);
  EXPECT_EQ(h.consumer.in_flight(), 0u);
  const std::string scraped = h.registry.render();
  EXPECT_NE(scraped.find("agentfleet_worker_dispatches_declined_total 1"), std::string::npos);
  // What it can do is run as before; so is a message of a scheduler that names no needs.
  ports::InMessage now = dispatch_message(5, task_id(2));
  now.headers = {{"agentfleet-needs", "strategy:plan_only feature:follow_up"}};
  h.feed(now);
  h.feed(dispatch_message(6, task_id(3)));
  EXPECT_EQ(h.runs.claims, (std::vector<std::string>{task_id(2), task_id(3)}));
}

TEST(DispatchConsumer, MessagesOfPartitionsItDoesNotOwnAreLeftForTheirOwner) {
  ConsumerHarness h;
  h.feed(dispatch_message(0, task_id(1), /*partition=*/3));
  EXPECT_TRUE(h.runs.claims.empty());
  EXPECT_TRUE(h.subscription.commits.empty());
  h.consumer.rebalanced(false, {{"agent.tasks.dispatch", 0}});
  h.feed(dispatch_message(1, task_id(2)));
  EXPECT_TRUE(h.runs.claims.empty()) << "revoked";
}

TEST(DispatchConsumer, AFenceOrADrainPausesItAndADrainLeavesTheGroup) {
  ConsumerHarness h;
  h.consumer.set_fenced(true);
  EXPECT_TRUE(h.consumer.paused());
  h.consumer.set_fenced(false);
  EXPECT_FALSE(h.consumer.paused());
  h.consumer.stop_consuming();
  EXPECT_TRUE(h.consumer.paused());
  h.feed(dispatch_message(0, task_id(1)));
  EXPECT_TRUE(h.runs.claims.empty()) << "nothing new starts while draining";
  h.consumer.set_fenced(false);
  EXPECT_TRUE(h.consumer.paused()) << "paused for good";
}

// ---- the drain ---------------------------------------------------------------------------

class NullRunStore final : public ports::RunStore {
 public:
  asio::awaitable<Result<ports::Claim>> claim(
      std::string, std::shared_ptr<const ports::FirstCallEstimates>) override {
    co_return ports::Claim{};
  }
  asio::awaitable<Result<Status>> save_model_step(ports::ModelStep) override {
    co_return Status(ok_status());
  }
  asio::awaitable<Result<Status>> save_tool_results(ports::ToolResults) override {
    co_return Status(ok_status());
  }
  asio::awaitable<Result<Status>> save_tool_step(ports::ToolStep) override {
    co_return Status(ok_status());
  }
  asio::awaitable<Result<Status>> record_charges(ports::Charges) override {
    co_return Status(ok_status());
  }
  asio::awaitable<Result<Status>> record_call(ports::CallSent) override {
    co_return Status(ok_status());
  }
  asio::awaitable<Result<Result<std::int64_t>>> finish(ports::TaskEnd) override {
    co_return Result<std::int64_t>(0);
  }
  asio::awaitable<Result<Status>> release(std::string, int, std::int64_t) override {
    co_return Status(ok_status());
  }
  asio::awaitable<Result<std::optional<ports::ParentTask>>> load_parent(std::string,
                                                                        std::string) override {
    co_return std::optional<ports::ParentTask>();
  }
  asio::awaitable<Result<billing::SpendByCurrency>> month_spend(std::string, std::string) override {
    co_return billing::SpendByCurrency{};
  }
  void announced(std::int64_t) override {}
  bool settling() const override { return false; }
};

TEST(Drain, RunsThatReachACheckpointNeedNoHandBackAndTheIncarnationIsRetired) {
  KeeperHarness h;
  ASSERT_TRUE(h.start());
  NullRunStore store;
  bool intake_stopped = false;
  Drain drain(h.runs, store, h.keeper, h.clock, DrainOptions{30s, 1ms},
              [&] { intake_stopped = true; });
  std::optional<DrainReport> report;
  asio::co_spawn(h.io, drain.run(), [&](std::exception_ptr, DrainReport r) { report = r; });
  h.io.restart();
  h.io.run();
  ASSERT_TRUE(report);
  EXPECT_TRUE(intake_stopped);
  EXPECT_EQ(h.runs.drains, 1);
  EXPECT_EQ(report->running_at_grace, 0u);
  EXPECT_TRUE(h.store.handed.empty());
  EXPECT_EQ(h.store.retired, std::vector<std::int64_t>{101});
}

TEST(Drain, RunsStillGoingWhenTheGraceRunsOutAreHandedBackInOneGo) {
  KeeperHarness h;
  ASSERT_TRUE(h.start());
  h.runs.hold("slow-1", 1);
  h.runs.hold("slow-2", 2);
  NullRunStore store;
  Drain drain(h.runs, store, h.keeper, h.clock, DrainOptions{0s, 1ms}, {});
  std::optional<DrainReport> report;
  asio::co_spawn(h.io, drain.run(), [&](std::exception_ptr, DrainReport r) { report = r; });
  h.io.restart();
  h.io.run();
  ASSERT_TRUE(report);
  EXPECT_EQ(report->running_at_start, 2u);
  EXPECT_EQ(report->running_at_grace, 2u);
  EXPECT_EQ(report->handed_back, 2);
  EXPECT_EQ(h.runs.fences, 1) << "they stop calling models and tools";
  ASSERT_EQ(h.store.handed.size(), 1u);
  EXPECT_EQ(h.store.handed[0].second.size(), 2u);
  EXPECT_EQ(h.store.retired, std::vector<std::int64_t>{101});
}

}  // namespace
}  // namespace agentfleet::worker
