#include "core/codec/checkpoint_codec.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "core/codec/json_text.hpp"
#include "core/codec/openai_codec.hpp"

namespace agentfleet::codec {

namespace {
using Writer = rapidjson::Writer<rapidjson::StringBuffer>;
void put(Writer& w, const char* key, std::string_view value) {
  w.Key(key);
  w.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
}

void put_tool_calls(Writer& w, const std::vector<ToolCall>& calls) {
  w.Key("tool_calls");
  w.StartArray();
  for (const ToolCall& call : calls) {
    w.StartObject();
    put(w, "id", call.id);
    put(w, "name", call.name);
    put(w, "arguments", call.arguments);
    w.EndObject();
  }
  w.EndArray();
}
std::string str(const rapidjson::Value& o, const char* key) {
  auto it = o.FindMember(key);
  return it != o.MemberEnd() && it->value.IsString()
             ? std::string(it->value.GetString(), it->value.GetStringLength())
             : std::string();
}
std::int64_t num(const rapidjson::Value& o, const char* key) {
  auto it = o.FindMember(key);
  return it != o.MemberEnd() && it->value.IsInt64() ? it->value.GetInt64() : 0;
}
}  // namespace

std::string model_reply_json(const ModelReply& reply, std::string_view role) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  if (!role.empty())
    put(w, "role", role);
  put(w, "content", reply.content);
  put(w, "reasoning", reply.reasoning);
  put(w, "finish_reason", reply.finish_reason);
  put(w, "provider_model", reply.provider_model);
  // Only react_json replies have these; absent otherwise, so older checkpoints read the same.
  if (reply.final_text)
    put(w, "final_text", *reply.final_text);
  if (!reply.unreadable.empty())
    put(w, "unreadable", reply.unreadable);
  put_tool_calls(w, reply.tool_calls);
  w.Key("usage");
  w.StartObject();
  w.Key("input_tokens");
  w.Int64(reply.usage.input);
  w.Key("cached_input_tokens");
  w.Int64(reply.usage.cached_input);
  w.Key("output_tokens");
  w.Int64(reply.usage.output);
  w.Key("reasoning_tokens");
  w.Int64(reply.usage.reasoning);
  w.EndObject();
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::string tool_step_checkpoint_json(const std::vector<ToolCall>& calls) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  put(w, "kind", "tool_step");
  put_tool_calls(w, calls);
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

bool is_tool_step_checkpoint(std::string_view json) {
  return checkpoint_role(json) == "tool_step";
}

std::string checkpoint_role(std::string_view json) {
  rapidjson::Document doc;
  if (!parse_json(doc, json) || !doc.IsObject())
    return {};
  if (str(doc, "kind") == "tool_step")
    return "tool_step";
  return str(doc, "role");
}

Result<ModelReply> parse_model_reply_json(std::string_view json) {
  rapidjson::Document doc;
  if (!parse_json(doc, json) || !doc.IsObject()) {
    return Error{ErrorKind::kInvalid, "checkpointed model reply is not a JSON object"};
  }
  ModelReply reply;
  reply.content = str(doc, "content");
  reply.reasoning = str(doc, "reasoning");
  reply.finish_reason = str(doc, "finish_reason");
  reply.provider_model = str(doc, "provider_model");
  if (auto final_text = doc.FindMember("final_text");
      final_text != doc.MemberEnd() && final_text->value.IsString()) {
    reply.final_text =
        std::string(final_text->value.GetString(), final_text->value.GetStringLength());
  }
  reply.unreadable = str(doc, "unreadable");
  if (auto calls = doc.FindMember("tool_calls");
      calls != doc.MemberEnd() && calls->value.IsArray()) {
    for (const auto& c : calls->value.GetArray()) {
      if (!c.IsObject())
        return Error{ErrorKind::kInvalid, "checkpointed tool call is not a JSON object"};
      reply.tool_calls.push_back(ToolCall{str(c, "id"), str(c, "name"), str(c, "arguments")});
      if (reply.tool_calls.back().name == kFinishTool && !reply.finish) {
        reply.finish = parse_finish_arguments(reply.tool_calls.back().arguments);
      }
    }
  }
  if (auto usage = doc.FindMember("usage"); usage != doc.MemberEnd() && usage->value.IsObject()) {
    reply.usage.input = num(usage->value, "input_tokens");
    reply.usage.cached_input = num(usage->value, "cached_input_tokens");
    reply.usage.output = num(usage->value, "output_tokens");
    reply.usage.reasoning = num(usage->value, "reasoning_tokens");
  }
  return reply;
}

std::string observations_json(const std::vector<ToolObservation>& observations) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartArray();
  for (const auto& o : observations) {
    w.StartObject();
    put(w, "call_id", o.call_id);
    put(w, "tool", o.tool);
    w.Key("ok");
    w.Bool(o.ok);
    put(w, "content", o.content);
    w.EndObject();
  }
  w.EndArray();
  return std::string(buffer.GetString(), buffer.GetSize());
}

Result<std::vector<ToolObservation>> parse_observations_json(std::string_view json) {
  rapidjson::Document doc;
  if (!parse_json(doc, json) || !doc.IsArray()) {
    return Error{ErrorKind::kInvalid, "checkpointed observations are not a JSON array"};
  }
  std::vector<ToolObservation> out;
  for (const auto& o : doc.GetArray()) {
    if (!o.IsObject())
      return Error{ErrorKind::kInvalid, "checkpointed observation is not a JSON object"};
    auto ok = o.FindMember("ok");
    out.push_back(ToolObservation{str(o, "call_id"), str(o, "tool"),
                                  ok != o.MemberEnd() && ok->value.IsBool() && ok->value.GetBool(),
                                  str(o, "content")});
  }
  return out;
}

}  // namespace agentfleet::codec
