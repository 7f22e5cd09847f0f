#pragma once
// A task as the whole system knows it: what was asked (TaskSpec), how it ended
// (TaskStatus, TaskResult) and what it cost (TokenUsage). Plain values, no I/O.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/domain/error.hpp"

namespace agentfleet {

enum class TaskStatus {
  kQueued,
  kDispatched,
  kRunning,
  kSucceeded,
  kFailed,
  kTimedOut,
  kCancelled
};
enum class ResultType { kActionCompleted, kNeedClarification, kError };
enum class Priority { kInteractive, kBatch };
// How the worker runs a task: one ReAct loop, or plan, execute, reflect and synthesize;
// kPlanOnly is POST /v1/plan's task: the planner alone, its plan the result.
enum class AgentStrategy { kReact, kPlanExecute, kPlanOnly };

std::string_view to_string(TaskStatus status);
std::string_view to_string(ResultType type);
std::string_view to_string(Priority priority);
std::string_view to_string(AgentStrategy strategy);
std::optional<TaskStatus> parse_task_status(std::string_view text);
std::optional<ResultType> parse_result_type(std::string_view text);
std::optional<Priority> parse_priority(std::string_view text);
std::optional<AgentStrategy> parse_agent_strategy(std::string_view text);
bool is_terminal(TaskStatus status);

struct TaskMetadata {
  std::string device_id;
  std::string time_zone;  // IANA name, e.g. "Asia/Shanghai"
  std::string locale;     // e.g. "zh-CN"
};

// Everything the worker needs to run a task; the dispatch message carries it.
struct TaskSpec {
  std::string task_id;
  std::string user_id;
  std::string text;
  std::string model;
  std::optional<std::vector<std::string>> tools;  // allow-list; nullopt = every tool
  int timeout_s = 30;
  int schedule_timeout_s = 3600;
  int max_steps = 10;
  Priority priority = Priority::kInteractive;
  std::string idempotency_key;
  std::string batch_id;
  TaskMetadata metadata;
  // As submitted; nullopt: the user's tier's strategy, else task_defaults.strategy.
  std::optional<AgentStrategy> strategy;
  // A follow-up: the task whose conversation this one continues (given, or the latest task
  // of `session_id` when stored), empty for none.
  std::string parent_task_id;
  std::string session_id;
  // The task's own spending limits, as submitted (nullopt: none): the most tokens its model
  // calls may use (input and output together, every attempt's), and the most they may cost,
  // in micro-units of the budget currency (docs/billing.md, "A task's own limits").
  std::optional<std::int64_t> max_tokens;
  std::optional<std::int64_t> max_cost_micros;
};

// What the model declared (through `finish`) or what its plain-text answer was classed as.
struct TaskResult {
  ResultType type = ResultType::kError;
  std::string message;
  std::vector<std::string> options;  // need_clarification: the choices, at most 5
};

// Provider token counts, normalised: `input` includes `cached_input`, `output` includes
// `reasoning` (as providers report them). Billing charges cached input at its own price
// and the rest of input at the input price, so nothing is counted twice.
struct TokenUsage {
  std::int64_t input = 0;
  std::int64_t cached_input = 0;
  std::int64_t output = 0;
  std::int64_t reasoning = 0;

  TokenUsage& operator+=(const TokenUsage& other) {
    input += other.input;
    cached_input += other.cached_input;
    output += other.output;
    reasoning += other.reasoning;
    return *this;
  }
};

// A batch's id is its user's: two users may each name a batch "nightly". The batches row's
// key (what a task's batch_id, its ledger rows and its calls hold) stays unique across users:
// the name itself when no batch had that key yet, else the name, kBatchKeySeparator (which no
// batch id may hold: ids refuse control characters) and the user id (migration 0030). Every
// answer shows the name.
inline constexpr char kBatchKeySeparator = '\x1f';
// The name a batch's key stands for: the key up to the separator (all of it when none).
std::string_view batch_name(std::string_view key);
// The key of user `user_id`'s batch `name` when another user's batch holds the name itself.
std::string batch_key_of_user(std::string_view name, std::string_view user_id);

// Why a model call the provider may have charged for has no step to bill it with: its answer
// is lost to the task (docs/billing.md, "Unreconciled charges").
enum class ChargeLoss {
  kTimeout,         // the request was sent and no answer came before the call's deadline
  kConnectionLost,  // the request was sent and the connection failed before the whole answer
  kUnreadable,      // a 2xx whose body is not a chat completion
  kAbandoned,       // the run stopped waiting (a cancel, a fence) and the answer came later
  kLeaseLost,       // the answer came, but the task was no longer this attempt's to checkpoint
  kWorkerLost,      // the worker stopped with the call in flight: billed by the scheduler from
                    // the estimate the worker recorded before sending it
};
std::string_view to_string(ChargeLoss loss);

// One such call: the provider's usage when it came, else a local estimate (`estimated`).
struct LostCharge {
  TokenUsage usage;
  bool estimated = true;
  ChargeLoss reason = ChargeLoss::kTimeout;
};

}  // namespace agentfleet
