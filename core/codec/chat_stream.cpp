#include "core/codec/chat_stream.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "core/codec/json_text.hpp"

namespace agentfleet::codec {

namespace {
std::string_view string_of(const rapidjson::Value& object, const char* name) {
  if (!object.IsObject())
    return {};
  auto it = object.FindMember(name);
  if (it == object.MemberEnd() || !it->value.IsString())
    return {};
  return {it->value.GetString(), it->value.GetStringLength()};
}

void write(rapidjson::Writer<rapidjson::StringBuffer>& w, std::string_view text) {
  w.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
}
}  // namespace

bool ChatStreamAssembler::feed(std::string_view bytes) {
  if (!error_.empty())
    return false;
  pending_.append(bytes.data(), bytes.size());
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = pending_.find('\n', start);
    if (end == std::string::npos)
      break;
    std::string_view line(pending_.data() + start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    if (line.empty()) {  // the event ends
      if (has_data_ && !event(data_))
        return false;
      data_.clear();
      has_data_ = false;
      continue;
    }
    if (line.front() == ':')
      continue;  // a comment: keep-alive
    const std::size_t colon = line.find(':');
    const std::string_view field = line.substr(0, colon);
    std::string_view value =
        colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ')
      value.remove_prefix(1);
    if (field == "data") {
      if (has_data_)
        data_ += '\n';
      data_.append(value.data(), value.size());
      has_data_ = true;
    }
    // `event`, `id` and `retry` say nothing a chat completion needs.
  }
  pending_.erase(0, start);
  return true;
}

bool ChatStreamAssembler::event(std::string_view data) {
  if (data == "[DONE]") {
    done_ = true;
    return true;
  }
  rapidjson::Document chunk;
  if (!parse_json(chunk, data) || !chunk.IsObject()) {
    error_ = "a stream event that is not JSON: " + std::string(data.substr(0, 200));
    return false;
  }
  if (auto err = chunk.FindMember("error"); err != chunk.MemberEnd()) {
    const std::string_view message = string_of(err->value, "message");
    error_ = "the stream ended with an error: " +
             (message.empty() ? std::string(data.substr(0, 200)) : std::string(message));
    return false;
  }
  if (model_.empty())
    model_ = std::string(string_of(chunk, "model"));
  if (auto usage = chunk.FindMember("usage");
      usage != chunk.MemberEnd() && usage->value.IsObject()) {
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
    usage->value.Accept(w);
    usage_json_.assign(buffer.GetString(), buffer.GetSize());
  }
  auto choices = chunk.FindMember("choices");
  if (choices == chunk.MemberEnd() || !choices->value.IsArray())
    return true;
  for (const auto& choice : choices->value.GetArray()) {
    if (!choice.IsObject())
      continue;
    if (auto index = choice.FindMember("index");
        index != choice.MemberEnd() && index->value.IsInt() && index->value.GetInt() != 0)
      continue;  // one answer is asked for (n = 1)
    if (const std::string_view reason = string_of(choice, "finish_reason"); !reason.empty())
      finish_reason_ = std::string(reason);
    auto delta = choice.FindMember("delta");
    if (delta == choice.MemberEnd() || !delta->value.IsObject())
      continue;
    const rapidjson::Value& d = delta->value;
    if (auto content = d.FindMember("content");
        content != d.MemberEnd() && content->value.IsString()) {
      const std::string_view text(content->value.GetString(), content->value.GetStringLength());
      has_content_ = true;
      content_.append(text.data(), text.size());
      if (!text.empty() && on_text)
        on_text(text);
    }
    const std::string_view reasoning = string_of(d, "reasoning_content");
    reasoning_.append(reasoning.data(), reasoning.size());
    auto tool_calls = d.FindMember("tool_calls");
    if (tool_calls == d.MemberEnd() || !tool_calls->value.IsArray())
      continue;
    int position = 0;
    for (const auto& fragment : tool_calls->value.GetArray()) {
      const int index =
          fragment.IsObject() && fragment.HasMember("index") && fragment["index"].IsInt()
              ? fragment["index"].GetInt()
              : position;
      ++position;
      Call& call = calls_[index];
      if (const std::string_view id = string_of(fragment, "id"); !id.empty() && call.id.empty())
        call.id = std::string(id);
      if (const std::string_view type = string_of(fragment, "type"); !type.empty())
        call.type = std::string(type);
      if (auto function = fragment.FindMember("function");
          function != fragment.MemberEnd() && function->value.IsObject()) {
        // The name comes whole once; a server that repeats it on every fragment is read once.
        if (const std::string_view name = string_of(function->value, "name");
            !name.empty() && call.name != name)
          call.name += std::string(name);
        const std::string_view arguments = string_of(function->value, "arguments");
        call.arguments.append(arguments.data(), arguments.size());
      }
    }
  }
  return true;
}

std::string ChatStreamAssembler::completion_json() const {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  if (!model_.empty()) {
    w.Key("model");
    write(w, model_);
  }
  w.Key("choices");
  w.StartArray();
  w.StartObject();
  w.Key("index");
  w.Int(0);
  w.Key("message");
  w.StartObject();
  w.Key("role");
  w.String("assistant");
  w.Key("content");
  if (has_content_)
    write(w, content_);
  else
    w.Null();
  if (!reasoning_.empty()) {
    w.Key("reasoning_content");
    write(w, reasoning_);
  }
  if (!calls_.empty()) {
    w.Key("tool_calls");
    w.StartArray();
    for (const auto& [index, call] : calls_) {
      w.StartObject();
      w.Key("id");
      write(w, call.id);
      w.Key("type");
      write(w, call.type.empty() ? std::string_view("function") : std::string_view(call.type));
      w.Key("function");
      w.StartObject();
      w.Key("name");
      write(w, call.name);
      w.Key("arguments");
      write(w, call.arguments);
      w.EndObject();
      w.EndObject();
    }
    w.EndArray();
  }
  w.EndObject();
  w.Key("finish_reason");
  if (finish_reason_.empty())
    w.Null();
  else
    write(w, finish_reason_);
  w.EndObject();
  w.EndArray();
  if (!usage_json_.empty()) {
    w.Key("usage");
    w.RawValue(usage_json_.data(), usage_json_.size(), rapidjson::kObjectType);
  }
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace agentfleet::codec
