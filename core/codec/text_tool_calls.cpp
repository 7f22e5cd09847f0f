#include "core/codec/text_tool_calls.hpp"

#include <rapidjson/document.h>
#include <rapidjson/encodedstream.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "core/codec/json_text.hpp"
#include "core/codec/openai_codec.hpp"

namespace agentfleet::codec {

namespace {

constexpr std::string_view kSpace = " \t\r\n";

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(kSpace);
  if (first == std::string_view::npos)
    return {};
  const auto last = text.find_last_not_of(kSpace);
  return text.substr(first, last - first + 1);
}

std::string serialize(const rapidjson::Value& value) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  value.Accept(writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

// The length of the one JSON value `text` starts with (after blanks), or 0 when it does not
// start with a whole one. Only finds the end; the value is then parsed by parse_json.
std::size_t json_value_length(std::string_view text) {
  rapidjson::MemoryStream memory(text.data(), text.size());
  rapidjson::EncodedInputStream<rapidjson::UTF8<>, rapidjson::MemoryStream> stream(memory);
  rapidjson::BaseReaderHandler<> ignore;  // no document: nothing nested is built or freed
  rapidjson::Reader reader;
  constexpr unsigned kFlags = rapidjson::kParseStopWhenDoneFlag | rapidjson::kParseIterativeFlag;
  if (reader.Parse<kFlags>(stream, ignore).IsError())
    return 0;
  return stream.Tell();
}

// Canonical arguments: an object (or a string holding one) written compactly; "{}" when
// there are none; anything else kept as its text, for the tool-call check to refuse.
std::string arguments_of(const rapidjson::Value* arguments) {
  if (arguments == nullptr || arguments->IsNull())
    return "{}";
  if (arguments->IsString())
    return canonical_arguments(
        std::string_view(arguments->GetString(), arguments->GetStringLength()));
  return serialize(*arguments);
}

// {"name", "arguments" | "parameters"}, also wrapped as {"function": {...}}; nullopt for
// any other shape. Untagged text (`require_arguments`) must name its arguments too, so that
// an answer such as {"name": "周会"} stays an answer.
std::optional<ToolCall> call_of(const rapidjson::Value& value, bool require_arguments) {
  if (!value.IsObject())
    return std::nullopt;
  const rapidjson::Value* object = &value;
  auto function = value.FindMember("function");
  if (function != value.MemberEnd() && function->value.IsObject())
    object = &function->value;
  auto name = object->FindMember("name");
  if (name == object->MemberEnd() || !name->value.IsString() || name->value.GetStringLength() == 0)
    return std::nullopt;
  const rapidjson::Value* arguments = nullptr;
  for (const char* key : {"arguments", "parameters"}) {
    auto it = object->FindMember(key);
    if (it != object->MemberEnd()) {
      arguments = &it->value;
      break;
    }
  }
  if (arguments == nullptr && require_arguments)
    return std::nullopt;
  ToolCall call;
  call.name.assign(name->value.GetString(), name->value.GetStringLength());
  call.arguments = arguments_of(arguments);
  return call;
}

// One call object, or an array of them; false when `json` is anything else.
bool read_calls(std::string_view json, std::vector<ToolCall>& out, bool require_arguments = false) {
  rapidjson::Document doc;
  if (!parse_json(doc, json))
    return false;
  if (doc.IsObject()) {
    auto call = call_of(doc, require_arguments);
    if (!call)
      return false;
    out.push_back(std::move(*call));
    return true;
  }
  if (!doc.IsArray() || doc.Empty())
    return false;
  for (const auto& element : doc.GetArray()) {
    auto call = call_of(element, require_arguments);
    if (!call)
      return false;
    out.push_back(std::move(*call));
  }
  return true;
}

// Text between `open` and `close` tags, each a call; a last one without its closing tag
// runs to the end. nullopt when there is no tag, or a tagged call does not read.
std::optional<TextCalls> read_hermes(std::string_view content) {
  constexpr std::string_view kOpen = "<tool_call>";
  constexpr std::string_view kClose = "</tool_call>";
  if (content.find(kOpen) == std::string_view::npos)
    return std::nullopt;
  TextCalls found;
  std::string text;
  std::size_t at = 0;
  while (at < content.size()) {
    const auto open = content.find(kOpen, at);
    if (open == std::string_view::npos) {
      text += content.substr(at);
      break;
    }
    text += content.substr(at, open - at);
    const auto body_start = open + kOpen.size();
    const auto close = content.find(kClose, body_start);
    const std::string_view body = content.substr(
        body_start, close == std::string_view::npos ? std::string_view::npos : close - body_start);
    if (!read_calls(trim(body), found.calls))
      return std::nullopt;
    at = close == std::string_view::npos ? content.size() : close + kClose.size();
  }
  found.text = std::string(trim(text));
  return found;
}

std::optional<TextCalls> read_llama(std::string_view content) {
  constexpr std::string_view kFunction = "<function=";
  constexpr std::string_view kFunctionEnd = "</function>";
  constexpr std::string_view kPythonTag = "<|python_tag|>";
  TextCalls found;
  if (content.find(kFunction) != std::string_view::npos) {
    std::string text;
    std::size_t at = 0;
    while (at < content.size()) {
      const auto open = content.find(kFunction, at);
      if (open == std::string_view::npos) {
        text += content.substr(at);
        break;
      }
      text += content.substr(at, open - at);
      const auto name_start = open + kFunction.size();
      const auto name_end = content.find('>', name_start);
      if (name_end == std::string_view::npos)
        return std::nullopt;
      const auto close = content.find(kFunctionEnd, name_end + 1);
      const std::string_view body =
          content.substr(name_end + 1, close == std::string_view::npos ? std::string_view::npos
                                                                       : close - name_end - 1);
      rapidjson::Document arguments;
      const std::string_view name = trim(content.substr(name_start, name_end - name_start));
      if (name.empty() || !parse_json(arguments, trim(body)) || !arguments.IsObject())
        return std::nullopt;
      found.calls.push_back(ToolCall{{}, std::string(name), serialize(arguments)});
      at = close == std::string_view::npos ? content.size() : close + kFunctionEnd.size();
    }
    found.text = std::string(trim(text));
    return found;
  }
  const auto tag = content.find(kPythonTag);
  if (tag == std::string_view::npos)
    return std::nullopt;
  // One or more JSON objects after the tag, separated by blanks or semicolons.
  std::string_view rest = content.substr(tag + kPythonTag.size());
  for (;;) {
    rest = trim(rest);
    while (!rest.empty() && rest.front() == ';')
      rest = trim(rest.substr(1));
    if (rest.empty())
      break;
    const std::size_t length = json_value_length(rest);
    if (length == 0 || !read_calls(rest.substr(0, length), found.calls))
      return std::nullopt;
    rest = rest.substr(length);
  }
  if (found.calls.empty())
    return std::nullopt;
  found.text = std::string(trim(content.substr(0, tag)));
  return found;
}

std::optional<TextCalls> read_mistral(std::string_view content) {
  constexpr std::string_view kTag = "[TOOL_CALLS]";
  const auto tag = content.find(kTag);
  if (tag == std::string_view::npos)
    return std::nullopt;
  const std::string_view rest = trim(content.substr(tag + kTag.size()));
  const std::size_t length = json_value_length(rest);
  TextCalls found;
  if (length == 0 || !read_calls(rest.substr(0, length), found.calls))
    return std::nullopt;
  found.text =
      std::string(trim(std::string(content.substr(0, tag)) + std::string(rest.substr(length))));
  return found;
}

std::optional<TextCalls> read_json(std::string_view content) {
  // The whole answer, or a fenced block that is all of it.
  const std::string_view body = unfenced(content);
  if (body.empty() || (body.front() != '{' && body.front() != '['))
    return std::nullopt;
  TextCalls found;
  if (!read_calls(body, found.calls, true))
    return std::nullopt;
  return found;
}

}  // namespace

std::optional<TextCallFormat> parse_text_call_format(std::string_view name) {
  for (TextCallFormat format : all_text_call_formats()) {
    if (to_string(format) == name)
      return format;
  }
  return std::nullopt;
}

std::string_view to_string(TextCallFormat format) {
  switch (format) {
    case TextCallFormat::kHermes:
      return "hermes";
    case TextCallFormat::kLlama:
      return "llama";
    case TextCallFormat::kMistral:
      return "mistral";
    case TextCallFormat::kJson:
      return "json";
  }
  return "json";
}

std::set<TextCallFormat> all_text_call_formats() {
  return {TextCallFormat::kHermes, TextCallFormat::kLlama, TextCallFormat::kMistral,
          TextCallFormat::kJson};
}

std::optional<TextCalls> read_text_tool_calls(std::string_view content,
                                              const std::set<TextCallFormat>& formats) {
  std::optional<TextCalls> found;
  for (TextCallFormat format : formats) {
    switch (format) {
      case TextCallFormat::kHermes:
        found = read_hermes(content);
        break;
      case TextCallFormat::kLlama:
        found = read_llama(content);
        break;
      case TextCallFormat::kMistral:
        found = read_mistral(content);
        break;
      case TextCallFormat::kJson:
        found = read_json(content);
        break;
    }
    if (found && !found->calls.empty())
      break;
    found.reset();
  }
  if (!found)
    return std::nullopt;
  int index = 0;
  for (ToolCall& call : found->calls)
    call.id = "text_call_" + std::to_string(index++);
  return found;
}

ModelReply with_text_tool_calls(ModelReply reply, const std::set<TextCallFormat>& formats) {
  if (!reply.tool_calls.empty() || reply.content.empty() || formats.empty())
    return reply;
  auto found = read_text_tool_calls(reply.content, formats);
  if (!found)
    return reply;
  reply.tool_calls = std::move(found->calls);
  reply.content = std::move(found->text);
  for (const ToolCall& call : reply.tool_calls) {
    if (call.name == kFinishTool) {
      reply.finish = parse_finish_arguments(call.arguments);
      break;
    }
  }
  return reply;
}

}  // namespace agentfleet::codec
