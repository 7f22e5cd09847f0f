#pragma once
// Port: one model call. Adapters (adapters/http model client) implement it; tests fake it.

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/domain/conversation.hpp"
#include "core/domain/error.hpp"

namespace agentfleet::ports {

struct ToolSchema {
  std::string name;
  std::string description;
  std::string parameters;  // JSON Schema text
};

struct ModelRequest {
  std::string model;  // the configured model name
  const std::vector<Message>* messages = nullptr;
  const std::vector<ToolSchema>* tools = nullptr;
  // Optional, from a caller that keeps its conversation encoded (codec::ConversationEncoder,
  // codec::encode_tools): the `messages` and `tools` arrays as a function-calling request
  // writes them, the same bytes the client would write from `messages` and `tools`. Used for
  // function-calling models when `messages_json` is set; valid for the whole call.
  std::string_view messages_json;
  std::string_view tools_json;
  std::chrono::steady_clock::time_point deadline;  // of this call, already min(call, task)
  std::string traceparent;
  // How `messages_json` wrote the assistants' reasoning: a client whose model sends it back
  // otherwise encodes `messages` itself.
  ReasoningEcho messages_echo = ReasoningEcho::kNone;
  // Where the client adds each attempt of this call that the provider may have charged for
  // but whose answer is not the call's result (a timeout after the request was sent, a 2xx
  // that is not a chat completion); null: not reported. Valid for the whole call.
  std::vector<LostCharge>* lost = nullptr;
  // The call's output allowance when less than the model's max_output_tokens (what a task's
  // max_tokens leaves); 0: the model's.
  std::int64_t max_output_tokens = 0;
  // A model configured to stream hands each piece of the answer's text here as it arrives
  // (on the client's executor), before the call returns; optional. An attempt that fails
  // after some text is retried from the start: its text comes again.
  std::function<void(std::string_view text)> on_text;
  // Awaited before each try is sent, with the request's estimated input tokens (what an
  // answer lost on the way is billed at); optional. An error: the try is not sent and the
  // call fails with that error (the caller could not record the call, or may no longer make
  // it).
  std::function<boost::asio::awaitable<Status>(std::int64_t input_tokens)> before_send;
  // Names the call to the provider (optional): each try is sent with the header
  // X-Client-Request-Id: <call_id>:<try> (tries from 1), which providers keep with their
  // own record of the request (OpenAI's support looks requests up by it) and llm-sim counts
  // the calls it was charged for by. The worker's is <task id>:<attempt>:<step>.
  std::string call_id;
};

class ModelClient {
 public:
  virtual ~ModelClient() = default;
  virtual boost::asio::awaitable<Result<ModelReply>> complete(ModelRequest request) = 0;
};

}  // namespace agentfleet::ports
