// react_json_fuzz: the text a react_json model answers with (see README.md), read by
// codec::read_react_json_reply. The first byte sets the step number (low 6 bits) and the
// finish_reason (high 2 bits: stop, length, content_filter, none); the rest is the reply's
// content as parse_chat_response hands it over (sanitized text). Checks what the loop relies
// on: at most one tool call, named `rj-<step>`, its arguments a JSON object; a finish only
// for a `finish` call; the raw content kept; everything sanitized; the same reply read twice
// gives the same result (it is checkpointed and replayed). Nothing here throws on input.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <rapidjson/document.h>

#include "core/codec/json_text.hpp"
#include "core/codec/react_json_codec.hpp"

namespace {

namespace codec = agentfleet::codec;
using agentfleet::ModelReply;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "react_json_fuzz: invariant broken: %s\n", what);
    std::abort();
  }
}

bool clean(const std::string& text) {
  return codec::sanitize_text(text) == text;
}

bool same(const ModelReply& a, const ModelReply& b) {
  if (a.content != b.content || a.reasoning != b.reasoning || a.final_text != b.final_text ||
      a.unreadable != b.unreadable || a.tool_calls.size() != b.tool_calls.size() ||
      a.finish.has_value() != b.finish.has_value())
    return false;
  for (std::size_t i = 0; i < a.tool_calls.size(); ++i) {
    if (a.tool_calls[i].id != b.tool_calls[i].id || a.tool_calls[i].name != b.tool_calls[i].name ||
        a.tool_calls[i].arguments != b.tool_calls[i].arguments)
      return false;
  }
  return !a.finish || (a.finish->problem == b.finish->problem &&
                       a.finish->result.message == b.finish->result.message &&
                       a.finish->result.options == b.finish->result.options);
}

constexpr const char* kFinishReasons[] = {"stop", "length", "content_filter", ""};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1)
    return 0;
  const int step = data[0] & 0x3f;
  ModelReply reply;
  reply.finish_reason = kFinishReasons[data[0] >> 6];
  reply.content =
      codec::sanitize_text(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  reply.usage.input = 100;
  reply.usage.output = 10;

  const ModelReply read = codec::read_react_json_reply(reply, step);
  require(read.content == reply.content, "the raw content was not kept");
  require(read.usage.input == 100 && read.usage.output == 10, "usage was not kept");
  require(read.tool_calls.size() <= 1, "more than one tool call");
  const bool cut_short = reply.finish_reason == "length" || reply.finish_reason == "content_filter";
  const int outcomes = static_cast<int>(read.tool_calls.size()) + (read.final_text ? 1 : 0) +
                       (read.unreadable.empty() ? 0 : 1);
  require(outcomes == 1 || (cut_short && outcomes == 0), "not exactly one outcome");
  if (!read.tool_calls.empty()) {
    const auto& call = read.tool_calls[0];
    require(call.id == "rj-" + std::to_string(step), "the call id is not rj-<step>");
    // Not checked: a name (or a final text) of only "\u0000" escapes is empty once sanitized;
    // the loop refuses a call to no tool like any unknown one.
    require(clean(call.name), "the tool name not sanitized");
    rapidjson::Document arguments;
    require(codec::parse_json(arguments, call.arguments) && arguments.IsObject(),
            "the arguments are not a JSON object");
    require(read.finish.has_value() == (call.name == "finish"), "finish without a finish call");
  } else {
    require(!read.finish, "a finish without a call");
  }
  if (read.final_text)
    require(clean(*read.final_text), "final_text not sanitized");
  if (read.finish) {
    require(read.finish->result.options.size() <= 5, "more than five finish options");
    require(clean(read.finish->result.message), "the finish message not sanitized");
  }
  require(clean(read.reasoning), "reasoning not sanitized");

  require(same(read, codec::read_react_json_reply(reply, step)), "not deterministic");
  return 0;
}
