#include "tools/llm_sim/streaming.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <vector>

#include "core/codec/json_text.hpp"

namespace agentfleet::llm_sim {

namespace {
using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

// Code points per text delta and per arguments fragment (the arguments' JSON cut anywhere,
// inside a key or a string: providers cut where their tokens end; a client only joins them).
constexpr std::size_t kTextPiece = 3;
constexpr std::size_t kArgumentsPiece = 7;

std::string_view string_of(const rapidjson::Value& object, const char* name) {
  if (!object.IsObject())
    return {};
  auto it = object.FindMember(name);
  if (it == object.MemberEnd() || !it->value.IsString())
    return {};
  return {it->value.GetString(), it->value.GetStringLength()};
}

// `text` in pieces of `n` code points.
std::vector<std::string_view> by_code_points(std::string_view text, std::size_t n) {
  std::vector<std::string_view> pieces;
  std::size_t start = 0, count = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) == 0x80)
      continue;
    if (count == n) {
      pieces.push_back(text.substr(start, i - start));
      start = i;
      count = 0;
    }
    ++count;
  }
  if (start < text.size())
    pieces.push_back(text.substr(start));
  return pieces;
}

void event(std::string& out, const std::string& json) {
  out += "data: ";
  out += json;
  out += "\n\n";
}

// One chunk: {"object":"chat.completion.chunk","model":…,"choices":[{"index":0,"delta":{…},
// "finish_reason":…}]} with the delta written by `delta`.
template <typename Delta>
std::string chunk(std::string_view model, Delta&& delta, std::string_view finish = {}) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("object");
  w.String("chat.completion.chunk");
  w.Key("model");
  w.String(model.data(), static_cast<rapidjson::SizeType>(model.size()));
  w.Key("choices");
  w.StartArray();
  w.StartObject();
  w.Key("index");
  w.Int(0);
  w.Key("delta");
  w.StartObject();
  delta(w);
  w.EndObject();
  w.Key("finish_reason");
  if (finish.empty())
    w.Null();
  else
    w.String(finish.data(), static_cast<rapidjson::SizeType>(finish.size()));
  w.EndObject();
  w.EndArray();
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

void key_string(Writer& w, const char* key, std::string_view value) {
  w.Key(key);
  w.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
}
}  // namespace

StreamRequest stream_request(std::string_view request_body) {
  StreamRequest out;
  rapidjson::Document doc;
  if (!codec::parse_json(doc, request_body) || !doc.IsObject())
    return out;
  auto stream = doc.FindMember("stream");
  out.stream = stream != doc.MemberEnd() && stream->value.IsBool() && stream->value.GetBool();
  auto options = doc.FindMember("stream_options");
  if (options != doc.MemberEnd() && options->value.IsObject()) {
    auto usage = options->value.FindMember("include_usage");
    out.include_usage =
        usage != options->value.MemberEnd() && usage->value.IsBool() && usage->value.GetBool();
  }
  return out;
}

std::optional<std::string> stream_events(std::string_view completion_body, bool include_usage) {
  rapidjson::Document doc;
  if (!codec::parse_json(doc, completion_body) || !doc.IsObject() || !doc.HasMember("choices") ||
      !doc["choices"].IsArray() || doc["choices"].Empty())
    return std::nullopt;
  const std::string model(string_of(doc, "model"));
  const rapidjson::Value& choice = doc["choices"][0];
  const rapidjson::Value* message =
      choice.IsObject() && choice.HasMember("message") ? &choice["message"] : nullptr;
  if (message == nullptr || !message->IsObject())
    return std::nullopt;

  std::string out;
  event(out, chunk(model, [](Writer& w) {
          key_string(w, "role", "assistant");
          key_string(w, "content", "");
        }));
  for (std::string_view piece :
       by_code_points(string_of(*message, "reasoning_content"), kTextPiece))
    event(out, chunk(model, [&](Writer& w) { key_string(w, "reasoning_content", piece); }));
  for (std::string_view piece : by_code_points(string_of(*message, "content"), kTextPiece))
    event(out, chunk(model, [&](Writer& w) { key_string(w, "content", piece); }));

  // Each call opened, then the fragments of every call's arguments in turn: index 0's first,
  // index 1's first, index 0's second, …
  struct Call {
    int index;
    std::string_view id, name, arguments;
  };
  std::vector<Call> calls;
  if (auto tool_calls = message->FindMember("tool_calls");
      tool_calls != message->MemberEnd() && tool_calls->value.IsArray()) {
    for (const auto& c : tool_calls->value.GetArray()) {
      const rapidjson::Value& function =
          c.IsObject() && c.HasMember("function") ? c["function"] : c;
      calls.push_back(Call{static_cast<int>(calls.size()), string_of(c, "id"),
                           string_of(function, "name"), string_of(function, "arguments")});
    }
  }
  for (const Call& c : calls) {
    event(out, chunk(model, [&](Writer& w) {
            w.Key("tool_calls");
            w.StartArray();
            w.StartObject();
            w.Key("index");
            w.Int(c.index);
            key_string(w, "id", c.id);
            key_string(w, "type", "function");
            w.Key("function");
            w.StartObject();
            key_string(w, "name", c.name);
            key_string(w, "arguments", "");
            w.EndObject();
            w.EndObject();
            w.EndArray();
          }));
  }
  std::vector<std::vector<std::string_view>> fragments;
  for (const Call& c : calls)
    fragments.push_back(by_code_points(c.arguments, kArgumentsPiece));
  for (std::size_t round = 0;; ++round) {
    bool any = false;
    for (const Call& c : calls) {
      const auto& mine = fragments[static_cast<std::size_t>(c.index)];
      if (round >= mine.size())
        continue;
      any = true;
      const std::string_view fragment = mine[round];
      event(out, chunk(model, [&](Writer& w) {
              w.Key("tool_calls");
              w.StartArray();
              w.StartObject();
              w.Key("index");
              w.Int(c.index);
              w.Key("function");
              w.StartObject();
              key_string(w, "arguments", fragment);
              w.EndObject();
              w.EndObject();
              w.EndArray();
            }));
    }
    if (!any)
      break;
  }
  event(out, chunk(
                 model, [](Writer&) {}, string_of(choice, "finish_reason")));
  if (include_usage && doc.HasMember("usage") && doc["usage"].IsObject()) {
    rapidjson::StringBuffer buffer;
    Writer w(buffer);
    w.StartObject();
    w.Key("object");
    w.String("chat.completion.chunk");
    w.Key("choices");
    w.StartArray();
    w.EndArray();
    w.Key("usage");
    doc["usage"].Accept(w);
    w.EndObject();
    event(out, std::string(buffer.GetString(), buffer.GetSize()));
  }
  out += "data: [DONE]\n\n";
  return out;
}

}  // namespace agentfleet::llm_sim
