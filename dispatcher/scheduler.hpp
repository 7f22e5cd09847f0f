#pragma once
// The active scheduler of the fleet: admits queued tasks into the dispatch topic under the
// per-user limits, fairly (limits::FairScheduler), and runs recovery (expired leases),
// queue timeouts and budget enforcement. Exactly one replica is active: the one whose
// connection holds the Postgres session advisory lock; the others retry every
// dispatcher.leader_retry_ms and take over within about that long once the holder's
// connection closes (its process died, or Postgres dropped it).
//
// A pass is one transaction on the lock-holding connection: recover, expire, read the
// backlog (users with queued work, their exact dispatched + running counts, their limits),
// plan, end over-budget tasks (quota_exceeded), dispatch the grants (status dispatched and
// the dispatch message in the outbox, which the relay publishes). The time-driven part
// (recovery of expired leases and unclaimed dispatches, queue timeouts, cancelled batches)
// runs at most once per dispatcher.housekeeping_interval_ms, and again at once when it found a
// full pass of work; the passes woken between (by every submission and every result) only
// admit. The statements every pass runs are prepared statements of this connection, their
// cached plans dropped every second so they follow the tables' sizes; the rare ones
// (seeding a user's rate window, ending over-budget tasks) go as text.
//
// Wake-ups: a pass runs at once after a NOTIFY on channel agentfleet_work (a submission on
// any replica, a batch moved into the queue, a worker's hand-back, a limits change), after
// wake(), and right away again when a pass used every slot it had. Between those it waits
// (wait_after()): dispatcher.scheduler_interval_ms while queued work waits for a limit or
// a slot; housekeeping_interval_ms while only tasks under way may need recovering; and
// scheduler_idle_ms when nothing is queued or under way, so that an idle fleet's scheduler
// asks Postgres nothing more often than it must to keep its lock. Such a round that nothing
// woke is not a pass: one read of the backlog keeps the session alive (and finds work that
// came without a notification, which then gets its pass at once); an idle fleet housekeeps
// once per kIdleHousekeepingEvery.
//
// Admitting what was heard: a submission's notification names its user and priority. When
// all a round heard is submissions of users a read of the backlog listed this term (within
// kUserKnownFor; the last read, which gives the fleet's figures, within kHeardTrustFor and
// leaving nothing waiting; no budget to read), the round plans them from what the reads
// said and what this scheduler did since (known_) and dispatches them in the admission's
// statement alone: no read first, one round trip to Postgres instead of two on the task's
// way. What it knows of each user's tasks under way is an upper bound: the count of the read
// that last listed them, plus every task dispatched to them since, less those of them whose
// result came (only this scheduler dispatches; a result of a task dispatched before that
// read subtracts nothing, the read counted it as under way or not). So it never admits past
// a limit a read would have enforced; when the plan would leave anything heard waiting, or
// anything else woke the scheduler (a hand-back, a limits change, a moved batch, wake()),
// the round is a full pass. Housekeeping that falls due runs after such an admission.
//
// After a pass commits outbox rows (dispatch messages, or the results of tasks it ended),
// it calls the `outbox_written` callback, so the relay publishes them at once instead of at
// its next poll. Given a `handoff` callback, a pass's admissions skip the relay's read: their
// dispatch messages are written due kHandoffS later and handed over as soon as the pass
// commits (the relay publishes them and deletes their rows; should the replica stop first,
// the rows fall due and any relay publishes them).
//
// Lifecycle: start() spawns the thread; stop() (or the destructor) ends it and closes the
// connection, which releases the lock. Thread-safety: wake(), task_ended(), leader() may be
// called from any thread; the rest runs on the scheduler's own thread.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/adapters/metrics/dispatcher_metrics.hpp"
#include "core/billing/money.hpp"
#include "core/config/config.hpp"
#include "core/limits/clock.hpp"
#include "core/limits/fair_scheduler.hpp"
#include "core/ports/scheduler_store.hpp"

namespace agentfleet::dispatcher {

class Scheduler {
 public:
  // `store`: the session the passes run on (pg::SchedulerSession), used from the
  // scheduler's thread only; it outlives the scheduler.
  Scheduler(const config::Config& config, ports::SchedulerStore& store,
            metrics::DispatcherMetrics& metrics,
            const limits::Clock& clock = limits::SteadyClock::instance(),
            std::function<void()> outbox_written = {},
            std::function<void(std::vector<ports::OutboxMessage>)> handoff = {});
  // How long the outbox rows of handed-over dispatch messages wait before the relay may
  // publish them itself (the worker's result events wait as long).
  static constexpr int kHandoffS = 10;
  // How often an idle fleet's scheduler housekeeps (staged uploads whose replica stopped,
  // calls left in flight, forgotten workers): nothing else of it is about time while nothing
  // is queued or under way.
  static constexpr std::chrono::seconds kIdleHousekeepingEvery{60};
  // How long after a read of the backlog a round may admit what it heard from that read
  // (see "Admitting what was heard"): the fleet's capacity and users' limits it gives.
  static constexpr std::chrono::seconds kHeardTrustFor{1};
  // How long what a read said of a user may admit their submissions (their limits; a change
  // made through the API is heard at once).
  static constexpr std::chrono::seconds kUserKnownFor{10};
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void start();
  void stop();
  // Run a pass soon (a slot was freed, work arrived).
  void wake();
  // A task ended having used `tokens` (input + output): its user's tokens-per-minute
  // charge is corrected and a pass runs soon.
  void task_ended(const std::string& user_id, const std::string& task_id, std::int64_t tokens);
  bool leader() const { return leader_.load(); }
  // One round of what the thread does between its waits: competes for the lock when this
  // replica does not hold it, then runs a pass when it does. True when the pass used every
  // slot (more may be waiting). Throws what the store throws, having ended the term (the
  // thread then ends the session and competes again). The thread calls it; the unit tests call it
  // instead of start(), with a fake store and a manual clock.
  bool round();
  // How long the thread waits for a wake-up after a round that did not use every slot:
  // see "Wake-ups" above.
  std::chrono::milliseconds wait_after() const;

 private:
  struct Ended {
    std::string user_id;
    std::string task_id;
    std::int64_t tokens = 0;
  };
  void run();
  bool lead_and_pass();
  // What housekeeping found, for the pass's logs and metrics.
  struct Housekept {
    ports::RecoveryReport recovery;
    int expired = 0, expired_deadline = 0, swept = 0, calls_settled = 0;
    // Tasks it ended or dispatched again.
    int ended() const {
      return recovery.exhausted + recovery.lease_expired + recovery.redispatched + expired +
             expired_deadline + swept;
    }
  };
  // What a pass's write did.
  struct Admitted {
    int total = 0;        // tasks dispatched
    int over_budget = 0;  // queued tasks ended quota_exceeded
    std::vector<std::pair<std::string, std::size_t>> over_budget_users;
  };
  // What a pass that starts at `started` asks of the store.
  ports::SchedulerPass pass_spec(limits::Clock::time_point started) const;
  // One pass; returns true when it used every slot (more may be waiting).
  bool pass();
  // Admits the submissions heard from what the last read said (see "Admitting what was
  // heard"). True when all were dispatched; false when that read cannot admit them all
  // (nothing written), or the write dispatched fewer (a pass must read the backlog).
  bool admit_heard(const ports::Heard& heard);
  // The round of an idle fleet's scheduler that nothing woke: one read of the backlog keeps
  // the session (and the lock) alive; a full pass follows only when it finds work (one that
  // arrived without a notification).
  bool look_while_idle();
  // Recovery, deadlines, sweeps, when their interval has passed (or the last found a full
  // pass); nothing otherwise.
  Housekept housekeep_if_due(const ports::SchedulerPass& spec, limits::Clock::time_point started);
  // The backlog (into `backlog`) and each waiting user's limits, spend and seeded buckets.
  std::vector<limits::UserBacklog> read_users(const ports::SchedulerPass& spec,
                                              ports::Backlog& backlog);
  // Writes the plan (dispatches and budget endings) and charges the grants; on a failed
  // write every grant's charge is given back and the error propagates.
  Admitted admit(const limits::PassPlan& plan, const std::vector<limits::UserBacklog>& users,
                 const ports::SchedulerPass& spec);
  // The pass's endings and recoveries, once committed: a line per task dispatched again, a
  // count per kind of ending, a line per user whose budget ended tasks.
  void log_endings(const ports::RecoveryReport& recovery, int expired, int expired_deadline,
                   int swept,
                   const std::vector<std::pair<std::string, std::size_t>>& over_budget_users) const;
  void reconcile_ended();
  // The sum of a user's spend per currency in the budget currency.
  std::int64_t spent_in_budget_currency(const ports::SpendByCurrency& spent);
  // Waits up to `ms` for a wake() or stop() (not for work heard by the store).
  void idle(int ms);

  const config::Config& config_;
  ports::SchedulerStore& store_;
  metrics::DispatcherMetrics& metrics_;
  const limits::Clock& clock_;
  std::function<void()> outbox_written_;  // called on the scheduler's thread
  std::function<void(std::vector<ports::OutboxMessage>)> handoff_;  // likewise
  std::unique_ptr<limits::FairScheduler> fair_;
  // Users whose buckets were seeded from the ledger in this leadership term.
  std::unordered_map<std::string, bool> seeded_;
  // Token estimate charged per dispatched task, until its result arrives.
  std::unordered_map<std::string, std::int64_t> estimates_;
  std::mutex ended_mutex_;
  std::vector<Ended> ended_;
  std::atomic<bool> leader_{false};
  // The last pass left queued work it could not admit (a limit, or the fleet's capacity):
  // task_ended() wakes a pass only then.
  std::atomic<bool> backlog_left_{true};
  // Tasks dispatched or running at the last pass (recovery may need to look at them).
  std::int64_t fleet_active_ = 0;
  // The last pass found nothing queued, nothing under way and no housekeeping left: until
  // something wakes the scheduler, its timed rounds only look (look_while_idle()).
  bool quiet_ = false;
  // Something woke the scheduler since its last pass (wake(), or work heard by the store).
  std::atomic<bool> woken_{false};
  // wake() was called since the last pass: the next round is a full pass.
  std::atomic<bool> poked_{false};
  // What this term's reads of the backlog said, kept up to date with what this scheduler
  // did since (see "Admitting what was heard"). Each read is a generation: it gives the
  // fleet's figures, and each user it lists their limits and tasks under way; a user keeps
  // what the last read that listed them said (for kUserKnownFor) plus the tasks dispatched
  // to them since, less those of them whose result came. Empty in a new term, and forgotten
  // whenever other work is heard (a limits change among it).
  struct Known {
    std::uint64_t generation = 0;  // reads this term; 0: none yet
    std::chrono::steady_clock::time_point read_at{};
    std::int64_t fleet_active = 0;
    std::int64_t fleet_capacity = -1;
    struct User {
      limits::UserLimits limits;
      int active = 0;
      std::uint64_t generation = 0;  // of the read that last listed them
      std::chrono::steady_clock::time_point read_at{};
    };
    std::unordered_map<std::string, User> users;
    // A task dispatched this term, until its result: its user and the generation of the last
    // read before its dispatch (which did not count it).
    struct Sent {
      std::string user_id;
      std::uint64_t generation = 0;
    };
    std::unordered_map<std::string, Sent> dispatched;
  };
  Known known_;
  std::atomic<bool> stopping_{false};
  int wake_fd_ = -1;
  // Budgets are kept in the budget currency; spend in others is converted at fixed rates.
  billing::Exchange exchange_;
  // Currencies in the ledger this term could not convert (logged once each).
  std::set<std::string> unconvertible_;
  // When the time-driven part of a pass last ran, and whether it left work behind.
  std::chrono::steady_clock::time_point housekeeping_at_{};
  bool housekeeping_backlog_ = true;
  // A round failed (the store was away, or the session broke) since the current term began.
  // When the next term begins at least worker.heartbeat_s after the last round that
  // succeeded (last_ok_; none yet: unknown, so held too), workers may have missed a renewal
  // because of it: that term holds back the recovery of lapsed incarnations' tasks until
  // lapsed_trusted_at_, one worker lease after it began. A failure followed at once by a new
  // term (a statement timeout under load) holds nothing.
  bool store_failed_ = false;
  std::optional<std::chrono::steady_clock::time_point> last_ok_;
  // When the round after the last one that succeeded was due. A round that begins
  // stall_bound() or more after it found this replica stalled (paused, or its machine
  // frozen) long enough for a lease to lapse, with the workers perhaps stalled too: it holds
  // recovery back like an outage.
  std::optional<std::chrono::steady_clock::time_point> next_due_;
  std::chrono::seconds stall_bound() const;
  // The last failed round ended a term (for run()'s log line).
  bool lost_term_ = false;
  std::chrono::steady_clock::time_point lapsed_trusted_at_{};
  // The waiting reasons the store holds from this term's passes (see record_waiting()),
  // whether the next write starts the table over (a new term: another replica's rows), and
  // when they were last written.
  std::map<std::pair<std::string, Priority>, limits::WaitReason> waiting_written_;
  bool waiting_replace_ = true;
  std::chrono::steady_clock::time_point waiting_at_{};
  // Writes what changed in the plan's waiting reasons since the last write, at most once a
  // second (a term's first write at once).
  void record_waiting(const std::vector<limits::Waiting>& waiting);
  // When the pass's cached plans were last dropped (DISCARD PLANS), so that they are
  // rebuilt from the tables' current sizes.
  std::chrono::steady_clock::time_point plans_at_{};
  std::thread thread_;
};

}  // namespace agentfleet::dispatcher
