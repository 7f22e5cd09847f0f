#pragma once
// The ReAct loop as a pure state machine: no I/O, no clock. The runner (worker/) asks
// `start` for the first step, performs what each step says (call the model, run tools),
// and feeds the outcome back through `on_model_reply` / `on_tool_results` until a
// Finish or Fail step. Because it only sees values, a whole run can be replayed from
// canned model replies in a unit test, and a resumed task can be rebuilt by feeding the
// checkpointed replies and observations again.
//
// Deadlines and cancellation are the runner's business: it simply stops asking.
// Thread-compatible: one ReactState per task, used by one strand at a time.

#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/domain/conversation.hpp"
#include "core/domain/error.hpp"

namespace agentfleet::react {

struct Limits {
  int max_steps = 10;  // model calls per task
  // Tool results longer than this are truncated in the conversation; <= 0: never.
  int tool_result_context_chars = 4000;
  // A function-calling answer in plain text (neither a tool call nor `finish`) is answered
  // with a correction and the model asked again, at most this many times in a task; after
  // that the text is classified by the markers.
  int max_corrections = 2;
};

// How a plain-text final answer (no `finish` call) is classified.
struct ResultMarkers {
  std::vector<std::string> action_completed = {"✅"};
  std::vector<std::string> need_clarification = {"⚠️"};
  std::vector<std::string> error = {"❌"};
  ResultType fallback = ResultType::kActionCompleted;
};

struct ReactState {
  std::vector<Message> messages;  // the conversation sent to the model
  int model_calls = 0;
  int tool_calls = 0;
  int tools_ok = 0;     // tool calls that ran and succeeded: what performed an action
  int corrections = 0;  // plain-text answers answered with a correction
  TokenUsage usage;
};

// Steps the runner performs.
struct CallModel {};
struct CallTools {
  std::vector<ToolCall> calls;           // to execute, in order
  std::vector<int> call_indices;         // each call's position among the reply's tool calls
  std::vector<ToolObservation> refused;  // answered without a call (not allowed, ...)
  // A checkpoint of its own (plan_execute's tool steps) rather than the results of the
  // model call before it (ReAct, and a plan step whose arguments the executor filled in).
  bool own_checkpoint = false;
};
struct Finish {
  TaskResult result;
};
// kUnperformedAction: the model's last word reported an action completed that no tool of
// the task performed (a false success is never reported).
enum class FailReason {
  kMaxSteps,
  kTruncated,
  kContentFilter,
  kEmptyReply,
  kNoPlan,
  kUnperformedAction
};
struct Fail {
  FailReason reason;
  std::string message;
};
using Step = std::variant<CallModel, CallTools, Finish, Fail>;

std::string_view to_string(FailReason reason);
// The task error code a failure ends the task with (each reason has its own).
ErrorCode error_code_of(FailReason reason);

class ReactLoop {
 public:
  // `allowed_tools`: the tools this task may call (its allow-list intersected with the
  // registry and the user's permission). Anything else the model asks for is refused and
  // the refusal is fed back to it.
  ReactLoop(Limits limits, ResultMarkers markers, std::set<std::string> allowed_tools);

  ReactState start(std::string system_prompt, std::string user_text) const;
  // A follow-up: the conversation starts with `history` (an earlier task's messages, each
  // tool call answered) between the system prompt and the user's text.
  ReactState start(std::string system_prompt, std::vector<Message> history,
                   std::string user_text) const;
  // A reply whose `unreadable` is set (react_json text that could not be read) is not a
  // finish: the assistant message gets one synthetic call ("unreadable-<model call>")
  // answered with that problem (tool error code "unreadable_reply"), so the model reads it
  // and may answer again; it consumes a step like any other reply.
  // A reply with `final_text` and no tool call finishes with that text classified.
  // A reply in plain text (function calling: neither a tool call nor `finish`) is not
  // guessed into a result: a user message (kCorrection) asks for a call or `finish`, and
  // the model is called again, at most Limits::max_corrections times while steps remain;
  // then the text is classified by the markers.
  // No action is reported that no tool performed: a `finish` of action_completed before
  // any tool call succeeded is refused (tool error code "invalid_finish", the model reads
  // why), and a text classified action_completed then fails kUnperformedAction.
  Step on_model_reply(ReactState& state, const ModelReply& reply) const;
  // Results longer than Limits::tool_result_context_chars are kept truncated
  // (truncate_for_context); the observations given here are not changed, so the runner
  // checkpoints them whole and a replay truncates them the same way.
  Step on_tool_results(ReactState& state, const CallTools& step,
                       std::vector<ToolObservation> results) const;

  // Classifies a plain-text answer by the configured markers.
  TaskResult classify_text(const std::string& text) const;

 private:
  // The text classified; a Fail when it claims an action no tool performed.
  Step finish_text(const ReactState& state, const std::string& text) const;

  Limits limits_;
  ResultMarkers markers_;
  std::set<std::string> allowed_tools_;
};

// What a plain-text answer is answered with (a user message).
inline constexpr std::string_view kCorrection =
    "Your answer called no tool and did not call finish, so nothing was done and no result "
    "was declared. Call the tool that does what was asked; once it is done, or if it cannot "
    "be done, call finish with type action_completed, need_clarification or error and a "
    "message.";

// The JSON a refused or failed tool call shows the model: {"error":{"code","message"}}.
std::string tool_error_json(std::string_view code, std::string_view message);

}  // namespace agentfleet::react
