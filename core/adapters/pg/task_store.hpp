#pragma once
// Every SQL statement on tasks, steps, the ledger and the outbox, as functions of a
// pqxx::connection (run them through DbPool), each in a transaction of its own; the worker's
// writes also take a pqxx::work, so WriteBatcher can put many tasks' writes in one commit. The
// worker's writes are fenced by (task_id, attempt, status = 'running'): a worker whose lease was
// taken over writes nothing and learns it from ErrorKind::kLeaseLost.

#include <pqxx/pqxx>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/domain/error.hpp"
#include "core/domain/task.hpp"

namespace agentfleet::pg {

// ---- dispatcher -------------------------------------------------------------------

struct NewTask {
  TaskSpec spec;  // task_id set by the caller
  std::string canonical;
  std::string traceparent;
};

enum class InsertOutcome { kCreated, kExisting, kConflict };
struct InsertResult {
  InsertOutcome outcome = InsertOutcome::kCreated;
  std::string task_id;  // the new task, or the one the idempotency key already names
};
InsertResult insert_task(pqxx::connection& c, const NewTask& task);

// The task as the API shows it (JSON text), or nullopt.
std::optional<std::string> task_json(pqxx::connection& c, const std::string& task_id);

// GET /v1/tasks: a user's tasks, newest first, optionally of one status, at most `limit`,
// created before the task `before` (a cursor: the last id of the previous page). Each item
// is the task's summary JSON (no trace); returns the JSON array text.
struct TaskListQuery {
  std::string user_id;
  std::string status;  // empty: any
  int limit = 50;
  std::string before;  // task id; empty: from the newest
};
std::string list_tasks(pqxx::connection& c, const TaskListQuery& query);

// POST /v1/tasks/{id}/cancel, in one transaction. A task not yet running (queued, or
// dispatched and unclaimed) ends `cancelled` at once, its result event in the outbox; a
// running task gets cancel_requested (its worker stops it within worker.cancel_poll_ms);
// a task already ended is left as it is.
enum class CancelOutcome { kCancelled, kRequested, kAlreadyCancelled, kAlreadyEnded, kUnknown };
CancelOutcome cancel_task(pqxx::connection& c, const std::string& task_id,
                          const std::string& results_topic);

// One scheduler pass, in one transaction, by one scheduler at a time (transaction-scoped
// advisory lock; returns -1 when another holds it). First recovery: tasks whose worker
// lease expired, and dispatched tasks unclaimed for `redispatch_after_s`, are dispatched
// again (they resume from their checkpoints; the attempt fence stops a late old owner).
// Then up to `limit` queued tasks are admitted. Each gets a dispatch message in the
// outbox. Returns the number of messages written.
struct SchedulerPass {
  std::string dispatch_topic;
  std::string results_topic;
  int limit = 200;
  int redispatch_after_s = 60;
  // A task whose lease expired after this many claims ends failed (its result event goes
  // to the outbox) instead of being dispatched again: something kills every worker that
  // runs it, and trying forever would take workers down with it.
  int max_attempts = 5;
};
int schedule_queued(pqxx::connection& c, const SchedulerPass& pass);

// The same pass, saying what it did (for the metrics).
struct SchedulerReport {
  bool lock_held = false;  // false: another scheduler holds the lock; nothing was done
  int exhausted = 0;       // running tasks ended failed after max_attempts
  int recovered_lease_expired = 0;
  int recovered_redispatch = 0;  // dispatched but unclaimed for redispatch_after_s
  int admitted_interactive = 0;
  int admitted_batch = 0;
  // Outbox messages written (result events of exhausted tasks, and dispatch messages).
  int messages() const {
    return exhausted + recovered_lease_expired + recovered_redispatch + admitted_interactive +
           admitted_batch;
  }
};
SchedulerReport schedule_pass(pqxx::connection& c, const SchedulerPass& pass);

// Tasks in each live status (queued, dispatched, running; zero when none), for the metrics.
std::vector<std::pair<TaskStatus, std::int64_t>> count_live_tasks(pqxx::connection& c);
// Outbox rows due for publishing (publish_after passed) and not yet published.
std::int64_t count_due_outbox(pqxx::connection& c);

struct OutboxRow {
  std::int64_t id = 0;
  std::string topic;
  std::string key;
  std::string payload;
  std::string traceparent;
};

// ---- worker -----------------------------------------------------------------------

struct StepRecord {
  int step = 0;
  std::string model_reply;   // JSON
  std::string observations;  // JSON array, empty when the tools have not finished
};

struct ClaimedTask {
  TaskSpec spec;
  int attempt = 0;
  // The user's overrides from user_limits (empty when none): the tier, and the highest
  // tool permission level ("read", "write", "execute", "admin").
  std::string user_tier;
  std::string user_tool_permission;
  std::int64_t remaining_ms = 0;  // until the deadline (may be <= 0)
  std::int64_t queued_ms = 0;     // from submission to this claim
  bool cancel_requested = false;
  bool schedule_expired = false;  // waited longer than schedule_timeout_s before running
  std::vector<StepRecord> steps;  // checkpoints of earlier attempts, in order
};

// Claims a dispatched task, or one whose lease expired: status running, attempt + 1,
// lease, worker id; the deadline is fixed by the first claim. kBusyOrDone when the task is
// terminal, queued, or leased by another worker; kUnknown when no such task exists.
enum class ClaimOutcome { kClaimed, kBusyOrDone, kUnknown };
struct Claim {
  ClaimOutcome outcome = ClaimOutcome::kBusyOrDone;
  std::optional<ClaimedTask> task;  // set when kClaimed
};
// A task whose lease expired is claimed only while attempt - releases < max_attempts (the
// dispatcher's recovery gives up on it then; a redelivered message must not revive it).
Claim claim_task(pqxx::connection& c, const std::string& task_id, const std::string& worker_id,
                 int lease_s, int max_attempts);
Claim claim_task(pqxx::work& tx, const std::string& task_id, const std::string& worker_id,
                 int lease_s, int max_attempts);

// Hands a running task back (a draining worker): status queued again, lease and worker
// cleared, `releases` + 1 so the hand-back does not count as a lost attempt. Fenced by
// the attempt; kLeaseLost when the task is no longer ours.
Status release_task(pqxx::connection& c, const std::string& task_id, int attempt);
Status release_task(pqxx::work& tx, const std::string& task_id, int attempt);
// The same for every (task_id, attempt) still held by `worker_id` (a drain whose grace
// ran out); returns how many were handed back.
int release_tasks(pqxx::connection& c, const std::string& worker_id,
                  const std::vector<std::pair<std::string, int>>& tasks);

struct LedgerRow {
  std::string user_id;
  std::string batch_id;
  std::string model;
  TokenUsage usage;
  std::string cost;  // decimal text
  std::string currency;
};

// Checkpoint of one model call: the reply and its ledger row, one transaction.
Status save_model_step(pqxx::connection& c, const std::string& task_id, int attempt, int step,
                       const std::string& model_reply_json, int latency_ms,
                       const LedgerRow& ledger);
Status save_model_step(pqxx::work& tx, const std::string& task_id, int attempt, int step,
                       const std::string& model_reply_json, int latency_ms,
                       const LedgerRow& ledger);

// The tool results of a step (what the model sees, and the trace).
// `executed_calls` (calls that ran, not the refused ones) is added to the task's count.
Status save_tool_results(pqxx::connection& c, const std::string& task_id, int attempt, int step,
                         const std::string& observations_json, const std::string& trace_json,
                         int executed_calls);
Status save_tool_results(pqxx::work& tx, const std::string& task_id, int attempt, int step,
                         const std::string& observations_json, const std::string& trace_json,
                         int executed_calls);

struct FinishRecord {
  std::string task_id;
  int attempt = 0;
  TaskStatus status = TaskStatus::kFailed;
  std::optional<TaskResult> result;
  std::string error;
  int steps = 0;
  int tool_calls = 0;
  std::string results_topic;
  std::string user_id;
  std::string result_event_json;
  std::string traceparent;
  int relay_delay_s = 10;  // the relay publishes it if the worker has not by then
};

// Task row (status, result, totals from the ledger) and the result announcement in the
// outbox, one transaction. Returns the outbox row id.
Result<std::int64_t> finish_task(pqxx::connection& c, const FinishRecord& record);
Result<std::int64_t> finish_task(pqxx::work& tx, const FinishRecord& record);

// Totals over the ledger, for the result event.
struct TaskTotals {
  TokenUsage usage;
  std::string cost = "0.000000";
  std::string currency;
};
TaskTotals task_totals(pqxx::connection& c, const std::string& task_id);
TaskTotals task_totals(pqxx::transaction_base& tx, const std::string& task_id);

void delete_outbox_row(pqxx::connection& c, std::int64_t id);
void delete_outbox_row(pqxx::work& tx, std::int64_t id);

// Extends the leases of the given (task_id, attempt) pairs held by this worker. Returns
// the pairs still ours (the rest were taken over: their runs must stop), and which of
// them have a cancellation requested.
struct LeaseCheck {
  std::vector<std::string> held;       // task ids whose lease was extended
  std::vector<std::string> cancelled;  // among `held`: cancel_requested is set
};
LeaseCheck extend_leases(pqxx::connection& c, const std::string& worker_id,
                         const std::vector<std::pair<std::string, int>>& tasks, int lease_s);

// Among the given task ids, those with a cancellation requested (a cheap read between
// heartbeats).
std::vector<std::string> cancel_requested(pqxx::connection& c,
                                          const std::vector<std::string>& task_ids);

}  // namespace agentfleet::pg
