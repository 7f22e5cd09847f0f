#pragma once
// Port: what one run of a task reads and writes durably. The worker's task runner claims a
// task through it, checkpoints every model step (with its ledger row) and every step's tool
// results, ends the task with its result announcement, or hands it back. The Postgres
// adapter (adapters/pg/run_store) group-commits the writes of many runs; tests fake it.
//
// Every write after the claim is fenced by (task_id, attempt, incarnation): it is stored
// only while that attempt, run by that worker incarnation, still owns the task. Fenced writes
// answer Result<Status>: the outer error is the store's (retryable or not), the inner one
// ErrorKind::kLeaseLost when the fence failed (another attempt owns the task; the run stops without
// writing).
//
// Thread-safety: called from the worker's io thread; each call resumes on the caller's
// executor.

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/billing/money.hpp"
#include "core/domain/error.hpp"
#include "core/domain/task.hpp"

namespace agentfleet::ports {

// One checkpoint of an earlier attempt.
struct StepRecord {
  int step = 0;
  std::string model_reply;   // JSON
  std::string observations;  // JSON array, empty when the tools have not finished
};

// What a task has used so far (its model calls' ledger rows summed): the totals its result
// event reports.
struct TaskTotals {
  TokenUsage usage;  // input, cached_input, output (reasoning is inside output)
  std::int64_t cost_micros = 0;
  std::string currency;  // of the last call billed; empty before the first
};

struct ClaimedTask {
  TaskSpec spec;
  int attempt = 0;
  TaskTotals totals;  // what earlier attempts billed
  // The user's overrides from user_limits (empty when none): the tier, and the highest
  // tool permission level ("read", "write", "execute", "admin").
  std::string user_tier;
  std::string user_tool_permission;
  std::int64_t remaining_ms = 0;  // until the deadline (may be <= 0)
  std::int64_t queued_ms = 0;     // from submission to this claim
  bool cancel_requested = false;
  bool schedule_expired = false;  // waited longer than schedule_timeout_s before running
  std::vector<StepRecord> steps;  // checkpoints of earlier attempts, in order
  // The user's own monthly budget (user_limits), in micro-units of the budget currency;
  // nullopt: their tier's.
  std::optional<std::int64_t> user_monthly_budget_micros;
  // The claim recorded the run's first model call (step 0) as CallSent would, at its
  // FirstCallEstimate: the call needs no record of its own, and a run that does not send it
  // settles the record.
  bool first_call_recorded = false;
};

// How a claim records a task's first model call with itself, so that the call needs no
// commit of its own before it is sent: for a task of `model` run by `strategy` (as the task
// row names it; empty: its tier's), the tokens the first request adds to the task's text
// (the system prompt, the tools offered, the messages' framing), and the input price in
// force now. The claim estimates the call's input as prompt_tokens plus the text's
// estimate (react::estimate_tokens) and records it for attempt 1 of a task with no parent
// only; every other first call is recorded by the run. The worker learns prompt_tokens from
// the first calls it prepares (TaskRunner::learn_first_call).
struct FirstCallEstimate {
  std::string model;
  std::string strategy;
  std::int64_t prompt_tokens = 0;
  // Micro-units per million input tokens, times the price window's multiplier in micro-units
  // (billing::PriceTable::cost): the record's cost is rate x tokens / 10^12 micro-units,
  // rounded half up.
  std::int64_t rate = 0;
  std::string currency;
};
using FirstCallEstimates = std::vector<FirstCallEstimate>;

// kBusyOrDone: the task is terminal, queued, or owned by another live attempt; kUnknown: no
// such task exists.
// kNotLive: nothing was claimed because the claimer's own liveness had lapsed when the
// claim ran (the worker is fenced, or about to be); it may claim again once it holds a new
// incarnation.
enum class ClaimOutcome { kClaimed, kBusyOrDone, kUnknown, kNotLive };
struct Claim {
  ClaimOutcome outcome = ClaimOutcome::kBusyOrDone;
  std::optional<ClaimedTask> task;  // set when kClaimed
  std::int64_t incarnation = 0;     // the worker incarnation the claim was made under
  // kBusyOrDone: the attempt at which that incarnation runs the task already (an earlier
  // claim of it that committed although its answer was lost); 0 when it is not its own.
  int held_attempt = 0;
};

struct LedgerRow {
  std::string user_id;
  std::string batch_id;
  std::string model;
  TokenUsage usage;
  std::string cost;  // decimal text
  std::string currency;
  bool usage_estimated = false;  // the provider sent no usage: a local estimate
};

// Model calls of one step the provider may have charged for that no checkpoint bills (their
// answers were lost to the task: ChargeLoss), each with its cost. Written whatever the fence
// says: the charge happened whether or not the task is still this attempt's.
struct UnreconciledCharge {
  LostCharge charge;
  std::string cost;  // decimal text
  std::string currency;
};
struct Charges {
  std::string task_id;
  int attempt = 0;
  int step = 0;
  std::string user_id;
  std::string batch_id;
  std::string model;
  std::vector<UnreconciledCharge> charges;
  std::string traceparent;  // the task's, for the log line; not stored
  // The step's call has ended (its last try's fate is these charges, maybe none: the
  // provider refused it): its in-flight record (CallSent) is removed, and the charges are
  // written only if the record was still there. Gone, the scheduler has billed the call
  // already (its worker's liveness had lapsed), and it is not billed twice.
  bool settles_call = false;
};

// A model call about to be sent (each try of it): recorded before it leaves, so that a call
// whose worker dies before its fate is written is still billed (by the scheduler, at this
// estimate: the request's tokens as input). Fenced like a checkpoint: when the task is no
// longer this attempt's, nothing is recorded and the call must not be sent. A second try of
// the same step keeps the first record.
struct CallSent {
  std::string task_id;
  int attempt = 0;
  int step = 0;
  std::string user_id;
  std::string batch_id;
  std::string model;
  std::int64_t input_tokens = 0;  // estimated from the request
  std::string cost;               // of that estimate, decimal text
  std::string currency;
  std::int64_t incarnation = 0;
};

// Checkpoint of one model call: the reply and its ledger row, stored together (and the
// call's in-flight record removed).
struct ModelStep {
  std::string task_id;
  int attempt = 0;
  int step = 0;
  std::string reply_json;
  int latency_ms = 0;
  LedgerRow ledger;
  std::int64_t incarnation = 0;  // the worker incarnation whose claim this run is (the fence)
};

// The tool results of a step (what the model sees, and the trace). `executed_calls` (calls
// that ran, not the refused ones) is added to the task's count. Empty `observations_json`:
// the step's calls were cut short by the task's end; the trace shows what answered.
struct ToolResults {
  std::string task_id;
  int attempt = 0;
  int step = 0;
  std::string observations_json;
  std::string trace_json;
  int executed_calls = 0;
  std::int64_t incarnation = 0;  // the fence, as in ModelStep
  // The record of the model call the results lead to (its first try), written with them:
  // that call is then sent without a commit of its own. A run that does not send it after
  // all settles the record (Charges::settles_call, nothing billed).
  std::optional<CallSent> next_call;
};

// A plan_execute tool step, recorded before its calls run: a step row of its own with no
// model call and no ledger row. Its results follow as ToolResults of the same step.
struct ToolStep {
  std::string task_id;
  int attempt = 0;
  int step = 0;
  std::string calls_json;
  std::int64_t incarnation = 0;  // the fence, as in ModelStep
};

// How a run ends its task, with the result event that announces it (built by the run from
// the totals it kept: the store writes it as it is). When the task ends on a model call's
// answer (the final answer, or one the strategy fails on), that call's checkpoint rides on
// the end: `last_step` is written with it, in one commit, fenced with it (refused together).
struct TaskEnd {
  std::string task_id;
  int attempt = 0;
  TaskStatus status = TaskStatus::kFailed;
  std::optional<TaskResult> result;
  std::string error;
  std::string user_id;
  std::string traceparent;
  std::string result_event;             // JSON
  std::optional<ErrorCode> error_code;  // set for every end but succeeded
  std::int64_t incarnation = 0;         // the fence, as in ModelStep
  std::optional<ModelStep> last_step;   // the checkpoint written with the end, if any
  // The step of a model call recorded for this attempt but never sent (its record written by
  // the claim or a tool round): the end removes that record, billing nothing.
  std::optional<int> unsent_call_step;
};

// A follow-up's parent as the worker rebuilds its conversation.
struct ParentTask {
  std::string text;
  std::optional<AgentStrategy> strategy;
  TaskStatus status = TaskStatus::kQueued;
  std::optional<TaskResult> result;
  std::string error;
  std::optional<std::vector<std::string>> tools;  // its allow-list
  std::vector<StepRecord> steps;
};

class RunStore {
 public:
  virtual ~RunStore() = default;

  // Claims a dispatched task (or one whose owner is gone): a new attempt of it is this run's.
  // With `first_calls` (may be null), the first model call of attempt 1 of a task with no
  // parent is recorded by the claim (ClaimedTask::first_call_recorded).
  virtual boost::asio::awaitable<Result<Claim>> claim(
      std::string task_id, std::shared_ptr<const FirstCallEstimates> first_calls) = 0;

  virtual boost::asio::awaitable<Result<Status>> save_model_step(ModelStep step) = 0;
  virtual boost::asio::awaitable<Result<Status>> save_tool_results(ToolResults results) = 0;
  virtual boost::asio::awaitable<Result<Status>> save_tool_step(ToolStep step) = 0;
  // Bills calls no checkpoint bills (usage_unreconciled), unfenced.
  virtual boost::asio::awaitable<Result<Status>> record_charges(Charges charges) = 0;
  // Records a model call before it is sent (fenced: kLeaseLost, do not send it).
  virtual boost::asio::awaitable<Result<Status>> record_call(CallSent call) = 0;

  // Ends the task (status, result) and stores its result announcement, which the store's
  // relay publishes unless announced() says the run did. The inner value is the
  // announcement's id; the inner error kLeaseLost when the fence failed.
  virtual boost::asio::awaitable<Result<Result<std::int64_t>>> finish(TaskEnd end) = 0;

  // Hands the task back (a draining worker): queued again, not counted as a lost attempt.
  virtual boost::asio::awaitable<Result<Status>> release(std::string task_id, int attempt,
                                                         std::int64_t incarnation) = 0;

  // The user's spend since the start of this month in `time_zone`, per currency,
  // unreconciled charges included (what a budget is held against).
  virtual boost::asio::awaitable<Result<billing::SpendByCurrency>> month_spend(
      std::string user_id, std::string time_zone) = 0;

  // A follow-up's parent, only when it is `user_id`'s task; nullopt otherwise.
  virtual boost::asio::awaitable<Result<std::optional<ParentTask>>> load_parent(
      std::string parent_id, std::string user_id) = 0;

  // The run published announcement `id` itself: the store forgets it (in the background).
  virtual void announced(std::int64_t id) = 0;
  // True while announced() work is still under way (a shutdown waits for it, or the relay
  // would publish those announcements again).
  virtual bool settling() const = 0;
};

}  // namespace agentfleet::ports
