#pragma once
// OpenAI-compatible chat completions: the request the worker sends and a tolerant parser
// for what real providers answer (tool-call arguments as a JSON string, an object or
// nothing; missing or repeated call ids; content beside tool_calls; content as an array
// of parts; reasoning_content; cached and reasoning token details, DeepSeek's cache
// hit counts; the legacy function_call field). Pure functions.

#include <string>
#include <string_view>
#include <vector>

#include "core/domain/conversation.hpp"
#include "core/domain/error.hpp"
#include "core/ports/model_client.hpp"

namespace agentfleet::codec {

struct ChatRequestOptions {
  std::string provider_model;
  int max_tokens = 1024;
  double temperature = 0.0;
};

std::string build_chat_request(const ChatRequestOptions& options,
                               const std::vector<Message>& messages,
                               const std::vector<ports::ToolSchema>& tools);

// kInvalid when the body is not a chat completion at all.
Result<ModelReply> parse_chat_response(std::string_view body);

// Parses the arguments of a `finish` call: {"type", "message", "options"}.
FinishCall parse_finish_arguments(std::string_view arguments_json);

// The JSON Schema of the `finish` function the model declares its result with.
const ports::ToolSchema& finish_tool_schema();

}  // namespace agentfleet::codec
