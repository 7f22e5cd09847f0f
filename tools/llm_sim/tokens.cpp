#include "tools/llm_sim/tokens.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace agentfleet::llm_sim {

namespace {

std::int64_t string_code_points(const rapidjson::Value& value) {
  if (!value.IsString()) {
    return 0;
  }
  return count_code_points(std::string_view(value.GetString(), value.GetStringLength()));
}

std::int64_t json_code_points(const rapidjson::Value& value) {
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> writer(out);
  value.Accept(writer);
  return count_code_points(std::string_view(out.GetString(), out.GetSize()));
}

std::int64_t content_code_points(const rapidjson::Value& message) {
  const auto content = message.FindMember("content");
  if (content == message.MemberEnd()) {
    return 0;
  }
  if (content->value.IsString()) {
    return string_code_points(content->value);
  }
  std::int64_t total = 0;
  if (content->value.IsArray()) {
    for (const auto& part : content->value.GetArray()) {
      if (!part.IsObject()) {
        continue;
      }
      const auto text = part.FindMember("text");
      if (text != part.MemberEnd()) {
        total += string_code_points(text->value);
      }
    }
  }
  return total;
}

// cp(name) + cp(arguments) of one `function` object.
std::int64_t function_code_points(const rapidjson::Value& function) {
  if (!function.IsObject()) {
    return 0;
  }
  std::int64_t total = 0;
  const auto name = function.FindMember("name");
  if (name != function.MemberEnd()) {
    total += string_code_points(name->value);
  }
  const auto arguments = function.FindMember("arguments");
  if (arguments != function.MemberEnd()) {
    // Providers send arguments as JSON text; tolerate an object as well.
    total += arguments->value.IsString() ? string_code_points(arguments->value)
                                         : json_code_points(arguments->value);
  }
  return total;
}

std::int64_t tool_call_code_points(const rapidjson::Value& message) {
  std::int64_t total = 0;
  const auto legacy = message.FindMember("function_call");
  if (legacy != message.MemberEnd()) {
    total += function_code_points(legacy->value);
  }
  const auto calls = message.FindMember("tool_calls");
  if (calls == message.MemberEnd() || !calls->value.IsArray()) {
    return total;
  }
  for (const auto& call : calls->value.GetArray()) {
    if (!call.IsObject()) {
      continue;
    }
    const auto function = call.FindMember("function");
    if (function != call.MemberEnd()) {
      total += function_code_points(function->value);
    }
  }
  return total;
}

std::int64_t ceil_quarter(std::int64_t n) {
  return (n + 3) / 4;
}

}  // namespace

std::int64_t count_code_points(std::string_view utf8) {
  std::int64_t count = 0;
  for (const char c : utf8) {
    // Every byte that is not a continuation byte (10xxxxxx) starts a code point.
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) {
      ++count;
    }
  }
  return count;
}

std::int64_t message_code_points(const rapidjson::Value& message) {
  if (!message.IsObject()) {
    return 0;
  }
  return content_code_points(message) + tool_call_code_points(message);
}

void count_prompt(const rapidjson::Value& request, Usage& usage) {
  usage.prompt_tokens = 0;
  usage.cached_tokens = 0;
  if (!request.IsObject()) {
    return;
  }
  std::int64_t tools = 0;
  const auto tools_member = request.FindMember("tools");
  if (tools_member != request.MemberEnd() && !tools_member->value.IsNull()) {
    tools = json_code_points(tools_member->value);
  }
  const auto messages = request.FindMember("messages");
  if (messages == request.MemberEnd() || !messages->value.IsArray()) {
    usage.prompt_tokens = ceil_quarter(tools);
    return;
  }
  std::int64_t total = tools;
  std::int64_t before_last_assistant = 0;
  std::int64_t last_assistant = -1;
  std::int64_t index = 0;
  for (const auto& message : messages->value.GetArray()) {
    if (message.IsObject()) {
      const auto role = message.FindMember("role");
      if (role != message.MemberEnd() && role->value.IsString() &&
          std::string_view(role->value.GetString()) == "assistant") {
        last_assistant = index;
        before_last_assistant = total;
      }
    }
    total += message_code_points(message);
    ++index;
  }
  usage.prompt_tokens = ceil_quarter(total) + 4 * index;
  if (last_assistant >= 0) {
    usage.cached_tokens = before_last_assistant / 4 + 4 * last_assistant;
  }
}

std::int64_t count_completion(const rapidjson::Value& message) {
  return ceil_quarter(message_code_points(message)) + 1;
}

}  // namespace agentfleet::llm_sim
