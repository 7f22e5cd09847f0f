#pragma once
// llm-sim's scripted scenarios: the plain types a scenario file becomes, and the loader
// that reads and validates one. The YAML syntax is described in tools/llm_sim/README.md.
//
// Lifecycle: loaded once at start-up (a bad file throws ScenarioError and the server does
// not start); immutable afterwards and safe to read from any thread.

#include <cstdint>
#include <map>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/llm_sim/fault_schedule.hpp"
#include "tools/llm_sim/latency.hpp"
#include "tools/llm_sim/templating.hpp"

namespace agentfleet::llm_sim {

// A bad scenario file. `what()` is "FILE:LINE:COLUMN: /json/pointer: problem", e.g.
// "config/llm-sim-scenarios.yaml:14:9: /scenarios/0/steps/1/finish/type: unknown finish
// type 'done' (expected action_completed, need_clarification or error)".
class ScenarioError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A tool call's `arguments`: a JSON tree whose strings are templates.
struct ArgumentNode {
  enum class Kind { kNull, kBool, kInt, kDouble, kText, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::int64_t integer = 0;
  double number = 0;
  Template text;
  std::vector<ArgumentNode> elements;                         // kArray
  std::vector<std::pair<std::string, ArgumentNode>> members;  // kObject, in file order
};

struct ToolCallSpec {
  std::string tool;
  ArgumentNode arguments;          // always an object
  std::optional<Template> repeat;  // how many identical calls; empty text means 1
};

enum class FinishType { kActionCompleted, kNeedClarification, kError };
std::string_view finish_type_name(FinishType type);

struct OptionsFrom {
  std::string path;  // an array in the scenario context, e.g. "r.items"
  Template format;   // rendered per element; paths relative to the element first
  std::int64_t limit = 5;
};

struct FinishSpec {
  FinishType type = FinishType::kError;
  Template message;
  std::vector<Template> options;
  std::optional<OptionsFrom> options_from;
};

// What the model answers at one step: tool calls or a finish, with optional thought text.
struct Action {
  std::optional<Template> content;
  std::vector<ToolCallSpec> calls;  // empty when `finish` is set
  std::optional<FinishSpec> finish;
};

struct Branch {
  std::vector<Condition> when;  // all must hold; empty = always
  Action action;
};

struct Step {
  std::optional<Template> repeat;  // the step fills this many consecutive step indexes
  std::optional<Action> action;    // exactly one of action / branches
  std::vector<Branch> branches;
};

// How a completion is shaped: OpenAI's (the default) or one of the provider variants the
// worker must tolerate. README.md shows each.
enum class ResponseStyle {
  kOpenAI,
  kArgumentsObject,       // function.arguments is a JSON object, not a string
  kArgumentsEmpty,        // function.arguments is "" when there are no arguments
  kMissingIds,            // tool calls without "id"
  kContentWithToolCalls,  // text content alongside tool_calls
  kReasoningContent,      // DeepSeek's reasoning_content (and reasoning_tokens)
  kDeepseekUsage,         // prompt_cache_hit_tokens / prompt_cache_miss_tokens
  kLegacyFunctionCall,    // message.function_call (one call), finish_reason function_call
  // The calls (finish included) written as text in content, no tool_calls, finish_reason
  // stop: what a model served without a tool-call parser answers.
  kHermesText,   // <tool_call>{"name", "arguments"}</tool_call> after the content
  kLlamaText,    // <function=NAME>{arguments}</function>
  kMistralText,  // [TOOL_CALLS] [{"name", "arguments"}, ...]
  kJsonText,     // the content is the call object alone (an array for several)
  // DeepSeek's thinking mode: reasoning_content as kReasoningContent, and a request whose
  // assistant message with tool calls does not send its reasoning_content back is refused
  // with 400, as DeepSeek refuses it.
  kDeepseekThinking,
  // No usage object at all: what some self-hosted servers and proxies answer. The worker
  // bills such an answer from its own estimate, flagged usage_estimated.
  kNoUsage,
};
std::string_view response_style_name(ResponseStyle style);
std::optional<ResponseStyle> parse_response_style(std::string_view name);
// "openai, arguments_object, ..." for messages.
std::string response_style_names();

// plan_execute's model calls carry "Agent-Role: <role>" in their system message; a
// scenario answers them from `roles` (README.md, "plan_execute").
inline constexpr std::string_view kPlanRoles[] = {"planner", "executor", "critic", "synthesizer"};

struct Scenario {
  std::string name;
  std::string pattern;  // empty for the default scenario
  std::regex regex;
  std::optional<sim::LatencyDistribution> latency;  // `latency` or `latency_ms`
  std::optional<ResponseStyle> style;
  std::vector<sim::FaultSpec> faults;  // scope = this scenario's name
  std::vector<Step> steps;             // empty when the scenario answers only plan_execute's roles
  // plan_execute: each role's answers, indexed by the plan round (planner, critic,
  // synthesizer) or by the plan step number (executor); past the end the last one repeats.
  std::map<std::string, std::vector<Step>, std::less<>> roles;
};

struct ScenarioSet {
  std::string source;               // file name, for messages
  std::vector<Scenario> scenarios;  // matched in this order
  Scenario fallback;                // the file's `default` scenario, or the built-in one
};

// Reads and validates a scenario file; throws ScenarioError naming the file and the place.
ScenarioSet load_scenario_file(const std::string& path);
// The same from text; `source` names it in messages.
ScenarioSet parse_scenarios(std::string_view yaml, const std::string& source);

// The scenario used when nothing matches and the file has no `default`:
// one step, finish error "无法理解该指令".
Scenario builtin_default_scenario();

// What a role answers when the matched scenario does not script it: the planner a
// one-step plan without tools, the executor "已完成：<step>", the critic full marks, the
// synthesizer error "无法理解该指令" (no tool ran, so it cannot be action_completed).
const std::map<std::string, std::vector<Step>, std::less<>>& builtin_role_steps();

}  // namespace agentfleet::llm_sim
