// GET /v1/tools, POST /v1/tools/{name}:call and GET /v1/stats on the fleet: the registry
// as users see it, direct calls checked like a model's (permission, schema), called once
// per idempotency key and audited, and the success statistics of a user's tasks.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>

#include "tests/integration/fleet_client.hpp"

namespace agentfleet {
namespace {

namespace bhttp = boost::beast::http;
using test::api;
using test::at;
using test::env;
using test::fetch;
using test::kAdminKey;
using test::kU1Key;
using test::kU2Key;
using test::num;
using test::parse;
using test::pg_row;
using test::run_tag;
using test::str;

// A number member (integer or not); NaN when absent or of another type.
double real(const rapidjson::Value& v, const char* name) {
  const auto& m = at(v, name);
  return m.IsNumber() ? m.GetDouble() : std::nan("");
}

std::string fresh_user(const std::string& name) {
  return "tools-" + name + "-" + run_tag();
}

const rapidjson::Value& tool_named(const rapidjson::Value& registry, const std::string& name) {
  static const rapidjson::Value kNull;
  const auto& tools = at(registry, "tools");
  if (!tools.IsArray())
    return kNull;
  for (const auto& tool : tools.GetArray()) {
    if (str(tool, "name") == name)
      return tool;
  }
  return kNull;
}

TEST(ToolsApi, TheRegistryListsEveryToolWithItsSchemaAndWhatTheUserMayCall) {
  auto all = api(bhttp::verb::get, "/v1/tools", kAdminKey);
  ASSERT_EQ(all.status, 200) << all.body;
  auto registry = parse(all.body);
  EXPECT_EQ(num(registry, "count"), 6);
  const auto& search = tool_named(registry, "search_items");
  ASSERT_TRUE(search.IsObject()) << all.body;
  EXPECT_EQ(str(search, "permission"), "read");
  EXPECT_TRUE(at(search, "parameters").IsObject());
  EXPECT_EQ(str(at(search, "parameters"), "type"), "object");
  EXPECT_FALSE(search.HasMember("permitted"));  // no user named
  EXPECT_EQ(str(tool_named(registry, "create_item"), "permission"), "write");

  auto mine = api(bhttp::verb::get, "/v1/tools?user_id=u1", kU1Key);
  ASSERT_EQ(mine.status, 200) << mine.body;
  auto as_u1 = parse(mine.body);
  EXPECT_TRUE(at(tool_named(as_u1, "search_items"), "permitted").GetBool());
  EXPECT_TRUE(at(tool_named(as_u1, "create_item"), "permitted").GetBool());  // standard: write
  EXPECT_EQ(api(bhttp::verb::get, "/v1/tools?user_id=u2", kU1Key).status, 403);
  EXPECT_EQ(api(bhttp::verb::post, "/v1/tools", kAdminKey).status, 405);
}

TEST(ToolsApi, ADirectCallIsCheckedCalledOncePerKeyAndAudited) {
  const std::string u = fresh_user("call");
  const std::string body =
      R"({"user_id":")" + u +
      R"(","arguments":{"item_type":"todo","title":"直接创建","date":"2026-03-01"}})";
  const std::string key = "direct-" + run_tag();
  auto first = api(bhttp::verb::post, "/v1/tools/create_item:call", kAdminKey, body,
                   {{"Idempotency-Key", key}});
  ASSERT_EQ(first.status, 200) << first.body;
  auto answer = parse(first.body);
  EXPECT_TRUE(at(answer, "ok").GetBool());
  EXPECT_EQ(str(at(at(answer, "result"), "item"), "title"), "直接创建");
  EXPECT_EQ(num(answer, "http_status"), 200);
  // The tool sees the key in the namespace of direct calls and of the user.
  EXPECT_EQ(str(answer, "idempotency_key"), "direct:" + u + ":" + key);
  const auto audit_id = static_cast<std::int64_t>(num(answer, "audit_id"));
  // The same key again: the tool answers from its record; one todo.
  auto again = api(bhttp::verb::post, "/v1/tools/create_item:call", kAdminKey, body,
                   {{"Idempotency-Key", key}});
  ASSERT_EQ(again.status, 200) << again.body;
  auto items = parse(fetch(env()["TOOL_SIM_URL"] + "/items?user_id=" + u, bhttp::verb::get).body);
  ASSERT_TRUE(at(items, "items").IsArray());
  EXPECT_EQ(at(items, "items").GetArray().Size(), 1u);

  auto row = pg_row(
      "SELECT caller, user_id, tool, outcome, http_status, arguments->>'title', idempotency_key, "
      "finished_at IS NOT NULL FROM tool_call_audit WHERE id = $1",
      audit_id);
  EXPECT_EQ(row[0].as<std::string>(), "dev-admin");
  EXPECT_EQ(row[1].as<std::string>(), u);
  EXPECT_EQ(row[2].as<std::string>(), "create_item");
  EXPECT_EQ(row[3].as<std::string>(), "ok");
  EXPECT_EQ(row[4].as<int>(), 200);
  EXPECT_EQ(row[5].as<std::string>(), "直接创建");
  EXPECT_EQ(row[6].as<std::string>(), "direct:" + u + ":" + key);
  EXPECT_TRUE(row[7].as<bool>());

  // Arguments that fail the tool's schema: 400, audited, nothing called.
  auto bad = api(bhttp::verb::post, "/v1/tools/create_item:call", kAdminKey,
                 R"({"user_id":")" + u + R"(","arguments":{"item_type":"todo"}})");
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(str(at(parse(bad.body), "error"), "code"), "invalid_arguments") << bad.body;
  EXPECT_EQ(pg_row("SELECT count(*) FROM tool_call_audit WHERE user_id = $1 AND outcome = "
                   "'invalid_arguments'",
                   u)[0]
                .as<int>(),
            1);
  EXPECT_EQ(api(bhttp::verb::post, "/v1/tools/no_such_tool:call", kAdminKey,
                R"({"user_id":")" + u + R"("})")
                .status,
            404);
  EXPECT_EQ(api(bhttp::verb::post, "/v1/tools/search_items:call", kAdminKey, R"({"arguments":{}})")
                .status,
            400);
  EXPECT_EQ(api(bhttp::verb::post, "/v1/tools/search_items:call", kU1Key,
                R"({"user_id":"u2","arguments":{}})")
                .status,
            403);
}

TEST(ToolsApi, TwoUsersWhoseIdsAndKeysJoinAlikeGetKeysOfTheirOwn) {
  // User "<u>:x" with key "k" and user "<u>" with key "x:k" once shared the key
  // "direct:<u>:x:k": the second call was answered from the first's record, and acted for
  // nobody.
  const std::string u = fresh_user("join");
  const std::string colon_user = u + ":x";
  const auto create = [](const std::string& user, const std::string& key) {
    return api(bhttp::verb::post, "/v1/tools/create_item:call", kAdminKey,
               R"({"user_id":")" + user +
                   R"(","arguments":{"item_type":"todo","title":"各自的","date":"2026-03-01"}})",
               {{"Idempotency-Key", key}});
  };
  auto first = create(colon_user, "k");
  ASSERT_EQ(first.status, 200) << first.body;
  auto second = create(u, "x:k");
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(str(parse(first.body), "idempotency_key"), "direct:" + u + "%3Ax:k");
  EXPECT_EQ(str(parse(second.body), "idempotency_key"), "direct:" + u + ":x:k");
  for (const std::string& user : {colon_user, u}) {
    auto items = parse(
        fetch(env()["TOOL_SIM_URL"] + "/items?user_id=" + test::url_encode(user), bhttp::verb::get)
            .body);
    ASSERT_TRUE(at(items, "items").IsArray()) << user;
    EXPECT_EQ(at(items, "items").GetArray().Size(), 1u) << "each user's call acted: " << user;
  }
}

// Sets a user's tool permission override for the test's length, then puts the old
// overrides back.
class PermissionOverride {
 public:
  PermissionOverride(std::string user, const std::string& level) : user_(std::move(user)) {
    auto before = parse(api(bhttp::verb::get, "/v1/users/" + user_ + "/limits", kAdminKey).body);
    const auto& overrides = at(before, "overrides");
    previous_ = overrides.IsObject() ? str(overrides, "tool_permission") : "";
    put(level);
  }
  ~PermissionOverride() { put(previous_); }
  PermissionOverride(const PermissionOverride&) = delete;
  PermissionOverride& operator=(const PermissionOverride&) = delete;

 private:
  void put(const std::string& level) {
    const std::string value = level.empty() ? "null" : "\"" + level + "\"";
    auto response = api(bhttp::verb::put, "/v1/users/" + user_ + "/limits", kAdminKey,
                        R"({"tool_permission":)" + value + "}");
    EXPECT_EQ(response.status, 200) << response.body;
  }
  std::string user_;
  std::string previous_;
};

TEST(ToolsApi, AUserKeyMayCallOnlyToolsWithinItsUsersPermissionLevel) {
  PermissionOverride read_only("u2", "read");
  auto refused =
      api(bhttp::verb::post, "/v1/tools/create_item:call", kU2Key,
          R"({"user_id":"u2","arguments":{"item_type":"todo","title":"x","date":"2026-03-01"}})");
  EXPECT_EQ(refused.status, 403) << refused.body;
  EXPECT_EQ(str(at(parse(refused.body), "error"), "code"), "permission_denied") << refused.body;
  EXPECT_GE(pg_row("SELECT count(*) FROM tool_call_audit WHERE user_id = 'u2' AND tool = "
                   "'create_item' AND outcome = 'refused' AND caller = 'dev-u2'")[0]
                .as<int>(),
            1);
  auto allowed = api(bhttp::verb::post, "/v1/tools/search_items:call", kU2Key,
                     R"({"user_id":"u2","arguments":{"item_type":"event","date":"2026-02-08"}})");
  EXPECT_EQ(allowed.status, 200) << allowed.body;
  EXPECT_TRUE(at(parse(allowed.body), "ok").GetBool()) << allowed.body;
}

TEST(StatsApi, AUsersTasksCountSucceedByResultTypeWithDurationsStepsTokensAndCost) {
  const std::string u = fresh_user("stats");
  const std::string ok = test::submit(
      R"({"user_id":")" + u + R"(","text":"bench: steps=2 calls=1","idempotency_key":"s1"})");
  const std::string impossible = test::submit(
      R"({"user_id":")" + u + R"(","text":"删除2月30日的日程","idempotency_key":"s2"})");
  ASSERT_EQ(str(test::wait_terminal(ok), "status"), "succeeded");
  ASSERT_EQ(str(test::wait_terminal(impossible), "status"), "succeeded");

  auto response = api(bhttp::verb::get, "/v1/stats?user_id=" + u, kAdminKey);
  ASSERT_EQ(response.status, 200) << response.body;
  auto stats = parse(response.body);
  EXPECT_EQ(str(stats, "user_id"), u);
  EXPECT_EQ(num(stats, "tasks"), 2);
  EXPECT_EQ(num(stats, "ended"), 2);
  EXPECT_DOUBLE_EQ(real(stats, "success_rate"), 1.0);
  EXPECT_DOUBLE_EQ(real(stats, "action_completed_rate"), 0.5)
      << "the impossible one succeeded with an error answer";
  EXPECT_EQ(num(at(stats, "by_result_type"), "action_completed"), 1);
  EXPECT_EQ(num(at(stats, "by_result_type"), "error"), 1);
  EXPECT_EQ(num(at(stats, "by_strategy"), "default"), 2);
  const double avg = real(at(stats, "duration_s"), "avg");
  const double p95 = real(at(stats, "duration_s"), "p95");
  EXPECT_GT(avg, 0.0);
  EXPECT_GE(p95, avg);
  EXPECT_DOUBLE_EQ(real(stats, "avg_steps"), 2.0);       // 3 and 1 model calls
  EXPECT_DOUBLE_EQ(real(stats, "avg_tool_calls"), 1.0);  // 2 and 0
  EXPECT_GT(num(at(stats, "tokens"), "input"), 0);
  ASSERT_TRUE(at(stats, "cost").IsArray() && at(stats, "cost").Size() == 1u) << response.body;
  EXPECT_EQ(str(at(stats, "cost")[0], "currency"), "CNY");
  // The ledger's bill and the statistics agree.
  EXPECT_EQ(str(at(stats, "cost")[0], "cost"),
            pg_row("SELECT to_char(sum(cost), 'FM999999999999990.000000') FROM usage_ledger "
                   "WHERE user_id = $1",
                   u)[0]
                .as<std::string>());

  // A window before the tasks: nothing.
  auto empty =
      parse(api(bhttp::verb::get, "/v1/stats?user_id=" + u + "&to=2020-01-01", kAdminKey).body);
  EXPECT_EQ(num(empty, "tasks"), 0);
  EXPECT_TRUE(at(empty, "success_rate").IsNull());
  EXPECT_TRUE(at(empty, "action_completed_rate").IsNull());
  EXPECT_EQ(api(bhttp::verb::get, "/v1/stats", kU1Key).status, 403);  // everyone's: admin only
  EXPECT_EQ(api(bhttp::verb::get, "/v1/stats?user_id=" + u, kU1Key).status, 403);
  EXPECT_EQ(api(bhttp::verb::get, "/v1/stats?user_id=u1&from=yesterday", kU1Key).status, 400);
  EXPECT_EQ(api(bhttp::verb::get, "/v1/stats", kAdminKey).status, 200);
}

}  // namespace
}  // namespace agentfleet

namespace agentfleet {
namespace {

TEST(PlanApi, ThePlannerAloneAnswersWithThePlanAndItsTimeBilledAsATaskOfItsOwn) {
  const std::string u = "plan-api-" + test::run_tag();
  auto answer = test::api(boost::beast::http::verb::post, "/v1/plan", test::kAdminKey,
                          R"({"user_id":")" + u + R"(","text":"计划：创建待办「周报」"})", {},
                          std::chrono::seconds(40));
  ASSERT_EQ(answer.status, 200) << answer.body;
  auto doc = test::parse(answer.body);
  const auto& plan = test::at(doc, "plan");
  EXPECT_EQ(test::num(plan, "total_steps"), 1);  // plan_todo's first plan: the search
  ASSERT_TRUE(test::at(plan, "steps").IsArray() && test::at(plan, "steps").Size() == 1u);
  EXPECT_EQ(test::str(test::at(plan, "steps")[0], "tool"), "search_items");
  EXPECT_TRUE(test::at(test::at(plan, "steps")[0], "input").IsObject());
  EXPECT_TRUE(test::at(plan, "estimated_total_time_s").IsNumber());
  EXPECT_DOUBLE_EQ(test::at(plan, "estimated_total_time_s").GetDouble(), 1.0);
  EXPECT_EQ(test::str(doc, "status"), "succeeded");

  // A task of its own: strategy plan_only, one model call, billed, nothing run.
  const std::string id = test::str(doc, "task_id");
  auto task = test::wait_terminal(id);
  EXPECT_EQ(test::str(task, "strategy"), "plan_only");
  EXPECT_EQ(test::num(task, "steps"), 1);
  EXPECT_EQ(test::num(task, "tool_calls"), 0);
  EXPECT_EQ(test::pg_count("SELECT count(*) FROM usage_ledger WHERE task_id = $1::uuid", id), 1);
  EXPECT_TRUE(test::at(doc, "usage").IsObject()) << answer.body;
  EXPECT_EQ(test::str(doc, "cost"), test::str(task, "cost"));
  auto records = test::parse(test::fetch(test::env()["TOOL_SIM_URL"] + "/records?user_id=" + u,
                                         boost::beast::http::verb::get)
                                 .body);
  EXPECT_TRUE(records.IsArray() && records.Empty()) << "planning called a tool";

  // Not waiting: 202 with the task to poll. The plan must not be able to end before it is
  // read (a plan of the simulator's ends within milliseconds once admitted): the user runs
  // one task at a time, and a slow one (20 answers of 600 ms) holds that place until the
  // test cancels it.
  const auto verb_put = boost::beast::http::verb::put;
  const auto verb_post = boost::beast::http::verb::post;
  ASSERT_EQ(
      test::api(verb_put, "/v1/users/" + u + "/limits", test::kAdminKey, R"({"max_concurrency":1})")
          .status,
      200);
  const std::string blocker = test::submit(
      R"({"user_id":")" + u + R"(","text":"slow: steps=20","idempotency_key":"blocker"})");
  std::string blocker_status;
  for (int i = 0; i < 600 && blocker_status != "running"; ++i) {  // until it runs: 30 s at most
    if (i > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    blocker_status = test::str(
        test::parse(
            test::api(boost::beast::http::verb::get, "/v1/tasks/" + blocker, test::kAdminKey).body),
        "status");
  }
  ASSERT_EQ(blocker_status, "running") << "the slow task never ran: nothing holds the plan back";
  auto later =
      test::api(verb_post, "/v1/plan", test::kAdminKey,
                R"({"user_id":")" + u + R"(","text":"计划：创建待办「月报」","wait_s":0})");
  EXPECT_EQ(later.status, 202) << later.body;
  const std::string waiting = test::str(test::parse(later.body), "task_id");
  EXPECT_FALSE(waiting.empty());
  EXPECT_EQ(test::str(test::parse(later.body), "status"), "queued") << later.body;
  // Both end, and the user's limits are as they were.
  for (const std::string& t : {blocker, waiting}) {
    if (!t.empty())
      test::api(verb_post, "/v1/tasks/" + t + "/cancel", test::kAdminKey);
  }
  EXPECT_EQ(test::api(verb_put, "/v1/users/" + u + "/limits", test::kAdminKey, "{}").status, 200);
  for (const std::string& t : {blocker, waiting}) {
    if (!t.empty())
      test::wait_terminal(t);
  }
  EXPECT_EQ(test::api(boost::beast::http::verb::post, "/v1/plan", test::kAdminKey,
                      R"({"user_id":")" + u + R"("})")
                .status,
            400);
  EXPECT_EQ(test::api(boost::beast::http::verb::post, "/v1/plan", test::kU1Key,
                      R"({"user_id":"u2","text":"x"})")
                .status,
            403);
}

}  // namespace
}  // namespace agentfleet
