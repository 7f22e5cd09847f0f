// plan_execute: the plan reader and its checks, the critic's scoring and replan limit, the
// reflection schedule, and whole runs of the state machine from canned replies.
#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "core/codec/plan_codec.hpp"
#include "core/react/plan_execute.hpp"

namespace agentfleet::react {
namespace {

const std::set<std::string> kTools = {"search_items", "create_item", "update_item"};

Plan plan_of(std::string_view text) {
  auto plan = codec::parse_plan(text);
  EXPECT_TRUE(plan.ok()) << (plan.ok() ? "" : plan.error().message);
  return plan.ok() ? plan.value() : Plan{};
}

std::string problem_of(std::string_view text) {
  auto plan = codec::parse_plan(text);
  if (!plan.ok())
    return plan.error().message;
  auto problem = check_plan(plan.value(), kTools);
  return problem.value_or("");
}

TEST(PlanParser, ReadsEveryFieldFromAFencedArray) {
  const Plan plan = plan_of(R"(计划如下：
```json
[{"step_number": 1, "description": "搜索会议", "tool": "search_items",
  "input": {"item_type": "event", "date": "2025-02-08"}, "expected_output": "会议列表",
  "estimated_time": 2.5, "dependencies": []},
 {"step_number": 2, "description": "改时间", "tool": "update_item", "input": {},
  "dependencies": [1]},
 {"step_number": 3, "description": "总结", "tool": null}]
```)");
  ASSERT_EQ(plan.steps.size(), 3u);
  EXPECT_EQ(plan.steps[0].tool, "search_items");
  EXPECT_EQ(plan.steps[0].input, R"({"item_type":"event","date":"2025-02-08"})");
  EXPECT_EQ(plan.steps[0].expected_output, "会议列表");
  EXPECT_DOUBLE_EQ(plan.steps[0].estimated_time_s, 2.5);
  EXPECT_EQ(plan.steps[1].dependencies, std::vector<int>{1});
  EXPECT_TRUE(plan.steps[2].tool.empty());
  EXPECT_EQ(plan.steps[2].input, "{}");
  EXPECT_DOUBLE_EQ(plan.steps[2].estimated_time_s, 5.0);
  std::vector<std::size_t> order;
  EXPECT_FALSE(check_plan(plan, kTools, &order));
  EXPECT_EQ(order, (std::vector<std::size_t>{0, 1, 2}));
}

TEST(PlanParser, AcceptsAnObjectWithStepsAndNumbersStepsByPosition) {
  const Plan plan =
      plan_of(R"({"steps": [{"description": "a"}, {"description": "b", "tool": "none"}]})");
  ASSERT_EQ(plan.steps.size(), 2u);
  EXPECT_EQ(plan.steps[1].number, 2);
  EXPECT_TRUE(plan.steps[1].tool.empty());
}

TEST(PlanParser, RefusesBadPlansSayingWhere) {
  EXPECT_EQ(problem_of("我不知道"), "the plan is not JSON");
  EXPECT_EQ(problem_of("[]"), "the plan has no steps");
  EXPECT_EQ(problem_of(R"({"title": "x"})"), "the plan object has no \"steps\" array");
  EXPECT_EQ(problem_of(R"([{"step_number": 1}])"), "plan step 1: description must be a string");
  EXPECT_EQ(problem_of(R"([{"description": "a", "input": "x"}])"),
            "plan step 1: input must be an object");
  EXPECT_EQ(problem_of(R"([{"description": "a", "step_number": 1.5}])"),
            "plan step 1: step_number must be an integer");
  EXPECT_EQ(problem_of(R"([{"description": "a", "dependencies": ["1"]}])"),
            "plan step 1: dependencies must be an array of step numbers");
  EXPECT_EQ(problem_of(R"([{"description": "a", "estimated_time": -1}])"),
            "plan step 1: estimated_time must be a number of seconds, 0 or more");
  EXPECT_EQ(problem_of(R"([{"description": "a", "tool": "rm_rf"}])"),
            "step 1 uses tool 'rm_rf', which is not available");
  EXPECT_EQ(problem_of(R"([{"description": "a"}, {"step_number": 1, "description": "b"}])"),
            "step_number 1 appears twice");
  EXPECT_EQ(problem_of(R"([{"description": "a", "step_number": 0}])"),
            "step_number 0 must be 1 or more");
  EXPECT_EQ(problem_of(R"([{"description": "a", "dependencies": [7]}])"),
            "step 1 depends on step 7, which the plan does not have");
  EXPECT_EQ(problem_of(R"([{"description": "a", "dependencies": [1]}])"),
            "step 1 depends on itself");
}

TEST(PlanParser, RefusesMoreThanFiftySteps) {
  std::string steps = "[";
  for (int i = 1; i <= 51; ++i)
    steps += std::string(i > 1 ? "," : "") + R"({"description": "s"})";
  steps += "]";
  EXPECT_EQ(problem_of(steps), "the plan has 51 steps; at most 50 are allowed");
  Plan fifty;
  for (int i = 1; i <= 50; ++i)
    fifty.steps.push_back(PlanStep{i, "s", "", "{}", "", 1.0, {}});
  EXPECT_FALSE(check_plan(fifty, kTools));
  fifty.steps.push_back(PlanStep{51, "s", "", "{}", "", 1.0, {}});
  EXPECT_EQ(check_plan(fifty, kTools).value_or(""),
            "the plan has 51 steps; at most 50 are allowed");
}

TEST(PlanParser, FindsCyclesAndOrdersDependenciesFirst) {
  EXPECT_EQ(problem_of(R"([{"description": "a", "dependencies": [3]},
                           {"description": "b", "dependencies": [1]},
                           {"description": "c", "dependencies": [2]},
                           {"description": "d"}])"),
            "the dependencies form a cycle (steps 1, 2, 3)");
  // Step 1 needs 3; 2 needs nothing: 2, 3, 1 (ready steps by number).
  const Plan plan = plan_of(R"([{"description": "a", "dependencies": [3]},
                                {"description": "b"},
                                {"description": "c", "dependencies": [2, 2]}])");
  std::vector<std::size_t> order;
  ASSERT_FALSE(check_plan(plan, kTools, &order));
  EXPECT_EQ(order, (std::vector<std::size_t>{1, 2, 0}));
}

TEST(PlanResponse, ListsStepsAndTheEstimatedTotal) {
  const Plan plan = plan_of(R"([{"description": "a", "tool": "search_items", "input": {"q": 1},
                                 "estimated_time": 2},
                                {"description": "b", "dependencies": [1]}])");
  EXPECT_EQ(
      codec::plan_response_json(plan),
      R"({"steps":[{"step_number":1,"description":"a","tool":"search_items","input":{"q":1},)"
      R"("expected_output":"","estimated_time_s":2.0,"dependencies":[]},{"step_number":2,)"
      R"("description":"b","tool":null,"input":{},"expected_output":"","estimated_time_s":5.0,)"
      R"("dependencies":[1]}],"total_steps":2,"estimated_total_time_s":7.0})");
}

TEST(Critic, ConfidenceWeighsAccuracyMost) {
  Critique c{1.0, 0.0, 0.0, 0.0, false, {}, {}};
  EXPECT_DOUBLE_EQ(confidence(c, CriticWeights{}), 0.4);
  c = Critique{0.0, 1.0, 0.0, 0.0, false, {}, {}};
  EXPECT_DOUBLE_EQ(confidence(c, CriticWeights{}), 0.3);
  c = Critique{0.0, 0.0, 1.0, 0.0, false, {}, {}};
  EXPECT_DOUBLE_EQ(confidence(c, CriticWeights{}), 0.2);
  c = Critique{0.0, 0.0, 0.0, 1.0, false, {}, {}};
  EXPECT_DOUBLE_EQ(confidence(c, CriticWeights{}), 0.1);
  c = Critique{0.9, 0.6, 0.5, 0.5, false, {}, {}};
  EXPECT_NEAR(confidence(c, CriticWeights{}), 0.36 + 0.18 + 0.10 + 0.05, 1e-12);
  // Weights that do not add up to 1 are normalised.
  EXPECT_NEAR(confidence(c, CriticWeights{4, 3, 2, 1}), 0.69, 1e-12);
}

TEST(Critic, PassesAtTheThresholdAndReplansAtMostMaxCorrectionsTimes) {
  PlanPolicy policy;  // 0.7, 3 corrections
  const Critique at_threshold{0.7, 0.7, 0.7, 0.7, false, {}, {}};
  EXPECT_EQ(judge(at_threshold, policy, 0), Verdict::kPass);
  const Critique below{0.69, 0.69, 0.69, 0.69, false, {}, {}};
  EXPECT_EQ(judge(below, policy, 0), Verdict::kReplan);
  EXPECT_EQ(judge(below, policy, 2), Verdict::kReplan);
  EXPECT_EQ(judge(below, policy, 3), Verdict::kOutOfChances);
  Critique asks{1, 1, 1, 1, true, {}, {}};
  EXPECT_EQ(judge(asks, policy, 0), Verdict::kReplan);
  policy.pass_confidence = 0.6;
  EXPECT_EQ(judge(below, policy, 0), Verdict::kPass);
  policy.max_corrections = 0;
  EXPECT_EQ(judge(asks, policy, 0), Verdict::kOutOfChances);
}

TEST(Critic, ReadsScoresInEitherNamingAndRefusesOutOfRange) {
  auto c = codec::parse_critique(
      R"({"accuracy_score": 0.9, "completeness_score": 0.5, "relevance": 1, "logic": 0,
          "need_replan": true, "assessment": "漏了一步", "suggestions": "补上"})");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_DOUBLE_EQ(c.value().accuracy, 0.9);
  EXPECT_DOUBLE_EQ(c.value().completeness, 0.5);
  EXPECT_TRUE(c.value().replan_requested);
  EXPECT_EQ(c.value().feedback, "漏了一步");
  EXPECT_EQ(c.value().suggestions, std::vector<std::string>{"补上"});
  EXPECT_EQ(
      codec::parse_critique(R"({"accuracy": 9, "completeness": 1, "relevance": 1, "logic": 1})")
          .error()
          .message,
      "the critique's 'accuracy' must be within 0..1, not 9.000000");
  EXPECT_EQ(codec::parse_critique(R"({"accuracy": 1})").error().message,
            "the critique has no number 'completeness'");
  EXPECT_FALSE(codec::parse_critique("很好").ok());
}

TEST(ReflectionSchedule, EveryStepEveryThirdOrOnlyAtTheEnd) {
  std::vector<int> every, third, end;
  for (int executed = 1; executed <= 7; ++executed) {
    if (reflects_after(ReflectionSchedule::kEveryStep, executed, 7))
      every.push_back(executed);
    if (reflects_after(ReflectionSchedule::kEveryThirdStep, executed, 7))
      third.push_back(executed);
    if (reflects_after(ReflectionSchedule::kAtEnd, executed, 7))
      end.push_back(executed);
  }
  EXPECT_EQ(every, (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(third, (std::vector<int>{3, 6, 7}));
  EXPECT_EQ(end, (std::vector<int>{7}));
  EXPECT_FALSE(reflects_after(ReflectionSchedule::kEveryStep, 0, 7));
  EXPECT_EQ(parse_reflection_schedule("every_third_step"), ReflectionSchedule::kEveryThirdStep);
  EXPECT_FALSE(parse_reflection_schedule("sometimes"));
}

// ---- the state machine -----------------------------------------------------------------

ModelReply text_reply(std::string text) {
  ModelReply reply;
  reply.content = std::move(text);
  reply.finish_reason = "stop";
  return reply;
}

ModelReply finish_reply(ResultType type, std::string message) {
  ModelReply reply;
  reply.tool_calls.push_back(ToolCall{"call_0", std::string(kFinishTool), "{}"});
  reply.finish = FinishCall{TaskResult{type, std::move(message), {}}, {}};
  reply.finish_reason = "tool_calls";
  return reply;
}

ModelReply tool_reply(std::string tool, std::string arguments) {
  ModelReply reply;
  reply.tool_calls.push_back(ToolCall{"call_x", std::move(tool), std::move(arguments)});
  reply.finish_reason = "tool_calls";
  return reply;
}

const char* kCritiquePass =
    R"({"accuracy":1,"completeness":1,"relevance":1,"logic":1,"need_replan":false,"feedback":"好"})";
const char* kCritiqueFail =
    R"({"accuracy":0.2,"completeness":0.1,"relevance":0.9,"logic":0.5,"need_replan":false,"feedback":"没有改到会议","suggestions":["先搜索再修改"]})";

PlanExecute machine(PlanPolicy policy = {}, int max_calls = 20) {
  std::vector<ports::ToolSchema> tools;
  for (const auto& name : kTools)
    tools.push_back(ports::ToolSchema{name, name + " does things", R"({"type":"object"})"});
  PromptValues values;
  values.now = LocalTime{2025, 2, 8, 10, 30, 0, 6, std::chrono::hours(8)};
  values.time_zone = "Asia/Shanghai";
  values.locale = "zh-CN";
  return PlanExecute(PlanExecuteLimits{max_calls, 4000}, policy, ResultMarkers{}, tools,
                     codec::plan_parsers(), values, "把2月8日的会议改到晚上8点");
}

std::string system_of(const PlanExecute& m) {
  const NextCall call = m.request();
  return call.messages->front().content;
}

TEST(PlanExecuteRun, ReplansOnceWhenTheCriticFailsThenSynthesizes) {
  PlanPolicy policy;
  policy.reflection = ReflectionSchedule::kAtEnd;
  PlanExecute m = machine(policy);
  ASSERT_TRUE(std::holds_alternative<CallModel>(m.start()));
  EXPECT_EQ(m.request().role, "planner");
  EXPECT_EQ(m.request().tools, ToolOffer::kNone);
  EXPECT_NE(system_of(m).find("Agent-Role: planner\nPlan-Round: 1\n"), std::string::npos);
  EXPECT_NE(system_of(m).find("- search_items："), std::string::npos);
  EXPECT_NE(system_of(m).find("今天是 2025-02-08。"), std::string::npos) << system_of(m);

  // Round 1: one tool step the critic finds wrong.
  Step s = m.on_model_reply(text_reply(
      R"([{"step_number":1,"description":"建会议","tool":"create_item","input":{"title":"会议"}}])"));
  auto* tools = std::get_if<CallTools>(&s);
  ASSERT_NE(tools, nullptr);
  ASSERT_EQ(tools->calls.size(), 1u);
  EXPECT_TRUE(tools->own_checkpoint);
  EXPECT_EQ(tools->calls[0].name, "create_item");
  EXPECT_EQ(tools->calls[0].arguments, R"({"title":"会议"})");
  EXPECT_EQ(tools->calls[0].id, "plan-1-1");
  s = m.on_tool_results(*tools, {ToolObservation{"plan-1-1", "create_item", true, R"({"id":9})"}});
  ASSERT_TRUE(std::holds_alternative<CallModel>(s));
  EXPECT_EQ(m.request().role, "critic");
  EXPECT_NE(m.request().messages->back().content.find(R"("result":"{\"id\":9}")"),
            std::string::npos);
  s = m.on_model_reply(text_reply(kCritiqueFail));
  ASSERT_TRUE(std::holds_alternative<CallModel>(s));
  EXPECT_EQ(m.request().role, "planner");
  EXPECT_EQ(m.corrections(), 1);
  EXPECT_NE(system_of(m).find("Plan-Round: 2\n"), std::string::npos);
  EXPECT_NE(m.request().messages->back().content.find("没有改到会议"), std::string::npos);
  EXPECT_NE(m.request().messages->back().content.find("先搜索再修改"), std::string::npos);

  // Round 2: search, then an update whose arguments the executor fills in from step 1.
  s = m.on_model_reply(text_reply(
      R"([{"step_number":1,"description":"搜索","tool":"search_items","input":{"date":"2025-02-08"}},
          {"step_number":2,"description":"改时间","tool":"update_item","input":{},"dependencies":[1]}])"));
  tools = std::get_if<CallTools>(&s);
  ASSERT_NE(tools, nullptr);
  EXPECT_EQ(tools->calls[0].id, "plan-2-1");
  s = m.on_tool_results(
      *tools, {ToolObservation{"plan-2-1", "search_items", true, R"({"items":[{"id":4}]})"}});
  ASSERT_TRUE(std::holds_alternative<CallModel>(s));
  EXPECT_EQ(m.request().role, "executor");
  EXPECT_EQ(m.request().tools, ToolOffer::kStepTool);
  EXPECT_EQ(m.request().tool, "update_item");
  EXPECT_NE(system_of(m).find("Plan-Step: 2\n"), std::string::npos);
  EXPECT_NE(m.request().messages->back().content.find(R"(\"id\":4)"), std::string::npos);
  s = m.on_model_reply(tool_reply("update_item", R"({"id":4,"start":"20:00"})"));
  tools = std::get_if<CallTools>(&s);
  ASSERT_NE(tools, nullptr);
  EXPECT_FALSE(tools->own_checkpoint);  // the results of the executor's call
  EXPECT_EQ(tools->calls[0].arguments, R"({"id":4,"start":"20:00"})");
  s = m.on_tool_results(*tools, {ToolObservation{"call_x", "update_item", true, R"({"ok":true})"}});
  ASSERT_TRUE(std::holds_alternative<CallModel>(s));
  EXPECT_EQ(m.request().role, "critic");
  s = m.on_model_reply(text_reply(kCritiquePass));
  ASSERT_TRUE(std::holds_alternative<CallModel>(s));
  EXPECT_EQ(m.request().role, "synthesizer");
  EXPECT_EQ(m.request().tools, ToolOffer::kFinishOnly);
  s = m.on_model_reply(finish_reply(ResultType::kActionCompleted, "已改到20:00"));
  auto* finished = std::get_if<Finish>(&s);
  ASSERT_NE(finished, nullptr);
  EXPECT_EQ(finished->result.message, "已改到20:00");
  // planner, critic, planner, executor, critic, synthesizer
  EXPECT_EQ(m.model_calls(), 6);
  EXPECT_EQ(m.tool_calls(), 3);
  EXPECT_EQ(m.corrections(), 1);
}

TEST(PlanExecuteRun, StopsReplanningAfterMaxCorrectionsAndGoesOn) {
  PlanPolicy policy;
  policy.reflection = ReflectionSchedule::kAtEnd;
  policy.max_corrections = 1;
  PlanExecute m = machine(policy);
  m.start();
  const char* plan = R"([{"description":"回答"}])";
  for (int round = 1; round <= 2; ++round) {
    ASSERT_EQ(m.request().role, "planner");
    m.on_model_reply(text_reply(plan));
    ASSERT_EQ(m.request().role, "executor");
    m.on_model_reply(text_reply("答案"));
    ASSERT_EQ(m.request().role, "critic");
    m.on_model_reply(text_reply(kCritiqueFail));
  }
  EXPECT_EQ(m.corrections(), 1);
  EXPECT_EQ(m.request().role, "synthesizer");
  // A plain-text synthesis is classified by the markers.
  Step s = m.on_model_reply(text_reply("❌ 无法完成"));
  ASSERT_TRUE(std::holds_alternative<Finish>(s));
  EXPECT_EQ(std::get<Finish>(s).result.type, ResultType::kError);
}

TEST(PlanExecuteRun, AskedAgainForAPlanItCannotUseThenFailsWithTheReason) {
  PlanPolicy policy;
  policy.max_corrections = 2;
  PlanExecute m = machine(policy);
  m.start();
  Step s = m.on_model_reply(text_reply(R"([{"description":"x","tool":"drop_tables"}])"));
  ASSERT_TRUE(std::holds_alternative<CallModel>(s));
  EXPECT_NE(m.request().messages->back().content.find("drop_tables"), std::string::npos);
  s = m.on_model_reply(text_reply("不知道"));
  ASSERT_TRUE(std::holds_alternative<CallModel>(s));
  s = m.on_model_reply(text_reply(R"([{"description":"a","dependencies":[1]}])"));
  auto* failed = std::get_if<Fail>(&s);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->reason, FailReason::kNoPlan);
  EXPECT_EQ(failed->message, "the planner gave no usable plan: step 1 depends on itself");
}

TEST(PlanExecuteRun, ReflectsOnTheConfiguredScheduleWithinTheCallBudget) {
  const char* plan = R"([{"description":"a"},{"description":"b"},{"description":"c"},
                         {"description":"d"}])";
  auto roles = [&](ReflectionSchedule schedule, int max_calls) {
    PlanPolicy policy;
    policy.reflection = schedule;
    PlanExecute m = machine(policy, max_calls);
    std::vector<std::string> seen;
    Step s = m.start();
    while (std::holds_alternative<CallModel>(s)) {
      const std::string role = m.request().role;
      seen.push_back(role);
      if (role == "planner")
        s = m.on_model_reply(text_reply(plan));
      else if (role == "critic")
        s = m.on_model_reply(text_reply(kCritiquePass));
      else if (role == "synthesizer")  // text steps did nothing: not action_completed
        s = m.on_model_reply(finish_reply(ResultType::kNeedClarification, "ok"));
      else
        s = m.on_model_reply(text_reply("r"));
    }
    EXPECT_TRUE(std::holds_alternative<Finish>(s));
    std::string out;
    for (const auto& r : seen)
      out += r.substr(0, 1);
    return out;
  };
  EXPECT_EQ(roles(ReflectionSchedule::kEveryStep, 20), "pececececs");
  EXPECT_EQ(roles(ReflectionSchedule::kEveryThirdStep, 20), "peeececs");
  EXPECT_EQ(roles(ReflectionSchedule::kAtEnd, 20), "peeeecs");
  // Six calls: the planner, four executors and the synthesizer; no room for a critique.
  EXPECT_EQ(roles(ReflectionSchedule::kEveryStep, 6), "peeees");
}

TEST(PlanExecuteRun, WritesUpWhatRanWhenMaxStepsCannotCoverThePlan) {
  PlanExecute tight = machine({}, 3);
  tight.start();
  Step t = tight.on_model_reply(text_reply(R"([{"description":"a"},{"description":"b"}])"));
  ASSERT_TRUE(std::holds_alternative<CallModel>(t));  // executor a (leaves one call)
  t = tight.on_model_reply(text_reply("r"));
  // Step b cannot run: the last call goes to the synthesizer, told what did not run.
  ASSERT_TRUE(std::holds_alternative<CallModel>(t));
  EXPECT_EQ(tight.request().role, "synthesizer");
  EXPECT_NE(tight.request().messages->back().content.find("计划从第 2 步起未执行"),
            std::string::npos);
  t = tight.on_model_reply(finish_reply(ResultType::kError, "只完成了 a"));
  ASSERT_TRUE(std::holds_alternative<Finish>(t));
  EXPECT_EQ(tight.model_calls(), 3);
  EXPECT_TRUE(std::holds_alternative<Fail>(machine({}, 1).start()));
}

TEST(PlanExecuteRun, TheSynthesizerSeesWhatEarlierRoundsDidAndAToolStepAnsweredInTextFailed) {
  PlanPolicy policy;
  policy.reflection = ReflectionSchedule::kAtEnd;
  PlanExecute m = machine(policy);
  m.start();
  Step s = m.on_model_reply(
      text_reply(R"([{"step_number":1,"description":"建","tool":"create_item","input":{"t":1}}])"));
  auto* tools = std::get_if<CallTools>(&s);
  ASSERT_NE(tools, nullptr);
  m.on_tool_results(*tools, {ToolObservation{"plan-1-1", "create_item", true, R"({"id":"x1"})"}});
  m.on_model_reply(text_reply(kCritiqueFail));  // a new plan
  // Round 2: an update the executor answers in text instead of calling the tool.
  s = m.on_model_reply(text_reply(
      R"([{"step_number":1,"description":"改","tool":"update_item","input":{},"dependencies":[]},
          {"step_number":2,"description":"再改","tool":"update_item","input":{},"dependencies":[1]}])"));
  tools = std::get_if<CallTools>(&s);
  ASSERT_NE(tools, nullptr);
  m.on_tool_results(*tools, {ToolObservation{"plan-2-1", "update_item", true, R"({"ok":1})"}});
  ASSERT_EQ(m.request().role, "executor");
  m.on_model_reply(text_reply("不用改了"));
  ASSERT_EQ(m.request().role, "critic");
  const std::string critic = m.request().messages->back().content;
  EXPECT_NE(critic.find("第 1 轮计划已执行的步骤及结果"), std::string::npos) << critic;
  EXPECT_NE(critic.find(R"(\"id\":\"x1\")"), std::string::npos) << critic;
  EXPECT_NE(critic.find(R"({"step_number":2,"ok":false,"result":"不用改了"})"), std::string::npos)
      << critic;
  m.on_model_reply(text_reply(kCritiquePass));
  ASSERT_EQ(m.request().role, "synthesizer");
  EXPECT_NE(m.request().messages->back().content.find(R"(\"id\":\"x1\")"), std::string::npos);
}

// Runs a one-step plan to the synthesizer: the step's tool call ends with `tool_ok`, or,
// without `tool`, the step is the executor's text.
PlanExecute at_synthesis(bool tool, bool tool_ok) {
  PlanPolicy policy;
  policy.reflection = ReflectionSchedule::kAtEnd;
  PlanExecute m = machine(policy);
  m.start();
  Step s = m.on_model_reply(text_reply(
      tool ? R"([{"step_number":1,"description":"建","tool":"create_item","input":{"t":1}}])"
           : R"([{"step_number":1,"description":"想一想"}])"));
  if (tool) {
    auto* tools = std::get_if<CallTools>(&s);
    EXPECT_NE(tools, nullptr);
    if (tools) {
      m.on_tool_results(*tools, {ToolObservation{"plan-1-1", "create_item", tool_ok,
                                                 tool_ok ? R"({"id":"x1"})" : R"({"error":1})"}});
    }
  } else {
    m.on_model_reply(text_reply("想好了"));
  }
  m.on_model_reply(text_reply(kCritiquePass));
  EXPECT_EQ(m.request().role, "synthesizer");
  return m;
}

TEST(PlanExecuteRun, ASynthesisClaimingAnActionNoToolPerformedIsAskedOnceThenFails) {
  for (const bool tool : {false, true}) {  // no tool step, or one whose call failed
    PlanExecute m = at_synthesis(tool, false);
    Step s = m.on_model_reply(finish_reply(ResultType::kActionCompleted, "已创建"));
    ASSERT_TRUE(std::holds_alternative<CallModel>(s)) << tool;
    EXPECT_EQ(m.request().role, "synthesizer");
    EXPECT_NE(m.request().messages->back().content.find("结果不能是 action_completed"),
              std::string::npos);
    // A plain-text claim is held to the same rule once the markers classify it.
    s = m.on_model_reply(text_reply("已创建待办"));
    auto* failed = std::get_if<Fail>(&s);
    ASSERT_NE(failed, nullptr) << tool;
    EXPECT_EQ(failed->reason, FailReason::kUnperformedAction);
    EXPECT_EQ(failed->message,
              "the synthesizer reported an action that no tool performed: 已创建待办");
  }
  // Told, the synthesizer may report what did happen.
  PlanExecute m = at_synthesis(false, false);
  m.on_model_reply(finish_reply(ResultType::kActionCompleted, "已创建"));
  Step s = m.on_model_reply(finish_reply(ResultType::kError, "没有创建"));
  auto* finished = std::get_if<Finish>(&s);
  ASSERT_NE(finished, nullptr);
  EXPECT_EQ(finished->result.type, ResultType::kError);
}

TEST(PlanExecuteRun, ASynthesisAfterASucceededToolCallMayReportTheAction) {
  PlanExecute m = at_synthesis(true, true);
  Step s = m.on_model_reply(finish_reply(ResultType::kActionCompleted, "已创建"));
  auto* finished = std::get_if<Finish>(&s);
  ASSERT_NE(finished, nullptr);
  EXPECT_EQ(finished->result.type, ResultType::kActionCompleted);
  EXPECT_EQ(m.model_calls(), 3);  // planner, critic, synthesizer: nothing asked again
}

TEST(PlanExecuteRun, PlanOnlyFinishesWithTheFirstUsablePlanAsJson) {
  std::vector<ports::ToolSchema> tools{ports::ToolSchema{"search_items", "d", "{}"}};
  PromptValues values;
  values.now = LocalTime{2025, 2, 8, 10, 30, 0, 6, std::chrono::hours(8)};
  PlanExecute m(PlanExecuteLimits{4, 4000, true}, PlanPolicy{}, ResultMarkers{}, tools,
                codec::plan_parsers(), values, "x");
  ASSERT_TRUE(std::holds_alternative<CallModel>(m.start()));
  // A refused plan is asked for again; the next one ends the run.
  ASSERT_TRUE(std::holds_alternative<CallModel>(m.on_model_reply(text_reply("[]"))));
  Step s = m.on_model_reply(text_reply(
      R"([{"step_number":1,"description":"找","tool":"search_items","input":{"q":"a"},"estimated_time":2.5}])"));
  auto* finished = std::get_if<Finish>(&s);
  ASSERT_NE(finished, nullptr);
  EXPECT_EQ(finished->result.message,
            R"([{"step_number":1,"description":"找","tool":"search_items","input":{"q":"a"},)"
            R"("expected_output":"","estimated_time":2.5,"dependencies":[]}])");
  EXPECT_EQ(m.model_calls(), 2);
  EXPECT_EQ(m.tool_calls(), 0);
  // What the API answers with reads it back.
  auto plan = codec::parse_plan(finished->result.message);
  ASSERT_TRUE(plan.ok());
  EXPECT_DOUBLE_EQ(plan.value().steps[0].estimated_time_s, 2.5);
}

}  // namespace
}  // namespace agentfleet::react
