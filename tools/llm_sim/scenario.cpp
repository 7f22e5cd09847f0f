#include "tools/llm_sim/scenario.hpp"

#include "tools/llm_sim/llm_faults.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>

#include <rapidjson/document.h>
#include <yaml-cpp/yaml.h>

#include <variant>

namespace agentfleet::llm_sim {

namespace {

// Names a template may start with outside options_from.format (see README.md).
const std::set<std::string, std::less<>> kContextRoots = {
    "today",   "tomorrow", "year",  "text",      "step", "match",  "r",
    "results", "steps",    "round", "plan_step", "deps", "earlier"};

std::optional<std::int64_t> parse_int(std::string_view text) {
  std::int64_t value = 0;
  if (text.empty()) {
    return std::nullopt;
  }
  const char* begin = text.data();
  const auto [end, ec] = std::from_chars(begin, begin + text.size(), value);
  if (ec != std::errc() || end != begin + text.size()) {
    return std::nullopt;
  }
  return value;
}

std::optional<double> parse_double(std::string_view text) {
  // Only plain decimals ("1.5", "-2.25e3"); "inf", "nan" and hex stay text.
  if (text.empty() || text.find_first_not_of("0123456789.eE+-") != std::string_view::npos ||
      text.find('.') == std::string_view::npos) {
    return std::nullopt;
  }
  double value = 0;
  const char* begin = text.data();
  const auto [end, ec] = std::from_chars(begin, begin + text.size(), value);
  if (ec != std::errc() || end != begin + text.size()) {
    return std::nullopt;
  }
  return value;
}

class Loader {
 public:
  explicit Loader(const std::string& source) : source_(source) {}

  [[noreturn]] void fail(const YAML::Node& node, const std::string& pointer,
                         const std::string& message) const {
    std::ostringstream out;
    out << source_;
    const YAML::Mark mark = node.IsDefined() ? node.Mark() : YAML::Mark::null_mark();
    if (!mark.is_null()) {
      out << ':' << mark.line + 1 << ':' << mark.column + 1;
    }
    out << ": " << (pointer.empty() ? "/" : pointer) << ": " << message;
    throw ScenarioError(out.str());
  }

  ScenarioSet load(const YAML::Node& root) {
    ScenarioSet set;
    set.source = source_;
    if (!root.IsMap()) {
      fail(root, "", "expected a mapping with a 'scenarios' list");
    }
    check_keys(root, "", {"scenarios"});
    const YAML::Node list = root["scenarios"];
    if (!list || !list.IsSequence() || list.size() == 0) {
      fail(list ? list : root, "/scenarios", "expected a non-empty list of scenarios");
    }
    std::set<std::string> names;
    bool have_default = false;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string pointer = "/scenarios/" + std::to_string(i);
      Scenario scenario = load_scenario(list[i], pointer);
      if (!names.insert(scenario.name).second) {
        fail(list[i], pointer + "/name", "duplicate scenario name '" + scenario.name + "'");
      }
      if (scenario.pattern.empty()) {
        have_default = true;
        set.fallback = std::move(scenario);
      } else {
        set.scenarios.push_back(std::move(scenario));
      }
    }
    if (!have_default) {
      set.fallback = builtin_default_scenario();
    }
    return set;
  }

 private:
  bool role_step_ = false;  // loading a step of `roles`: text-only answers are allowed

  void check_keys(const YAML::Node& node, const std::string& pointer,
                  std::initializer_list<std::string_view> allowed) const {
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!it->first.IsScalar()) {
        fail(it->first, pointer, "keys must be plain strings");
      }
      const std::string key = it->first.Scalar();
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        std::string known;
        for (const auto& name : allowed) {
          known += (known.empty() ? "" : ", ") + std::string(name);
        }
        fail(it->first, pointer + "/" + key, "unknown key '" + key + "' (allowed: " + known + ")");
      }
    }
  }

  std::string expect_string(const YAML::Node& node, const std::string& pointer) const {
    if (!node.IsScalar()) {
      fail(node, pointer, "expected a string");
    }
    return node.Scalar();
  }

  std::int64_t expect_int(const YAML::Node& node, const std::string& pointer, std::int64_t min,
                          std::int64_t max) const {
    const auto value = node.IsScalar() ? parse_int(node.Scalar()) : std::nullopt;
    if (!value || *value < min || *value > max) {
      fail(node, pointer,
           "expected an integer from " + std::to_string(min) + " to " + std::to_string(max));
    }
    return *value;
  }

  Template expect_template(const YAML::Node& node, const std::string& pointer,
                           bool element_relative = false) const {
    const std::string text = expect_string(node, pointer);
    Template result;
    try {
      result = Template::parse(text);
    } catch (const TemplateError& e) {
      fail(node, pointer, e.what());
    }
    if (!element_relative) {
      for (const auto& path : result.paths()) {
        check_context_path(node, pointer, path);
      }
    }
    return result;
  }

  void check_context_path(const YAML::Node& node, const std::string& pointer,
                          const std::string& path) const {
    if (!is_valid_path(path)) {
      fail(node, pointer, "malformed path '" + path + "': expected e.g. r.items.0.id");
    }
    const std::string root = path.substr(0, path.find('.'));
    if (kContextRoots.find(root) == kContextRoots.end()) {
      fail(node, pointer,
           "unknown name '" + root +
               "' (known: today, tomorrow, year, text, step, match, r, results, steps, "
               "round, plan_step, deps, earlier)");
    }
    if (root == "match" && root.size() < path.size()) {
      const std::string rest = path.substr(root.size() + 1);
      const auto group = parse_int(rest.substr(0, rest.find('.')));
      if (!group || *group < 0 || static_cast<std::size_t>(*group) > groups_) {
        fail(node, pointer,
             "'" + path + "' names a capture group the pattern does not have (it has " +
                 std::to_string(groups_) + ")");
      }
    }
  }

  Scenario load_scenario(const YAML::Node& node, const std::string& pointer) {
    if (!node.IsMap()) {
      fail(node, pointer, "expected a mapping (name, match, steps)");
    }
    check_keys(node, pointer,
               {"name", "match", "latency_ms", "latency", "style", "faults", "steps", "roles"});
    Scenario scenario;
    const YAML::Node name = node["name"];
    if (!name) {
      fail(node, pointer, "missing required key 'name'");
    }
    scenario.name = expect_string(name, pointer + "/name");
    if (scenario.name.empty()) {
      fail(name, pointer + "/name", "must not be empty");
    }
    groups_ = 0;
    if (const YAML::Node match = node["match"]) {
      if (scenario.name == "default") {
        fail(match, pointer + "/match",
             "the 'default' scenario is used when nothing matches "
             "and has no 'match'");
      }
      scenario.pattern = expect_string(match, pointer + "/match");
      if (scenario.pattern.empty()) {
        fail(match, pointer + "/match", "must not be empty");
      }
      try {
        scenario.regex = std::regex(scenario.pattern, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        fail(match, pointer + "/match", std::string("invalid regular expression: ") + e.what());
      }
      groups_ = scenario.regex.mark_count();
    } else if (scenario.name != "default") {
      fail(node, pointer,
           "missing required key 'match' (only the scenario named 'default' has none)");
    }
    if (const YAML::Node latency = node["latency_ms"]) {
      scenario.latency = sim::LatencyDistribution::fixed(
          static_cast<double>(expect_int(latency, pointer + "/latency_ms", 0, 600000)));
    }
    if (const YAML::Node latency = node["latency"]) {
      if (scenario.latency) {
        fail(latency, pointer + "/latency", "has both 'latency' and 'latency_ms'; use one");
      }
      std::string problem;
      scenario.latency = sim::parse_latency(expect_string(latency, pointer + "/latency"), &problem);
      if (!scenario.latency) {
        fail(latency, pointer + "/latency", problem);
      }
    }
    if (const YAML::Node style = node["style"]) {
      scenario.style = parse_response_style(expect_string(style, pointer + "/style"));
      if (!scenario.style) {
        fail(style, pointer + "/style",
             "unknown style '" + style.Scalar() + "' (known: " + response_style_names() + ")");
      }
    }
    if (const YAML::Node faults = node["faults"]) {
      if (!faults.IsSequence() || faults.size() == 0) {
        fail(faults, pointer + "/faults", "expected a non-empty list of faults");
      }
      for (std::size_t i = 0; i < faults.size(); ++i) {
        const std::string fault_pointer = pointer + "/faults/" + std::to_string(i);
        if (!faults[i].IsMap()) {
          fail(faults[i], fault_pointer,
               "expected a mapping such as {mode: http_503, probability: 0.5}");
        }
        rapidjson::Document json;
        to_json(faults[i], json, json.GetAllocator());
        auto parsed = sim::parse_fault_spec(json, llm_fault_rules(false));
        if (auto* problem = std::get_if<sim::FaultSpecError>(&parsed)) {
          fail(faults[i], fault_pointer + problem->path, problem->message);
        }
        sim::FaultSpec spec = std::get<sim::FaultSpec>(std::move(parsed));
        spec.scope = scenario.name;
        scenario.faults.push_back(std::move(spec));
      }
    }
    if (const YAML::Node roles = node["roles"]) {
      if (!roles.IsMap() || roles.size() == 0) {
        fail(roles, pointer + "/roles",
             "expected a mapping of roles (planner, executor, critic, synthesizer) to steps");
      }
      check_keys(roles, pointer + "/roles", {"planner", "executor", "critic", "synthesizer"});
      for (auto it = roles.begin(); it != roles.end(); ++it) {
        const std::string role = it->first.Scalar();
        const std::string role_pointer = pointer + "/roles/" + role;
        if (!it->second.IsSequence() || it->second.size() == 0) {
          fail(it->second, role_pointer, "expected a non-empty list of steps");
        }
        role_step_ = true;
        for (std::size_t i = 0; i < it->second.size(); ++i) {
          scenario.roles[role].push_back(
              load_step(it->second[i], role_pointer + "/" + std::to_string(i)));
        }
        role_step_ = false;
      }
    }
    const YAML::Node steps = node["steps"];
    if (!steps && !scenario.roles.empty())
      return scenario;
    if (!steps || !steps.IsSequence() || steps.size() == 0) {
      fail(steps ? steps : node, pointer + "/steps", "expected a non-empty list of steps");
    }
    for (std::size_t i = 0; i < steps.size(); ++i) {
      scenario.steps.push_back(load_step(steps[i], pointer + "/steps/" + std::to_string(i)));
    }
    return scenario;
  }

  // A YAML tree as JSON, scalars typed as in tool-call arguments (plain 5 is a number).
  static void to_json(const YAML::Node& node, rapidjson::Value& out,
                      rapidjson::Document::AllocatorType& allocator) {
    if (node.IsMap()) {
      out.SetObject();
      for (auto it = node.begin(); it != node.end(); ++it) {
        rapidjson::Value value;
        to_json(it->second, value, allocator);
        out.AddMember(rapidjson::Value(it->first.Scalar().c_str(), allocator), value, allocator);
      }
    } else if (node.IsSequence()) {
      out.SetArray();
      for (std::size_t i = 0; i < node.size(); ++i) {
        rapidjson::Value value;
        to_json(node[i], value, allocator);
        out.PushBack(value, allocator);
      }
    } else if (node.IsScalar()) {
      const std::string& text = node.Scalar();
      const bool plain = node.Tag() != "!";
      if (plain && (text == "true" || text == "false")) {
        out.SetBool(text == "true");
      } else if (const auto integer = plain ? parse_int(text) : std::nullopt) {
        out.SetInt64(*integer);
      } else if (const auto number = plain ? parse_double(text) : std::nullopt) {
        out.SetDouble(*number);
      } else {
        out.SetString(text.c_str(), static_cast<rapidjson::SizeType>(text.size()), allocator);
      }
    } else {
      out.SetNull();
    }
  }

  Step load_step(const YAML::Node& node, const std::string& pointer) const {
    if (!node.IsMap()) {
      fail(node, pointer, "expected a mapping with calls, finish or branches");
    }
    Step step;
    if (const YAML::Node repeat = node["repeat"]) {
      step.repeat = expect_template(repeat, pointer + "/repeat");
    }
    if (const YAML::Node branches = node["branches"]) {
      check_keys(node, pointer, {"branches", "repeat"});
      if (!branches.IsSequence() || branches.size() == 0) {
        fail(branches, pointer + "/branches", "expected a non-empty list of branches");
      }
      for (std::size_t i = 0; i < branches.size(); ++i) {
        const std::string branch_pointer = pointer + "/branches/" + std::to_string(i);
        const YAML::Node branch = branches[i];
        if (!branch.IsMap()) {
          fail(branch, branch_pointer, "expected a mapping");
        }
        if (i > 0 && step.branches.back().when.empty()) {
          fail(branch, branch_pointer,
               "unreachable: the branch before it has no 'when' and always applies");
        }
        Branch loaded;
        if (const YAML::Node when = branch["when"]) {
          loaded.when = load_when(when, branch_pointer + "/when");
        }
        loaded.action = load_action(branch, branch_pointer, {"when", "content", "calls", "finish"});
        step.branches.push_back(std::move(loaded));
      }
      return step;
    }
    step.action = load_action(node, pointer, {"repeat", "content", "calls", "finish"});
    return step;
  }

  Action load_action(const YAML::Node& node, const std::string& pointer,
                     std::initializer_list<std::string_view> allowed) const {
    check_keys(node, pointer, allowed);
    Action action;
    if (const YAML::Node content = node["content"]) {
      action.content = expect_template(content, pointer + "/content");
    }
    const YAML::Node calls = node["calls"];
    const YAML::Node finish = node["finish"];
    if (calls && finish) {
      fail(node, pointer, "has both 'calls' and 'finish'; a step does one");
    }
    if (!calls && !finish) {
      // Text alone: plan_execute's planner, critic and executor answer so, and a ReAct
      // step so scripted is a plain-text answer (no call, no finish).
      if (action.content)
        return action;
      fail(node, pointer, "needs 'content', 'calls', 'finish' or 'branches'");
    }
    if (calls) {
      if (!calls.IsSequence() || calls.size() == 0) {
        fail(calls, pointer + "/calls", "expected a non-empty list of tool calls");
      }
      for (std::size_t i = 0; i < calls.size(); ++i) {
        action.calls.push_back(load_call(calls[i], pointer + "/calls/" + std::to_string(i)));
      }
    } else {
      action.finish = load_finish(finish, pointer + "/finish");
    }
    return action;
  }

  ToolCallSpec load_call(const YAML::Node& node, const std::string& pointer) const {
    if (!node.IsMap()) {
      fail(node, pointer, "expected a mapping (tool, arguments)");
    }
    check_keys(node, pointer, {"tool", "arguments", "repeat"});
    ToolCallSpec call;
    const YAML::Node tool = node["tool"];
    if (!tool) {
      fail(node, pointer, "missing required key 'tool'");
    }
    call.tool = expect_string(tool, pointer + "/tool");
    if (call.tool.empty()) {
      fail(tool, pointer + "/tool", "must not be empty");
    }
    if (call.tool == "finish") {
      fail(tool, pointer + "/tool", "write 'finish:' instead of calling the finish tool");
    }
    call.arguments.kind = ArgumentNode::Kind::kObject;
    if (const YAML::Node arguments = node["arguments"]) {
      if (!arguments.IsMap()) {
        fail(arguments, pointer + "/arguments", "expected a mapping");
      }
      call.arguments = load_argument(arguments, pointer + "/arguments");
    }
    if (const YAML::Node repeat = node["repeat"]) {
      call.repeat = expect_template(repeat, pointer + "/repeat");
    }
    return call;
  }

  ArgumentNode load_argument(const YAML::Node& node, const std::string& pointer) const {
    ArgumentNode out;
    if (node.IsMap()) {
      out.kind = ArgumentNode::Kind::kObject;
      for (auto it = node.begin(); it != node.end(); ++it) {
        if (!it->first.IsScalar()) {
          fail(it->first, pointer, "keys must be plain strings");
        }
        const std::string key = it->first.Scalar();
        out.members.emplace_back(key, load_argument(it->second, pointer + "/" + key));
      }
    } else if (node.IsSequence()) {
      out.kind = ArgumentNode::Kind::kArray;
      for (std::size_t i = 0; i < node.size(); ++i) {
        out.elements.push_back(load_argument(node[i], pointer + "/" + std::to_string(i)));
      }
    } else if (node.IsNull()) {
      out.kind = ArgumentNode::Kind::kNull;
    } else {
      // A quoted scalar (tag "!") is always a string; a plain one is typed like JSON.
      const std::string& text = node.Scalar();
      const bool plain = node.Tag() != "!";
      if (plain && (text == "null" || text == "~")) {
        out.kind = ArgumentNode::Kind::kNull;
      } else if (plain && (text == "true" || text == "false")) {
        out.kind = ArgumentNode::Kind::kBool;
        out.boolean = text == "true";
      } else if (const auto integer = plain ? parse_int(text) : std::nullopt) {
        out.kind = ArgumentNode::Kind::kInt;
        out.integer = *integer;
      } else if (const auto number = plain ? parse_double(text) : std::nullopt) {
        out.kind = ArgumentNode::Kind::kDouble;
        out.number = *number;
      } else {
        out.kind = ArgumentNode::Kind::kText;
        out.text = expect_template(node, pointer);
      }
    }
    return out;
  }

  FinishSpec load_finish(const YAML::Node& node, const std::string& pointer) const {
    if (!node.IsMap()) {
      fail(node, pointer, "expected a mapping (type, message, options)");
    }
    check_keys(node, pointer, {"type", "message", "options", "options_from"});
    FinishSpec finish;
    const YAML::Node type = node["type"];
    if (!type) {
      fail(node, pointer, "missing required key 'type'");
    }
    const std::string type_name = expect_string(type, pointer + "/type");
    if (type_name == "action_completed") {
      finish.type = FinishType::kActionCompleted;
    } else if (type_name == "need_clarification") {
      finish.type = FinishType::kNeedClarification;
    } else if (type_name == "error") {
      finish.type = FinishType::kError;
    } else {
      fail(type, pointer + "/type",
           "unknown finish type '" + type_name +
               "' (expected action_completed, need_clarification or error)");
    }
    const YAML::Node message = node["message"];
    if (!message) {
      fail(node, pointer, "missing required key 'message'");
    }
    finish.message = expect_template(message, pointer + "/message");
    const YAML::Node options = node["options"];
    const YAML::Node options_from = node["options_from"];
    if (options && options_from) {
      fail(node, pointer, "has both 'options' and 'options_from'; use one");
    }
    if (options) {
      if (!options.IsSequence()) {
        fail(options, pointer + "/options", "expected a list of strings");
      }
      for (std::size_t i = 0; i < options.size(); ++i) {
        finish.options.push_back(
            expect_template(options[i], pointer + "/options/" + std::to_string(i)));
      }
    }
    if (options_from) {
      const std::string from_pointer = pointer + "/options_from";
      if (!options_from.IsMap()) {
        fail(options_from, from_pointer, "expected a mapping");
      }
      check_keys(options_from, from_pointer, {"path", "format", "limit"});
      OptionsFrom from;
      const YAML::Node path = options_from["path"];
      if (!path) {
        fail(options_from, from_pointer, "missing required key 'path'");
      }
      from.path = expect_string(path, from_pointer + "/path");
      check_context_path(path, from_pointer + "/path", from.path);
      const YAML::Node format = options_from["format"];
      if (!format) {
        fail(options_from, from_pointer, "missing required key 'format'");
      }
      from.format = expect_template(format, from_pointer + "/format", true);
      if (const YAML::Node limit = options_from["limit"]) {
        from.limit = expect_int(limit, from_pointer + "/limit", 1, 100);
      }
      finish.options_from = std::move(from);
    }
    return finish;
  }

  std::vector<Condition> load_when(const YAML::Node& node, const std::string& pointer) const {
    std::vector<Condition> conditions;
    if (node.IsSequence()) {
      if (node.size() == 0) {
        fail(node, pointer, "expected at least one condition");
      }
      for (std::size_t i = 0; i < node.size(); ++i) {
        conditions.push_back(load_condition(node[i], pointer + "/" + std::to_string(i)));
      }
    } else {
      conditions.push_back(load_condition(node, pointer));
    }
    return conditions;
  }

  Condition load_condition(const YAML::Node& node, const std::string& pointer) const {
    if (!node.IsMap()) {
      fail(node, pointer,
           "expected a condition: {exists: P}, {missing: P}, "
           "{count: P, eq|min|max: N} or {error: true|false}");
    }
    Condition condition;
    if (const YAML::Node error = node["error"]) {
      check_keys(node, pointer, {"error"});
      const std::string flag = expect_string(error, pointer + "/error");
      if (flag != "true" && flag != "false") {
        fail(error, pointer + "/error", "expected true or false");
      }
      condition.kind = flag == "true" ? Condition::Kind::kExists : Condition::Kind::kMissing;
      condition.path = "r.error";
      return condition;
    }
    // (yaml-cpp's Node::operator= copies content instead of rebinding, so no reassignment.)
    const char* path_key = nullptr;
    if (node["exists"]) {
      check_keys(node, pointer, {"exists"});
      condition.kind = Condition::Kind::kExists;
      path_key = "exists";
    } else if (node["missing"]) {
      check_keys(node, pointer, {"missing"});
      condition.kind = Condition::Kind::kMissing;
      path_key = "missing";
    } else if (node["count"]) {
      check_keys(node, pointer, {"count", "eq", "min", "max"});
      condition.kind = Condition::Kind::kCount;
      path_key = "count";
      constexpr std::int64_t kMax = 1'000'000'000;
      if (const YAML::Node eq = node["eq"]) {
        condition.eq = expect_int(eq, pointer + "/eq", 0, kMax);
      }
      if (const YAML::Node min = node["min"]) {
        condition.min = expect_int(min, pointer + "/min", 0, kMax);
      }
      if (const YAML::Node max = node["max"]) {
        condition.max = expect_int(max, pointer + "/max", 0, kMax);
      }
      if (!condition.eq && !condition.min && !condition.max) {
        fail(node, pointer, "a count condition needs eq, min or max");
      }
    } else {
      fail(node, pointer, "expected one of exists, missing, count, error");
    }
    const YAML::Node path = node[path_key];
    condition.path = expect_string(path, pointer + "/" + path_key);
    check_context_path(path, pointer + "/" + std::string(path_key), condition.path);
    return condition;
  }

  const std::string& source_;
  std::size_t groups_ = 0;  // capture groups of the scenario being loaded
};

}  // namespace

std::string_view finish_type_name(FinishType type) {
  switch (type) {
    case FinishType::kActionCompleted:
      return "action_completed";
    case FinishType::kNeedClarification:
      return "need_clarification";
    case FinishType::kError:
      return "error";
  }
  return "error";
}

namespace {
constexpr std::pair<ResponseStyle, std::string_view> kStyleNames[] = {
    {ResponseStyle::kOpenAI, "openai"},
    {ResponseStyle::kArgumentsObject, "arguments_object"},
    {ResponseStyle::kArgumentsEmpty, "arguments_empty"},
    {ResponseStyle::kMissingIds, "missing_ids"},
    {ResponseStyle::kContentWithToolCalls, "content_with_tool_calls"},
    {ResponseStyle::kReasoningContent, "reasoning_content"},
    {ResponseStyle::kDeepseekUsage, "deepseek_usage"},
    {ResponseStyle::kLegacyFunctionCall, "legacy_function_call"},
    {ResponseStyle::kHermesText, "hermes_text"},
    {ResponseStyle::kLlamaText, "llama_text"},
    {ResponseStyle::kMistralText, "mistral_text"},
    {ResponseStyle::kJsonText, "json_text"},
    {ResponseStyle::kDeepseekThinking, "deepseek_thinking"},
    {ResponseStyle::kNoUsage, "no_usage"},
};
}  // namespace

std::string_view response_style_name(ResponseStyle style) {
  for (const auto& [candidate, name] : kStyleNames) {
    if (candidate == style) {
      return name;
    }
  }
  return "openai";
}

std::optional<ResponseStyle> parse_response_style(std::string_view name) {
  for (const auto& [style, candidate] : kStyleNames) {
    if (candidate == name) {
      return style;
    }
  }
  return std::nullopt;
}

std::string response_style_names() {
  std::string names;
  for (const auto& [style, name] : kStyleNames) {
    names += (names.empty() ? "" : ", ") + std::string(name);
  }
  return names;
}

Scenario builtin_default_scenario() {
  Scenario scenario;
  scenario.name = "default";
  FinishSpec finish;
  finish.type = FinishType::kError;
  finish.message = Template::parse("无法理解该指令");
  Action action;
  action.finish = std::move(finish);
  Step step;
  step.action = std::move(action);
  scenario.steps.push_back(std::move(step));
  return scenario;
}

const std::map<std::string, std::vector<Step>, std::less<>>& builtin_role_steps() {
  static const auto* const kSteps = [] {
    const ScenarioSet set = parse_scenarios(R"(scenarios:
  - name: default
    roles:
      planner:
        - content: '[{"step_number": 1, "description": "完成用户的指令", "tool": null, "input": {}, "expected_output": "指令的结果", "estimated_time": 1, "dependencies": []}]'
      executor:
        - content: '已完成：{{text}}'
      critic:
        - content: '{"accuracy": 1, "completeness": 1, "relevance": 1, "logic": 1, "need_replan": false, "feedback": "结果符合指令", "suggestions": []}'
      synthesizer:
        - finish: {type: error, message: 无法理解该指令}
)",
                                            "built-in roles");
    return new std::map<std::string, std::vector<Step>, std::less<>>(set.fallback.roles);
  }();
  return *kSteps;
}

ScenarioSet parse_scenarios(std::string_view yaml, const std::string& source) {
  const YAML::Node root = [&] {
    try {
      return YAML::Load(std::string(yaml));
    } catch (const YAML::Exception& e) {
      std::ostringstream out;
      out << source;
      if (!e.mark.is_null()) {
        out << ':' << e.mark.line + 1 << ':' << e.mark.column + 1;
      }
      out << ": invalid YAML: " << e.msg;
      throw ScenarioError(out.str());
    }
  }();
  Loader loader(source);
  try {
    return loader.load(root);
  } catch (const YAML::Exception& e) {
    // yaml-cpp's own conversion errors, should a construct slip past the checks above.
    throw ScenarioError(source + ": " + e.what());
  }
}

ScenarioSet load_scenario_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ScenarioError(path + ": cannot open: " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    throw ScenarioError(path + ": cannot read: " + std::strerror(errno));
  }
  return parse_scenarios(text.str(), path);
}

}  // namespace agentfleet::llm_sim
