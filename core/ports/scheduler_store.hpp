#pragma once
// The store the fleet's scheduler runs its passes on (dispatcher/scheduler.hpp): a session
// that holds the fleet-wide scheduler lock, hears that work arrived, and runs a pass's
// housekeeping, reads and writes. Implemented on Postgres by pg::SchedulerSession (one
// connection of its own: the session advisory lock lives and dies with it); the unit tests
// use a fake.
//
// Every method may throw (std::exception) when the store fails: the scheduler then ends the
// session (reset()) and competes for the lock again from a new one, so whatever failed is
// never half-applied (each write is one transaction).
//
// Thread-safety: one thread (the scheduler's) calls it.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/billing/money.hpp"
#include "core/domain/task.hpp"
#include "core/domain/user_limits.hpp"
#include "core/ports/publisher.hpp"

namespace agentfleet::ports {

struct SchedulerPass {
  std::string dispatch_topic;
  std::string results_topic;
  int limit = 200;
  int redispatch_after_s = 60;
  // A task whose lease expired after this many claims ends failed (its result event goes
  // to the outbox) instead of being dispatched again: something kills every worker that
  // runs it, and trying forever would take workers down with it.
  int max_attempts = 5;
  // Whether recovery may take over the running tasks of incarnations whose lease lapsed. False
  // for one lease after the store came back from an outage: no worker could renew while it
  // was away, and each gets a lease to hand back what it holds (a claim whose commit was in
  // doubt among it) before recovery counts the attempt as lost.
  bool recover_lapsed = true;
  // Seconds after a pass's dispatch messages are written that the relay may publish them
  // from the outbox. 0: at once. More: the pass answers them (DispatchedTask::message) for
  // the scheduler to hand to its relay as soon as it commits, which publishes them and
  // deletes their rows; the rows are the fallback should the replica stop first (a message
  // published twice is harmless: the claim is fenced). Recovery's go to the relay at once.
  int handoff_s = 0;
};

// Recovery: tasks whose worker lease expired, and dispatched tasks unclaimed for
// `redispatch_after_s`, are dispatched again (they resume from their checkpoints; the
// attempt fence stops a late old owner); tasks out of attempts end failed.
struct RecoveryReport {
  int exhausted = 0;
  int lease_expired = 0;
  int redispatched = 0;
  // Each task dispatched again, for the log.
  struct Task {
    std::string task_id;
    std::string user_id;
    std::string traceparent;
    bool lease_expired = false;  // else unclaimed for redispatch_after_s
  };
  std::vector<Task> tasks;
};

// The time-driven part of a pass: recovery, queue deadlines, cancelled batches.
struct Housekeeping {
  RecoveryReport recovery;
  int expired = 0;  // queued tasks ended timed_out (schedule_timeout)
  // Tasks handed back to the queue whose deadline passed there, ended timed_out (deadline).
  int expired_deadline = 0;
  int swept = 0;  // tasks of cancelled batches ended cancelled
  // Staged tasks of uploads that stopped part-way: those of a sealed batch moved into the
  // queue, those of an abandoned one deleted.
  int staged = 0;
  // Model calls left in flight by a worker that stopped, billed as unreconciled
  // (worker_lost) from the estimate recorded before each was sent.
  int calls_settled = 0;
};

// A user's overrides in user_limits (nullopt / empty: the tier's value applies).
using UserOverrides = UserLimitOverrides;

// Every user with queued work: queued counts per priority (each up to a cap), the exact
// count of dispatched + running tasks, the overrides; the capacity the live workers report
// and the fleet's active total (read whether or not anyone's work is queued).
struct BacklogUser {
  std::string user_id;
  std::int64_t queued_interactive = 0;
  std::int64_t queued_batch = 0;
  int active = 0;
  UserOverrides overrides;
};
struct Backlog {
  std::vector<BacklogUser> users;  // ordered by user_id
  std::int64_t fleet_active = 0;
  // What the live workers report they can run at once; -1 when none reports (unknown).
  std::int64_t fleet_capacity = -1;
  std::int64_t count_cap = 0;  // what each queued count stopped at (backlog_count_cap)
};

// What read_backlog counts each user's queues up to: one more than a pass could admit,
// that is than the least of `limit` (the scheduler batch), the room the live workers that
// take work report (`capacity`, -1 when none reports: no bound) and `max_active` (the
// fleet's max_active_tasks, 0: no bound), each less what is `active` already; never less
// than one. With the fleet full, a queue of thousands then costs a pass one row per user
// and priority, and a user whose count reaches the cap is known to have work left waiting.
// The store computes it in the statement that counts; this is its definition.
inline std::int64_t backlog_count_cap(int limit, int max_active, std::int64_t capacity,
                                      std::int64_t active) {
  std::int64_t cap = limit;
  if (capacity >= 0)
    cap = std::min(cap, capacity - active);
  if (max_active > 0)
    cap = std::min(cap, max_active - active);
  return std::max<std::int64_t>(cap, 0) + 1;
}

// Tokens (input + output) in the ledger and dispatches in the last minute, per user: where
// a new active scheduler starts its rate buckets.
struct RecentUsage {
  std::int64_t admissions = 0;
  std::int64_t tokens = 0;
};

// How a task that never started ends (over budget, out of queue time, ...).
struct Ending {
  TaskStatus status = TaskStatus::kFailed;
  std::string error;                            // the reason, in words
  ErrorCode error_code = ErrorCode::kInternal;  // docs/errors.md
  // Set for an ending the user should read as the task's answer (quota_exceeded: result
  // type error with the reason as its message).
  std::optional<TaskResult> result;
};

// A grant of the pass's plan: up to `tasks` of the user's oldest queued of that priority.
struct DispatchGrant {
  std::string user_id;
  Priority priority = Priority::kInteractive;
  int tasks = 0;
};

// A task the pass dispatched: status dispatched and its message in the outbox.
struct DispatchedTask {
  std::string task_id;
  std::string user_id;
  Priority priority = Priority::kInteractive;
  std::string was;      // the status it was picked in
  double queued_s = 0;  // since submission
  bool first = true;    // its first dispatch (attempt 0)
  std::string traceparent;
  // Its dispatch message and the outbox row that holds it.
  std::int64_t outbox_id = 0;
  OutMessage message;
};

// Queued tasks of a user to end unstarted: the oldest `count`, all with `ending`.
struct EndQueued {
  std::string user_id;
  int count = 0;
  Ending ending;
};

// What a pass's writes did.
struct PassWrites {
  std::vector<std::pair<std::string, std::size_t>> ended;  // per EndQueued with any ended
  std::vector<DispatchedTask> dispatched;
};

// Why queued tasks wait (the API's `waiting_reason`), per user and priority, as the last pass
// found: rows in `set` are written (a reason by its API name, limits::wait_reason_name), rows
// in `cleared` go. With `replace`, every row not in `set` goes: a new term starts over.
struct WaitingRow {
  std::string user_id;
  Priority priority = Priority::kInteractive;
  std::string reason;
};
struct WaitingChanges {
  bool replace = false;
  std::vector<WaitingRow> set;
  std::vector<std::pair<std::string, Priority>> cleared;
};

// What the store heard since it was last asked: each submission by its user and priority
// (a submission's NOTIFY names them), and whether anything else came (a notification that
// names no submission: a hand-back, a limits change, a batch moved into the queue, a
// submission by an older version).
struct Heard {
  std::vector<std::pair<std::string, Priority>> submitted;
  bool other = false;

  bool empty() const { return submitted.empty() && !other; }
};

using SpendByCurrency = billing::SpendByCurrency;  // currency -> micro-units spent in it

class SchedulerStore {
 public:
  virtual ~SchedulerStore() = default;

  // Opens a session when there is none, then tries the scheduler lock on it: true when this
  // session holds it (taken now, or held already).
  virtual bool try_lead() = 0;
  // Ends the session; the lock, when it held it, goes with it.
  virtual void reset() = 0;
  // Waits up to `timeout` for work to arrive (a submission on any replica, a limits change,
  // heard on the session) or for `wake_fd` to become readable (a wake-up from this process),
  // whichever comes first. Without a session only `wake_fd` is watched. True when it was
  // woken (work heard, or `wake_fd`), false when the timeout passed.
  virtual bool wait(std::chrono::milliseconds timeout, int wake_fd) = 0;
  // Takes what was heard since the last call (what wait() woke for, and what came during
  // the calls since): nothing is kept across reset() or a try_lead() that took the lock.
  virtual Heard take_heard() = 0;
  // Drops cached statement plans, so that the next ones follow the tables' current sizes.
  virtual void refresh_plans() = 0;

  // One transaction: recovery, queue deadlines, cancelled batches, forgotten workers.
  virtual Housekeeping housekeep(const SchedulerPass& pass) = 0;

  // The admission's reads (no transaction: only the active scheduler admits).
  // The backlog, in one statement with the fleet's room, each queued count capped at
  // backlog_count_cap(limit, max_active, the room's capacity and active).
  virtual Backlog read_backlog(int limit, int max_active) = 0;
  // Each user's cost since the start of this month in `time_zone`, unreconciled charges
  // included, per currency in micro-units (users without calls are absent).
  virtual std::map<std::string, SpendByCurrency> month_spend_micros(
      const std::vector<std::string>& users, const std::string& time_zone) = 0;
  virtual std::map<std::string, RecentUsage> recent_usage(
      const std::vector<std::string>& users) = 0;

  // One transaction: ends each EndQueued's oldest queued tasks (with their result events),
  // then dispatches the grants (skipping rows locked elsewhere), their dispatch messages due
  // to the relay pass.handoff_s later. Nothing when both are empty.
  virtual PassWrites write_pass(const std::vector<EndQueued>& end_queued,
                                const std::vector<DispatchGrant>& grants,
                                const SchedulerPass& pass) = 0;
  // One statement: the waiting reasons changed since the last call (see WaitingChanges).
  virtual void record_waiting(const WaitingChanges& changes) = 0;
};

}  // namespace agentfleet::ports
