// model_response_fuzz: what a model provider answers, read by the worker (see README.md).
// The first byte picks the reader, the rest is the body:
//   0  codec::parse_chat_response, an OpenAI-compatible chat completion in any of the
//      provider variants it tolerates (arguments as a string, an object or nothing, missing
//      or repeated ids, content beside tool_calls, content as parts, reasoning_content,
//      cached / reasoning / DeepSeek cache-hit token counts, the legacy function_call);
//      an accepted reply then goes back into codec::build_chat_request in both protocols
//      (the next request of the conversation carries it), which must write a JSON object
//   1  parse_chat_response, then codec::read_react_json_reply (a react_json model), the step
//      number taken from the second byte
//   2  codec::parse_provider_error, the error body of a refused call; the status comes from
//      the second byte (a table of the statuses providers use, or 400 + the byte)
//   3  codec::parse_finish_arguments, the arguments of a `finish` call
//   4  codec::read_text_tool_calls on the raw body, and codec::with_text_tool_calls on a
//      reply without native calls whose content is the body (sanitized, as a reply's is): the
//      calls an open model wrote as text, in every format (odd second byte) or the default
//      ones (even); a reply read so must be as clean as one the provider sent
// None of these throws on input: any exception, crash, leak or UB is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <rapidjson/document.h>

#include "core/codec/json_text.hpp"
#include "core/codec/openai_codec.hpp"
#include "core/codec/provider_error.hpp"
#include "core/codec/react_json_codec.hpp"
#include "core/codec/text_tool_calls.hpp"

namespace {

namespace codec = agentfleet::codec;
using agentfleet::Message;
using agentfleet::ModelReply;
using agentfleet::Role;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "model_response_fuzz: invariant broken: %s\n", what);
    std::abort();
  }
}

// Storable anywhere: valid UTF-8, no NUL (what sanitize_text makes of text).
bool clean(const std::string& text) {
  return codec::sanitize_text(text) == text;
}

void check_reply(const ModelReply& reply) {
  require(clean(reply.content) && clean(reply.reasoning), "content or reasoning not sanitized");
  std::set<std::string> ids;
  for (const auto& call : reply.tool_calls) {
    require(!call.id.empty(), "a tool call without an id");
    require(ids.insert(call.id).second, "two tool calls with the same id");
    require(clean(call.name) && clean(call.arguments), "a tool call not sanitized");
  }
  if (reply.finish) {
    require(reply.finish->result.options.size() <= 5, "more than five finish options");
    for (const auto& option : reply.finish->result.options)
      require(clean(option), "a finish option not sanitized");
    require(clean(reply.finish->result.message), "the finish message not sanitized");
  }
  require(reply.usage.input >= 0 && reply.usage.output >= 0 && reply.usage.cached_input >= 0 &&
              reply.usage.reasoning >= 0,
          "a negative token count");
  require(reply.usage.cached_input <= reply.usage.input, "more cached than input tokens");
}

bool is_json_object(const std::string& text) {
  rapidjson::Document doc;
  return codec::parse_json(doc, text) && doc.IsObject();
}

// The conversation after this reply, as the worker sends it next: the reply as the assistant
// turn and one observation per call.
void send_back(const ModelReply& reply) {
  static const std::vector<agentfleet::ports::ToolSchema> kTools = {
      {"search_items", "Finds items.",
       R"({"type":"object","properties":{"keyword":{"type":"string"}}})"},
      codec::finish_tool_schema()};
  std::vector<Message> messages;
  messages.push_back(Message{Role::kSystem, "You are a helpful assistant.", {}, {}, {}});
  messages.push_back(Message{Role::kUser, "把周会改到8点", {}, {}, {}});
  messages.push_back(Message{Role::kAssistant, reply.content, reply.tool_calls, {}, {}});
  for (const auto& call : reply.tool_calls) {
    messages.push_back(Message{Role::kTool, R"({"ok":true})", {}, call.id, call.name});
  }
  for (const auto protocol :
       {codec::ChatProtocol::kFunctionCalling, codec::ChatProtocol::kReactJson}) {
    codec::ChatRequestOptions options;
    options.provider_model = "provider-model";
    options.protocol = protocol;
    require(is_json_object(codec::build_chat_request(options, messages, kTools)),
            "build_chat_request wrote something that is not a JSON object");
  }
}

constexpr int kStatuses[] = {400, 401, 402, 403, 404, 408, 409, 413, 422, 429, 500, 502, 503, 504};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2)
    return 0;
  const unsigned mode = data[0] % 5;
  const unsigned arg = data[1];
  const std::string_view body(reinterpret_cast<const char*>(data) + 2, size - 2);
  switch (mode) {
    case 0: {
      auto reply = codec::parse_chat_response(body);
      if (reply.ok()) {
        check_reply(reply.value());
        send_back(reply.value());
      } else {
        require(reply.error().kind == agentfleet::ErrorKind::kInvalid, "not kInvalid");
      }
      break;
    }
    case 1: {
      auto reply = codec::parse_chat_response(body);
      if (reply.ok()) {
        const int step = static_cast<int>(arg % 60);
        ModelReply read = codec::read_react_json_reply(reply.value(), step);
        check_reply(read);
        if (read.tool_calls.size() == 1 && reply.value().tool_calls.empty())
          require(read.tool_calls[0].id == "rj-" + std::to_string(step), "react_json call id");
      }
      break;
    }
    case 2: {
      constexpr std::size_t kCount = sizeof(kStatuses) / sizeof(kStatuses[0]);
      const int status = arg < kCount ? kStatuses[arg] : 400 + static_cast<int>(arg);
      const codec::ProviderError error = codec::parse_provider_error(status, body);
      require(clean(error.message) && clean(error.type) && clean(error.code),
              "a provider error not sanitized");
      require(error.message.size() <= 300 * 3 + 3 && error.type.size() <= 300 * 3 + 3 &&
                  error.code.size() <= 300 * 3 + 3,
              "a provider error longer than its excerpt");
      require(status != 402 || error.quota_exhausted, "402 is always out of money");
      require(!(status < 400 || status >= 500) || status == 402 || !error.quota_exhausted,
              "out of money outside 4xx");
      break;
    }
    case 3: {
      const agentfleet::FinishCall finish = codec::parse_finish_arguments(body);
      if (finish.problem.empty())
        require(finish.result.options.size() <= 5, "more than five finish options");
      break;
    }
    case 4: {
      const std::set<codec::TextCallFormat> formats =
          arg % 2 ? codec::all_text_call_formats() : codec::default_text_call_formats();
      if (auto calls = codec::read_text_tool_calls(body, formats)) {
        std::set<std::string> ids;
        for (const auto& call : calls->calls)
          require(!call.id.empty() && ids.insert(call.id).second, "a text call id missing or twice");
      }
      ModelReply reply;
      reply.content = codec::sanitize_text(body);
      const ModelReply read = codec::with_text_tool_calls(reply, formats);
      check_reply(read);
      send_back(read);
      break;
    }
  }
  return 0;
}
