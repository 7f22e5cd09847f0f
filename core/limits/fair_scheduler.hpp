#pragma once
// The dispatcher's admission policy: which queued tasks go to the workers in one
// scheduler pass. The store reads the backlog (one UserBacklog per user with queued work,
// with that user's exact count of dispatched + running tasks and the effective limits);
// FairScheduler::plan() decides the grants; the store dispatches them in the same
// transaction and reports back what it really dispatched (it may find fewer rows).
//
// Policy, per pass:
//   - a pass admits at most `pass_limit` tasks, and never lets the fleet's active tasks
//     (dispatched + running, all users) exceed `max_active` (0: no fleet-wide cap) nor the
//     capacity the live workers report (admission by capacity: the backlog waits in the
//     queue, not in the workers); users held back only by that are counted under
//     kFleetCapacity;
//   - a user is admitted only while `active < max_concurrency`, its requests-per-minute
//     bucket has one admission left, its tokens-per-minute bucket has room for the
//     estimate of one task, and its monthly budget (when set) is not spent;
//   - a user whose budget is spent gets no grant; its queued tasks are reported in
//     `over_budget` so the store ends them failed (`quota_exceeded`) instead of running them
//     (they count against `pass_limit`, not against `max_active`);
//   - interactive before batch: the pass's slots go to interactive work first, except a
//     guaranteed share (`batch_share` of the pass's slots, rounded up) that batch work
//     gets when it is waiting; slots one class leaves unused go to the other;
//   - within a class, weighted round robin across users: each round a user gets up to
//     `weight` grants (its tier's weight), rounds repeat until the slots are used or no
//     user can take more; the next pass starts with the user after the last one served,
//     so a scarce slot goes around the users in turn (when the slots ran out in the middle
//     of a user's turn, the next pass first finishes that turn, so weights hold even with
//     one slot per pass);
//   - a user's interactive and batch grants draw on the same concurrency, rate and token
//     room.
//
// Tokens per minute: each admitted task is charged an estimate (the user's running
// average of real task totals, `default_task_tokens` until one is known); when the task
// ends, reconcile() replaces the estimate with the real total from the ledger (the
// difference is given back or taken as debt, which delays the user's later tasks).
//
// Time comes from the injected Clock. Thread-safety: none; the scheduler thread owns it.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/domain/task.hpp"
#include "core/domain/user_limits.hpp"
#include "core/limits/clock.hpp"
#include "core/limits/token_bucket.hpp"

namespace agentfleet::limits {

// A user's effective limits: the tier's defaults with the user's overrides applied
// (config::Config::limits_for). The plan reads max_concurrency, requests_per_minute,
// tokens_per_minute, monthly_budget_micros and weight.
using agentfleet::UserLimits;

// One user with queued work, as the store read it at the start of the pass.
struct UserBacklog {
  std::string user_id;
  UserLimits limits;
  int active = 0;                       // dispatched + running, exact
  std::int64_t queued_interactive = 0;  // queued tasks of each priority (may be capped
  std::int64_t queued_batch = 0;        // by the store; a lower bound is enough)
  std::int64_t spent_micros = 0;        // this month's cost so far (when a budget is set)
};

enum class ThrottleCause { kConcurrency, kRpm, kTpm, kBudget, kFleetCapacity };
inline constexpr int kThrottleCauses = 5;

// Why a user's queued tasks of one priority still wait after a pass (the API's
// `waiting_reason`): the first limit that stopped the user, or the fleet's room that ran out.
enum class WaitReason {
  kConcurrency,        // the user's max_concurrency tasks are dispatched or running
  kRequestsPerMinute,  // requests_per_minute admissions this minute
  kTokensPerMinute,    // tokens_per_minute: no room for one more task's estimate
  kBudget,             // the monthly budget is spent (the tasks end quota_exceeded)
  kFleetCapacity,      // the workers' capacity, or the fleet's max_active_tasks, is in use
  kBatchShare,         // batch work, behind interactive work beyond its guaranteed share
  kPassLimit,          // the pass admitted all it may at once; the next pass follows at once
};
inline constexpr int kWaitReasons = 7;
// "concurrency", "requests_per_minute", "tokens_per_minute", "budget", "fleet_capacity",
// "batch_share", "pass_limit": the names the API shows.
const char* wait_reason_name(WaitReason reason);

struct Waiting {
  std::string user_id;
  Priority priority = Priority::kInteractive;
  WaitReason reason = WaitReason::kConcurrency;
  bool operator==(const Waiting&) const = default;
};

struct Grant {
  std::string user_id;
  Priority priority = Priority::kInteractive;
  int tasks = 0;
};

struct PassPlan {
  std::vector<Grant> grants;  // in admission order; at most one Grant per (user, priority)
  // Users whose budget is spent, with how many of their queued tasks to end
  // `quota_exceeded` this pass (at most the pass limit in all).
  std::vector<std::pair<std::string, int>> over_budget;
  // Users with queued work held back this pass, by the first limit that stopped them.
  int throttled[kThrottleCauses] = {0, 0, 0, 0, 0};
  // Every (user, priority) with queued tasks the pass leaves waiting, and why; in user
  // order, interactive before batch.
  std::vector<Waiting> waiting;
  // What the pass could admit (pass limit less the over_budget failures, and fleet cap);
  // the grants add up to at most this.
  int slots = 0;
};

struct FairSchedulerOptions {
  int pass_limit = 200;
  std::int64_t max_active = 0;              // fleet-wide cap on dispatched + running; 0 = none
  double batch_share = 0.2;                 // of a pass's slots, guaranteed to waiting batch work
  std::int64_t default_task_tokens = 4000;  // the estimate before a user's first result
};

class FairScheduler {
 public:
  FairScheduler(FairSchedulerOptions options, const Clock& clock);

  // Decides the pass. `fleet_active` is every user's dispatched + running tasks;
  // `fleet_capacity` what the live workers can run at once (negative: unknown, no cap).
  // Charges the rate and token buckets of every grant (see dispatched() to give back what
  // the store could not dispatch).
  PassPlan plan(const std::vector<UserBacklog>& users, std::int64_t fleet_active,
                std::int64_t fleet_capacity = -1);

  // What the store really dispatched of a grant (<= grant.tasks): the rest is given
  // back to the user's buckets. Returns the token estimate charged per task, for
  // reconcile().
  std::int64_t dispatched(const Grant& grant, int tasks);

  // A task of `user_id` ended having used `actual_tokens` (input + output, from the
  // ledger), after `estimated_tokens` was charged at dispatch (the value dispatched()
  // returned; the current estimate when unknown, e.g. dispatched by another replica).
  // Corrects the user's token bucket and updates the user's running estimate.
  void reconcile(const std::string& user_id, std::int64_t estimated_tokens,
                 std::int64_t actual_tokens);

  // The estimate a task of this user is charged now.
  std::int64_t estimate_tokens(const std::string& user_id) const;

  // A new leader starts from what the ledger says the user used in the last minute,
  // instead of full buckets.
  void seed_usage(const std::string& user_id, const UserLimits& limits,
                  std::int64_t admissions_last_minute, std::int64_t tokens_last_minute);

  // Drops the state of users idle (no plan() with queued work, no reconcile) for longer
  // than `idle_for` whose buckets are full again, so memory follows the active users.
  void forget_idle(Clock::duration idle_for);
  std::size_t tracked_users() const { return users_.size(); }

 private:
  // What the scheduler remembers of a user between passes.
  struct UserState {
    UserState(const UserLimits& applied, Clock::time_point now);

    UserLimits limits;          // the limits the buckets were last sized for
    TokenBucket requests;       // admissions per minute
    TokenBucket tokens;         // tokens per minute: estimates at admission, corrected later
    double average_tokens = 0;  // running average of real task totals
    bool has_average = false;   // false until the first reconcile()
    std::int64_t charged_per_task = 0;  // estimate charged to the last pass's grants
    Clock::time_point last_seen;        // last plan() with this user, dispatched(), reconcile()
  };

  // The user's state, created with full buckets on first sight; buckets are resized when
  // the limits changed since the last pass.
  UserState& state_for(const std::string& user_id, const UserLimits& limits);
  std::int64_t estimate_of(const UserState& state) const;

  FairSchedulerOptions options_;
  const Clock& clock_;
  std::unordered_map<std::string, UserState> users_;
  std::string cursor_[2];  // per priority: the last user served (round-robin position)
  // Per priority: what is left of the cursor user's turn when the pass's slots ran out
  // in the middle of it (0: the turn was complete; the next pass starts after the cursor).
  int cursor_turn_left_[2] = {0, 0};
};

}  // namespace agentfleet::limits
