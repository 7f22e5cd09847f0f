// llm-sim's answers to plan_execute's roles, driven by the worker's own PlanExecute state
// machine and chat codec: the requests are the ones the worker sends, the replies are read
// the way the worker reads them. The plan_todo scenario replans once; a text no scenario
// scripts for the roles runs on the built-in ones.
#include "tests/source_dir.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "core/codec/openai_codec.hpp"
#include "core/codec/plan_codec.hpp"
#include "core/react/plan_execute.hpp"
#include "tools/llm_sim/scenario.hpp"
#include "tools/llm_sim/simulator.hpp"

namespace agentfleet::llm_sim {
namespace {

using namespace std::chrono_literals;

const auto kNow = std::chrono::sys_days{std::chrono::year{2025} / 2 / 5} + 10h;

std::vector<ports::ToolSchema> demo_tools() {
  std::vector<ports::ToolSchema> tools;
  for (const char* name : {"search_items", "create_item", "update_item"})
    tools.push_back(ports::ToolSchema{name, "demo", R"({"type":"object"})"});
  return tools;
}

react::PlanExecute machine(const std::string& text) {
  react::PromptValues values;
  values.now = LocalTime{2025, 2, 5, 10, 0, 0, 3, 8h};
  values.time_zone = "Asia/Shanghai";
  values.locale = "zh-CN";
  return react::PlanExecute(react::PlanExecuteLimits{20, 4000}, react::PlanPolicy{},
                            react::ResultMarkers{}, demo_tools(), codec::plan_parsers(), values,
                            text);
}

// One model call as the worker makes it: the request the strategy asks for, llm-sim's
// answer read by the chat codec. `role` is what llm-sim said answered (its step header is
// the index it used).
ModelReply call(const Simulator& simulator, const react::PlanExecute& m, std::string* role) {
  const react::NextCall next = m.request();
  std::vector<ports::ToolSchema> offered;
  if (next.tools == react::ToolOffer::kFinishOnly)
    offered.push_back(codec::finish_tool_schema());
  if (next.tools == react::ToolOffer::kStepTool)
    offered.push_back(ports::ToolSchema{next.tool, "demo", R"({"type":"object"})"});
  const std::string body =
      codec::build_chat_request(codec::ChatRequestOptions{"sim-model"}, *next.messages, offered);
  auto result = simulator.complete(body, kNow, 1);
  auto* completion = std::get_if<Completion>(&result);
  EXPECT_NE(completion, nullptr);
  if (completion == nullptr)
    return {};
  *role = next.role;
  auto reply = codec::parse_chat_response(completion->body);
  EXPECT_TRUE(reply.ok()) << completion->body;
  return reply.ok() ? reply.value() : ModelReply{};
}

// Runs `m` to its end against the demo scenarios: every model call answered by llm-sim,
// every tool step by `tool_result` (tool name -> its JSON result). Returns what happened:
// the roles called and the tool calls made, in order.
std::vector<std::string> drive(react::PlanExecute& m, react::Step& step,
                               const std::map<std::string, std::string>& tool_result = {}) {
  const Simulator simulator(
      load_scenario_file(std::string(AGENTFLEET_SOURCE_DIR) + "/config/llm-sim-scenarios.yaml"));
  std::vector<std::string> seen;
  step = m.start();
  for (int guard = 0; guard < 30; ++guard) {
    if (auto* tools = std::get_if<react::CallTools>(&step)) {
      EXPECT_EQ(tools->calls.size(), 1u);
      const ToolCall& c = tools->calls.at(0);
      seen.push_back("tool " + c.name + " " + c.arguments);
      auto result = tool_result.find(c.name);
      step = m.on_tool_results(
          *tools, {ToolObservation{c.id, c.name, true,
                                   result == tool_result.end() ? "{}" : result->second}});
    } else if (std::holds_alternative<react::CallModel>(step)) {
      std::string role;
      const ModelReply reply = call(simulator, m, &role);
      seen.push_back(role);
      step = m.on_model_reply(reply);
    } else {
      break;
    }
  }
  return seen;
}

TEST(LlmSimRoles, ThePlanTodoScenarioReplansOnceAndFillsInTheIdFromTheCreate) {
  react::PlanExecute m = machine("计划：创建待办「整理周报」");
  react::Step step;
  const auto seen =
      drive(m, step,
            {{"search_items", R"({"items":[],"count":0})"},
             {"create_item", R"({"item":{"id":"todo-7","title":"整理周报"}})"},
             {"update_item",
              R"({"item":{"id":"todo-7","title":"整理周报","description":"由计划创建"}})"}});
  auto* finished = std::get_if<react::Finish>(&step);
  ASSERT_NE(finished, nullptr);
  EXPECT_EQ(finished->result.type, ResultType::kActionCompleted);
  EXPECT_EQ(finished->result.message, "已创建待办「整理周报」，备注：由计划创建");
  EXPECT_EQ(
      seen,
      (std::vector<std::string>{
          "planner",
          R"(tool search_items {"item_type":"todo","keyword":"整理周报"})",
          "critic",
          "planner",
          R"(tool search_items {"item_type":"todo","keyword":"整理周报"})",
          R"(tool create_item {"item_type":"todo","title":"整理周报","date":"2025-02-05","time_segment":"all_day"})",
          "executor",
          R"(tool update_item {"id":"todo-7","description":"由计划创建"})",
          "critic",
          "synthesizer",
      }));
  EXPECT_EQ(m.corrections(), 1);
}

TEST(LlmSimRoles, TheBenchScenarioRunsOneSearchUnderPlanExecute) {
  react::PlanExecute m = machine("bench: steps=2");
  react::Step step;
  const auto seen = drive(m, step, {{"search_items", R"({"items":[],"count":0})"}});
  auto* finished = std::get_if<react::Finish>(&step);
  ASSERT_NE(finished, nullptr);
  EXPECT_EQ(finished->result.type, ResultType::kActionCompleted);
  EXPECT_EQ(finished->result.message, "bench 完成：计划 1 步");
  EXPECT_EQ(seen,
            (std::vector<std::string>{
                "planner", R"(tool search_items {"item_type":"any","keyword":"bench","limit":1})",
                "critic", "synthesizer"}));
}

TEST(LlmSimRoles, ATextNoScenarioScriptsRunsOnTheBuiltInRoles) {
  react::PlanExecute m = machine("写一首关于春天的诗");
  react::Step step;
  const auto seen = drive(m, step);
  auto* finished = std::get_if<react::Finish>(&step);
  ASSERT_NE(finished, nullptr);
  // No tool ran, so the built-in synthesizer does not claim an action.
  EXPECT_EQ(finished->result.type, ResultType::kError);
  EXPECT_EQ(finished->result.message, "无法理解该指令");
  EXPECT_EQ(seen, (std::vector<std::string>{"planner", "executor", "critic", "synthesizer"}));
}

TEST(LlmSimRoles, RolesAreCheckedWhenTheFileLoads) {
  EXPECT_THROW(parse_scenarios(R"(scenarios:
  - name: a
    match: x
    roles: {judge: [{content: "1"}]})",
                               "t.yaml"),
               ScenarioError);
  // A ReAct step in text alone is a plain-text answer; a step that says nothing is refused.
  EXPECT_NO_THROW(parse_scenarios(R"(scenarios:
  - name: a
    match: x
    steps: [{content: "hi"}])",
                                  "t.yaml"));
  try {
    parse_scenarios(R"(scenarios:
  - name: a
    match: x
    steps: [{repeat: 2}])",
                    "t.yaml");
    ADD_FAILURE() << "an empty ReAct step loaded";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("needs 'content', 'calls', 'finish' or 'branches'"),
              std::string::npos)
        << e.what();
  }
  const ScenarioSet set = parse_scenarios(R"(scenarios:
  - name: a
    match: x
    roles:
      critic: [{content: '{"accuracy": {{round}}}'}]
      executor: [{content: 'step {{plan_step}} of {{text}}: {{deps.0.result.id}}'}])",
                                          "t.yaml");
  ASSERT_EQ(set.scenarios.size(), 1u);
  EXPECT_TRUE(set.scenarios[0].steps.empty());
  EXPECT_EQ(set.scenarios[0].roles.size(), 2u);
}

}  // namespace
}  // namespace agentfleet::llm_sim

namespace agentfleet::llm_sim {
namespace {

// A follow-up's request: the earlier conversation (a search and its clarification), then
// the new text. The step index counts from the new text; `earlier` holds the search.
TEST(LlmSimFollowUp, TheSecondEarlierResultIsTheOneAFollowUpChanges) {
  const Simulator simulator(
      load_scenario_file(std::string(AGENTFLEET_SOURCE_DIR) + "/config/llm-sim-scenarios.yaml"));
  const std::string body =
      R"({"model":"m","tools":[{"type":"function","function":{"name":"update_item"}}],
    "messages":[{"role":"system","content":"今天是 2025-02-05。"},
      {"role":"user","content":"2月8日的会议改到晚上8点"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c0","type":"function",
        "function":{"name":"search_items","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"c0","content":"{\"items\":[{\"id\":\"e1\",\"title\":\"晨会\"},{\"id\":\"e2\",\"title\":\"团队会议\"},{\"id\":\"e3\",\"title\":\"项目评审\"}]}"},
      {"role":"assistant","content":"⚠️ 找到 3 个会议"},
      {"role":"user","content":"改第二个"}]})";
  auto result = simulator.complete(body, kNow, 1);
  auto* completion = std::get_if<Completion>(&result);
  ASSERT_NE(completion, nullptr);
  EXPECT_EQ(completion->scenario, "pick_second_meeting");
  EXPECT_EQ(completion->step, 0u);
  auto reply = codec::parse_chat_response(completion->body);
  ASSERT_TRUE(reply.ok());
  ASSERT_EQ(reply.value().tool_calls.size(), 1u) << completion->body;
  EXPECT_EQ(reply.value().tool_calls[0].name, "update_item");
  EXPECT_EQ(reply.value().tool_calls[0].arguments,
            R"({"id":"e2","start_time":"20:00","end_time":"21:00"})");
}

}  // namespace
}  // namespace agentfleet::llm_sim
