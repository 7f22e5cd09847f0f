#include "core/codec/text_tool_calls.hpp"

#include <algorithm>
#include <cctype>

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
// an answer such as {"name": "周会"} stays an answer. Command R names the tool `tool_name`.
std::optional<ToolCall> call_of(const rapidjson::Value& value, bool require_arguments,
                                std::string_view name_key = "name") {
  if (!value.IsObject())
    return std::nullopt;
  const rapidjson::Value* object = &value;
  auto function = value.FindMember("function");
  if (function != value.MemberEnd() && function->value.IsObject())
    object = &function->value;
  auto name =
      object->FindMember(rapidjson::Value(rapidjson::StringRef(name_key.data(), name_key.size())));
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
bool read_calls(std::string_view json, std::vector<ToolCall>& out, bool require_arguments = false,
                std::string_view name_key = "name") {
  rapidjson::Document doc;
  if (!parse_json(doc, json))
    return false;
  if (doc.IsObject()) {
    auto call = call_of(doc, require_arguments, name_key);
    if (!call)
      return false;
    out.push_back(std::move(*call));
    return true;
  }
  if (!doc.IsArray() || doc.Empty())
    return false;
  for (const auto& element : doc.GetArray()) {
    auto call = call_of(element, require_arguments, name_key);
    if (!call)
      return false;
    out.push_back(std::move(*call));
  }
  return true;
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

// ---- shared pieces for the formats below ----

// A function name as the templates write them: letters, digits, `_`, `-`, `.` and `:`.
bool is_name(std::string_view text) {
  if (text.empty() || text.size() > 256)
    return false;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.' || c == ':';
    if (!ok)
      return false;
  }
  return true;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// Text between `open` and `close` tags, each body read by `read_body` (false: not a call,
// and then the answer is not calls at all); a last body without its closing tag runs to
// the end when `cut_off_ok`. nullopt when there is no tag or a body does not read.
template <typename ReadBody>
std::optional<TextCalls> read_tagged(std::string_view content, std::string_view open,
                                     std::string_view close, bool cut_off_ok, ReadBody read_body) {
  if (content.find(open) == std::string_view::npos)
    return std::nullopt;
  TextCalls found;
  std::string text;
  std::size_t at = 0;
  while (at < content.size()) {
    const auto tag = content.find(open, at);
    if (tag == std::string_view::npos) {
      text += content.substr(at);
      break;
    }
    text += content.substr(at, tag - at);
    const auto body_start = tag + open.size();
    const auto end = content.find(close, body_start);
    if (end == std::string_view::npos && !cut_off_ok)
      return std::nullopt;
    const std::string_view body = content.substr(
        body_start, end == std::string_view::npos ? std::string_view::npos : end - body_start);
    if (!read_body(body, found.calls))
      return std::nullopt;
    at = end == std::string_view::npos ? content.size() : end + close.size();
  }
  found.text = std::string(trim(text));
  return found;
}

// <tool_call>...</tool_call>, each a call; a last one without its closing tag runs to the
// end. nullopt when there is no tag, or a tagged call does not read.
std::optional<TextCalls> read_hermes(std::string_view content) {
  return read_tagged(content, "<tool_call>", "</tool_call>", true,
                     [](std::string_view body, std::vector<ToolCall>& calls) {
                       return read_calls(trim(body), calls);
                     });
}

// One or more JSON values (each a call or an array of calls) separated by blanks, the whole
// of `body`; a value cut off is not read.
bool read_call_sequence(std::string_view body, std::vector<ToolCall>& out,
                        std::string_view name_key = "name") {
  std::string_view rest = trim(body);
  if (rest.empty())
    return false;
  while (!rest.empty()) {
    const std::size_t length = json_value_length(rest);
    if (length == 0 || !read_calls(rest.substr(0, length), out, false, name_key))
      return false;
    rest = trim(rest.substr(length));
  }
  return true;
}

// Tagged bodies (read_tagged, a last one cut off read to the end), each a call sequence.
std::optional<TextCalls> read_tagged_sequence(std::string_view content, std::string_view open,
                                              std::string_view close) {
  return read_tagged(content, open, close, true,
                     [](std::string_view body, std::vector<ToolCall>& calls) {
                       return read_call_sequence(body, calls);
                     });
}

// A value as the XML formats write it: JSON when it reads as JSON, else the string, less
// one newline either side.
void add_xml_value(rapidjson::Document& arguments, std::string_view key, std::string_view value) {
  if (starts_with(value, "\n"))
    value.remove_prefix(1);
  if (!value.empty() && value.back() == '\n')
    value.remove_suffix(1);
  auto& allocator = arguments.GetAllocator();
  rapidjson::Value name(key.data(), static_cast<rapidjson::SizeType>(key.size()), allocator);
  rapidjson::Document parsed;
  const std::string_view trimmed = trim(value);
  if (!trimmed.empty() && parse_json(parsed, trimmed)) {
    rapidjson::Value copy(parsed, allocator);
    arguments.RemoveMember(name);
    arguments.AddMember(name, copy, allocator);
    return;
  }
  rapidjson::Value text(value.data(), static_cast<rapidjson::SizeType>(value.size()), allocator);
  arguments.RemoveMember(name);
  arguments.AddMember(name, text, allocator);
}

std::optional<TextCalls> read_granite(std::string_view content) {
  // Granite writes the token first and nothing after the array.
  constexpr std::string_view kTag = "<|tool_call|>";
  const std::string_view body = trim(content);
  if (!starts_with(body, kTag))
    return std::nullopt;
  TextCalls found;
  if (!read_call_sequence(body.substr(kTag.size()), found.calls))
    return std::nullopt;
  return found;
}

std::optional<TextCalls> read_jamba(std::string_view content) {
  // An array (Jamba) or one object a line (MiniMax).
  return read_tagged_sequence(content, "<tool_calls>", "</tool_calls>");
}

std::optional<TextCalls> read_internlm(std::string_view content) {
  return read_tagged_sequence(content, "<|action_start|><|plugin|>", "<|action_end|>");
}

std::optional<TextCalls> read_command_r(std::string_view content) {
  auto found = read_tagged(content, "<|START_ACTION|>", "<|END_ACTION|>", true,
                           [](std::string_view body, std::vector<ToolCall>& calls) {
                             return read_call_sequence(body, calls, "tool_name");
                           });
  if (!found)
    return found;
  // The plan Command R writes before its calls stays, without its markers.
  std::string text = found->text;
  for (std::string_view marker : {"<|START_THINKING|>", "<|END_THINKING|>"}) {
    for (auto at = text.find(marker); at != std::string::npos; at = text.find(marker, at))
      text.erase(at, marker.size());
  }
  found->text = std::string(trim(text));
  return found;
}

std::optional<TextCalls> read_nemotron(std::string_view content) {
  return read_tagged_sequence(content, "<TOOLCALL>", "</TOOLCALL>");
}

std::optional<TextCalls> read_firefunction(std::string_view content) {
  // ` functools[...]`: the bracket opens the array; at the very start the blank may be gone.
  constexpr std::string_view kTag = "functools[";
  auto tag = content.find(kTag);
  while (tag != std::string_view::npos && tag != 0 &&
         kSpace.find(content[tag - 1]) == std::string_view::npos)
    tag = content.find(kTag, tag + 1);
  if (tag == std::string_view::npos)
    return std::nullopt;
  const std::string_view rest = content.substr(tag + kTag.size() - 1);
  const std::size_t length = json_value_length(rest);
  TextCalls found;
  if (length == 0 || !read_calls(rest.substr(0, length), found.calls))
    return std::nullopt;
  found.text =
      std::string(trim(std::string(content.substr(0, tag)) + std::string(rest.substr(length))));
  return found;
}

std::optional<TextCalls> read_qwen3_coder(std::string_view content) {
  return read_tagged(content, "<tool_call>", "</tool_call>", true,
                     [](std::string_view body, std::vector<ToolCall>& calls) {
                       constexpr std::string_view kFunction = "<function=";
                       constexpr std::string_view kFunctionEnd = "</function>";
                       constexpr std::string_view kParameter = "<parameter=";
                       constexpr std::string_view kParameterEnd = "</parameter>";
                       body = trim(body);
                       if (!starts_with(body, kFunction))
                         return false;
                       const auto name_end = body.find('>');
                       const auto function_end = body.find(kFunctionEnd);
                       if (name_end == std::string_view::npos ||
                           function_end == std::string_view::npos || function_end < name_end ||
                           !trim(body.substr(function_end + kFunctionEnd.size())).empty())
                         return false;
                       const std::string_view name =
                           trim(body.substr(kFunction.size(), name_end - kFunction.size()));
                       if (!is_name(name))
                         return false;
                       rapidjson::Document arguments(rapidjson::kObjectType);
                       std::string_view rest =
                           body.substr(name_end + 1, function_end - name_end - 1);
                       for (rest = trim(rest); !rest.empty(); rest = trim(rest)) {
                         if (!starts_with(rest, kParameter))
                           return false;
                         const auto key_end = rest.find('>');
                         if (key_end == std::string_view::npos)
                           return false;
                         const std::string_view key =
                             trim(rest.substr(kParameter.size(), key_end - kParameter.size()));
                         if (key.empty())
                           return false;
                         rest.remove_prefix(key_end + 1);
                         // A value whose closing tag was left out runs to the next parameter.
                         auto value_end = rest.find(kParameterEnd);
                         const auto next = rest.find(kParameter);
                         std::size_t skip = kParameterEnd.size();
                         if (value_end == std::string_view::npos ||
                             (next != std::string_view::npos && next < value_end)) {
                           value_end = next == std::string_view::npos ? rest.size() : next;
                           skip = 0;
                         }
                         add_xml_value(arguments, key, rest.substr(0, value_end));
                         rest.remove_prefix(std::min(rest.size(), value_end + skip));
                       }
                       calls.push_back(ToolCall{{}, std::string(name), serialize(arguments)});
                       return true;
                     });
}

std::optional<TextCalls> read_glm45(std::string_view content) {
  return read_tagged(
      content, "<tool_call>", "</tool_call>", false,
      [](std::string_view body, std::vector<ToolCall>& calls) {
        constexpr std::string_view kKey = "<arg_key>";
        constexpr std::string_view kKeyEnd = "</arg_key>";
        constexpr std::string_view kValue = "<arg_value>";
        constexpr std::string_view kValueEnd = "</arg_value>";
        const auto first_key = body.find(kKey);
        const std::string_view name = trim(body.substr(0, first_key));
        if (!is_name(name))
          return false;
        rapidjson::Document arguments(rapidjson::kObjectType);
        std::string_view rest =
            first_key == std::string_view::npos ? std::string_view{} : body.substr(first_key);
        for (rest = trim(rest); !rest.empty(); rest = trim(rest)) {
          if (!starts_with(rest, kKey))
            return false;
          const auto key_end = rest.find(kKeyEnd);
          if (key_end == std::string_view::npos)
            return false;
          const std::string_view key = trim(rest.substr(kKey.size(), key_end - kKey.size()));
          rest = trim(rest.substr(key_end + kKeyEnd.size()));
          const auto value_end = rest.find(kValueEnd);
          if (key.empty() || !starts_with(rest, kValue) || value_end == std::string_view::npos)
            return false;
          add_xml_value(arguments, key, rest.substr(kValue.size(), value_end - kValue.size()));
          rest.remove_prefix(value_end + kValueEnd.size());
        }
        calls.push_back(ToolCall{{}, std::string(name), serialize(arguments)});
        return true;
      });
}

std::optional<TextCalls> read_deepseek(std::string_view content) {
  constexpr std::string_view kBegin = "<｜tool▁calls▁begin｜>";
  constexpr std::string_view kEnd = "<｜tool▁calls▁end｜>";
  constexpr std::string_view kSep = "<｜tool▁sep｜>";
  const auto begin = content.find(kBegin);
  if (begin == std::string_view::npos)
    return std::nullopt;
  const auto section_start = begin + kBegin.size();
  const auto end = content.find(kEnd, section_start);
  const std::string_view section = content.substr(
      section_start, end == std::string_view::npos ? std::string_view::npos : end - section_start);
  auto calls =
      read_tagged(section, "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", true,
                  [&](std::string_view body, std::vector<ToolCall>& out) {
                    const auto sep = body.find(kSep);
                    if (sep == std::string_view::npos)
                      return false;
                    std::string_view name = trim(body.substr(0, sep));
                    std::string_view rest = trim(body.substr(sep + kSep.size()));
                    if (name == "function" && !starts_with(rest, "{")) {
                      // V3 and R1: `function<sep>NAME` and the arguments in a ```json fence.
                      const auto line_end = rest.find('\n');
                      if (line_end == std::string_view::npos)
                        return false;
                      name = trim(rest.substr(0, line_end));
                      rest = trim(rest.substr(line_end + 1));
                      if (starts_with(rest, "```")) {
                        const auto fence_end = rest.find('\n');
                        rest = fence_end == std::string_view::npos ? std::string_view{}
                                                                   : rest.substr(fence_end);
                      }
                    }
                    rest = trim(rest);
                    const std::size_t length = json_value_length(rest);
                    if (!is_name(name) || length == 0)
                      return false;
                    const std::string_view after = trim(rest.substr(length));
                    if (!after.empty() && after != "```")
                      return false;
                    rapidjson::Document arguments;
                    if (!parse_json(arguments, rest.substr(0, length)) || !arguments.IsObject())
                      return false;
                    out.push_back(ToolCall{{}, std::string(name), serialize(arguments)});
                    return true;
                  });
  // Between the calls there is nothing to say.
  if (!calls || !calls->text.empty())
    return std::nullopt;
  const std::string after = end == std::string_view::npos
                                ? std::string{}
                                : std::string(content.substr(end + kEnd.size()));
  calls->text = std::string(trim(std::string(content.substr(0, begin)) + after));
  return calls;
}

std::optional<TextCalls> read_functionary(std::string_view content) {
  // `>>>NAME\n{...}`, one after the other; `>>>all\n` opens text.
  constexpr std::string_view kRecipient = ">>>";
  auto at = content.find(kRecipient);
  if (at == std::string_view::npos)
    return std::nullopt;
  TextCalls found;
  std::string text(content.substr(0, at));
  while (at != std::string_view::npos) {
    const auto start = at + kRecipient.size();
    const auto next = content.find(kRecipient, start);
    const std::string_view segment = content.substr(
        start, next == std::string_view::npos ? std::string_view::npos : next - start);
    at = next;
    const auto line_end = segment.find('\n');
    if (line_end == std::string_view::npos)
      return std::nullopt;
    const std::string_view name = segment.substr(0, line_end);
    const std::string_view body = trim(segment.substr(line_end + 1));
    if (name == "all") {
      text += "\n";
      text += body;
      continue;
    }
    rapidjson::Document arguments;
    if (!is_name(name) || !starts_with(body, "{") || !parse_json(arguments, body) ||
        !arguments.IsObject())
      return std::nullopt;
    found.calls.push_back(ToolCall{{}, std::string(name), serialize(arguments)});
  }
  if (found.calls.empty())
    return std::nullopt;
  found.text = std::string(trim(text));
  return found;
}

// ---- pythonic: a list of calls written as Python ----

// Python literals as JSON text; false on anything else (names, expressions, calls).
class PythonLiteral {
 public:
  explicit PythonLiteral(std::string_view text) : text_(text) {}

  std::size_t at() const { return at_; }
  void skip_blanks() {
    while (at_ < text_.size() && kSpace.find(text_[at_]) != std::string_view::npos)
      ++at_;
  }
  bool eat(char c) {
    skip_blanks();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  std::string_view name() {
    skip_blanks();
    const std::size_t start = at_;
    while (at_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[at_])) != 0 ||
                                  text_[at_] == '_' || (text_[at_] == '.' && at_ > start)))
      ++at_;
    if (at_ > start && std::isdigit(static_cast<unsigned char>(text_[start])) != 0)
      return {};
    return text_.substr(start, at_ - start);
  }

  // One value written as JSON into `out`.
  bool value(std::string& out, int depth = 0) {
    if (depth > kMaxJsonDepth)
      return false;
    skip_blanks();
    if (at_ >= text_.size())
      return false;
    const char c = text_[at_];
    if (c == '\'' || c == '"')
      return string(out);
    if (c == '[' || c == '(')
      return sequence(out, depth, c == '[' ? ']' : ')');
    if (c == '{')
      return dict(out, depth);
    if (c == '-' || c == '+' || c == '.' || std::isdigit(static_cast<unsigned char>(c)) != 0)
      return number(out);
    const std::string_view word = name();
    if (word == "True" || word == "False" || word == "None") {
      out += word == "True" ? "true" : word == "False" ? "false" : "null";
      return true;
    }
    return false;
  }

 private:
  bool string(std::string& out) {
    const char quote = text_[at_++];
    std::string decoded;
    while (at_ < text_.size() && text_[at_] != quote) {
      char c = text_[at_++];
      if (c == '\n')
        return false;
      if (c != '\\') {
        decoded += c;
        continue;
      }
      if (at_ >= text_.size())
        return false;
      c = text_[at_++];
      switch (c) {
        case 'n':
          decoded += '\n';
          break;
        case 't':
          decoded += '\t';
          break;
        case 'r':
          decoded += '\r';
          break;
        case '\\':
        case '\'':
        case '"':
          decoded += c;
          break;
        case 'u': {
          if (at_ + 4 > text_.size())
            return false;
          unsigned code = 0;
          for (int i = 0; i < 4; ++i) {
            const auto h = static_cast<unsigned char>(text_[at_++]);
            if (std::isxdigit(h) == 0)
              return false;
            code = code * 16 + static_cast<unsigned>(
                                   std::isdigit(h) != 0 ? h - '0' : std::tolower(h) - 'a' + 10);
          }
          if (code >= 0xD800 && code <= 0xDFFF)
            return false;
          if (code < 0x80) {
            decoded += static_cast<char>(code);
          } else if (code < 0x800) {
            decoded += static_cast<char>(0xC0 | (code >> 6));
            decoded += static_cast<char>(0x80 | (code & 0x3F));
          } else {
            decoded += static_cast<char>(0xE0 | (code >> 12));
            decoded += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            decoded += static_cast<char>(0x80 | (code & 0x3F));
          }
          break;
        }
        default:  // Python keeps an unknown escape as it is
          decoded += '\\';
          decoded += c;
      }
    }
    if (at_ >= text_.size())
      return false;
    ++at_;
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
    writer.String(decoded.data(), static_cast<rapidjson::SizeType>(decoded.size()));
    out.append(buffer.GetString(), buffer.GetSize());
    return true;
  }

  bool number(std::string& out) {
    const std::size_t start = at_;
    if (text_[at_] == '+' || text_[at_] == '-')
      ++at_;
    while (at_ < text_.size() && (std::isdigit(static_cast<unsigned char>(text_[at_])) != 0 ||
                                  text_[at_] == '.' || text_[at_] == 'e' || text_[at_] == 'E' ||
                                  ((text_[at_] == '-' || text_[at_] == '+') &&
                                   (text_[at_ - 1] == 'e' || text_[at_ - 1] == 'E'))))
      ++at_;
    std::string_view number = text_.substr(start, at_ - start);
    if (starts_with(number, "+"))
      number.remove_prefix(1);
    // Checked when the whole is parsed as JSON; a Python-only form (`1.`, `.5`) fails there.
    out += number;
    return !number.empty();
  }

  bool sequence(std::string& out, int depth, char close) {
    ++at_;
    out += '[';
    bool first = true;
    while (!eat(close)) {
      if (!first && !eat(','))
        return false;
      if (eat(close))
        break;
      if (!first)
        out += ',';
      if (!value(out, depth + 1))
        return false;
      first = false;
    }
    out += ']';
    return true;
  }

  bool dict(std::string& out, int depth) {
    ++at_;
    out += '{';
    bool first = true;
    while (!eat('}')) {
      if (!first && !eat(','))
        return false;
      if (eat('}'))
        break;
      if (!first)
        out += ',';
      skip_blanks();
      if (at_ >= text_.size() || (text_[at_] != '\'' && text_[at_] != '"') || !string(out) ||
          !eat(':'))
        return false;
      out += ':';
      if (!value(out, depth + 1))
        return false;
      first = false;
    }
    out += '}';
    return true;
  }

  std::string_view text_;
  std::size_t at_ = 0;
};

std::optional<TextCalls> read_pythonic(std::string_view content) {
  // The whole answer, also between Llama 4's <|python_start|> and <|python_end|>.
  std::string_view body = trim(content);
  if (starts_with(body, "<|python_start|>")) {
    body.remove_prefix(std::string_view("<|python_start|>").size());
    const auto end = body.rfind("<|python_end|>");
    if (end != std::string_view::npos && trim(body.substr(end + 14)).empty())
      body = body.substr(0, end);
    body = trim(body);
  }
  if (!starts_with(body, "[") || body.back() != ']')
    return std::nullopt;
  PythonLiteral python(body);
  python.eat('[');
  TextCalls found;
  while (!python.eat(']')) {
    if (!found.calls.empty() && !python.eat(','))
      return std::nullopt;
    const std::string_view name = python.name();
    if (!is_name(name) || !python.eat('('))
      return std::nullopt;
    std::string arguments = "{";
    while (!python.eat(')')) {
      if (arguments.size() > 1 && !python.eat(','))
        return std::nullopt;
      if (python.eat(')'))
        break;
      const std::string_view key = python.name();
      if (key.empty() || key.find('.') != std::string_view::npos || !python.eat('='))
        return std::nullopt;
      if (arguments.size() > 1)
        arguments += ',';
      rapidjson::StringBuffer buffer;
      rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
      writer.String(key.data(), static_cast<rapidjson::SizeType>(key.size()));
      arguments.append(buffer.GetString(), buffer.GetSize());
      arguments += ':';
      if (!python.value(arguments))
        return std::nullopt;
    }
    arguments += '}';
    rapidjson::Document parsed;
    if (!parse_json(parsed, arguments))
      return std::nullopt;
    found.calls.push_back(ToolCall{{}, std::string(name), serialize(parsed)});
  }
  python.skip_blanks();
  if (python.at() != body.size() || found.calls.empty())
    return std::nullopt;
  return found;
}

// ---- fenced: prose, then a fenced block holding calls ----

// Exactly {"name": string, "arguments" | "parameters": object}: a fence holding any other
// JSON is an answer's example or data, not a call.
bool read_strict_calls(std::string_view json, std::vector<ToolCall>& out) {
  rapidjson::Document doc;
  if (!parse_json(doc, json))
    return false;
  auto one = [&](const rapidjson::Value& value) {
    if (!value.IsObject() || value.MemberCount() != 2)
      return false;
    auto name = value.FindMember("name");
    auto arguments = value.FindMember("arguments");
    if (arguments == value.MemberEnd())
      arguments = value.FindMember("parameters");
    if (name == value.MemberEnd() || !name->value.IsString() ||
        !is_name(std::string_view(name->value.GetString(), name->value.GetStringLength())) ||
        arguments == value.MemberEnd() || !arguments->value.IsObject())
      return false;
    out.push_back(ToolCall{{},
                           std::string(name->value.GetString(), name->value.GetStringLength()),
                           serialize(arguments->value)});
    return true;
  };
  if (doc.IsObject())
    return one(doc);
  if (!doc.IsArray() || doc.Empty())
    return false;
  for (const auto& element : doc.GetArray()) {
    if (!one(element))
      return false;
  }
  return true;
}

std::optional<TextCalls> read_fenced(std::string_view content) {
  constexpr std::string_view kFence = "```";
  TextCalls found;
  std::string text;
  std::size_t at = 0;
  while (at < content.size()) {
    const auto open = content.find(kFence, at);
    if (open == std::string_view::npos) {
      text += content.substr(at);
      break;
    }
    const auto info_end = content.find('\n', open);
    if (info_end == std::string_view::npos) {
      text += content.substr(at);
      break;
    }
    const std::string_view info =
        trim(content.substr(open + kFence.size(), info_end - open - kFence.size()));
    const auto close = content.find(kFence, info_end);
    const auto block_end = close == std::string_view::npos ? content.size() : close + kFence.size();
    const std::string_view body =
        content.substr(info_end + 1, close == std::string_view::npos ? std::string_view::npos
                                                                     : close - info_end - 1);
    std::vector<ToolCall> calls;
    if ((info.empty() || info == "json" || info == "tool_call" || info == "tool_calls") &&
        read_strict_calls(trim(body), calls)) {
      text += content.substr(at, open - at);
      for (ToolCall& call : calls)
        found.calls.push_back(std::move(call));
    } else {
      text += content.substr(at, block_end - at);
    }
    at = block_end;
  }
  if (found.calls.empty())
    return std::nullopt;
  found.text = std::string(trim(text));
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
    case TextCallFormat::kGranite:
      return "granite";
    case TextCallFormat::kJamba:
      return "jamba";
    case TextCallFormat::kInternlm:
      return "internlm";
    case TextCallFormat::kQwen3Coder:
      return "qwen3_coder";
    case TextCallFormat::kGlm45:
      return "glm45";
    case TextCallFormat::kDeepseek:
      return "deepseek";
    case TextCallFormat::kFunctionary:
      return "functionary";
    case TextCallFormat::kCommandR:
      return "command_r";
    case TextCallFormat::kNemotron:
      return "nemotron";
    case TextCallFormat::kFirefunction:
      return "firefunction";
    case TextCallFormat::kPythonic:
      return "pythonic";
    case TextCallFormat::kFenced:
      return "fenced";
  }
  return "json";
}

std::set<TextCallFormat> all_text_call_formats() {
  return {TextCallFormat::kHermes,   TextCallFormat::kLlama,        TextCallFormat::kMistral,
          TextCallFormat::kJson,     TextCallFormat::kGranite,      TextCallFormat::kJamba,
          TextCallFormat::kInternlm, TextCallFormat::kQwen3Coder,   TextCallFormat::kGlm45,
          TextCallFormat::kDeepseek, TextCallFormat::kFunctionary,  TextCallFormat::kCommandR,
          TextCallFormat::kNemotron, TextCallFormat::kFirefunction, TextCallFormat::kPythonic,
          TextCallFormat::kFenced};
}

std::set<TextCallFormat> default_text_call_formats() {
  std::set<TextCallFormat> formats = all_text_call_formats();
  formats.erase(TextCallFormat::kPythonic);  // a bracketed list of calls could be an answer
  return formats;
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
      case TextCallFormat::kGranite:
        found = read_granite(content);
        break;
      case TextCallFormat::kJamba:
        found = read_jamba(content);
        break;
      case TextCallFormat::kInternlm:
        found = read_internlm(content);
        break;
      case TextCallFormat::kQwen3Coder:
        found = read_qwen3_coder(content);
        break;
      case TextCallFormat::kGlm45:
        found = read_glm45(content);
        break;
      case TextCallFormat::kDeepseek:
        found = read_deepseek(content);
        break;
      case TextCallFormat::kFunctionary:
        found = read_functionary(content);
        break;
      case TextCallFormat::kCommandR:
        found = read_command_r(content);
        break;
      case TextCallFormat::kNemotron:
        found = read_nemotron(content);
        break;
      case TextCallFormat::kFirefunction:
        found = read_firefunction(content);
        break;
      case TextCallFormat::kPythonic:
        found = read_pythonic(content);
        break;
      case TextCallFormat::kFenced:
        found = read_fenced(content);
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
