#pragma once
// The messages of a ReAct conversation and what one model call returned, in the
// provider-neutral form the loop works on; codec/ maps them to and from provider JSON.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/domain/task.hpp"

namespace agentfleet {

inline constexpr std::string_view kFinishTool = "finish";

enum class Role { kSystem, kUser, kAssistant, kTool };
std::string_view to_string(Role role);

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of an object ("{}" when the provider sent nothing)
};

struct Message {
  Role role = Role::kUser;
  std::string content;
  std::vector<ToolCall> tool_calls;  // assistant messages only
  std::string tool_call_id;          // tool messages only
  std::string name;                  // tool messages: the tool's name
  // Assistant messages: the turn's reasoning (reasoning_content), sent back as the model's
  // configuration says (ReasoningEcho).
  std::string reasoning;
};

// Which assistant turns carry their reasoning back to the provider (`reasoning_content`):
// none; those with tool calls (DeepSeek's thinking mode answers 400 without it there, even
// when it is empty); every one.
enum class ReasoningEcho { kNone, kToolTurns, kAll };
std::optional<ReasoningEcho> parse_reasoning_echo(std::string_view name);
std::string_view to_string(ReasoningEcho echo);

// The arguments of a `finish` call, already parsed by the codec. `problem` is set when
// they were not a valid declaration; the loop then tells the model what was wrong.
struct FinishCall {
  TaskResult result;
  std::string problem;
};

struct ModelReply {
  std::string content;
  std::string reasoning;  // reasoning_content and the like; traced, sent back per ReasoningEcho
  std::vector<ToolCall> tool_calls;
  std::optional<FinishCall> finish;  // present when one of the tool calls was `finish`
  std::string finish_reason;         // "stop", "tool_calls", "length", "content_filter", ...
  TokenUsage usage;
  // The provider sent no usage: `usage` is a local estimate (react::estimate_tokens of the
  // request and the answer), billed and flagged as such.
  bool usage_estimated = false;
  std::string provider_model;  // the model the provider says answered

  // Set only by protocols that carry the answer inside the text (react_json, see
  // codec/react_json_codec.hpp); `content` then stays the raw text, sent back verbatim.
  // A plain-text final answer given inside the protocol's envelope, classified by the
  // result markers like a plain-text reply.
  std::optional<std::string> final_text;
  // Why the text could not be read. The reply then carries one synthetic tool call that
  // the loop answers with this problem, so the model reads it and may try again.
  std::string unreadable;
};

// The outcome of one tool call as the model will read it.
struct ToolObservation {
  std::string call_id;
  std::string tool;
  bool ok = false;
  std::string content;  // the tool's JSON result, or {"error": {...}} when !ok
};

}  // namespace agentfleet
