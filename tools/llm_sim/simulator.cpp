#include "tools/llm_sim/simulator.hpp"

#include <charconv>
#include <cstdio>
#include <set>
#include <vector>

#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "core/react/react_loop.hpp"

namespace agentfleet::llm_sim {

namespace {

using rapidjson::Value;
using Allocator = rapidjson::Document::AllocatorType;

constexpr std::int64_t kMaxRepeat = 1000;

std::string_view string_of(const Value& value) {
  return value.IsString() ? std::string_view(value.GetString(), value.GetStringLength())
                          : std::string_view();
}

const Value* member(const Value& object, const char* name) {
  if (!object.IsObject()) {
    return nullptr;
  }
  const auto it = object.FindMember(name);
  return it == object.MemberEnd() ? nullptr : &it->value;
}

std::string_view role_of(const Value& message) {
  const Value* role = member(message, "role");
  return role == nullptr ? std::string_view() : string_of(*role);
}

// The text of a message's content: a string, or the `text` of each part of an array.
std::string content_text(const Value& message) {
  const Value* content = member(message, "content");
  if (content == nullptr) {
    return {};
  }
  if (content->IsString()) {
    return std::string(string_of(*content));
  }
  std::string text;
  if (content->IsArray()) {
    for (const auto& part : content->GetArray()) {
      if (const Value* part_text = member(part, "text")) {
        text += string_of(*part_text);
      }
    }
  }
  return text;
}

std::string compact_json(const Value& value) {
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> writer(out);
  value.Accept(writer);
  return std::string(out.GetString(), out.GetSize());
}

Value string_value(std::string_view text, Allocator& allocator) {
  return Value(text.data(), static_cast<rapidjson::SizeType>(text.size()), allocator);
}

std::string format_date(std::chrono::year_month_day date) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "%04d-%02u-%02u", static_cast<int>(date.year()),
                static_cast<unsigned>(date.month()), static_cast<unsigned>(date.day()));
  return buffer;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// The first valid YYYY-MM-DD in `text` that is not part of a longer run of digits.
std::optional<std::chrono::year_month_day> first_date(std::string_view text) {
  for (std::size_t i = 0; i + 10 <= text.size(); ++i) {
    if (i > 0 && is_digit(text[i - 1])) {
      continue;
    }
    const std::string_view candidate = text.substr(i, 10);
    bool shape = candidate[4] == '-' && candidate[7] == '-';
    for (std::size_t j : {0, 1, 2, 3, 5, 6, 8, 9}) {
      shape = shape && is_digit(candidate[j]);
    }
    if (!shape || (i + 10 < text.size() && is_digit(text[i + 10]))) {
      continue;
    }
    int year = 0;
    unsigned month = 0;
    unsigned day = 0;
    std::from_chars(candidate.data(), candidate.data() + 4, year);
    std::from_chars(candidate.data() + 5, candidate.data() + 7, month);
    std::from_chars(candidate.data() + 8, candidate.data() + 10, day);
    const std::chrono::year_month_day date{std::chrono::year{year}, std::chrono::month{month},
                                           std::chrono::day{day}};
    if (date.ok()) {
      return date;
    }
  }
  return std::nullopt;
}

// Cuts `text` to at most `limit` bytes without splitting a UTF-8 sequence.
std::string_view utf8_prefix(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) {
    return text;
  }
  std::size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
    --end;
  return text.substr(0, end);
}

struct FinishOutcome {
  FinishType type = FinishType::kError;
  std::string message;
  std::vector<std::string> options;
};

struct RenderedCall {
  std::string tool;
  std::string arguments;  // JSON text
};

// What a step resolved to: tool calls, or a finish (scripted or synthesized by llm-sim).
struct StepOutcome {
  std::optional<std::string> content;
  std::vector<RenderedCall> calls;
  std::optional<FinishOutcome> finish;
};

StepOutcome simulator_error(std::string message) {
  StepOutcome outcome;
  outcome.finish = FinishOutcome{FinishType::kError, std::move(message), {}};
  return outcome;
}

// A repeat count: empty text means 1; otherwise an integer from 0 to kMaxRepeat.
std::optional<std::int64_t> repeat_count(const std::optional<Template>& repeat,
                                         const Scope& scope) {
  if (!repeat) {
    return 1;
  }
  const std::string text = repeat->render(scope);
  if (text.empty()) {
    return 1;
  }
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0 || value > kMaxRepeat) {
    return std::nullopt;
  }
  return value;
}

Value render_argument(const ArgumentNode& node, const Scope& scope, Allocator& allocator) {
  switch (node.kind) {
    case ArgumentNode::Kind::kNull:
      return Value(rapidjson::kNullType);
    case ArgumentNode::Kind::kBool:
      return Value(node.boolean);
    case ArgumentNode::Kind::kInt:
      return Value(node.integer);
    case ArgumentNode::Kind::kDouble:
      return Value(node.number);
    case ArgumentNode::Kind::kText:
      return node.text.render_value(scope, allocator);
    case ArgumentNode::Kind::kArray: {
      Value array(rapidjson::kArrayType);
      for (const auto& element : node.elements) {
        array.PushBack(render_argument(element, scope, allocator), allocator);
      }
      return array;
    }
    case ArgumentNode::Kind::kObject: {
      Value object(rapidjson::kObjectType);
      for (const auto& [key, value] : node.members) {
        object.AddMember(string_value(key, allocator), render_argument(value, scope, allocator),
                         allocator);
      }
      return object;
    }
  }
  return Value(rapidjson::kNullType);
}

FinishOutcome render_finish(const FinishSpec& spec, const Value& context) {
  const Scope scope{&context, nullptr};
  FinishOutcome outcome{spec.type, spec.message.render(scope), {}};
  for (const auto& option : spec.options) {
    outcome.options.push_back(option.render(scope));
  }
  if (spec.options_from) {
    const Value* list = resolve_path(context, spec.options_from->path);
    if (list != nullptr && list->IsArray()) {
      for (const auto& element : list->GetArray()) {
        if (static_cast<std::int64_t>(outcome.options.size()) >= spec.options_from->limit) {
          break;
        }
        outcome.options.push_back(spec.options_from->format.render(Scope{&element, &context}));
      }
    }
  }
  return outcome;
}

// The conversation as llm-sim reads it from the request.
struct Conversation {
  std::string user_text;
  // plan_execute: the role line of the system message ("planner", ...), its round and plan
  // step, and the last user message (what the step is about); empty role otherwise.
  std::string role;
  std::int64_t round = 1;
  std::int64_t plan_step = 0;
  std::string material;
  std::optional<std::chrono::year_month_day> system_date;
  std::size_t step = 0;  // assistant messages after the last user message (this task's)
  // Assistant messages before it: an earlier conversation a follow-up task carries on.
  std::size_t earlier_steps = 0;
  std::set<std::string, std::less<>> offered_tools;
  Protocol protocol = Protocol::kFunctionCalling;
};

std::string_view trim(std::string_view text) {
  const auto begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) {
    return {};
  }
  const auto end = text.find_last_not_of(" \t\r\n");
  return text.substr(begin, end - begin + 1);
}

// True when one line of `text` is exactly the react_json marker (surrounding blanks aside).
bool has_react_marker(std::string_view text) {
  while (!text.empty()) {
    const auto newline = text.find('\n');
    if (trim(text.substr(0, newline)) == kReactJsonMarker) {
      return true;
    }
    if (newline == std::string_view::npos) {
      break;
    }
    text = text.substr(newline + 1);
  }
  return false;
}

// The JSON text of a react_json observation, or nullopt when `text` is not one.
std::optional<std::string_view> observation_of(std::string_view text) {
  const std::string_view trimmed = trim(text);
  if (trimmed.substr(0, kObservationPrefix.size()) != kObservationPrefix) {
    return std::nullopt;
  }
  return trim(trimmed.substr(kObservationPrefix.size()));
}

// A tool result as the scenario sees it: JSON when it parses, else the text.
Value result_value(std::string_view text, Allocator& allocator) {
  if (text.empty()) {
    return Value();
  }
  rapidjson::Document parsed;
  parsed.Parse(text.data(), text.size());
  if (parsed.HasParseError()) {
    return string_value(text, allocator);  // a non-JSON tool answer stays text
  }
  Value result;
  result.CopyFrom(parsed, allocator);
  return result;
}

// react_json: the observations after each assistant message are its results, in order.
void collect_observations(const Value& messages, Value& steps, Allocator& allocator) {
  for (const auto& message : messages.GetArray()) {
    const std::string_view role = role_of(message);
    if (role == "assistant") {
      steps.PushBack(Value(rapidjson::kArrayType), allocator);
      continue;
    }
    if (role != "user" || steps.Empty()) {
      continue;
    }
    const std::string text = content_text(message);
    if (const auto observation = observation_of(text)) {
      steps[steps.Size() - 1].PushBack(result_value(*observation, allocator), allocator);
    }
  }
}

// Reads the tool results of every earlier step into `steps` (an array of arrays, one per
// assistant message). A result goes to the call whose id its `tool_call_id` names, else to
// the first call still without one, so results also line up when ids are missing.
void collect_results(const Value& messages, Value& steps, Allocator& allocator) {
  struct Calls {
    std::vector<std::string> ids;
    std::vector<bool> answered;
  };
  std::vector<Calls> history;
  for (const auto& message : messages.GetArray()) {
    const std::string_view role = role_of(message);
    if (role == "assistant") {
      Calls calls;
      if (const Value* list = member(message, "tool_calls"); list && list->IsArray()) {
        for (const auto& call : list->GetArray()) {
          const Value* id = member(call, "id");
          calls.ids.emplace_back(id ? string_of(*id) : std::string_view());
        }
      } else if (const Value* legacy = member(message, "function_call");
                 legacy && legacy->IsObject()) {
        calls.ids.emplace_back();  // the legacy shape: one call, no id
      }
      calls.answered.assign(calls.ids.size(), false);
      Value results(rapidjson::kArrayType);
      for (std::size_t i = 0; i < calls.ids.size(); ++i) {
        results.PushBack(Value(), allocator);
      }
      steps.PushBack(results, allocator);
      history.push_back(std::move(calls));
      continue;
    }
    if ((role != "tool" && role != "function") || history.empty()) {
      continue;
    }

    Value result = result_value(content_text(message), allocator);  // null when empty
    Calls& calls = history.back();
    const Value* id_value = member(message, "tool_call_id");
    const std::string_view id = id_value ? string_of(*id_value) : std::string_view();
    std::size_t slot = calls.ids.size();
    for (std::size_t i = 0; i < calls.ids.size() && slot == calls.ids.size(); ++i) {
      if (!calls.answered[i] && !id.empty() && calls.ids[i] == id) {
        slot = i;
      }
    }
    for (std::size_t i = 0; i < calls.ids.size() && slot == calls.ids.size(); ++i) {
      if (!calls.answered[i]) {
        slot = i;
      }
    }
    Value& results = steps[steps.Size() - 1];
    if (slot == calls.ids.size()) {  // more results than calls: keep them, in order
      calls.ids.emplace_back(id);
      calls.answered.push_back(false);
      results.PushBack(Value(), allocator);
    }
    calls.answered[slot] = true;
    results[static_cast<rapidjson::SizeType>(slot)] = result;
  }
}

// DeepSeek's thinking mode: every assistant message with tool calls must carry its
// reasoning_content (a string, "" allowed) on every later request.
std::optional<RequestError> unreturned_reasoning(const rapidjson::Document& request) {
  const Value& messages = *member(request, "messages");
  for (rapidjson::SizeType i = 0; i < messages.Size(); ++i) {
    const Value& m = messages[i];
    const Value* role = member(m, "role");
    const Value* calls = member(m, "tool_calls");
    if (role == nullptr || !role->IsString() || string_of(*role) != "assistant" ||
        calls == nullptr || !calls->IsArray() || calls->Empty())
      continue;
    const Value* reasoning = member(m, "reasoning_content");
    if (reasoning == nullptr || !reasoning->IsString()) {
      return RequestError{
          "The reasoning_content in the thinking mode must be passed back to the API.",
          "messages[" + std::to_string(i) + "].reasoning_content"};
    }
  }
  return std::nullopt;
}

std::optional<RequestError> validate_request(const rapidjson::Document& request) {
  if (!request.IsObject()) {
    return RequestError{"the request body must be a JSON object", ""};
  }
  const Value* messages = member(request, "messages");
  if (messages == nullptr) {
    return RequestError{"'messages' is a required property", "messages"};
  }
  if (!messages->IsArray()) {
    return RequestError{"'messages' must be an array", "messages"};
  }
  if (messages->Empty()) {
    return RequestError{"'messages' must not be empty", "messages"};
  }
  for (rapidjson::SizeType i = 0; i < messages->Size(); ++i) {
    const std::string param = "messages[" + std::to_string(i) + "]";
    const Value& message = (*messages)[i];
    if (!message.IsObject()) {
      return RequestError{param + " must be an object", param};
    }
    const Value* role = member(message, "role");
    if (role == nullptr || !role->IsString()) {
      return RequestError{param + ".role must be a string", param + ".role"};
    }
  }
  // stream: true is answered as server-sent events by the server (streaming.hpp).
  if (const Value* stream = member(request, "stream"); stream && !stream->IsBool()) {
    return RequestError{"stream must be a boolean", "stream"};
  }
  return std::nullopt;
}

// plan_execute's material lists step results after one of these labels (the executor's:
// the steps it depends on; the critic's and the synthesizer's: every step run), as a JSON
// array of {step_number, ok, result}; each result that is JSON text becomes JSON.
constexpr std::string_view kResultLabels[] = {"依赖步骤的结果：", "已执行步骤的结果：",
                                              "各步骤的结果："};

Value dependency_results(std::string_view material, Allocator& allocator) {
  Value out(rapidjson::kArrayType);
  std::string_view rest;
  for (const std::string_view label : kResultLabels) {
    if (const auto at = material.find(label); at != std::string_view::npos) {
      rest = material.substr(at + label.size());
      const auto end = rest.find('\n');
      rest = rest.substr(0, end);
      break;
    }
  }
  if (rest.empty()) {
    return out;
  }
  rapidjson::Document doc(&allocator);
  doc.Parse(rest.data(), rest.size());
  if (doc.HasParseError() || !doc.IsArray()) {
    return out;
  }
  for (auto& item : doc.GetArray()) {
    if (Value* result = item.IsObject() ? &item : nullptr;
        result != nullptr && result->HasMember("result") && (*result)["result"].IsString()) {
      rapidjson::Document parsed(&allocator);
      const Value& text = (*result)["result"];
      parsed.Parse(text.GetString(), text.GetStringLength());
      if (!parsed.HasParseError()) {
        Value copy(parsed, allocator);
        (*result)["result"] = copy;
      }
    }
    Value element(item, allocator);
    out.PushBack(element, allocator);
  }
  return out;
}

// The value after `prefix` on a line of `text` that starts with it, trimmed; nullopt when no
// line does.
std::optional<std::string> line_value(std::string_view text, std::string_view prefix) {
  while (!text.empty()) {
    const auto newline = text.find('\n');
    const std::string_view line = trim(text.substr(0, newline));
    if (line.substr(0, prefix.size()) == prefix) {
      return std::string(trim(line.substr(prefix.size())));
    }
    if (newline == std::string_view::npos) {
      break;
    }
    text.remove_prefix(newline + 1);
  }
  return std::nullopt;
}

std::int64_t number_or(const std::optional<std::string>& text, std::int64_t fallback) {
  if (!text) {
    return fallback;
  }
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
  return error == std::errc() && end == text->data() + text->size() ? value : fallback;
}

Conversation read_conversation(const Value& request) {
  Conversation conversation;
  const Value& messages = *member(request, "messages");
  for (const auto& message : messages.GetArray()) {
    if (role_of(message) != "system") {
      continue;
    }
    const std::string text = content_text(message);
    if (has_react_marker(text)) {
      conversation.protocol = Protocol::kReactJson;
    }
    if (auto role = line_value(text, kAgentRoleLine)) {
      conversation.role = std::move(*role);
      conversation.round = number_or(line_value(text, kPlanRoundLine), 1);
      conversation.plan_step = number_or(line_value(text, kPlanStepLine), 0);
    }
  }
  const bool react = conversation.protocol == Protocol::kReactJson;
  bool first_user = true;
  for (const auto& message : messages.GetArray()) {
    const std::string_view role = role_of(message);
    if (role == "assistant") {
      ++conversation.step;
    } else if (role == "user") {
      std::string text = content_text(message);
      if (text == react::kCorrection) {
        // The worker's answer to a plain-text reply, not the user's text: the scenario
        // goes on at its next step.
      } else if (!conversation.role.empty()) {
        // plan_execute: the task's text comes first, what the call is about last.
        (first_user ? conversation.user_text : conversation.material) = std::move(text);
        first_user = false;
      } else if (!react || !observation_of(text)) {
        conversation.user_text = std::move(text);
        conversation.earlier_steps += conversation.step;
        conversation.step = 0;
      }
    } else if (role == "system" && !conversation.system_date) {
      conversation.system_date = first_date(content_text(message));
    }
  }
  if (const Value* tools = member(request, "tools"); tools && tools->IsArray()) {
    for (const auto& tool : tools->GetArray()) {
      const Value* function = member(tool, "function");
      const Value* name = function ? member(*function, "name") : nullptr;
      if (name != nullptr && name->IsString()) {
        conversation.offered_tools.emplace(string_of(*name));
      }
    }
  }
  return conversation;
}

// Resolves the step at `conversation.step` of `steps` (a scenario's, or one role's)
// against `context`; past the end, the last step answers when `repeat_last`.
StepOutcome run_step(const Scenario& scenario, const std::vector<Step>& steps,
                     const Conversation& conversation, const Value& context, Allocator& allocator,
                     bool repeat_last) {
  const Scope scope{&context, nullptr};
  std::size_t remaining = conversation.step;
  const Step* current = nullptr;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& step = steps[i];
    const auto count = repeat_count(step.repeat, scope);
    if (!count) {
      return simulator_error("场景「" + scenario.name + "」第 " + std::to_string(i) +
                             " 步的 repeat 不是 0 到 1000 的整数：" + step.repeat->render(scope));
    }
    if (remaining < static_cast<std::size_t>(*count)) {
      current = &step;
      break;
    }
    remaining -= static_cast<std::size_t>(*count);
  }
  if (current == nullptr && repeat_last && !steps.empty()) {
    current = &steps.back();
  }
  if (current == nullptr) {
    return simulator_error("场景已结束");
  }

  const Action* action = current->action ? &*current->action : nullptr;
  for (const auto& branch : current->branches) {
    bool holds = true;
    for (const auto& condition : branch.when) {
      holds = holds && condition.holds(context);
    }
    if (holds) {
      action = &branch.action;
      break;
    }
  }
  if (action == nullptr) {
    return simulator_error("场景「" + scenario.name + "」第 " + std::to_string(conversation.step) +
                           " 步没有符合条件的分支");
  }

  StepOutcome outcome;
  if (action->content) {
    outcome.content = action->content->render(scope);
  }
  if (action->finish) {
    outcome.finish = render_finish(*action->finish, context);
    return outcome;
  }
  if (action->calls.empty()) {
    return outcome;  // a text answer (plan_execute's planner, executor, critic)
  }
  for (const auto& call : action->calls) {
    // react_json lists its tools in the prompt's text, which llm-sim does not read.
    if (conversation.protocol == Protocol::kFunctionCalling &&
        conversation.offered_tools.find(call.tool) == conversation.offered_tools.end()) {
      // A real model cannot call a tool it was not given.
      StepOutcome refused = simulator_error("工具「" + call.tool + "」不可用，无法完成该操作");
      refused.content = outcome.content;
      return refused;
    }
    const auto count = repeat_count(call.repeat, scope);
    if (!count) {
      return simulator_error("场景「" + scenario.name + "」调用 " + call.tool +
                             " 的 repeat 不是 0 到 1000 的整数：" + call.repeat->render(scope));
    }
    const std::string arguments = compact_json(render_argument(call.arguments, scope, allocator));
    for (std::int64_t i = 0; i < *count; ++i) {
      outcome.calls.push_back({call.tool, arguments});
    }
  }
  if (outcome.calls.empty()) {
    return simulator_error("场景「" + scenario.name + "」第 " + std::to_string(conversation.step) +
                           " 步没有工具调用（repeat 为 0）");
  }
  return outcome;
}

std::string finish_arguments(const FinishOutcome& finish) {
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> writer(out);
  writer.StartObject();
  writer.Key("type");
  const std::string_view type = finish_type_name(finish.type);
  writer.String(type.data(), static_cast<rapidjson::SizeType>(type.size()));
  writer.Key("message");
  writer.String(finish.message.data(), static_cast<rapidjson::SizeType>(finish.message.size()));
  writer.Key("options");
  writer.StartArray();
  for (const auto& option : finish.options) {
    writer.String(option.data(), static_cast<rapidjson::SizeType>(option.size()));
  }
  writer.EndArray();
  writer.EndObject();
  return std::string(out.GetString(), out.GetSize());
}

// The final answer as plain text, for a request that offers no `finish` function.
std::string finish_text(const FinishOutcome& finish) {
  std::string text;
  switch (finish.type) {
    case FinishType::kActionCompleted:
      text = "✅ ";
      break;
    case FinishType::kNeedClarification:
      text = "⚠️ ";
      break;
    case FinishType::kError:
      text = "❌ ";
      break;
  }
  text += finish.message;
  for (std::size_t i = 0; i < finish.options.size(); ++i) {
    text += "\n" + std::to_string(i + 1) + ". " + finish.options[i];
  }
  return text;
}

Value tool_call_value(std::size_t step, std::size_t index, std::string_view name,
                      std::string_view arguments, Allocator& allocator) {
  Value function(rapidjson::kObjectType);
  function.AddMember("name", string_value(name, allocator), allocator);
  function.AddMember("arguments", string_value(arguments, allocator), allocator);
  Value call(rapidjson::kObjectType);
  const std::string id = "call_" + std::to_string(step) + "_" + std::to_string(index);
  call.AddMember("id", string_value(id, allocator), allocator);
  call.AddMember("type", "function", allocator);
  call.AddMember("function", function, allocator);
  return call;
}

// react_json: the assistant's content for a step. Odd steps wrap the object in a ```json
// fence, as models often do, so a client's parser meets both forms.
std::string react_content(const StepOutcome& outcome, std::size_t step, std::string& summary) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  const auto text = [&](std::string_view value) {
    writer.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
  };
  if (!outcome.finish && outcome.calls.empty()) {
    summary = "text (react_json)";
    return outcome.content.value_or("");  // a plain-text answer, outside the protocol
  }
  writer.StartObject();
  writer.Key("thought");
  if (outcome.finish) {
    text(outcome.content.value_or("任务已有结论，给出最终结果。"));
    writer.Key("final");
    writer.StartObject();
    writer.Key("type");
    text(finish_type_name(outcome.finish->type));
    writer.Key("message");
    text(outcome.finish->message);
    writer.Key("options");
    writer.StartArray();
    for (const auto& option : outcome.finish->options) {
      text(option);
    }
    writer.EndArray();
    writer.EndObject();
    summary = "final " + std::string(finish_type_name(outcome.finish->type));
  } else {
    // One action per answer in this protocol: a step scripted with several calls sends
    // its first.
    const RenderedCall& call = outcome.calls.front();
    text(outcome.content.value_or("调用 " + call.tool + "。"));
    writer.Key("action");
    text(call.tool);
    writer.Key("action_input");
    writer.RawValue(call.arguments.data(), call.arguments.size(), rapidjson::kObjectType);
    summary = "action " + call.tool;
    if (outcome.calls.size() > 1) {
      summary += " (first of " + std::to_string(outcome.calls.size()) + ")";
    }
  }
  writer.EndObject();
  const std::string json(buffer.GetString(), buffer.GetSize());
  summary += " (react_json)";
  return step % 2 == 1 ? "```json\n" + json + "\n```" : json;
}

// The tool calls of an assistant message written as text, as a model served without a
// tool-call parser writes them in `style` (a *_text style).
std::string calls_as_text(ResponseStyle style, std::string_view content, const Value& calls) {
  const auto call_json = [](const Value& call, bool wrap_arguments) {
    const Value& function = call["function"];
    rapidjson::Document arguments;
    arguments.Parse(function["arguments"].GetString(), function["arguments"].GetStringLength());
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
    if (wrap_arguments) {
      writer.StartObject();
      writer.Key("name");
      writer.String(function["name"].GetString(), function["name"].GetStringLength());
      writer.Key("arguments");
    }
    arguments.Accept(writer);
    if (wrap_arguments)
      writer.EndObject();
    return std::string(buffer.GetString(), buffer.GetSize());
  };
  std::string text(content);
  switch (style) {
    case ResponseStyle::kHermesText:
      for (const auto& call : calls.GetArray())
        text += "\n<tool_call>\n" + call_json(call, true) + "\n</tool_call>";
      break;
    case ResponseStyle::kLlamaText:
      for (const auto& call : calls.GetArray()) {
        text += "<function=" + std::string(string_of(call["function"]["name"])) + ">" +
                call_json(call, false) + "</function>";
      }
      break;
    case ResponseStyle::kMistralText: {
      std::string list;
      for (const auto& call : calls.GetArray())
        list += (list.empty() ? "" : ", ") + call_json(call, true);
      text += "[TOOL_CALLS] [" + list + "]";
      break;
    }
    case ResponseStyle::kJsonText:
    default:
      if (calls.Size() == 1)
        return call_json(calls[0], true);
      text = "[";
      for (const auto& call : calls.GetArray())
        text += (text.size() == 1 ? "" : ", ") + call_json(call, true);
      text += "]";
      break;
  }
  return text;
}

// Reshapes an OpenAI-style assistant message (and its usage) into `style`.
void apply_style(ResponseStyle style, std::size_t step, Value& message, std::string& finish_reason,
                 Usage& usage, Allocator& allocator) {
  const auto calls_member = message.FindMember("tool_calls");
  Value* calls = calls_member == message.MemberEnd() ? nullptr : &calls_member->value;
  switch (style) {
    case ResponseStyle::kOpenAI:
    case ResponseStyle::kDeepseekUsage:  // only the usage differs
    case ResponseStyle::kNoUsage:
      break;
    case ResponseStyle::kArgumentsObject:
      if (calls == nullptr) {
        break;
      }
      for (auto& call : calls->GetArray()) {
        Value& arguments = call["function"]["arguments"];
        rapidjson::Document parsed;
        parsed.Parse(arguments.GetString(), arguments.GetStringLength());
        arguments.CopyFrom(parsed, allocator);
      }
      break;
    case ResponseStyle::kArgumentsEmpty:
      if (calls == nullptr) {
        break;
      }
      for (auto& call : calls->GetArray()) {
        Value& arguments = call["function"]["arguments"];
        if (string_of(arguments) == "{}") {
          arguments.SetString("", allocator);
        }
      }
      break;
    case ResponseStyle::kMissingIds:
      if (calls == nullptr) {
        break;
      }
      for (auto& call : calls->GetArray()) {
        call.RemoveMember("id");
      }
      break;
    case ResponseStyle::kContentWithToolCalls:
      if (calls != nullptr && !message["content"].IsString()) {
        std::string text = "好的，我来调用";
        for (const auto& call : calls->GetArray()) {
          text += " " + std::string(string_of(call["function"]["name"]));
        }
        text += "。";
        message["content"] = string_value(text, allocator);
      }
      break;
    case ResponseStyle::kReasoningContent:
    case ResponseStyle::kDeepseekThinking: {
      std::string reasoning = "第 " + std::to_string(step) + " 步：";
      if (calls != nullptr) {
        reasoning += "需要调用工具";
        for (const auto& call : calls->GetArray()) {
          reasoning += " " + std::string(string_of(call["function"]["name"]));
        }
        reasoning += "。";
      } else {
        reasoning += "可以给出回答了。";
      }
      usage.reasoning_tokens = (count_code_points(reasoning) + 3) / 4;
      usage.completion_tokens += usage.reasoning_tokens;
      message.AddMember("reasoning_content", string_value(reasoning, allocator), allocator);
      break;
    }
    case ResponseStyle::kHermesText:
    case ResponseStyle::kLlamaText:
    case ResponseStyle::kMistralText:
    case ResponseStyle::kJsonText:
      if (calls != nullptr) {
        const std::string text = calls_as_text(
            style, message["content"].IsString() ? string_of(message["content"]) : "", *calls);
        message["content"] = string_value(text, allocator);
        message.RemoveMember("tool_calls");
        finish_reason = "stop";
      }
      break;
    case ResponseStyle::kLegacyFunctionCall:
      if (calls != nullptr) {
        // The legacy shape holds one call: later calls of the step are dropped.
        Value function(rapidjson::kObjectType);
        function.CopyFrom((*calls)[0]["function"], allocator);
        message.RemoveMember("tool_calls");
        message.AddMember("function_call", function, allocator);
        finish_reason = "function_call";
      }
      break;
  }
}

Value usage_value(const Usage& usage, ResponseStyle style, Allocator& allocator) {
  Value value(rapidjson::kObjectType);
  value.AddMember("prompt_tokens", usage.prompt_tokens, allocator);
  value.AddMember("completion_tokens", usage.completion_tokens, allocator);
  value.AddMember("total_tokens", usage.total_tokens(), allocator);
  if (style == ResponseStyle::kDeepseekUsage) {
    // DeepSeek's own counters only, so a client must read them.
    value.AddMember("prompt_cache_hit_tokens", usage.cached_tokens, allocator);
    value.AddMember("prompt_cache_miss_tokens", usage.prompt_tokens - usage.cached_tokens,
                    allocator);
    return value;
  }
  Value prompt_details(rapidjson::kObjectType);
  prompt_details.AddMember("cached_tokens", usage.cached_tokens, allocator);
  Value completion_details(rapidjson::kObjectType);
  completion_details.AddMember("reasoning_tokens", usage.reasoning_tokens, allocator);
  value.AddMember("prompt_tokens_details", prompt_details, allocator);
  value.AddMember("completion_tokens_details", completion_details, allocator);
  return value;
}

}  // namespace

std::string_view protocol_name(Protocol protocol) {
  return protocol == Protocol::kReactJson ? "react_json" : "function_calling";
}

Simulator::Simulator(ScenarioSet scenarios, std::string default_scenario)
    : set_(std::move(scenarios)) {
  if (default_scenario.empty()) {
    return;
  }
  for (std::size_t i = 0; i < set_.scenarios.size() && !default_index_; ++i) {
    if (set_.scenarios[i].name == default_scenario) {
      default_index_ = i;
      default_captures_ = {default_scenario};
    }
  }
  const std::string_view text = utf8_prefix(default_scenario, kMatchTextLimit);
  for (std::size_t i = 0; i < set_.scenarios.size() && !default_index_; ++i) {
    std::cmatch match;
    if (std::regex_search(text.data(), text.data() + text.size(), match, set_.scenarios[i].regex)) {
      default_index_ = i;
      for (const auto& group : match) {
        default_captures_.emplace_back(group.matched ? group.str() : "");
      }
    }
  }
  if (!default_index_) {
    throw std::invalid_argument("default scenario '" + default_scenario +
                                "' is neither a scenario name nor matched by any scenario");
  }
}

std::variant<Completion, RequestError> Simulator::complete(
    std::string_view body, std::chrono::system_clock::time_point now, std::uint64_t sequence,
    const CompletionOptions& options) const {
  rapidjson::Document request;
  request.Parse(body.data(), body.size());
  if (request.HasParseError()) {
    return RequestError{std::string("the request body is not valid JSON: ") +
                            rapidjson::GetParseError_En(request.GetParseError()) + " (at byte " +
                            std::to_string(request.GetErrorOffset()) + ")",
                        ""};
  }
  if (auto error = validate_request(request)) {
    return *error;
  }
  const Conversation conversation = read_conversation(request);

  // Choose the scenario: first `match` that finds the user text, else the default.
  const Scenario* scenario = nullptr;
  std::vector<std::string> captures{conversation.user_text};
  const std::string_view match_text = utf8_prefix(conversation.user_text, kMatchTextLimit);
  for (const auto& candidate : set_.scenarios) {
    std::cmatch match;
    if (std::regex_search(match_text.data(), match_text.data() + match_text.size(), match,
                          candidate.regex)) {
      scenario = &candidate;
      captures.clear();
      for (const auto& group : match) {
        captures.emplace_back(group.matched ? group.str() : "");
      }
      break;
    }
  }
  if (scenario == nullptr && default_index_) {
    scenario = &set_.scenarios[*default_index_];
    captures = default_captures_;
  }
  if (scenario == nullptr) {
    scenario = &set_.fallback;
  }

  // The context every template and condition reads.
  const auto today = conversation.system_date.value_or(
      std::chrono::year_month_day{std::chrono::floor<std::chrono::days>(now)});
  const auto tomorrow =
      std::chrono::year_month_day{std::chrono::sys_days{today} + std::chrono::days{1}};
  rapidjson::Document context(rapidjson::kObjectType);
  Allocator& allocator = context.GetAllocator();
  context.AddMember("today", string_value(format_date(today), allocator), allocator);
  context.AddMember("tomorrow", string_value(format_date(tomorrow), allocator), allocator);
  context.AddMember("year", string_value(format_date(today).substr(0, 4), allocator), allocator);
  context.AddMember("text", string_value(conversation.user_text, allocator), allocator);
  context.AddMember("step", Value(static_cast<std::uint64_t>(conversation.step)), allocator);
  Value match_array(rapidjson::kArrayType);
  for (const auto& capture : captures) {
    match_array.PushBack(string_value(capture, allocator), allocator);
  }
  context.AddMember("match", match_array, allocator);
  context.AddMember("round", Value(conversation.round), allocator);
  context.AddMember("plan_step", Value(conversation.plan_step), allocator);
  context.AddMember("deps", dependency_results(conversation.material, allocator), allocator);
  Value steps(rapidjson::kArrayType);
  if (conversation.protocol == Protocol::kReactJson) {
    collect_observations(*member(request, "messages"), steps, allocator);
  } else {
    collect_results(*member(request, "messages"), steps, allocator);
  }
  // The results of an earlier conversation (a follow-up's parent task), flattened, apart
  // from this task's steps.
  Value earlier(rapidjson::kArrayType);
  if (conversation.earlier_steps > 0 && conversation.earlier_steps <= steps.Size()) {
    Value own(rapidjson::kArrayType);
    for (rapidjson::SizeType i = 0; i < steps.Size(); ++i) {
      if (i < conversation.earlier_steps) {
        for (auto& result : steps[i].GetArray()) {
          earlier.PushBack(Value(result, allocator), allocator);
        }
      } else {
        own.PushBack(Value(steps[i], allocator), allocator);
      }
    }
    steps = std::move(own);
  }
  context.AddMember("earlier", earlier, allocator);
  Value previous(rapidjson::kArrayType);
  if (!steps.Empty()) {
    previous.CopyFrom(steps[steps.Size() - 1], allocator);
  }
  Value first;
  if (!previous.Empty()) {
    first.CopyFrom(previous[0], allocator);
  }
  context.AddMember("r", first, allocator);
  context.AddMember("results", previous, allocator);
  context.AddMember("steps", steps, allocator);

  StepOutcome outcome;
  if (!conversation.role.empty()) {
    // plan_execute: the role's steps, by round (by plan step for the executor).
    const auto& roles =
        scenario->roles.count(conversation.role) != 0 ? scenario->roles : builtin_role_steps();
    const auto role = roles.find(conversation.role);
    Conversation indexed = conversation;
    const std::int64_t index =
        (conversation.role == "executor" ? conversation.plan_step : conversation.round) - 1;
    indexed.step = static_cast<std::size_t>(std::max<std::int64_t>(0, index));
    outcome = role == roles.end()
                  ? simulator_error("未知角色「" + conversation.role + "」")
                  : run_step(*scenario, role->second, indexed, context, allocator, true);
  } else {
    const std::vector<Step>& scripted =
        scenario->steps.empty() ? set_.fallback.steps : scenario->steps;
    outcome = run_step(*scenario, scripted, conversation, context, allocator, false);
  }
  const ResponseStyle style = scenario->style.value_or(options.style);
  if (style == ResponseStyle::kDeepseekThinking) {
    if (auto error = unreturned_reasoning(request))
      return *error;
  }

  // The assistant message, first in OpenAI's shape: usage is counted on it, so every
  // style bills the same (reasoning_content adds its reasoning tokens).
  rapidjson::Document response(rapidjson::kObjectType);
  Allocator& out = response.GetAllocator();
  Value message(rapidjson::kObjectType);
  message.AddMember("role", "assistant", out);
  std::string finish_reason = "tool_calls";
  std::string summary;
  if (conversation.protocol == Protocol::kReactJson) {
    const std::string content = react_content(outcome, conversation.step, summary);
    message.AddMember("content", string_value(content, out), out);
    finish_reason = "stop";
  } else {
    Value tool_calls(rapidjson::kArrayType);
    if (outcome.finish) {
      summary = "finish " + std::string(finish_type_name(outcome.finish->type));
      if (conversation.offered_tools.count("finish") != 0) {
        tool_calls.PushBack(
            tool_call_value(conversation.step, 0, "finish", finish_arguments(*outcome.finish), out),
            out);
      } else {
        outcome.content = finish_text(*outcome.finish);
        finish_reason = "stop";
        summary += " (text)";
      }
    } else if (outcome.calls.empty()) {
      summary = "text";
      finish_reason = "stop";
    } else {
      summary = "tool_calls";
      for (std::size_t i = 0; i < outcome.calls.size(); ++i) {
        tool_calls.PushBack(tool_call_value(conversation.step, i, outcome.calls[i].tool,
                                            outcome.calls[i].arguments, out),
                            out);
        summary += " " + outcome.calls[i].tool;
      }
    }
    if (outcome.content) {
      message.AddMember("content", string_value(*outcome.content, out), out);
    } else {
      message.AddMember("content", Value(rapidjson::kNullType), out);
    }
    if (!tool_calls.Empty()) {
      message.AddMember("tool_calls", tool_calls, out);
    }
  }

  Completion completion;
  count_prompt(request, completion.usage);
  completion.usage.completion_tokens = count_completion(message);
  apply_style(style, conversation.step, message, finish_reason, completion.usage, out);
  completion.scenario = scenario->name;
  completion.step = conversation.step;
  completion.latency = scenario->latency;
  completion.protocol = conversation.protocol;
  completion.style = style;
  completion.summary = std::move(summary);

  const Value* model = member(request, "model");
  const std::string model_name =
      model != nullptr && model->IsString() ? std::string(string_of(*model)) : "llm-sim";
  const auto created =
      std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  const std::string id = "chatcmpl-sim-" + std::to_string(created) + "-" + std::to_string(sequence);

  Value choice(rapidjson::kObjectType);
  choice.AddMember("index", 0, out);
  choice.AddMember("message", message, out);
  choice.AddMember("logprobs", Value(rapidjson::kNullType), out);
  choice.AddMember("finish_reason", string_value(finish_reason, out), out);
  Value choices(rapidjson::kArrayType);
  choices.PushBack(choice, out);

  response.AddMember("id", string_value(id, out), out);
  response.AddMember("object", "chat.completion", out);
  response.AddMember("created", static_cast<std::int64_t>(created), out);
  response.AddMember("model", string_value(model_name, out), out);
  response.AddMember("system_fingerprint", "llm-sim", out);
  response.AddMember("choices", choices, out);
  if (style != ResponseStyle::kNoUsage)
    response.AddMember("usage", usage_value(completion.usage, style, out), out);
  completion.body = compact_json(response);
  return completion;
}

}  // namespace agentfleet::llm_sim
