#pragma once
// OpenAI-compatible chat completions: the request the worker sends and a tolerant parser
// for what real providers answer (tool-call arguments as a JSON string, an object or
// nothing; missing or repeated call ids; content beside tool_calls; content as an array
// of parts; reasoning_content; cached and reasoning token details, DeepSeek's cache
// hit counts; the legacy function_call field). Pure functions.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/domain/conversation.hpp"
#include "core/domain/error.hpp"
#include "core/ports/model_client.hpp"

namespace agentfleet::codec {

// How tools reach the model: native function calling, or react_json (the tools described
// in the system prompt and the model answering with JSON text; see react_json_codec.hpp).
enum class ChatProtocol { kFunctionCalling, kReactJson };

// "react_json" -> kReactJson; anything else (the configured default "function_calling")
// -> kFunctionCalling.
ChatProtocol chat_protocol(std::string_view name);

struct ChatRequestOptions {
  std::string provider_model;
  int max_tokens = 1024;
  double temperature = 0.0;
  ChatProtocol protocol = ChatProtocol::kFunctionCalling;
  // kFunctionCalling: which assistant messages carry `reasoning_content` (their reasoning,
  // "" when they had none).
  ReasoningEcho reasoning_echo = ReasoningEcho::kNone;
  // Ask for the answer as a stream of chunks (`"stream": true`, with the usage in a final
  // chunk: `stream_options.include_usage`); read it with ChatStreamAssembler.
  bool stream = false;
};

// kFunctionCalling: messages as OpenAI expects them, `tools` with tool_choice auto.
// kReactJson: no `tools`; the first system message gets react_json_addendum(tools)
// appended (a system message holding only the addendum is put first when there is none);
// assistant messages are sent as their raw content only (a message that only has tool calls,
// which react_json replies never are, is written as the JSON the protocol asks for); each
// tool message becomes {"role":"user","content":"Observation: <content>"}.
std::string build_chat_request(const ChatRequestOptions& options,
                               const std::vector<Message>& messages,
                               const std::vector<ports::ToolSchema>& tools);

// The `tools` array of a kFunctionCalling request ("[]" for none), as build_chat_request
// writes it; for a caller that keeps it with the tool set (ports::ModelRequest::tools_json).
std::string encode_tools(const std::vector<ports::ToolSchema>& tools);

// build_chat_request of kFunctionCalling from parts already encoded: `messages_json` the
// `messages` array (ConversationEncoder::json), `tools_json` the `tools` array
// (encode_tools; "[]" or empty when none is offered). The same bytes as build_chat_request
// given the messages and tools those parts encode.
std::string assemble_chat_request(const ChatRequestOptions& options, std::string_view messages_json,
                                  std::string_view tools_json);

// One conversation's `messages` array for kFunctionCalling, kept across its model calls:
// each message is encoded, and its tokens estimated (react::estimate_tokens), once; a call
// encodes only what was appended since the call before. `conversation` names a message
// list that only ever grows by appending (react::NextCall::conversation); another number,
// or 0 (a list rebuilt for each call), or another `echo`, starts over. Not thread-safe; one
// per run.
class ConversationEncoder {
 public:
  // Brings the encoding up to `messages`, assistants' reasoning written as `echo` says.
  void sync(std::uint64_t conversation, const std::vector<Message>& messages,
            ReasoningEcho echo = ReasoningEcho::kNone);
  ReasoningEcho echo() const { return echo_; }
  // The messages array, "[...]", of the messages last synced.
  const std::string& json() const { return json_; }
  // react::estimate_tokens of the messages last synced.
  std::int64_t estimated_tokens() const { return tokens_; }
  // Messages encoded once, not again, since construction (for tests and metrics).
  std::uint64_t reused() const { return reused_; }

 private:
  std::uint64_t conversation_ = 0;
  ReasoningEcho echo_ = ReasoningEcho::kNone;
  std::size_t encoded_ = 0;  // messages in json_
  std::string json_ = "[]";
  std::int64_t tokens_ = 0;
  std::uint64_t reused_ = 0;
};

// Estimated tokens the tools take in a request of this protocol (the `tools` array, or the
// react_json addendum), by react::estimate_tokens; for react::context_budget.
std::int64_t estimate_tool_tokens(const std::vector<ports::ToolSchema>& tools,
                                  ChatProtocol protocol);

// kInvalid when the body is not a chat completion at all.
Result<ModelReply> parse_chat_response(std::string_view body);
// The usage a body reports (a chat completion's `usage`), nullopt when it reports none or
// is not JSON: for a 2xx answer that is not a chat completion but may still say what it cost.
std::optional<TokenUsage> parse_usage(std::string_view body);

// Parses the arguments of a `finish` call: {"type", "message", "options"}.
FinishCall parse_finish_arguments(std::string_view arguments_json);

// The JSON Schema of the `finish` function the model declares its result with.
const ports::ToolSchema& finish_tool_schema();

}  // namespace agentfleet::codec
