#include "dispatcher/scheduler.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <utility>

#include "core/adapters/log.hpp"
#include "core/billing/money.hpp"
#include "dispatcher/user_limits.hpp"

namespace agentfleet::dispatcher {

namespace {
// A leadership term drops per-user state idle this long.
constexpr auto kForgetIdleAfter = std::chrono::minutes(10);
// How often a pass drops the connection's cached plans (see pass()).
constexpr auto kReplanEvery = std::chrono::seconds(1);
// Tasks dispatched this term whose results are followed (Known): a bound, should results
// stop coming (a task left out keeps its place in what is known until a read).
constexpr std::size_t kMaxKnownDispatched = 100000;
// Waiting reasons are written at most this often (a term's first write at once): a busy
// fleet's users go in and out of waiting from pass to pass, and what they wait for may
// show a second late.
constexpr auto kWaitingEvery = std::chrono::seconds(1);

// What a plan grants in all, and what its users have queued (as read, or as heard).
std::pair<std::int64_t, std::int64_t> granted_and_queued(
    const limits::PassPlan& plan, const std::vector<limits::UserBacklog>& users) {
  std::int64_t granted = 0, queued = 0;
  for (const limits::Grant& grant : plan.grants)
    granted += grant.tasks;
  for (const limits::UserBacklog& u : users)
    queued += u.queued_interactive + u.queued_batch;
  return {granted, queued};
}

metrics::ThrottleReason throttle_reason(int cause) {
  switch (static_cast<limits::ThrottleCause>(cause)) {
    case limits::ThrottleCause::kConcurrency:
      return metrics::ThrottleReason::kConcurrency;
    case limits::ThrottleCause::kRpm:
      return metrics::ThrottleReason::kRpm;
    case limits::ThrottleCause::kTpm:
      return metrics::ThrottleReason::kTpm;
    case limits::ThrottleCause::kBudget:
      return metrics::ThrottleReason::kBudget;
    case limits::ThrottleCause::kFleetCapacity:
      return metrics::ThrottleReason::kFleetCapacity;
  }
  return metrics::ThrottleReason::kConcurrency;
}

std::string budget_message(const std::string& currency, std::int64_t budget, std::int64_t spent,
                           const std::string& time_zone) {
  return "quota_exceeded: the monthly budget of " + billing::format_micros(budget) + " " +
         currency + " is spent (" + billing::format_micros(spent) + " " + currency +
         " used this month, " + time_zone +
         "); the task was not started. Raise the budget (PUT /v1/users/{id}/limits) or wait "
         "for next month.";
}
}  // namespace

Scheduler::Scheduler(const config::Config& config, ports::SchedulerStore& store,
                     metrics::DispatcherMetrics& metrics, const limits::Clock& clock,
                     std::function<void()> outbox_written,
                     std::function<void(std::vector<ports::OutboxMessage>)> handoff)
    : config_(config),
      store_(store),
      metrics_(metrics),
      clock_(clock),
      outbox_written_(std::move(outbox_written)),
      handoff_(std::move(handoff)) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0)
    throw std::runtime_error("scheduler: eventfd failed");
  exchange_ = config::budget_exchange(config.billing);
}

Scheduler::~Scheduler() {
  stop();
  if (wake_fd_ >= 0)
    ::close(wake_fd_);
}

void Scheduler::start() {
  thread_ = std::thread([this] { run(); });
}

void Scheduler::stop() {
  stopping_ = true;
  wake();
  if (thread_.joinable())
    thread_.join();
}

void Scheduler::wake() {
  poked_ = true;
  woken_ = true;
  const std::uint64_t one = 1;
  // A full counter already means "wake": nothing to do when the write would block.
  [[maybe_unused]] auto written = ::write(wake_fd_, &one, sizeof one);
}

void Scheduler::task_ended(const std::string& user_id, const std::string& task_id,
                           std::int64_t tokens) {
  // Only the active scheduler keeps token accounts; a standby starts from the ledger.
  if (!leader_)
    return;
  {
    std::lock_guard lock(ended_mutex_);
    // Bounded, should the scheduler thread stall.
    if (ended_.size() < 100000)
      ended_.push_back(Ended{user_id, task_id, tokens});
  }
  // A freed slot matters only to work that waits: when the last pass left nobody queued,
  // the next submission's NOTIFY (or the interval) runs the pass, not every result.
  if (backlog_left_)
    wake();
}

void Scheduler::idle(int ms) {
  pollfd fd = {wake_fd_, POLLIN, 0};
  if (::poll(&fd, 1, ms) > 0 && (fd.revents & POLLIN)) {
    std::uint64_t count = 0;
    [[maybe_unused]] auto read = ::read(wake_fd_, &count, sizeof count);
  }
}

std::chrono::milliseconds Scheduler::wait_after() const {
  const auto& d = config_.dispatcher;
  // Queued work this pass could not admit: a rate window refills, a worker joins.
  if (backlog_left_ || housekeeping_backlog_)
    return std::chrono::milliseconds(d.scheduler_interval_ms);
  // Nothing queued (a submission, a hand-back or a moved batch notifies): only leases and
  // unclaimed dispatches of the tasks under way are about time.
  if (fleet_active_ > 0)
    return std::chrono::milliseconds(std::max(d.scheduler_interval_ms, d.housekeeping_interval_ms));
  return std::chrono::milliseconds(std::max(d.scheduler_interval_ms, d.scheduler_idle_ms));
}

bool Scheduler::round() {
  try {
    const bool more = lead_and_pass();
    last_ok_ = clock_.now();
    // When the next round is due: at once when this one left work, else after its wait (a
    // NOTIFY may wake it sooner, never later).
    next_due_ = *last_ok_ + (more ? std::chrono::milliseconds(0) : wait_after());
    return more;
  } catch (...) {
    // The lock lives and dies with the session, which the caller resets: the term is over.
    store_failed_ = true;
    lost_term_ = leader_.exchange(false);
    metrics_.set_leader(false);
    throw;
  }
}

bool Scheduler::lead_and_pass() {
  if (!leader_) {
    if (!store_.try_lead()) {
      metrics_.set_leader(false);
      return false;
    }
    // A new term: fresh buckets, seeded from the ledger as users show up.
    leader_ = true;
    housekeeping_backlog_ = true;
    quiet_ = false;
    fair_ = std::make_unique<limits::FairScheduler>(
        limits::FairSchedulerOptions{
            config_.dispatcher.scheduler_batch, config_.dispatcher.max_active_tasks,
            config_.dispatcher.batch_share_percent / 100.0, config_.dispatcher.task_token_estimate},
        clock_);
    seeded_.clear();
    estimates_.clear();
    known_ = Known{};
    waiting_written_.clear();
    waiting_replace_ = true;
    metrics_.set_leader(true);
    log::write("info", "scheduler", "this replica is now the active scheduler");
    // Leases that lapsed while the store was away say nothing about the workers: none could
    // renew. Each gets one lease from now to hand back what it holds (its claims whose
    // commit was in doubt among it, which recovery would otherwise count as lost attempts)
    // before recovery takes their tasks over.
    const auto now = clock_.now();
    const bool gap =
        !last_ok_ || now - *last_ok_ >= std::chrono::seconds(config_.worker.heartbeat_s);
    if (std::exchange(store_failed_, false) && gap) {
      lapsed_trusted_at_ = now + std::chrono::seconds(config_.worker.lease_s);
      log::write("info", "scheduler",
                 "after a failed round, no lapsed worker's running tasks are taken over for " +
                     std::to_string(config_.worker.lease_s) +
                     " s: their workers hand back what they hold first");
    }
  } else if (next_due_ && clock_.now() - *next_due_ >= stall_bound()) {
    // This replica (or its whole machine) was stalled long enough for a renewing worker's
    // lease to lapse: a paused process, a VM that was frozen. Whether the workers stalled
    // with it is not known, so the leases that lapsed meanwhile say nothing yet: as after an
    // outage, each worker gets one lease to renew or hand back before recovery takes its
    // tasks over.
    const auto late = clock_.now() - *next_due_;
    lapsed_trusted_at_ = clock_.now() + std::chrono::seconds(config_.worker.lease_s);
    log::write(
        "warn", "scheduler",
        "this scheduler ran " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(late).count()) +
            " ms late (a stall): no lapsed worker's running tasks are taken over for " +
            std::to_string(config_.worker.lease_s) + " s");
  }
  const ports::Heard heard = store_.take_heard();
  if (quiet_ && !woken_ && heard.empty() &&
      clock_.now() - housekeeping_at_ < kIdleHousekeepingEvery)
    return look_while_idle();
  if (admit_heard(heard)) {
    // All that was heard is dispatched; a pass follows only when its time-driven part is due.
    const auto now = clock_.now();
    if (!housekeeping_backlog_ &&
        now - housekeeping_at_ <
            std::chrono::milliseconds(config_.dispatcher.housekeeping_interval_ms))
      return false;
  }
  return pass();
}

bool Scheduler::admit_heard(const ports::Heard& heard) {
  const auto started = clock_.now();
  if (heard.other)
    known_.users.clear();  // a limits change among what it may be
  if (heard.submitted.empty() || heard.other || poked_ || known_.generation == 0 || backlog_left_ ||
      housekeeping_backlog_ || started - known_.read_at >= kHeardTrustFor)
    return false;
  reconcile_ended();
  std::map<std::string, limits::UserBacklog> by_user;
  for (const auto& [user_id, priority] : heard.submitted) {
    const auto it = known_.users.find(user_id);
    // A user no read listed lately, or whose budget needs this month's spend read.
    if (it == known_.users.end() || started - it->second.read_at >= kUserKnownFor ||
        it->second.limits.monthly_budget_micros > 0 || !seeded_.count(user_id))
      return false;
    limits::UserBacklog& u = by_user[user_id];
    u.user_id = user_id;
    u.limits = it->second.limits;
    u.active = it->second.active;
    ++(priority == Priority::kBatch ? u.queued_batch : u.queued_interactive);
  }
  std::vector<limits::UserBacklog> users;
  users.reserve(by_user.size());
  for (auto& [user_id, u] : by_user)
    users.push_back(std::move(u));
  const limits::PassPlan plan = fair_->plan(users, known_.fleet_active, known_.fleet_capacity);
  const auto [granted, heard_count] = granted_and_queued(plan, users);
  if (granted < heard_count || !plan.over_budget.empty()) {
    // Something heard would wait: the pass reads the backlog and says why.
    for (const limits::Grant& grant : plan.grants)
      fair_->dispatched(grant, 0);
    return false;
  }
  const ports::SchedulerPass spec = pass_spec(started);
  const Admitted admitted = admit(plan, users, spec);
  fleet_active_ += admitted.total;
  quiet_ = false;
  metrics_.scheduler_pass(std::chrono::duration<double>(clock_.now() - started).count());
  // Fewer dispatched than heard (a task the last pass dispatched already, rows locked by a
  // cancel): a pass reads the backlog now.
  return admitted.total >= heard_count;
}

bool Scheduler::look_while_idle() {
  const ports::Backlog backlog =
      store_.read_backlog(config_.dispatcher.scheduler_batch, config_.dispatcher.max_active_tasks);
  if (backlog.users.empty() && backlog.fleet_active == 0)
    return false;
  return pass();
}

ports::SchedulerPass Scheduler::pass_spec(limits::Clock::time_point started) const {
  return ports::SchedulerPass{config_.kafka.topics.dispatch,
                              config_.kafka.topics.results,
                              config_.dispatcher.scheduler_batch,
                              config_.dispatcher.redispatch_after_s,
                              config_.dispatcher.max_attempts,
                              /*recover_lapsed=*/started >= lapsed_trusted_at_,
                              /*handoff_s=*/handoff_ ? kHandoffS : 0};
}

std::chrono::seconds Scheduler::stall_bound() const {
  // A worker renews every heartbeat_s and its lease runs lease_s from the last renewal: a
  // stall shorter than the difference lapses no lease of a worker that stalled with it.
  return std::chrono::seconds(
      std::max(config_.worker.heartbeat_s, config_.worker.lease_s - config_.worker.heartbeat_s));
}

void Scheduler::run() {
  int failures = 0;
  while (!stopping_) {
    try {
      const auto started = std::chrono::steady_clock::now();
      const bool more = round();
      failures = 0;
      if (!leader_) {
        idle(config_.dispatcher.leader_retry_ms);
        continue;
      }
      if (!more && store_.wait(wait_after(), wake_fd_))
        woken_ = true;
      // Passes woken by every submission and every result are coalesced: at most one per
      // scheduler_min_gap_ms, so a burst of wake-ups costs one pass, not one each.
      const auto gap = std::chrono::milliseconds(config_.dispatcher.scheduler_min_gap_ms) -
                       (std::chrono::steady_clock::now() - started);
      if (gap > std::chrono::milliseconds(0) && !stopping_)
        std::this_thread::sleep_for(gap);
    } catch (const std::exception& e) {
      // The lock lives and dies with the session: whatever failed, start over from a new
      // session and compete for the lock again.
      // round() ends the term when it fails and says whether there was one.
      if (std::exchange(lost_term_, false) || leader_)
        log::write("warn", "scheduler", std::string("lost the scheduler lock: ") + e.what());
      else
        log::write("warn", "scheduler", std::string("scheduler: ") + e.what());
      // A session that broke outside a round (in store_.wait()) is a failure too.
      store_failed_ = true;
      leader_ = false;
      metrics_.set_leader(false);
      store_.reset();
      // At most 2 s apart: after an outage, admission resumes within seconds of the store.
      const int backoff = std::min(2000, 100 << std::min(++failures, 5));
      idle(backoff);
    }
  }
  leader_ = false;
}

std::int64_t Scheduler::spent_in_budget_currency(const ports::SpendByCurrency& spent) {
  std::vector<std::string> unconverted;
  const std::int64_t total = exchange_.sum(spent, &unconverted);
  for (const std::string& currency : unconverted) {
    // A currency no price has any more (the configuration checks those that have one).
    if (unconvertible_.insert(currency).second) {
      log::warn("scheduler", "the ledger holds spend in " + currency +
                                 ", which billing.exchange_rates cannot convert into " +
                                 exchange_.target() + ": budgets do not count it");
    }
  }
  return total;
}

void Scheduler::reconcile_ended() {
  std::vector<Ended> ended;
  {
    std::lock_guard lock(ended_mutex_);
    ended.swap(ended_);
  }
  // Only tasks this term dispatched (and charged) are corrected, each once: a task that
  // never ran (cancelled, expired, over budget) was never charged, the charges of another
  // term's tasks were not carried over (the buckets were seeded from the ledger), and a
  // repeated result event finds nothing left to correct.
  for (const Ended& e : ended) {
    // A task dispatched since the read that last counted its user (or the fleet) frees its
    // place in what is known of them.
    if (auto sent = known_.dispatched.find(e.task_id); sent != known_.dispatched.end()) {
      const auto user = known_.users.find(sent->second.user_id);
      if (user != known_.users.end() && sent->second.generation >= user->second.generation)
        user->second.active = std::max(0, user->second.active - 1);
      if (sent->second.generation == known_.generation)
        known_.fleet_active = std::max<std::int64_t>(0, known_.fleet_active - 1);
      known_.dispatched.erase(sent);
    }
    auto it = estimates_.find(e.task_id);
    if (it == estimates_.end())
      continue;
    fair_->reconcile(e.user_id, it->second, e.tokens);
    estimates_.erase(it);
  }
}

void Scheduler::log_endings(
    const ports::RecoveryReport& recovery, int expired, int expired_deadline, int swept,
    const std::vector<std::pair<std::string, std::size_t>>& over_budget_users) const {
  for (const ports::RecoveryReport::Task& task : recovery.tasks) {
    log::TaskContext context;
    context.task_id = task.task_id;
    context.user_id = task.user_id;
    context.trace_id = log::trace_id_of(task.traceparent);
    log::warn("scheduler", context,
              task.lease_expired
                  ? "dispatched again: its worker's lease expired"
                  : "dispatched again: no worker claimed it within redispatch_after_s (" +
                        std::to_string(config_.dispatcher.redispatch_after_s) + " s)");
  }
  if (recovery.exhausted > 0) {
    log::warn("scheduler", std::to_string(recovery.exhausted) +
                               " tasks ended failed: attempts_exhausted (every worker that ran "
                               "them stopped before they finished)");
  }
  if (expired > 0) {
    log::info("scheduler", std::to_string(expired) +
                               " queued tasks ended timed_out: schedule_timeout (waited longer "
                               "than their schedule_timeout_s)");
  }
  if (expired_deadline > 0) {
    log::info("scheduler", std::to_string(expired_deadline) +
                               " queued tasks ended timed_out: deadline (handed back by their "
                               "worker, their timeout_s passed while they waited to run again)");
  }
  if (swept > 0)
    log::info("scheduler", std::to_string(swept) + " tasks of cancelled batches ended cancelled");
  for (const auto& [user_id, count] : over_budget_users) {
    log::TaskContext context;
    context.user_id = user_id;
    log::warn("scheduler", context,
              std::to_string(count) +
                  " queued tasks ended failed: quota_exceeded (the monthly budget is spent)");
  }
}

Scheduler::Housekept Scheduler::housekeep_if_due(const ports::SchedulerPass& spec,
                                                 limits::Clock::time_point started) {
  // Liveness, lost dispatches, queue deadlines and cancelled batches are about time, not
  // about the wake-up: they are looked at once per interval (and again at once while they
  // find full passes), in a transaction of their own.
  Housekept done;
  const bool due = housekeeping_backlog_ ||
                   started - housekeeping_at_ >=
                       std::chrono::milliseconds(config_.dispatcher.housekeeping_interval_ms);
  if (!due)
    return done;
  ports::Housekeeping found = store_.housekeep(spec);
  done.recovery = std::move(found.recovery);
  done.expired = found.expired;
  done.expired_deadline = found.expired_deadline;
  done.swept = found.swept;
  done.calls_settled = found.calls_settled;
  if (found.staged > 0) {
    log::info("scheduler", std::to_string(found.staged) +
                               " staged tasks of batch uploads that stopped part-way moved "
                               "into the queue (sealed) or deleted (abandoned)");
  }
  housekeeping_at_ = started;
  housekeeping_backlog_ =
      done.recovery.exhausted + done.recovery.lease_expired + done.recovery.redispatched >=
          spec.limit ||
      done.expired >= spec.limit || done.expired_deadline >= spec.limit ||
      done.swept >= spec.limit || done.calls_settled >= spec.limit || found.staged >= spec.limit;
  if (done.calls_settled > 0) {
    log::info("scheduler", std::to_string(done.calls_settled) +
                               " model call(s) left in flight by a stopped worker billed as "
                               "unreconciled (worker_lost)");
  }
  if (done.ended() > 0 && outbox_written_)
    outbox_written_();
  return done;
}

std::vector<limits::UserBacklog> Scheduler::read_users(const ports::SchedulerPass& spec,
                                                       ports::Backlog& backlog) {
  // The admission's reads need no transaction: only this scheduler admits, so a user's
  // active count read here can only fall before the dispatch below (which locks the rows it
  // takes); a pass that finds nobody waiting is one statement. The backlog's counts stop at
  // what this pass could admit (ports::backlog_count_cap), computed by the statement that
  // counts: with the fleet full, a queue of thousands costs a pass one row per user and
  // priority, not the scheduler batch each (measured at twice the peak: 4.6 ms a pass, 71
  // passes a second, a third of a CPU of Postgres).
  backlog = store_.read_backlog(spec.limit, config_.dispatcher.max_active_tasks);
  const auto read_at = clock_.now();
  ++known_.generation;
  known_.read_at = read_at;
  known_.fleet_active = backlog.fleet_active;
  known_.fleet_capacity = backlog.fleet_capacity;
  std::erase_if(known_.users,
                [&](const auto& user) { return read_at - user.second.read_at >= kUserKnownFor; });
  std::vector<limits::UserBacklog> users;
  users.reserve(backlog.users.size());
  std::vector<std::string> with_budget, unseeded;
  for (const ports::BacklogUser& b : backlog.users) {
    limits::UserBacklog u;
    u.user_id = b.user_id;
    u.limits = config_.limits_for(b.overrides);
    u.active = b.active;
    u.queued_interactive = b.queued_interactive;
    u.queued_batch = b.queued_batch;
    if (u.limits.monthly_budget_micros > 0)
      with_budget.push_back(u.user_id);
    if (!seeded_.count(u.user_id))
      unseeded.push_back(u.user_id);
    known_.users[u.user_id] = Known::User{u.limits, u.active, known_.generation, read_at};
    users.push_back(std::move(u));
  }
  std::map<std::string, ports::SpendByCurrency> spent =
      store_.month_spend_micros(with_budget, config_.billing.time_zone);
  std::map<std::string, ports::RecentUsage> recent;
  if (!unseeded.empty())
    recent = store_.recent_usage(unseeded);
  for (limits::UserBacklog& u : users) {
    if (auto it = spent.find(u.user_id); it != spent.end())
      u.spent_micros = spent_in_budget_currency(it->second);
    if (!seeded_.count(u.user_id)) {
      const ports::RecentUsage used =
          recent.count(u.user_id) ? recent[u.user_id] : ports::RecentUsage{};
      fair_->seed_usage(u.user_id, u.limits, used.admissions, used.tokens);
      seeded_[u.user_id] = true;
    }
  }
  return users;
}

Scheduler::Admitted Scheduler::admit(const limits::PassPlan& plan,
                                     const std::vector<limits::UserBacklog>& users,
                                     const ports::SchedulerPass& spec) {
  Admitted done;
  try {
    std::vector<ports::EndQueued> end_queued;
    for (const auto& [user_id, count] : plan.over_budget) {
      // The binding is captured through a name of its own: clang 14 cannot capture
      // structured bindings (the fuzz build, tests/fuzz).
      const auto it =
          std::find_if(users.begin(), users.end(),
                       [&id = user_id](const limits::UserBacklog& u) { return u.user_id == id; });
      const std::string message = budget_message(
          exchange_.target(), it == users.end() ? 0 : it->limits.monthly_budget_micros,
          it == users.end() ? 0 : it->spent_micros, config_.billing.time_zone);
      TaskResult result;
      result.type = ResultType::kError;
      result.message = message;
      end_queued.push_back(ports::EndQueued{
          user_id, static_cast<int>(count),
          ports::Ending{TaskStatus::kFailed, message, ErrorCode::kQuotaExceeded, result}});
    }
    std::vector<ports::DispatchGrant> grants;
    grants.reserve(plan.grants.size());
    for (const limits::Grant& grant : plan.grants)
      grants.push_back(ports::DispatchGrant{grant.user_id, grant.priority, grant.tasks});
    ports::PassWrites written = store_.write_pass(end_queued, grants, spec);
    for (const auto& [user_id, ended] : written.ended)
      done.over_budget += static_cast<int>(ended);
    done.over_budget_users = std::move(written.ended);
    const std::vector<ports::DispatchedTask>& dispatched = written.dispatched;
    if (handoff_ && !dispatched.empty()) {
      std::vector<ports::OutboxMessage> handed;
      handed.reserve(dispatched.size());
      for (const ports::DispatchedTask& task : dispatched)
        handed.push_back(ports::OutboxMessage{task.outbox_id, task.message});
      handoff_(std::move(handed));
    }
    if (((!handoff_ && !dispatched.empty()) || done.over_budget > 0) && outbox_written_)
      outbox_written_();

    std::map<std::pair<std::string, Priority>, std::vector<const ports::DispatchedTask*>> by_grant;
    for (const auto& task : dispatched)
      by_grant[{task.user_id, task.priority}].push_back(&task);
    int admitted[2] = {0, 0};
    for (const limits::Grant& grant : plan.grants) {
      const auto& tasks = by_grant[{grant.user_id, grant.priority}];
      const std::int64_t estimate = fair_->dispatched(grant, static_cast<int>(tasks.size()));
      const auto known = known_.users.find(grant.user_id);
      for (const ports::DispatchedTask* task : tasks) {
        // Under way now, in what is known; followed to its result while the bound allows
        // (past it, its place stays taken until a read lists its user again).
        if (known != known_.users.end())
          ++known->second.active;
        ++known_.fleet_active;
        if (known_.dispatched.size() < kMaxKnownDispatched)
          known_.dispatched.emplace(task->task_id, Known::Sent{grant.user_id, known_.generation});
        estimates_[task->task_id] = estimate;
        if (task->first)
          metrics_.queue_wait(task->priority, task->queued_s);
      }
      admitted[grant.priority == Priority::kBatch ? 1 : 0] += static_cast<int>(tasks.size());
    }
    metrics_.admitted(Priority::kInteractive, admitted[0]);
    metrics_.admitted(Priority::kBatch, admitted[1]);
    done.total = admitted[0] + admitted[1];
  } catch (...) {
    // Nothing was dispatched: give every grant's charge back before the error propagates.
    for (const limits::Grant& grant : plan.grants)
      fair_->dispatched(grant, 0);
    throw;
  }
  return done;
}

bool Scheduler::pass() {
  const auto started = clock_.now();
  // Cleared before the pass reads: a wake-up from here on runs the next round as a pass.
  woken_ = false;
  poked_ = false;
  reconcile_ended();
  const ports::SchedulerPass spec = pass_spec(started);
  // A generic plan is costed with the table sizes of the moment it was built: one cached
  // while tasks was small (a fresh fleet, then a flood of 100,000) joins it by a sequential
  // scan in every pass until autovacuum analyzes it. Dropped every second, the plans are
  // rebuilt from the current sizes.
  if (started - plans_at_ >= kReplanEvery) {
    store_.refresh_plans();
    plans_at_ = started;
  }
  const Housekept kept = housekeep_if_due(spec, started);
  ports::Backlog backlog;
  const std::vector<limits::UserBacklog> users = read_users(spec, backlog);
  const limits::PassPlan plan = fair_->plan(users, backlog.fleet_active, backlog.fleet_capacity);
  {
    // Queued work this pass does not admit waits for a slot: results wake the next pass.
    const auto [granted, queued] = granted_and_queued(plan, users);
    backlog_left_ = queued > granted;
  }
  const Admitted admitted = admit(plan, users, spec);
  // Under way now: what was, and what this pass dispatched.
  fleet_active_ = backlog.fleet_active + admitted.total;
  quiet_ = !backlog_left_ && fleet_active_ == 0 && !housekeeping_backlog_;
  try {
    record_waiting(plan.waiting);
  } catch (const std::exception& e) {
    // Only what the API shows: admission goes on, and the next write starts the table over.
    log::warn("scheduler", std::string("could not record why tasks wait: ") + e.what());
    waiting_replace_ = true;
  }
  const ports::RecoveryReport& recovery = kept.recovery;
  log_endings(recovery, kept.expired, kept.expired_deadline, kept.swept,
              admitted.over_budget_users);
  for (int cause = 0; cause < limits::kThrottleCauses; ++cause)
    metrics_.throttled(throttle_reason(cause), plan.throttled[cause]);
  metrics_.recovered(metrics::RecoveryReason::kLeaseExpired, recovery.lease_expired);
  metrics_.recovered(metrics::RecoveryReason::kRedispatch, recovery.redispatched);
  metrics_.recovery_exhausted(recovery.exhausted);
  metrics_.scheduler_ended(metrics::SchedulerEnd::kScheduleTimeout, kept.expired);
  metrics_.scheduler_ended(metrics::SchedulerEnd::kDeadline, kept.expired_deadline);
  metrics_.calls_settled(kept.calls_settled);
  metrics_.scheduler_ended(metrics::SchedulerEnd::kQuotaExceeded, admitted.over_budget);
  metrics_.scheduler_pass(std::chrono::duration<double>(clock_.now() - started).count());
  fair_->forget_idle(kForgetIdleAfter);
  // Tasks whose result never reached this replica (a lost event) must not pile up.
  if (estimates_.size() > 1000000)
    estimates_.clear();
  // Go again at once only when the slots were really used: a grant whose rows were locked
  // elsewhere (a batch cancel in progress) must not spin the loop.
  const int work = admitted.total + admitted.over_budget + kept.ended();
  return plan.slots > 0 && admitted.total >= plan.slots ? true : work >= spec.limit;
}

void Scheduler::record_waiting(const std::vector<limits::Waiting>& waiting) {
  std::map<std::pair<std::string, Priority>, limits::WaitReason> now;
  for (const limits::Waiting& w : waiting)
    now.emplace(std::make_pair(w.user_id, w.priority), w.reason);
  if (!waiting_replace_ && (now == waiting_written_ || clock_.now() - waiting_at_ < kWaitingEvery))
    return;
  ports::WaitingChanges changes;
  changes.replace = waiting_replace_;
  for (const auto& [key, reason] : now) {
    const auto it = waiting_written_.find(key);
    if (waiting_replace_ || it == waiting_written_.end() || it->second != reason)
      changes.set.push_back(
          ports::WaitingRow{key.first, key.second, limits::wait_reason_name(reason)});
  }
  if (!waiting_replace_) {
    for (const auto& [key, reason] : waiting_written_)
      if (!now.count(key))
        changes.cleared.push_back(key);
  }
  store_.record_waiting(changes);
  waiting_written_ = std::move(now);
  waiting_replace_ = false;
  waiting_at_ = clock_.now();
}

}  // namespace agentfleet::dispatcher
