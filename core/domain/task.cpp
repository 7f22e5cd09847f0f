#include "core/domain/task.hpp"

#include "core/domain/conversation.hpp"
#include "core/domain/error.hpp"

namespace agentfleet {

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kTransient:
      return "transient";
    case ErrorKind::kTimeout:
      return "timeout";
    case ErrorKind::kInvalid:
      return "invalid";
    case ErrorKind::kNotFound:
      return "not_found";
    case ErrorKind::kConflict:
      return "conflict";
    case ErrorKind::kLeaseLost:
      return "lease_lost";
    case ErrorKind::kCancelled:
      return "cancelled";
    case ErrorKind::kFatal:
      return "fatal";
  }
  return "unknown";
}

std::string_view to_string(TaskStatus status) {
  switch (status) {
    case TaskStatus::kQueued:
      return "queued";
    case TaskStatus::kDispatched:
      return "dispatched";
    case TaskStatus::kRunning:
      return "running";
    case TaskStatus::kSucceeded:
      return "succeeded";
    case TaskStatus::kFailed:
      return "failed";
    case TaskStatus::kTimedOut:
      return "timed_out";
    case TaskStatus::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

std::string_view to_string(ResultType type) {
  switch (type) {
    case ResultType::kActionCompleted:
      return "action_completed";
    case ResultType::kNeedClarification:
      return "need_clarification";
    case ResultType::kError:
      return "error";
  }
  return "unknown";
}

std::string_view to_string(Priority priority) {
  return priority == Priority::kBatch ? "batch" : "interactive";
}

std::string_view to_string(AgentStrategy strategy) {
  switch (strategy) {
    case AgentStrategy::kPlanExecute:
      return "plan_execute";
    case AgentStrategy::kPlanOnly:
      return "plan_only";
    case AgentStrategy::kReact:
      break;
  }
  return "react";
}

std::string_view to_string(ChargeLoss loss) {
  switch (loss) {
    case ChargeLoss::kConnectionLost:
      return "connection_lost";
    case ChargeLoss::kUnreadable:
      return "unreadable";
    case ChargeLoss::kAbandoned:
      return "abandoned";
    case ChargeLoss::kLeaseLost:
      return "lease_lost";
    case ChargeLoss::kWorkerLost:
      return "worker_lost";
    case ChargeLoss::kTimeout:
      break;
  }
  return "timeout";
}

std::optional<AgentStrategy> parse_agent_strategy(std::string_view text) {
  for (auto s : {AgentStrategy::kReact, AgentStrategy::kPlanExecute, AgentStrategy::kPlanOnly}) {
    if (to_string(s) == text)
      return s;
  }
  return std::nullopt;
}

std::optional<TaskStatus> parse_task_status(std::string_view text) {
  for (auto s :
       {TaskStatus::kQueued, TaskStatus::kDispatched, TaskStatus::kRunning, TaskStatus::kSucceeded,
        TaskStatus::kFailed, TaskStatus::kTimedOut, TaskStatus::kCancelled}) {
    if (to_string(s) == text)
      return s;
  }
  return std::nullopt;
}

std::optional<ResultType> parse_result_type(std::string_view text) {
  for (auto t :
       {ResultType::kActionCompleted, ResultType::kNeedClarification, ResultType::kError}) {
    if (to_string(t) == text)
      return t;
  }
  return std::nullopt;
}

std::optional<Priority> parse_priority(std::string_view text) {
  if (text == "interactive")
    return Priority::kInteractive;
  if (text == "batch")
    return Priority::kBatch;
  return std::nullopt;
}

std::string_view to_string(Role role) {
  switch (role) {
    case Role::kSystem:
      return "system";
    case Role::kUser:
      return "user";
    case Role::kAssistant:
      return "assistant";
    case Role::kTool:
      return "tool";
  }
  return "user";
}

std::optional<ReasoningEcho> parse_reasoning_echo(std::string_view name) {
  if (name == "none")
    return ReasoningEcho::kNone;
  if (name == "tool_turns")
    return ReasoningEcho::kToolTurns;
  if (name == "all")
    return ReasoningEcho::kAll;
  return std::nullopt;
}

std::string_view to_string(ReasoningEcho echo) {
  switch (echo) {
    case ReasoningEcho::kNone:
      return "none";
    case ReasoningEcho::kToolTurns:
      return "tool_turns";
    case ReasoningEcho::kAll:
      return "all";
  }
  return "none";
}

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kScheduleTimeout:
      return "schedule_timeout";
    case ErrorCode::kDeadline:
      return "deadline";
    case ErrorCode::kMaxSteps:
      return "max_steps";
    case ErrorCode::kQuotaExceeded:
      return "quota_exceeded";
    case ErrorCode::kMaxTokens:
      return "max_tokens";
    case ErrorCode::kMaxCost:
      return "max_cost";
    case ErrorCode::kAttemptsExhausted:
      return "attempts_exhausted";
    case ErrorCode::kModelUnavailable:
      return "model_unavailable";
    case ErrorCode::kModelOutOfQuota:
      return "model_out_of_quota";
    case ErrorCode::kModelRejected:
      return "model_rejected";
    case ErrorCode::kTruncated:
      return "truncated";
    case ErrorCode::kContentFilter:
      return "content_filter";
    case ErrorCode::kEmptyReply:
      return "empty_reply";
    case ErrorCode::kNoPlan:
      return "no_plan";
    case ErrorCode::kUnperformedAction:
      return "unperformed_action";
    case ErrorCode::kUnknownModel:
      return "unknown_model";
    case ErrorCode::kModelNotAllowed:
      return "model_not_allowed";
    case ErrorCode::kUnsupportedStrategy:
      return "unsupported_strategy";
    case ErrorCode::kParentUnavailable:
      return "parent_unavailable";
    case ErrorCode::kCheckpointMismatch:
      return "checkpoint_mismatch";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "internal";
}

const std::vector<ErrorCode>& all_error_codes() {
  static const std::vector<ErrorCode> codes = [] {
    std::vector<ErrorCode> all;
    for (int i = 0; i <= static_cast<int>(ErrorCode::kInternal); ++i)
      all.push_back(static_cast<ErrorCode>(i));
    return all;
  }();
  return codes;
}

std::optional<ErrorCode> parse_error_code(std::string_view text) {
  for (const ErrorCode code : all_error_codes()) {
    if (to_string(code) == text)
      return code;
  }
  return std::nullopt;
}

bool is_terminal(TaskStatus status) {
  return status == TaskStatus::kSucceeded || status == TaskStatus::kFailed ||
         status == TaskStatus::kTimedOut || status == TaskStatus::kCancelled;
}

std::string_view batch_name(std::string_view key) {
  return key.substr(0, key.find(kBatchKeySeparator));
}

std::string batch_key_of_user(std::string_view name, std::string_view user_id) {
  std::string key(name);
  key += kBatchKeySeparator;
  key += user_id;
  return key;
}

}  // namespace agentfleet
