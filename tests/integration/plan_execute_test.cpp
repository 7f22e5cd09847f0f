// plan_execute on the fleet: a task whose first plan the critic fails, replanned once; what
// each call wrote (the trace's roles), what it cost (one ledger row per model call, none
// for a tool step), and the side effects in tool-sim (once each).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/integration/fleet_client.hpp"

namespace agentfleet {
namespace {

namespace bhttp = boost::beast::http;
using test::at;
using test::env;
using test::fetch;
using test::num;
using test::parse;
using test::pg_row;
using test::run_tag;
using test::str;

std::string plan_user(const std::string& name) {
  return "plan-" + name + "-" + run_tag();
}

TEST(PlanExecute, ATaskReplansOnceThenCreatesItsTodoOnceAndBillsEveryModelCall) {
  const std::string u = plan_user("replan");
  const std::string id =
      test::submit(R"({"user_id":")" + u +
                   R"(","text":"计划：创建待办「整理周报」","strategy":"plan_execute",)"
                   R"("idempotency_key":"plan-1"})");
  ASSERT_FALSE(id.empty());
  auto task = test::wait_terminal(id);
  ASSERT_EQ(str(task, "status"), "succeeded") << str(task, "error");
  EXPECT_EQ(str(task, "strategy"), "plan_execute");
  EXPECT_EQ(str(at(task, "result"), "type"), "action_completed");
  // The synthesizer's message is built from the results of steps 2 and 3 of the new plan.
  EXPECT_EQ(str(at(task, "result"), "message"), "已创建待办「整理周报」，备注：由计划创建");

  // planner, search (round 1), critic (fails), planner, search, create, executor + update
  // (the id it filled in from the create), critic (passes), synthesizer.
  const auto& trace = at(task, "trace");
  ASSERT_TRUE(trace.IsArray());
  std::vector<std::string> roles;
  for (const auto& step : trace.GetArray())
    roles.push_back(str(step, "role"));
  EXPECT_EQ(roles, (std::vector<std::string>{"planner", "tool", "critic", "planner", "tool", "tool",
                                             "executor", "critic", "synthesizer"}));
  EXPECT_EQ(num(task, "steps"), 9);
  EXPECT_EQ(num(task, "tool_calls"), 4);
  ASSERT_EQ(trace.GetArray().Size(), 9u);

  // The executor's update carries the id the create returned.
  const auto& create_calls = at(trace[5], "tool_calls");
  const auto& update_calls = at(trace[6], "tool_calls");
  ASSERT_TRUE(create_calls.IsArray() && create_calls.Size() == 1u);
  ASSERT_TRUE(update_calls.IsArray() && update_calls.Size() == 1u);
  EXPECT_EQ(str(create_calls[0], "tool"), "create_item");
  const std::string created = str(create_calls[0], "result");
  const auto& update = update_calls[0];
  EXPECT_EQ(str(update, "tool"), "update_item");
  EXPECT_EQ(str(update, "status"), "ok");
  auto created_doc = parse(created);
  const std::string item_id = str(at(created_doc, "item"), "id");
  ASSERT_FALSE(item_id.empty()) << created;
  EXPECT_NE(str(update, "arguments").find("\"id\":\"" + item_id + "\""), std::string::npos)
      << str(update, "arguments") << " / " << created;

  // One ledger row per model call (six), none for the four tool steps' rows; totals agree.
  auto ledger = pg_row(R"SQL(
      SELECT (SELECT count(*) FROM usage_ledger WHERE task_id = $1::uuid),
             (SELECT count(*) FROM task_steps s WHERE s.task_id = $1::uuid
                AND s.model_reply->>'kind' IS DISTINCT FROM 'tool_step'),
             (SELECT count(*) FROM task_steps s JOIN usage_ledger l USING (task_id, step)
                WHERE s.task_id = $1::uuid AND s.model_reply->>'kind' = 'tool_step'),
             (SELECT cost FROM tasks WHERE task_id = $1::uuid) =
               (SELECT sum(cost) FROM usage_ledger WHERE task_id = $1::uuid),
             (SELECT input_tokens FROM tasks WHERE task_id = $1::uuid) =
               (SELECT sum(input_tokens) FROM usage_ledger WHERE task_id = $1::uuid))SQL",
                       id);
  EXPECT_EQ(ledger[0].as<int>(), 6);
  EXPECT_EQ(ledger[1].as<int>(), 6);
  EXPECT_EQ(ledger[2].as<int>(), 0) << "a tool step was billed";
  EXPECT_TRUE(ledger[3].as<bool>());
  EXPECT_TRUE(ledger[4].as<bool>());

  // Exactly one todo, with the note.
  auto items = parse(fetch(env()["TOOL_SIM_URL"] + "/items?user_id=" + u, bhttp::verb::get).body);
  ASSERT_TRUE(at(items, "items").IsArray());
  ASSERT_EQ(at(items, "items").GetArray().Size(), 1u) << "the todo was not created exactly once";
  EXPECT_EQ(str(at(items, "items")[0], "title"), "整理周报");
  EXPECT_EQ(str(at(items, "items")[0], "description"), "由计划创建");
}

TEST(PlanExecute, ATierCanMakeItTheDefaultAndAnyScenarioRunsOnTheBuiltInRoles) {
  // No strategy in the submission: the user's tier decides. A user of the standard tier
  // (react) runs ReAct; asking for plan_execute runs the bench scenario's roles (one planned
  // search, run as planned); a text no scenario scripts runs llm-sim's built-in roles (a
  // plan of one model step, then the synthesis), and since no tool did anything the
  // synthesizer says so instead of reporting an action.
  const std::string u = plan_user("default");
  const std::string react =
      test::submit(R"({"user_id":")" + u + R"(","text":"bench: steps=1","idempotency_key":"d-1"})");
  const std::string plan = test::submit(
      R"({"user_id":")" + u +
      R"(","text":"bench: steps=1","strategy":"plan_execute","idempotency_key":"d-2"})");
  const std::string unscripted = test::submit(
      R"({"user_id":")" + u +
      R"(","text":"写一首关于春天的诗","strategy":"plan_execute","idempotency_key":"d-3"})");
  auto r = test::wait_terminal(react);
  auto p = test::wait_terminal(plan);
  auto n = test::wait_terminal(unscripted);
  ASSERT_EQ(str(r, "status"), "succeeded") << str(r, "error");
  ASSERT_EQ(str(p, "status"), "succeeded") << str(p, "error");
  ASSERT_EQ(str(n, "status"), "succeeded") << str(n, "error");
  EXPECT_TRUE(at(r, "strategy").IsNull());  // as submitted: none, so the tier's (react)
  EXPECT_EQ(str(p, "strategy"), "plan_execute");
  auto roles_of = [](const auto& task) {
    std::vector<std::string> roles;
    for (const auto& step : at(task, "trace").GetArray())
      roles.push_back(str(step, "role"));
    return roles;
  };
  EXPECT_EQ(roles_of(p), (std::vector<std::string>{"planner", "tool", "critic", "synthesizer"}));
  EXPECT_EQ(str(at(p, "result"), "type"), "action_completed");
  EXPECT_EQ(str(at(p, "result"), "message"), "bench 完成：计划 1 步");
  EXPECT_EQ(roles_of(n),
            (std::vector<std::string>{"planner", "executor", "critic", "synthesizer"}));
  EXPECT_EQ(str(at(n, "result"), "type"), "error");
  EXPECT_EQ(str(at(n, "result"), "message"), "无法理解该指令");
}

TEST(PlanExecute, ARefusedStrategyOrAModelWithoutFunctionCallingIsAClearError) {
  const std::string u = plan_user("refused");
  auto bad = test::api(bhttp::verb::post, "/v1/tasks", test::kAdminKey,
                       R"({"user_id":")" + u + R"(","text":"x","strategy":"tree_of_thought"})");
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(str(at(parse(bad.body), "error"), "path"), "/strategy") << bad.body;
  // sim-react-model speaks react_json: plan_execute cannot drive it.
  const std::string id = test::submit(
      R"({"user_id":")" + u +
      R"(","text":"bench: steps=1","strategy":"plan_execute","model":"sim-react-model","idempotency_key":"r-1"})");
  auto task = test::wait_terminal(id);
  EXPECT_EQ(str(task, "status"), "failed");
  EXPECT_NE(str(task, "error").find("plan_execute needs a model that calls functions"),
            std::string::npos)
      << str(task, "error");
  EXPECT_EQ(num(task, "steps"), 0);
}

}  // namespace
}  // namespace agentfleet
