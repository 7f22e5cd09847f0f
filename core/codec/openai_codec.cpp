#include "core/codec/openai_codec.hpp"

#include "core/codec/json_text.hpp"
#include "core/codec/react_json_codec.hpp"
#include "core/react/context_budget.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <set>

namespace agentfleet::codec {

namespace {
using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void write_string(Writer& w, std::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

std::string serialize(const rapidjson::Value& value) {
  rapidjson::StringBuffer buffer;
  Writer writer(buffer);
  value.Accept(writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

// No single call has more tokens than this; a larger count is a provider's bug and is
// capped so that sums over a task stay far from overflow.
constexpr std::int64_t kMaxTokensPerCall = 1'000'000'000;

std::int64_t int_member(const rapidjson::Value& object, const char* name) {
  if (!object.IsObject())
    return 0;
  auto it = object.FindMember(name);
  if (it == object.MemberEnd() || !it->value.IsNumber())
    return 0;
  const double value = it->value.GetDouble();
  if (!(value > 0))
    return 0;
  if (value >= static_cast<double>(kMaxTokensPerCall))
    return kMaxTokensPerCall;
  return static_cast<std::int64_t>(value);
}

std::string string_member(const rapidjson::Value& object, const char* name) {
  if (!object.IsObject())
    return {};
  auto it = object.FindMember(name);
  if (it == object.MemberEnd() || !it->value.IsString())
    return {};
  return std::string(it->value.GetString(), it->value.GetStringLength());
}

// content may be a string, null, or an array of parts ({"type":"text","text":...}).
std::string content_text(const rapidjson::Value& message) {
  auto it = message.FindMember("content");
  if (it == message.MemberEnd())
    return {};
  if (it->value.IsString())
    return std::string(it->value.GetString(), it->value.GetStringLength());
  std::string text;
  if (it->value.IsArray()) {
    for (const auto& part : it->value.GetArray()) {
      if (part.IsString())
        text += part.GetString();
      if (part.IsObject())
        text += string_member(part, "text");
    }
  }
  return text;
}

// The arguments canonical (canonical_arguments): what the tool receives and what the next
// request sends back, whatever spacing or fence the provider's text had.
std::string arguments_text(const rapidjson::Value& function) {
  auto it = function.FindMember("arguments");
  if (it == function.MemberEnd() || it->value.IsNull())
    return "{}";
  if (it->value.IsString())
    return canonical_arguments(
        std::string_view(it->value.GetString(), it->value.GetStringLength()));
  return serialize(it->value);  // an object (or anything else) sent as JSON
}
}  // namespace

const ports::ToolSchema& finish_tool_schema() {
  static const ports::ToolSchema kSchema{
      std::string(kFinishTool),
      "Declare the final result of the task and stop. Call it exactly once, as the last "
      "action. type: action_completed when the action was performed (message says what "
      "was done); need_clarification when several indistinguishable matches were found "
      "after searching (list at most 5 in options, say how to re-ask); error when it "
      "cannot be done (message says why, no suggestions).",
      R"({"type":"object","properties":{"type":{"type":"string","enum":["action_completed","need_clarification","error"]},"message":{"type":"string"},"options":{"type":"array","items":{"type":"string"},"maxItems":5}},"required":["type","message"],"additionalProperties":false})"};
  return kSchema;
}

ChatProtocol chat_protocol(std::string_view name) {
  return name == "react_json" ? ChatProtocol::kReactJson : ChatProtocol::kFunctionCalling;
}

namespace {
void write_tools(Writer& w, const std::vector<ports::ToolSchema>& tools) {
  w.StartArray();
  for (const auto& tool : tools) {
    w.StartObject();
    w.Key("type");
    w.String("function");
    w.Key("function");
    w.StartObject();
    w.Key("name");
    write_string(w, tool.name);
    w.Key("description");
    write_string(w, tool.description);
    w.Key("parameters");
    w.RawValue(tool.parameters.data(), tool.parameters.size(), rapidjson::kObjectType);
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
}

bool echoes_reasoning(const Message& m, ReasoningEcho echo) {
  return m.role == Role::kAssistant &&
         (echo == ReasoningEcho::kAll ||
          (echo == ReasoningEcho::kToolTurns && !m.tool_calls.empty()));
}

void write_function_calling_message(Writer& w, const Message& m, ReasoningEcho echo) {
  w.StartObject();
  w.Key("role");
  write_string(w, to_string(m.role));
  w.Key("content");
  if (m.role == Role::kAssistant && m.content.empty() && !m.tool_calls.empty()) {
    w.Null();
  } else {
    write_string(w, m.content);
  }
  if (!m.tool_calls.empty()) {
    w.Key("tool_calls");
    w.StartArray();
    for (const ToolCall& call : m.tool_calls) {
      w.StartObject();
      w.Key("id");
      write_string(w, call.id);
      w.Key("type");
      w.String("function");
      w.Key("function");
      w.StartObject();
      w.Key("name");
      write_string(w, call.name);
      w.Key("arguments");
      write_string(w, call.arguments);
      w.EndObject();
      w.EndObject();
    }
    w.EndArray();
  }
  if (echoes_reasoning(m, echo)) {
    w.Key("reasoning_content");
    write_string(w, m.reasoning);
  }
  if (m.role == Role::kTool) {
    w.Key("tool_call_id");
    write_string(w, m.tool_call_id);
    if (!m.name.empty()) {
      w.Key("name");
      write_string(w, m.name);
    }
  }
  w.EndObject();
}

// `{"model", "temperature", "max_tokens"` (and the stream's options) of a request, its
// object left open.
void write_request_head(Writer& w, const ChatRequestOptions& options) {
  w.StartObject();
  w.Key("model");
  write_string(w, options.provider_model);
  w.Key("temperature");
  w.Double(options.temperature);
  w.Key("max_tokens");
  w.Int(options.max_tokens);
  if (options.stream) {
    w.Key("stream");
    w.Bool(true);
    w.Key("stream_options");
    w.StartObject();
    w.Key("include_usage");
    w.Bool(true);
    w.EndObject();
  }
}

void write_plain_message(Writer& w, std::string_view role, std::string_view content) {
  w.StartObject();
  w.Key("role");
  write_string(w, role);
  w.Key("content");
  write_string(w, content);
  w.EndObject();
}

// An assistant turn with tool calls but no text (not a react_json reply, for example one
// recorded before the model's protocol changed), written as the protocol's own JSON.
std::string react_json_text_of(const Message& m) {
  if (!m.content.empty() || m.tool_calls.empty())
    return m.content;
  const ToolCall& call = m.tool_calls.front();
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("action");
  write_string(w, call.name);
  w.Key("action_input");
  rapidjson::Document arguments;
  if (parse_json(arguments, call.arguments) && arguments.IsObject()) {
    arguments.Accept(w);
  } else {
    w.StartObject();
    w.EndObject();
  }
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

void write_react_json_messages(Writer& w, const std::vector<Message>& messages,
                               const std::vector<ports::ToolSchema>& tools) {
  const std::string addendum = react_json_addendum(tools);
  const bool has_system = std::any_of(messages.begin(), messages.end(),
                                      [](const Message& m) { return m.role == Role::kSystem; });
  bool added = false;
  if (!has_system) {
    write_plain_message(w, "system", addendum);
    added = true;
  }
  for (const Message& m : messages) {
    switch (m.role) {
      case Role::kSystem:
        write_plain_message(w, "system", added ? m.content : m.content + addendum);
        added = true;
        break;
      case Role::kUser:
        write_plain_message(w, "user", m.content);
        break;
      case Role::kAssistant:
        write_plain_message(w, "assistant", react_json_text_of(m));
        break;
      case Role::kTool:
        write_plain_message(w, "user", "Observation: " + m.content);
        break;
    }
  }
}
}  // namespace

std::string build_chat_request(const ChatRequestOptions& options,
                               const std::vector<Message>& messages,
                               const std::vector<ports::ToolSchema>& tools) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  write_request_head(w, options);
  w.Key("messages");
  w.StartArray();
  if (options.protocol == ChatProtocol::kReactJson) {
    write_react_json_messages(w, messages, tools);
  } else {
    for (const Message& m : messages)
      write_function_calling_message(w, m, options.reasoning_echo);
  }
  w.EndArray();
  if (options.protocol == ChatProtocol::kFunctionCalling && !tools.empty()) {
    w.Key("tools");
    write_tools(w, tools);
    w.Key("tool_choice");
    w.String("auto");
  }
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::string encode_tools(const std::vector<ports::ToolSchema>& tools) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  write_tools(w, tools);
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::string assemble_chat_request(const ChatRequestOptions& options, std::string_view messages_json,
                                  std::string_view tools_json) {
  const bool with_tools = !tools_json.empty() && tools_json != "[]";
  // The head through a writer (as build_chat_request writes it), the parts copied whole:
  // copying them through the writer would cost as much as encoding them again.
  rapidjson::StringBuffer head;
  Writer w(head);
  write_request_head(w, options);
  std::string body;
  body.reserve(head.GetSize() + messages_json.size() + tools_json.size() + 64);
  body.append(head.GetString(), head.GetSize());
  body += R"(,"messages":)";
  body += messages_json;
  if (with_tools) {
    body += R"(,"tools":)";
    body += tools_json;
    body += R"(,"tool_choice":"auto")";
  }
  body += '}';
  return body;
}

void ConversationEncoder::sync(std::uint64_t conversation, const std::vector<Message>& messages,
                               ReasoningEcho echo) {
  if (conversation == 0 || conversation != conversation_ || messages.size() < encoded_ ||
      echo != echo_) {
    conversation_ = conversation;
    echo_ = echo;
    encoded_ = 0;
    json_ = "[]";
    tokens_ = 0;
  } else {
    reused_ += encoded_;
  }
  if (encoded_ == messages.size())
    return;
  // Each message is written on its own and spliced in before the closing bracket.
  rapidjson::StringBuffer buffer;
  json_.pop_back();
  for (std::size_t i = encoded_; i < messages.size(); ++i) {
    buffer.Clear();
    Writer w(buffer);
    write_function_calling_message(w, messages[i], echo);
    if (i > 0)
      json_ += ',';
    json_.append(buffer.GetString(), buffer.GetSize());
    tokens_ += react::estimate_tokens(messages[i]);
    if (echoes_reasoning(messages[i], echo))
      tokens_ += react::estimate_tokens(messages[i].reasoning);
  }
  json_ += ']';
  encoded_ = messages.size();
}

std::int64_t estimate_tool_tokens(const std::vector<ports::ToolSchema>& tools,
                                  ChatProtocol protocol) {
  if (tools.empty() && protocol == ChatProtocol::kFunctionCalling)
    return 0;
  if (protocol == ChatProtocol::kReactJson)
    return react::estimate_tokens(react_json_addendum(tools));
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  write_tools(w, tools);
  return react::estimate_tokens(std::string_view(buffer.GetString(), buffer.GetSize()));
}

FinishCall parse_finish_arguments(std::string_view arguments_json) {
  FinishCall finish;
  rapidjson::Document doc;
  if (!parse_json(doc, arguments_json) || !doc.IsObject()) {
    finish.problem = "finish arguments must be a JSON object";
    return finish;
  }
  const std::string type = string_member(doc, "type").empty() ? string_member(doc, "result_type")
                                                              : string_member(doc, "type");
  auto parsed = parse_result_type(type);
  if (!parsed) {
    finish.problem = "finish.type must be action_completed, need_clarification or error";
    return finish;
  }
  finish.result.type = *parsed;
  auto message = doc.FindMember("message");
  if (message == doc.MemberEnd() || !message->value.IsString()) {
    finish.problem = "finish.message must be a string";
    return finish;
  }
  finish.result.message.assign(message->value.GetString(), message->value.GetStringLength());
  auto options = doc.FindMember("options");
  if (options != doc.MemberEnd() && options->value.IsArray()) {
    for (const auto& option : options->value.GetArray()) {
      if (finish.result.options.size() == 5)
        break;  // at most five choices are shown
      if (option.IsString())
        finish.result.options.emplace_back(option.GetString(), option.GetStringLength());
    }
  }
  return finish;
}

namespace {
// The usage object of a chat completion (OpenAI's fields, DeepSeek's cache counters); nullopt
// when there is none, or it counts nothing (a server that does not count).
std::optional<TokenUsage> usage_of(const rapidjson::Value& doc) {
  auto usage_it = doc.FindMember("usage");
  if (usage_it == doc.MemberEnd() || !usage_it->value.IsObject())
    return std::nullopt;
  const auto& usage = usage_it->value;
  TokenUsage out;
  out.input = int_member(usage, "prompt_tokens");
  out.output = int_member(usage, "completion_tokens");
  auto details = usage.FindMember("prompt_tokens_details");
  if (details != usage.MemberEnd())
    out.cached_input = int_member(details->value, "cached_tokens");
  if (out.cached_input == 0)
    out.cached_input = int_member(usage, "prompt_cache_hit_tokens");  // DeepSeek
  auto completion = usage.FindMember("completion_tokens_details");
  if (completion != usage.MemberEnd())
    out.reasoning = int_member(completion->value, "reasoning_tokens");
  out.cached_input = std::min(out.cached_input, out.input);
  if (out.input == 0 && out.output == 0)
    return std::nullopt;
  return out;
}
}  // namespace

std::optional<TokenUsage> parse_usage(std::string_view body) {
  rapidjson::Document doc;
  if (!parse_json(doc, body) || !doc.IsObject())
    return std::nullopt;
  return usage_of(doc);
}

Result<ModelReply> parse_chat_response(std::string_view body) {
  rapidjson::Document doc;
  if (!parse_json(doc, body) || !doc.IsObject()) {
    return Error{ErrorKind::kInvalid, "model response is not a JSON object"};
  }
  auto choices = doc.FindMember("choices");
  if (choices == doc.MemberEnd() || !choices->value.IsArray() || choices->value.Empty() ||
      !choices->value[0].IsObject()) {
    return Error{ErrorKind::kInvalid, "model response has no choices"};
  }
  const rapidjson::Value& choice = choices->value[0];
  auto message_it = choice.FindMember("message");
  if (message_it == choice.MemberEnd() || !message_it->value.IsObject()) {
    return Error{ErrorKind::kInvalid, "model response choice has no message"};
  }
  const rapidjson::Value& message = message_it->value;

  ModelReply reply;
  reply.content = content_text(message);
  reply.reasoning = string_member(message, "reasoning_content");
  if (reply.reasoning.empty())
    reply.reasoning = string_member(message, "reasoning");
  reply.finish_reason = string_member(choice, "finish_reason");
  reply.provider_model = string_member(doc, "model");

  std::set<std::string> seen_ids;
  auto add_call = [&](const rapidjson::Value& function, std::string id) {
    ToolCall call;
    call.name = string_member(function, "name");
    call.arguments = arguments_text(function);
    // Providers omit or repeat ids; every call needs its own so each result finds it.
    if (id.empty() || seen_ids.count(id)) {
      id = "call_" + std::to_string(reply.tool_calls.size());
      while (seen_ids.count(id))
        id += "_";
    }
    seen_ids.insert(id);
    call.id = std::move(id);
    reply.tool_calls.push_back(std::move(call));
  };
  auto tool_calls = message.FindMember("tool_calls");
  if (tool_calls != message.MemberEnd() && tool_calls->value.IsArray()) {
    for (const auto& entry : tool_calls->value.GetArray()) {
      if (!entry.IsObject())
        continue;
      auto function = entry.FindMember("function");
      if (function == entry.MemberEnd() || !function->value.IsObject())
        continue;
      add_call(function->value, string_member(entry, "id"));
    }
  }
  auto legacy = message.FindMember("function_call");
  if (reply.tool_calls.empty() && legacy != message.MemberEnd() && legacy->value.IsObject()) {
    add_call(legacy->value, {});
  }
  for (const ToolCall& call : reply.tool_calls) {
    if (call.name == kFinishTool) {
      reply.finish = parse_finish_arguments(call.arguments);
      break;
    }
  }

  const std::optional<TokenUsage> usage = usage_of(doc);
  if (usage)
    reply.usage = *usage;
  reply.usage_estimated = !usage;  // the caller fills in an estimate
  // Strings may carry \u0000 escapes; nothing downstream (Postgres, headers) accepts NUL.
  reply.content = sanitize_text(reply.content);
  reply.reasoning = sanitize_text(reply.reasoning);
  for (ToolCall& call : reply.tool_calls) {
    call.name = sanitize_text(call.name);
    call.arguments = sanitize_text(call.arguments);
  }
  if (reply.finish) {
    reply.finish->result.message = sanitize_text(reply.finish->result.message);
    for (auto& option : reply.finish->result.options)
      option = sanitize_text(option);
  }
  return reply;
}

}  // namespace agentfleet::codec
