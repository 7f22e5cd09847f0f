// llm-sim without sockets: scenario loading, matching, steps, branches, templates, the
// response shape and the token counts, driven through Simulator::complete.

#include "tests/source_dir.hpp"

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <chrono>
#include <fstream>
#include <string>
#include <variant>
#include <vector>

#include "core/react/react_loop.hpp"
#include "tools/llm_sim/scenario.hpp"
#include "tools/llm_sim/simulator.hpp"
#include "tools/llm_sim/templating.hpp"
#include "tools/llm_sim/tokens.hpp"

namespace agentfleet::llm_sim {
namespace {

using rapidjson::Value;

// 2025-03-01T12:00:00Z; only used when the system message has no date.
const std::chrono::system_clock::time_point kNow{std::chrono::seconds{1740830400}};

const std::vector<std::string> kDemoTools = {"search_items", "create_item",   "update_item",
                                             "delete_item",  "complete_todo", "finish"};

std::string json_text(const Value& value) {
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> writer(out);
  value.Accept(writer);
  return std::string(out.GetString(), out.GetSize());
}

// Builds a chat-completions request the way the worker does.
class Chat {
 public:
  explicit Chat(const std::string& user_text, const std::vector<std::string>& tools = kDemoTools,
                const std::string& system =
                    "你是一个快速操作执行器。当前时间：2025-02-05 09:30 "
                    "(Asia/Shanghai)") {
    doc_.SetObject();
    auto& a = doc_.GetAllocator();
    doc_.AddMember("model", "sim-model", a);
    doc_.AddMember("temperature", 0, a);
    doc_.AddMember("messages", Value(rapidjson::kArrayType), a);
    if (!system.empty()) {
      add_message("system", system);
    }
    add_message("user", user_text);
    Value list(rapidjson::kArrayType);
    for (const auto& name : tools) {
      Value function(rapidjson::kObjectType);
      function.AddMember("name", Value(name.c_str(), a), a);
      function.AddMember("description", "a tool", a);
      function.AddMember("parameters", Value(rapidjson::kObjectType), a);
      Value tool(rapidjson::kObjectType);
      tool.AddMember("type", "function", a);
      tool.AddMember("function", function, a);
      list.PushBack(tool, a);
    }
    if (!tools.empty()) {
      doc_.AddMember("tools", list, a);
    }
  }

  void add_message(const char* role, const std::string& content) {
    auto& a = doc_.GetAllocator();
    Value message(rapidjson::kObjectType);
    message.AddMember("role", Value(role, a), a);
    message.AddMember("content", Value(content.c_str(), a), a);
    doc_["messages"].PushBack(message, a);
  }

  // Appends the assistant message of a completion, as the worker echoes it back.
  void add_assistant(const Value& message) {
    Value copy(message, doc_.GetAllocator());
    doc_["messages"].PushBack(copy, doc_.GetAllocator());
  }

  void add_tool_result(const std::string& call_id, const std::string& content) {
    auto& a = doc_.GetAllocator();
    Value message(rapidjson::kObjectType);
    message.AddMember("role", "tool", a);
    message.AddMember("tool_call_id", Value(call_id.c_str(), a), a);
    message.AddMember("content", Value(content.c_str(), a), a);
    doc_["messages"].PushBack(message, a);
  }

  std::string body() const { return json_text(doc_); }

 private:
  rapidjson::Document doc_;
};

// One answer, parsed.
struct Answer {
  Completion completion;
  rapidjson::Document response;
  const Value& message() const { return response["choices"][0]["message"]; }
  std::string finish_reason() const { return response["choices"][0]["finish_reason"].GetString(); }
  std::size_t call_count() const {
    return message().HasMember("tool_calls") ? message()["tool_calls"].Size() : 0;
  }
  std::string tool(std::size_t i = 0) const {
    return message()["tool_calls"][static_cast<rapidjson::SizeType>(i)]["function"]["name"]
        .GetString();
  }
  std::string call_id(std::size_t i = 0) const {
    return message()["tool_calls"][static_cast<rapidjson::SizeType>(i)]["id"].GetString();
  }
  rapidjson::Document arguments(std::size_t i = 0) const {
    rapidjson::Document args;
    args.Parse(message()["tool_calls"][static_cast<rapidjson::SizeType>(i)]["function"]["arguments"]
                   .GetString());
    EXPECT_FALSE(args.HasParseError());
    return args;
  }
  std::string content() const {
    return message()["content"].IsString() ? message()["content"].GetString() : "";
  }
};

Answer ask(const Simulator& simulator, const std::string& body, std::uint64_t sequence = 1) {
  auto result = simulator.complete(body, kNow, sequence);
  if (auto* error = std::get_if<RequestError>(&result)) {
    ADD_FAILURE() << "request rejected: " << error->message;
    return {};
  }
  Answer answer;
  answer.completion = std::get<Completion>(result);
  answer.response.Parse(answer.completion.body.c_str());
  EXPECT_FALSE(answer.response.HasParseError()) << answer.completion.body;
  return answer;
}

// Asks, then feeds `result` back as the answer to every tool call of the reply.
Answer step_with(const Simulator& simulator, Chat& chat, const std::string& result) {
  Answer answer = ask(simulator, chat.body());
  chat.add_assistant(answer.message());
  for (std::size_t i = 0; i < answer.call_count(); ++i) {
    chat.add_tool_result(answer.call_id(i), result);
  }
  return answer;
}

Simulator simulator_from(const std::string& yaml) {
  return Simulator(parse_scenarios(yaml, "test.yaml"));
}

Simulator demo_simulator() {
  return Simulator(
      load_scenario_file(std::string(AGENTFLEET_SOURCE_DIR) + "/config/llm-sim-scenarios.yaml"));
}

std::string finish_type(const Answer& answer) {
  return answer.arguments()["type"].GetString();
}
std::string finish_message(const Answer& answer) {
  return answer.arguments()["message"].GetString();
}

const char* const kThreeEvents = R"({"items":[
  {"id":"e1","item_type":"event","title":"晨会","date":"2025-02-08","start_time":"09:00","end_time":"10:00"},
  {"id":"e2","item_type":"event","title":"团队会议","date":"2025-02-08","start_time":"14:00","end_time":"15:00"},
  {"id":"e3","item_type":"event","title":"项目评审","date":"2025-02-08","start_time":"16:00","end_time":"17:00"}],
  "count":3})";
const char* const kOneEvent = R"({"items":[
  {"id":"e2","item_type":"event","title":"团队会议","date":"2025-02-08","start_time":"14:00","end_time":"15:00"}],
  "count":1})";

// --- scenario choice and steps ----------------------------------------------------------

TEST(LlmSimTest, ChoosesTheFirstMatchingScenarioInFileOrder) {
  const Simulator simulator = simulator_from(R"(
scenarios:
  - name: first
    match: 'hello'
    steps: [{finish: {type: action_completed, message: one}}]
  - name: second
    match: 'hello (\w+)'
    steps: [{finish: {type: action_completed, message: "two {{match.1}}"}}]
  - name: third
    match: '^bye (\w+)'
    steps: [{finish: {type: action_completed, message: "three {{match.1}}"}}]
)");
  Answer answer = ask(simulator, Chat("say hello world").body());
  EXPECT_EQ(answer.completion.scenario, "first");
  EXPECT_EQ(finish_message(answer), "one");

  answer = ask(simulator, Chat("bye moon").body());
  EXPECT_EQ(answer.completion.scenario, "third");
  EXPECT_EQ(finish_message(answer), "three moon");

  answer = ask(simulator, Chat("nothing like it").body());
  EXPECT_EQ(answer.completion.scenario, "default");
  EXPECT_EQ(finish_type(answer), "error");
  EXPECT_EQ(finish_message(answer), "无法理解该指令");
}

TEST(LlmSimTest, MatchesTheLastUserMessage) {
  const Simulator simulator = simulator_from(R"(
scenarios:
  - name: second
    match: '^second$'
    steps: [{finish: {type: action_completed, message: ok}}]
)");
  Chat chat("first");
  chat.add_message("user", "second");
  EXPECT_EQ(ask(simulator, chat.body()).completion.scenario, "second");
}

TEST(LlmSimTest, StepIndexIsTheNumberOfAssistantMessages) {
  const Simulator simulator = simulator_from(R"(
scenarios:
  - name: three
    match: go
    steps:
      - calls: [{tool: search_items}]
      - calls: [{tool: create_item, arguments: {title: x}}]
      - finish: {type: action_completed, message: done}
)");
  Chat chat("go");
  Answer answer = step_with(simulator, chat, R"({"items":[],"count":0})");
  EXPECT_EQ(answer.completion.step, 0u);
  EXPECT_EQ(answer.tool(), "search_items");
  EXPECT_EQ(answer.call_id(), "call_0_0");
  EXPECT_EQ(answer.finish_reason(), "tool_calls");

  answer = step_with(simulator, chat, R"({"item":{"id":"t1"}})");
  EXPECT_EQ(answer.completion.step, 1u);
  EXPECT_EQ(answer.tool(), "create_item");
  EXPECT_EQ(answer.call_id(), "call_1_0");

  answer = step_with(simulator, chat, "");
  EXPECT_EQ(answer.tool(), "finish");
  EXPECT_EQ(finish_type(answer), "action_completed");

  answer = ask(simulator, chat.body());
  EXPECT_EQ(answer.completion.step, 3u);
  EXPECT_EQ(finish_type(answer), "error");
  EXPECT_EQ(finish_message(answer), "场景已结束");
}

// --- branches and templates -------------------------------------------------------------

TEST(LlmSimTest, BranchesOnTheCountOfThePreviousResults) {
  const Simulator simulator = demo_simulator();
  const std::string text = "2月8日的会议改到晚上8点";

  Chat one(text);
  Answer answer = step_with(simulator, one, kOneEvent);
  EXPECT_EQ(answer.tool(), "search_items");
  const auto search = answer.arguments();
  EXPECT_STREQ(search["item_type"].GetString(), "event");
  EXPECT_STREQ(search["date"].GetString(), "2025-02-08");  // {{year}} from the system date
  answer = ask(simulator, one.body());
  ASSERT_EQ(answer.tool(), "update_item");
  const auto update = answer.arguments();
  EXPECT_STREQ(update["id"].GetString(), "e2");
  EXPECT_STREQ(update["start_time"].GetString(), "20:00");
  EXPECT_STREQ(update["end_time"].GetString(), "21:00");

  Chat three(text);
  step_with(simulator, three, kThreeEvents);
  answer = ask(simulator, three.body());
  ASSERT_EQ(answer.tool(), "finish");
  const auto finish = answer.arguments();
  EXPECT_STREQ(finish["type"].GetString(), "need_clarification");
  EXPECT_EQ(std::string(finish["message"].GetString()).rfind("找到 3 个2月8日的会议", 0), 0u);
  ASSERT_EQ(finish["options"].Size(), 3u);
  EXPECT_STREQ(finish["options"][0].GetString(), "09:00-10:00「晨会」");
  EXPECT_STREQ(finish["options"][2].GetString(), "16:00-17:00「项目评审」");

  Chat none(text);
  step_with(simulator, none, R"({"items":[],"count":0})");
  answer = ask(simulator, none.body());
  EXPECT_EQ(finish_type(answer), "error");
  EXPECT_EQ(finish_message(answer), "未找到2月8日的任何会议");

  Chat failed(text);
  step_with(simulator, failed, R"({"error":{"code":"unavailable","message":"服务繁忙"}})");
  answer = ask(simulator, failed.body());
  EXPECT_EQ(finish_type(answer), "error");
  EXPECT_EQ(finish_message(answer), "查找会议失败：服务繁忙");
}

TEST(LlmSimTest, TemplatesReadToolResultsOfEarlierSteps) {
  const Simulator simulator = simulator_from(R"(
scenarios:
  - name: t
    match: '^copy (\w+)'
    steps:
      - calls:
          - {tool: search_items, arguments: {keyword: "{{match.1}}"}}
          - {tool: search_items, arguments: {keyword: second}}
      - calls:
          - tool: update_item
            arguments:
              id: "{{r.items.0.id}}"
              title: "{{results.1.item.title}}"
              note: "{{count r.items}} found, first {{r.items.0.id}}"
              n: "{{count r.items}}"
              missing: "{{r.nothing.here}}"
              dates: ["{{today}}", "{{tomorrow}}", "{{year}}"]
              fixed: {limit: 5, ratio: 0.5, flag: true, quoted: "5", empty: null}
      - finish:
          type: action_completed
          message: "{{steps.0.0.items.0.title}}/{{steps.0.1.item.title}}/{{r.item.title}}"
)");
  Chat chat("copy word");
  Answer answer = ask(simulator, chat.body());
  ASSERT_EQ(answer.call_count(), 2u);
  EXPECT_STREQ(answer.arguments(0)["keyword"].GetString(), "word");
  EXPECT_EQ(answer.call_id(1), "call_0_1");
  chat.add_assistant(answer.message());
  // Results arrive in call order; ids decide where each one goes.
  chat.add_tool_result("call_0_0", R"({"items":[{"id":42,"title":"A"},{"id":43}],"count":2})");
  chat.add_tool_result("call_0_1", R"({"item":{"title":"B"}})");

  answer = ask(simulator, chat.body());
  const auto args = answer.arguments();
  ASSERT_TRUE(args["id"].IsInt());  // a lone placeholder keeps the JSON type
  EXPECT_EQ(args["id"].GetInt(), 42);
  EXPECT_STREQ(args["title"].GetString(), "B");
  EXPECT_STREQ(args["note"].GetString(), "2 found, first 42");
  EXPECT_EQ(args["n"].GetInt(), 2);
  EXPECT_TRUE(args["missing"].IsNull());
  EXPECT_STREQ(args["dates"][0].GetString(), "2025-02-05");
  EXPECT_STREQ(args["dates"][1].GetString(), "2025-02-06");
  EXPECT_STREQ(args["dates"][2].GetString(), "2025");
  EXPECT_EQ(args["fixed"]["limit"].GetInt(), 5);
  EXPECT_DOUBLE_EQ(args["fixed"]["ratio"].GetDouble(), 0.5);
  EXPECT_TRUE(args["fixed"]["flag"].GetBool());
  EXPECT_STREQ(args["fixed"]["quoted"].GetString(), "5");
  EXPECT_TRUE(args["fixed"]["empty"].IsNull());
  chat.add_assistant(answer.message());
  chat.add_tool_result("call_1_0", R"({"item":{"title":"C"}})");

  EXPECT_EQ(finish_message(ask(simulator, chat.body())), "A/B/C");
}

TEST(LlmSimTest, TodayComesFromTheSystemMessageElseTheServerDate) {
  const Simulator simulator = simulator_from(R"(
scenarios:
  - name: d
    match: date
    steps: [{finish: {type: action_completed, message: "{{today}} {{tomorrow}} {{year}}"}}]
)");
  EXPECT_EQ(finish_message(ask(
                simulator,
                Chat("date", kDemoTools, "Now: 2024-12-31 23:00 (+08:00), id 12024-01-01").body())),
            "2024-12-31 2025-01-01 2024");
  EXPECT_EQ(finish_message(ask(simulator, Chat("date", kDemoTools, "").body())),
            "2025-03-01 2025-03-02 2025");
  // Not a date: month 13. The next valid one wins.
  EXPECT_EQ(
      finish_message(ask(simulator, Chat("date", kDemoTools, "2024-13-01 / 2024-02-28").body())),
      "2024-02-28 2024-02-29 2024");
}

TEST(LlmSimTest, OptionsFromFormatsEachElementUpToTheLimit) {
  const Simulator simulator = simulator_from(R"y(
scenarios:
  - name: o
    match: list
    steps:
      - calls: [{tool: search_items}]
      - finish:
          type: need_clarification
          message: "{{count r.items}} items"
          options_from: {path: r.items, format: "{{n}}:{{title}} ({{today}})", limit: 5}
)y");
  Chat chat("list");
  std::string items = R"({"items":[)";
  for (int i = 0; i < 7; ++i) {
    items += std::string(i ? "," : "") + R"({"n":)" + std::to_string(i) + R"(,"title":"t)" +
             std::to_string(i) + "\"}";
  }
  items += "]}";
  step_with(simulator, chat, items);
  const auto args = ask(simulator, chat.body()).arguments();
  EXPECT_STREQ(args["message"].GetString(), "7 items");
  ASSERT_EQ(args["options"].Size(), 5u);
  EXPECT_STREQ(args["options"][0].GetString(), "0:t0 (2025-02-05)");
  EXPECT_STREQ(args["options"][4].GetString(), "4:t4 (2025-02-05)");
}

TEST(LlmSimTest, FinishArgumentsAreParseableJsonWithTypeMessageOptions) {
  const Simulator simulator = simulator_from(R"(
scenarios:
  - name: quote
    match: quote
    steps:
      - content: thinking "hard"
        finish: {type: need_clarification, message: "say \"a\\b\"\n{{text}}", options: ["x {{year}}", y]}
)");
  Answer answer = ask(simulator, Chat("quote \"me\" \\ now").body());
  EXPECT_EQ(answer.content(), "thinking \"hard\"");
  ASSERT_EQ(answer.call_count(), 1u);
  EXPECT_EQ(answer.tool(), "finish");
  EXPECT_EQ(answer.finish_reason(), "tool_calls");
  const auto args = answer.arguments();
  ASSERT_TRUE(args.IsObject());
  EXPECT_STREQ(args["type"].GetString(), "need_clarification");
  EXPECT_STREQ(args["message"].GetString(), "say \"a\\b\"\nquote \"me\" \\ now");
  ASSERT_TRUE(args["options"].IsArray());
  EXPECT_STREQ(args["options"][0].GetString(), "x 2025");
  EXPECT_STREQ(args["options"][1].GetString(), "y");
}

TEST(LlmSimTest, AToolThatWasNotOfferedEndsInAnErrorFinish) {
  const Simulator simulator = demo_simulator();
  Answer answer = ask(simulator, Chat("2月8日的会议改到晚上8点", {"create_item", "finish"}).body());
  ASSERT_EQ(answer.tool(), "finish");
  EXPECT_EQ(finish_type(answer), "error");
  EXPECT_NE(finish_message(answer).find("search_items"), std::string::npos);
  EXPECT_NE(finish_message(answer).find("不可用"), std::string::npos);
}

TEST(LlmSimTest, WithoutAFinishToolTheAnswerIsPlainTextWithAMarker) {
  const Simulator simulator = demo_simulator();
  Answer answer = ask(simulator, Chat("删除2月30日的日程", {"search_items"}).body());
  EXPECT_EQ(answer.call_count(), 0u);
  EXPECT_EQ(answer.finish_reason(), "stop");
  EXPECT_EQ(answer.content(), "❌ 2月30日不存在，无法删除日程");
}

TEST(LlmSimTest, AReplyToAPlainTextAnswerIsNotTheUsersTextAndTheScenarioGoesOn) {
  const Simulator simulator = demo_simulator();
  Chat chat("plain then act");
  Answer first = ask(simulator, chat.body());
  EXPECT_EQ(first.call_count(), 0u);
  EXPECT_EQ(first.content(), "好的，我这就去办。");
  chat.add_assistant(first.message());
  chat.add_message("user", std::string(react::kCorrection));  // the worker's correction
  Answer second = ask(simulator, chat.body());
  ASSERT_EQ(second.call_count(), 1u) << second.completion.body;
  EXPECT_EQ(second.tool(), "search_items");
}

// --- the demo file ------------------------------------------------------------------------

TEST(LlmSimTest, DemoFileLoadsAndScriptsTheSixTasks) {
  const Simulator simulator = demo_simulator();
  std::vector<std::string> names;
  for (const auto& scenario : simulator.scenarios().scenarios) {
    names.push_back(scenario.name);
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "move_meeting", "move_named_meeting", "pick_second_meeting", "create_meeting",
                "complete_todo", "create_todo", "plan_todo", "impossible_date", "bench", "thinking",
                "no-usage", "slow", "impersonate", "text_calls_hermes", "text_calls_llama",
                "text_calls_mistral", "text_calls_json", "plain_claim", "plain_then_act"}));

  {  // 1. move the only meeting
    Chat chat("2月8日的会议改到晚上8点");
    step_with(simulator, chat, kOneEvent);
    step_with(simulator, chat, R"({"item":{"id":"e2","title":"团队会议","date":"2025-02-08",
      "start_time":"20:00","end_time":"21:00"},"previous":{"id":"e2","title":"团队会议",
      "date":"2025-02-08","start_time":"14:00","end_time":"15:00"}})");
    const Answer answer = ask(simulator, chat.body());
    EXPECT_EQ(finish_type(answer), "action_completed");
    EXPECT_EQ(finish_message(answer), "已将「团队会议」从 2月8日 14:00-15:00 改到 20:00-21:00");
  }
  {  // 1b. update refused
    Chat chat("2月8日的会议改到晚上8点");
    step_with(simulator, chat, kOneEvent);
    step_with(simulator, chat, R"({"error":{"code":"conflict","message":"时间冲突"}})");
    EXPECT_EQ(finish_message(ask(simulator, chat.body())), "修改失败：时间冲突");
  }
  {  // 2. create tomorrow's meeting
    Chat chat("明天下午3点开会，讨论项目进度");
    const Answer create = step_with(simulator, chat, R"({"item":{"id":"n1","title":"讨论项目进度",
      "date":"2025-02-06","start_time":"15:00","end_time":"16:00"}})");
    ASSERT_EQ(create.tool(), "create_item");
    const auto args = create.arguments();
    EXPECT_STREQ(args["item_type"].GetString(), "event");
    EXPECT_STREQ(args["title"].GetString(), "讨论项目进度");
    EXPECT_STREQ(args["date"].GetString(), "2025-02-06");
    EXPECT_STREQ(args["start_time"].GetString(), "15:00");
    EXPECT_STREQ(args["end_time"].GetString(), "16:00");
    EXPECT_EQ(finish_message(ask(simulator, chat.body())),
              "已创建日程：2月6日 15:00-16:00「讨论项目进度」");
  }
  {  // 3. complete the report todo
    Chat chat("完成报告提交");
    const Answer search =
        step_with(simulator, chat,
                  R"({"items":[{"id":"t9","item_type":"todo","title":"提交月度报告"}],"count":1})");
    EXPECT_STREQ(search.arguments()["keyword"].GetString(), "报告");
    const Answer complete = step_with(
        simulator, chat, R"({"item":{"id":"t9","title":"提交月度报告","status":"done"}})");
    ASSERT_EQ(complete.tool(), "complete_todo");
    EXPECT_STREQ(complete.arguments()["id"].GetString(), "t9");
    EXPECT_EQ(finish_message(ask(simulator, chat.body())), "已完成待办：提交月度报告");
  }
  {  // 4. a todo this afternoon
    Chat chat("今天下午去买东西");
    const Answer create = step_with(simulator, chat, R"({"item":{"id":"t10"}})");
    const auto args = create.arguments();
    EXPECT_STREQ(args["item_type"].GetString(), "todo");
    EXPECT_STREQ(args["date"].GetString(), "2025-02-05");
    EXPECT_STREQ(args["time_segment"].GetString(), "afternoon");
    EXPECT_EQ(finish_message(ask(simulator, chat.body())), "已创建待办：今天下午「去买东西」");
  }
  {  // 5. impossible date, no tool call
    const Answer answer = ask(simulator, Chat("删除2月30日的日程").body());
    EXPECT_EQ(answer.call_count(), 1u);
    EXPECT_EQ(finish_type(answer), "error");
    EXPECT_EQ(finish_message(answer), "2月30日不存在，无法删除日程");
  }
  {  // bench: 2 steps of 3 calls, then finish
    Chat chat("bench: steps=2 calls=3");
    EXPECT_EQ(step_with(simulator, chat, R"({"items":[],"count":0})").call_count(), 3u);
    const Answer second = step_with(simulator, chat, R"({"items":[],"count":0})");
    EXPECT_EQ(second.call_count(), 3u);
    EXPECT_EQ(second.call_id(2), "call_1_2");
    const Answer done = ask(simulator, chat.body());
    EXPECT_EQ(finish_type(done), "action_completed");
    EXPECT_EQ(ask(simulator, Chat("bench:").body()).call_count(), 1u);
  }
}

// --- token counts -------------------------------------------------------------------------

TEST(LlmSimTest, TokenCountsFollowTheDocumentedFormula) {
  EXPECT_EQ(count_code_points("abc"), 3);
  EXPECT_EQ(count_code_points("会议"), 2);
  EXPECT_EQ(count_code_points("✅ ok"), 4);

  rapidjson::Document request;
  request.Parse(R"({"messages":[
      {"role":"system","content":"abcd"},
      {"role":"user","content":"会议改到"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function",
        "function":{"name":"search_items","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"c","content":"[1,2]"}],
    "tools":[1]})");
  Usage usage;
  count_prompt(request, usage);
  // cp: tools "[1]" 3, system 4, user 4, assistant 12 + 2, tool 5 -> 30.
  EXPECT_EQ(usage.prompt_tokens, (30 + 3) / 4 + 4 * 4);
  // Before the assistant message (index 2): 3 + 4 + 4 = 11 -> floor(11 / 4) + 4 * 2.
  EXPECT_EQ(usage.cached_tokens, 11 / 4 + 4 * 2);
  EXPECT_EQ(count_completion(request["messages"][2]), (14 + 3) / 4 + 1);
}

TEST(LlmSimTest, UsageIsDeterministicAndCachedNeverExceedsPrompt) {
  const Simulator simulator = demo_simulator();
  Chat chat("2月8日的会议改到晚上8点");
  const Answer first = ask(simulator, chat.body(), 1);
  const Answer again = ask(simulator, chat.body(), 2);
  EXPECT_EQ(first.completion.usage.prompt_tokens, again.completion.usage.prompt_tokens);
  EXPECT_EQ(first.completion.usage.completion_tokens, again.completion.usage.completion_tokens);
  EXPECT_EQ(first.completion.usage.cached_tokens, 0);  // nothing cached on the first call
  EXPECT_GT(first.completion.usage.completion_tokens, 1);

  const Value& usage = first.response["usage"];
  EXPECT_EQ(usage["total_tokens"].GetInt64(),
            usage["prompt_tokens"].GetInt64() + usage["completion_tokens"].GetInt64());
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"].GetInt64(), 0);
  EXPECT_EQ(usage["completion_tokens_details"]["reasoning_tokens"].GetInt64(), 0);
  EXPECT_STREQ(first.response["object"].GetString(), "chat.completion");
  EXPECT_STREQ(first.response["model"].GetString(), "sim-model");
  EXPECT_NE(std::string(first.response["id"].GetString()),
            std::string(again.response["id"].GetString()));

  chat.add_assistant(first.message());
  chat.add_tool_result(first.call_id(), kThreeEvents);
  const Answer second = ask(simulator, chat.body());
  const Usage& u = second.completion.usage;
  EXPECT_GT(u.cached_tokens, 0);
  EXPECT_LE(u.cached_tokens, u.prompt_tokens);
  EXPECT_GT(u.prompt_tokens, first.completion.usage.prompt_tokens);
}

// --- bad input ----------------------------------------------------------------------------

TEST(LlmSimTest, RejectsRequestsThatAreNotJsonOrLackMessages) {
  const Simulator simulator = demo_simulator();
  const auto error_of = [&](const std::string& body) {
    auto result = simulator.complete(body, kNow, 1);
    EXPECT_TRUE(std::holds_alternative<RequestError>(result)) << body;
    return std::holds_alternative<RequestError>(result) ? std::get<RequestError>(result)
                                                        : RequestError{};
  };
  EXPECT_NE(error_of("not json").message.find("not valid JSON"), std::string::npos);
  EXPECT_EQ(error_of("[1]").param, "");
  EXPECT_EQ(error_of(R"({"model":"m"})").param, "messages");
  EXPECT_EQ(error_of(R"({"messages":{}})").param, "messages");
  EXPECT_EQ(error_of(R"({"messages":[{"role":"user","content":"x"},{"content":"y"}]})").param,
            "messages[1].role");
  // Unknown fields are ignored.
  EXPECT_TRUE(std::holds_alternative<Completion>(simulator.complete(
      R"({"messages":[{"role":"user","content":"x"}],"foo":{"bar":1},"n":1})", kNow, 1)));
}

TEST(LlmSimTest, RejectsAMalformedScenarioFileNamingThePlace) {
  const auto error_of = [](const std::string& yaml) -> std::string {
    try {
      parse_scenarios(yaml, "bad.yaml");
    } catch (const ScenarioError& e) {
      return e.what();
    }
    ADD_FAILURE() << "accepted: " << yaml;
    return {};
  };
  const std::string type = error_of(R"(scenarios:
  - name: a
    match: x
    steps:
      - finish: {type: done, message: m}
)");
  EXPECT_EQ(type.rfind("bad.yaml:5:", 0), 0u) << type;
  EXPECT_NE(type.find("/scenarios/0/steps/0/finish/type"), std::string::npos) << type;

  EXPECT_NE(
      error_of("scenarios: [{name: a, match: '(', steps: [{finish: {type: error, message: m}}]}]")
          .find("/scenarios/0/match: invalid regular expression"),
      std::string::npos);
  EXPECT_NE(
      error_of("scenarios: [{name: a, match: x, steps: [{calls: [{tool: t, argumnts: {}}]}]}]")
          .find("/scenarios/0/steps/0/calls/0/argumnts: unknown key"),
      std::string::npos);
  EXPECT_NE(error_of("scenarios: [{name: a, match: x, steps: [{finish: {type: error, message: "
                     "'{{resuls.0}}'}}]}]")
                .find("unknown name 'resuls'"),
            std::string::npos);
  EXPECT_NE(error_of("scenarios: [{name: a, match: 'x(y)', steps: [{finish: {type: error, "
                     "message: '{{match.2}}'}}]}]")
                .find("capture group"),
            std::string::npos);
  EXPECT_NE(error_of("scenarios: [{name: a, match: x, steps: [{finish: {type: error, message: "
                     "'{{r.items'}}]}]")
                .find("unclosed"),
            std::string::npos);
  EXPECT_NE(error_of("scenarios: [{name: a, match: x, steps: [{branches: [{finish: {type: error, "
                     "message: a}}, {finish: {type: error, message: b}}]}]}]")
                .find("/scenarios/0/steps/0/branches/1: unreachable"),
            std::string::npos);
  EXPECT_NE(error_of("scenarios: [{name: a, steps: [{finish: {type: error, message: a}}]}]")
                .find("missing required key 'match'"),
            std::string::npos);
  EXPECT_NE(error_of("scenarios: [{name: a, match: x, steps: [{calls: [{tool: x}], finish: "
                     "{type: error, message: a}}]}]")
                .find("both 'calls' and 'finish'"),
            std::string::npos);
  EXPECT_NE(error_of("scenarios: [{name: a, match: x, steps: [{branches: [{when: {count: r.items}, "
                     "finish: {type: error, message: a}}]}]}]")
                .find("needs eq, min or max"),
            std::string::npos);
  EXPECT_NE(error_of("scenarios: [\n").find("bad.yaml:"), std::string::npos);

  const std::string path = testing::TempDir() + "llm_sim_bad_scenarios.yaml";
  {
    std::ofstream out(path);
    out << "scenarios:\n  - name: a\n    match: x\n    steps: []\n";
  }
  try {
    load_scenario_file(path);
    ADD_FAILURE() << "accepted an empty steps list";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ":4:", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("/scenarios/0/steps"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_scenario_file(path + ".missing"), ScenarioError);
}

TEST(LlmSimTest, ConditionsOnErrorsAndPresence) {
  rapidjson::Document context;
  context.Parse(R"({"r":{"error":{"code":"x"},"items":[1,2,3],"empty":null}})");
  EXPECT_TRUE((Condition{Condition::Kind::kExists, "r.error"}).holds(context));
  EXPECT_FALSE((Condition{Condition::Kind::kMissing, "r.error"}).holds(context));
  EXPECT_TRUE((Condition{Condition::Kind::kMissing, "r.empty"}).holds(context));
  EXPECT_TRUE((Condition{Condition::Kind::kMissing, "r.items.3"}).holds(context));
  EXPECT_TRUE((Condition{Condition::Kind::kCount, "r.items", 3, std::nullopt, std::nullopt})
                  .holds(context));
  EXPECT_FALSE((Condition{Condition::Kind::kCount, "r.items", std::nullopt, 4, std::nullopt})
                   .holds(context));
  EXPECT_TRUE((Condition{Condition::Kind::kCount, "r.nothing", std::nullopt, std::nullopt, 0})
                  .holds(context));
}

}  // namespace
}  // namespace agentfleet::llm_sim
