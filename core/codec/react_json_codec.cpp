#include "core/codec/react_json_codec.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <optional>
#include <string_view>

#include "core/codec/json_text.hpp"
#include "core/codec/openai_codec.hpp"

namespace agentfleet::codec {

namespace {

constexpr std::string_view kFormatHint =
    R"(Answer with exactly one JSON object: {"thought": "...", "action": "<tool name>", )"
    R"("action_input": {...}} to call one tool, or {"thought": "...", "final": {"type": )"
    R"("action_completed|need_clarification|error", "message": "...", "options": [...]}} to )"
    R"(finish.)";

// Opening braces tried per reply at most: a hostile reply full of braces costs bounded work.
constexpr int kMaxCandidates = 64;

std::string serialize(const rapidjson::Value& value) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  value.Accept(writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

// The texts to search for the object, best first: the body of each ``` fence (an optional
// language tag such as `json` on the opening line), then the whole reply.
std::vector<std::string_view> regions(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  for (std::size_t open; (open = text.find("```", pos)) != std::string_view::npos;) {
    std::size_t body = open + 3;
    const std::size_t eol = text.find('\n', body);
    const std::string_view first_line =
        text.substr(body, eol == std::string_view::npos ? std::string_view::npos : eol - body);
    if (eol != std::string_view::npos && first_line.find('{') == std::string_view::npos)
      body = eol + 1;  // skip the language tag
    const std::size_t close = text.find("```", body);
    if (close == std::string_view::npos) {
      out.push_back(text.substr(body));  // an unclosed fence: the rest of the reply
      break;
    }
    out.push_back(text.substr(body, close - body));
    pos = close + 3;
  }
  out.push_back(text);
  return out;
}

// One past the brace that closes the object opened at text[start], matching braces outside
// strings; npos when it never closes.
std::size_t object_end(std::string_view text, std::size_t start) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = start; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

bool has_value(const rapidjson::Value& object, const char* name) {
  auto it = object.FindMember(name);
  return it != object.MemberEnd() && !it->value.IsNull();
}

// Finds the protocol object in `text`: the first JSON object, in region order, that has
// "action" or "final". `problem` says why none was found.
bool find_object(std::string_view text, rapidjson::Document& doc, std::string& problem) {
  bool saw_brace = false, saw_object = false;
  int attempts = 0;
  for (std::string_view region : regions(text)) {
    for (std::size_t start = region.find('{'); start != std::string_view::npos;
         start = region.find('{', start + 1)) {
      saw_brace = true;
      if (++attempts > kMaxCandidates)
        break;
      const std::size_t end = object_end(region, start);
      if (end == std::string_view::npos)
        continue;
      if (!parse_json(doc, region.substr(start, end - start)) || !doc.IsObject())
        continue;
      saw_object = true;
      if (has_value(doc, "action") || has_value(doc, "final"))
        return true;
    }
  }
  if (saw_object) {
    problem = R"(the JSON object has neither "action" nor "final")";
  } else if (saw_brace) {
    problem = "the reply holds no valid JSON object";
  } else {
    problem = "the reply holds no JSON object";
  }
  return false;
}

// action_input as the JSON text of an object: an object, a string holding one, or nothing.
std::optional<std::string> action_arguments(const rapidjson::Value& object) {
  auto it = object.FindMember("action_input");
  if (it == object.MemberEnd() || it->value.IsNull())
    return "{}";
  if (it->value.IsObject())
    return serialize(it->value);
  if (it->value.IsString()) {
    const std::string_view text(it->value.GetString(), it->value.GetStringLength());
    if (text.find_first_not_of(" \t\r\n") == std::string_view::npos)
      return "{}";
    rapidjson::Document inner;
    if (parse_json(inner, text) && inner.IsObject())
      return serialize(inner);
  }
  return std::nullopt;
}

void sanitize(ModelReply& reply) {
  if (reply.final_text)
    *reply.final_text = sanitize_text(*reply.final_text);
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
}

// Reads the protocol object into `reply`; the problem when it does not follow the format.
std::string interpret(const rapidjson::Value& object, ModelReply& reply, int step) {
  bool has_action = has_value(object, "action");
  const bool has_final = has_value(object, "final");
  if (has_action && has_final) {
    // {"action": "finish", "final": {...}} says the same thing twice: take the final.
    const rapidjson::Value& action = object["action"];
    const bool finish_named =
        action.IsString() &&
        std::string_view(action.GetString(), action.GetStringLength()) == kFinishTool;
    if (!finish_named || has_value(object, "action_input"))
      return R"(give either "action" or "final", not both)";
    has_action = false;
  }

  if (auto thought = object.FindMember("thought");
      thought != object.MemberEnd() && thought->value.IsString() && reply.reasoning.empty()) {
    reply.reasoning.assign(thought->value.GetString(), thought->value.GetStringLength());
  }

  ToolCall call;
  call.id = "rj-" + std::to_string(step);
  if (has_action) {
    const rapidjson::Value& action = object["action"];
    if (!action.IsString() || action.GetStringLength() == 0)
      return R"("action" must be the name of a tool, as a string)";
    call.name.assign(action.GetString(), action.GetStringLength());
    auto arguments = action_arguments(object);
    if (!arguments)
      return R"("action_input" must be a JSON object (or a string holding one))";
    call.arguments = std::move(*arguments);
  } else {
    const rapidjson::Value& final = object["final"];
    if (final.IsString()) {
      if (final.GetStringLength() == 0)
        return R"("final" must not be empty)";
      reply.final_text = std::string(final.GetString(), final.GetStringLength());
      return {};
    }
    if (!final.IsObject())
      return R"("final" must be an object {"type", "message", "options"})";
    call.name = std::string(kFinishTool);
    call.arguments = serialize(final);
  }
  if (call.name == kFinishTool)
    reply.finish = parse_finish_arguments(call.arguments);
  reply.tool_calls.push_back(std::move(call));
  return {};
}

}  // namespace

std::string react_json_addendum(const std::vector<ports::ToolSchema>& tools) {
  std::string out =
      "\n\n## Reply format\n"
      "Protocol: react_json\n"
      "You cannot call functions directly. Each reply is exactly one JSON object and nothing "
      "else:\n"
      "- to call one tool: "
      R"({"thought": "<your reasoning>", "action": "<tool name>", "action_input": {<arguments>}})"
      "\n"
      "- to finish: "
      R"({"thought": "<your reasoning>", "final": {"type": "action_completed|need_clarification|error", "message": "<the result>", "options": ["<at most 5>"]}})"
      "\n"
      "One action per reply. The next message then starts with \"Observation: \" followed by "
      "the tool's result as JSON (an {\"error\": ...} object when the call failed or was "
      "refused). Finishing is declared with \"final\" (or with the action finish and its "
      "arguments in action_input).\n"
      "\n## Tools\n";
  auto describe = [&out](const ports::ToolSchema& tool) {
    out += "\n### " + tool.name + "\n" + tool.description +
           "\nArguments (JSON Schema): " + tool.parameters + "\n";
  };
  for (const ports::ToolSchema& tool : tools)
    describe(tool);
  if (std::none_of(tools.begin(), tools.end(),
                   [](const ports::ToolSchema& t) { return t.name == kFinishTool; })) {
    describe(finish_tool_schema());
  }
  return out;
}

ModelReply read_react_json_reply(ModelReply reply, int step) {
  if (!reply.tool_calls.empty())
    return reply;  // the provider used native tool calls after all: nothing to read
  const bool cut_short = reply.finish_reason == "length" || reply.finish_reason == "content_filter";
  std::string problem;
  rapidjson::Document doc;
  if (reply.content.find_first_not_of(" \t\r\n") == std::string::npos) {
    problem = "the reply is empty";
  } else if (find_object(reply.content, doc, problem)) {
    ModelReply read = reply;
    problem = interpret(doc, read, step);
    if (problem.empty()) {
      sanitize(read);
      return read;
    }
  }
  if (cut_short)
    return reply;  // the loop fails it as truncated or filtered, not as a format problem
  reply.unreadable = problem + ". " + std::string(kFormatHint);
  return reply;
}

}  // namespace agentfleet::codec
