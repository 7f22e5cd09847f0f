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

bool is_terminal(TaskStatus status) {
  return status == TaskStatus::kSucceeded || status == TaskStatus::kFailed ||
         status == TaskStatus::kTimedOut || status == TaskStatus::kCancelled;
}

}  // namespace agentfleet
