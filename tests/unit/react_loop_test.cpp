// The ReAct state machine driven by canned model replies: built as values, and parsed from
// real-looking OpenAI chat-completion bodies, the way the worker and a resumed task feed it.
#include "core/react/react_loop.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "core/codec/checkpoint_codec.hpp"
#include "core/codec/openai_codec.hpp"
#include "core/codec/react_json_codec.hpp"
#include "core/codec/text_tool_calls.hpp"

namespace agentfleet::react {
namespace {

const std::set<std::string> kCalendarTools = {"search_items", "update_item", "create_item"};

ReactLoop make_loop(int max_steps = 10, ResultMarkers markers = {}) {
  return ReactLoop(Limits{max_steps}, std::move(markers), kCalendarTools);
}

ModelReply parsed(const std::string& body) {
  auto reply = codec::parse_chat_response(body);
  EXPECT_TRUE(reply.ok()) << (reply.ok() ? "" : reply.error().message) << "\n" << body;
  return reply.ok() ? reply.value() : ModelReply{};
}

// A chat-completion body whose assistant message calls one tool.
std::string tool_call_body(const std::string& id, const std::string& name,
                           const std::string& arguments_as_json_string, int prompt_tokens,
                           int completion_tokens) {
  return R"({"id":"chatcmpl-1","object":"chat.completion","model":"deepseek-chat",)"
         R"("choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant",)"
         R"("content":null,"tool_calls":[{"id":")" +
         id + R"(","type":"function","function":{"name":")" + name + R"(","arguments":)" +
         arguments_as_json_string + R"(}}]}}],)" + R"("usage":{"prompt_tokens":)" +
         std::to_string(prompt_tokens) + R"(,"completion_tokens":)" +
         std::to_string(completion_tokens) + "}}";
}

// The three replies of the sample flow: search, update, finish.
std::vector<std::string> sample_flow_bodies() {
  return {
      tool_call_body("call_search", "search_items",
                     R"("{\"keyword\":\"周会\",\"date\":\"2026-02-08\"}")", 1200, 40),
      tool_call_body("call_update", "update_item",
                     R"("{\"id\":\"evt_42\",\"start\":\"2026-02-08T20:00:00+08:00\"}")", 1400, 60),
      tool_call_body(
          "call_finish", "finish",
          R"("{\"type\":\"action_completed\",\"message\":\"已将2月8日的周会改到晚上8点\"}")", 1600,
          30),
  };
}

// A fake tool service: answers by tool name and records what it was asked to run.
struct FakeTools {
  std::map<std::string, std::string> answers = {
      {"search_items", R"({"items":[{"id":"evt_42","title":"周会"}]})"},
      {"update_item", R"({"id":"evt_42","updated":true})"},
      {"create_item", R"({"id":"evt_43"})"},
  };
  std::vector<ToolCall> executed;

  std::vector<ToolObservation> run(const CallTools& step) {
    std::vector<ToolObservation> out;
    for (const ToolCall& call : step.calls) {
      executed.push_back(call);
      out.push_back(ToolObservation{call.id, call.name, true, answers.at(call.name)});
    }
    return out;
  }
};

// Drives the loop through `replies` the way the worker does; returns the last step.
Step drive(const ReactLoop& loop, ReactState& state, const std::vector<ModelReply>& replies,
           FakeTools& tools) {
  Step step = CallModel{};
  for (const ModelReply& reply : replies) {
    EXPECT_TRUE(std::holds_alternative<CallModel>(step)) << "the loop stopped asking early";
    step = loop.on_model_reply(state, reply);
    if (auto* call_tools = std::get_if<CallTools>(&step)) {
      step = loop.on_tool_results(state, *call_tools, tools.run(*call_tools));
    }
  }
  return step;
}

std::string error_code_of(const std::string& tool_json) {
  rapidjson::Document doc;
  doc.Parse(tool_json.c_str());
  if (doc.HasParseError() || !doc.IsObject() || !doc.HasMember("error") ||
      !doc["error"].IsObject() || !doc["error"].HasMember("code")) {
    return "<not a tool error: " + tool_json + ">";
  }
  return doc["error"]["code"].GetString();
}

TEST(ReactLoopTest, StartSendsSystemPromptThenUserText) {
  const ReactState state = make_loop().start("system prompt", "把2月8日的会议改到晚上8点");
  ASSERT_EQ(state.messages.size(), 2u);
  EXPECT_EQ(state.messages[0].role, Role::kSystem);
  EXPECT_EQ(state.messages[0].content, "system prompt");
  EXPECT_EQ(state.messages[1].role, Role::kUser);
  EXPECT_EQ(state.messages[1].content, "把2月8日的会议改到晚上8点");
  EXPECT_EQ(state.model_calls, 0);
}

TEST(ReactLoopTest, SampleFlowFromOpenAiJsonSearchUpdateFinish) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "把2月8日的周会改到晚上8点");
  FakeTools tools;
  std::vector<ModelReply> replies;
  for (const auto& body : sample_flow_bodies())
    replies.push_back(parsed(body));

  const Step last = drive(loop, state, replies, tools);

  ASSERT_TRUE(std::holds_alternative<Finish>(last));
  const TaskResult& result = std::get<Finish>(last).result;
  EXPECT_EQ(result.type, ResultType::kActionCompleted);
  EXPECT_EQ(result.message, "已将2月8日的周会改到晚上8点");
  EXPECT_TRUE(result.options.empty());

  ASSERT_EQ(tools.executed.size(), 2u);
  EXPECT_EQ(tools.executed[0].name, "search_items");
  EXPECT_EQ(tools.executed[0].arguments, R"({"keyword":"周会","date":"2026-02-08"})");
  EXPECT_EQ(tools.executed[1].name, "update_item");
  EXPECT_EQ(state.model_calls, 3);
  EXPECT_EQ(state.tool_calls, 2);

  // system, user, (assistant, tool) x2, assistant(finish)
  ASSERT_EQ(state.messages.size(), 7u);
  EXPECT_EQ(state.messages[2].role, Role::kAssistant);
  EXPECT_EQ(state.messages[3].role, Role::kTool);
  EXPECT_EQ(state.messages[3].tool_call_id, "call_search");
  EXPECT_EQ(state.messages[3].name, "search_items");
  EXPECT_EQ(state.messages[3].content, tools.answers["search_items"]);
  EXPECT_EQ(state.messages[5].tool_call_id, "call_update");
  EXPECT_EQ(state.messages[6].role, Role::kAssistant);
}

TEST(ReactLoopTest, AnAssistantTurnKeepsItsReasoningForTheRequestsAfterIt) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "把2月8日的周会改到晚上8点");
  ModelReply reply = parsed(sample_flow_bodies()[0]);
  reply.reasoning = "先找到周会";
  ASSERT_TRUE(std::holds_alternative<CallTools>(loop.on_model_reply(state, reply)));
  EXPECT_EQ(state.messages.back().role, Role::kAssistant);
  EXPECT_EQ(state.messages.back().reasoning, "先找到周会");
}

TEST(ReactLoopTest, SampleFlowFromValuesWithOptions) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "完成报告待办");
  FakeTools tools;
  ModelReply search;
  search.tool_calls = {ToolCall{"c1", "search_items", R"({"keyword":"报告"})"}};
  search.finish_reason = "tool_calls";
  ModelReply finish;
  finish.tool_calls = {ToolCall{"c2", "finish", "{}"}};
  finish.finish = FinishCall{
      TaskResult{
          ResultType::kNeedClarification, "找到两个报告待办，请说明是哪一个", {"周报", "月报"}},
      ""};

  const Step last = drive(loop, state, {search, finish}, tools);

  ASSERT_TRUE(std::holds_alternative<Finish>(last));
  const TaskResult& result = std::get<Finish>(last).result;
  EXPECT_EQ(result.type, ResultType::kNeedClarification);
  EXPECT_EQ(result.options, (std::vector<std::string>{"周报", "月报"}));
  EXPECT_EQ(tools.executed.size(), 1u);
}

TEST(ReactLoopTest, ToolOutsideAllowListIsRefusedAndFedBackWithItsCallId) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "删除周会");
  const ModelReply reply = parsed(
      R"({"choices":[{"finish_reason":"tool_calls","message":{"role":"assistant","content":null,)"
      R"("tool_calls":[)"
      R"({"id":"c1","type":"function","function":{"name":"search_items","arguments":"{}"}},)"
      R"({"id":"c2","type":"function","function":{"name":"delete_item","arguments":"{\"id\":\"evt_42\"}"}},)"
      R"({"id":"c3","type":"function","function":{"name":"create_item","arguments":"{}"}}]}}]})");

  const Step step = loop.on_model_reply(state, reply);

  ASSERT_TRUE(std::holds_alternative<CallTools>(step));
  const CallTools& call_tools = std::get<CallTools>(step);
  ASSERT_EQ(call_tools.calls.size(), 2u);
  EXPECT_EQ(call_tools.calls[0].id, "c1");
  EXPECT_EQ(call_tools.calls[1].id, "c3");
  // Idempotency keys use the position in the reply, so a refused call between two allowed
  // ones does not shift the keys (and a resumed step sends the same ones).
  EXPECT_EQ(call_tools.call_indices, (std::vector<int>{0, 2}));
  ASSERT_EQ(call_tools.refused.size(), 1u);
  EXPECT_EQ(call_tools.refused[0].call_id, "c2");
  EXPECT_EQ(call_tools.refused[0].tool, "delete_item");
  EXPECT_FALSE(call_tools.refused[0].ok);
  EXPECT_EQ(error_code_of(call_tools.refused[0].content), "tool_not_allowed");

  FakeTools tools;
  loop.on_tool_results(state, call_tools, tools.run(call_tools));
  ASSERT_EQ(state.messages.size(), 6u);
  EXPECT_EQ(state.messages[4].role, Role::kTool);
  EXPECT_EQ(state.messages[4].tool_call_id, "c2");
  EXPECT_EQ(state.messages[4].name, "delete_item");
  EXPECT_EQ(error_code_of(state.messages[4].content), "tool_not_allowed");
  // Only the allowed calls ran.
  ASSERT_EQ(tools.executed.size(), 2u);
  EXPECT_EQ(state.tool_calls, 2);
}

TEST(ReactLoopTest, EmptyAllowListRefusesEveryTool) {
  const ReactLoop loop(Limits{}, ResultMarkers{}, {});
  ReactState state = loop.start("sys", "text");
  ModelReply reply;
  reply.tool_calls = {ToolCall{"a", "search_items", "{}"}};
  const Step step = loop.on_model_reply(state, reply);
  ASSERT_TRUE(std::holds_alternative<CallTools>(step));
  EXPECT_TRUE(std::get<CallTools>(step).calls.empty());
  ASSERT_EQ(std::get<CallTools>(step).refused.size(), 1u);
  EXPECT_EQ(error_code_of(std::get<CallTools>(step).refused[0].content), "tool_not_allowed");
}

TEST(ReactLoopTest, EveryToolCallGetsExactlyOneToolMessageInCallOrder) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "text");
  ModelReply reply;
  reply.tool_calls = {ToolCall{"c1", "search_items", "{}"}, ToolCall{"c2", "not_allowed", "{}"},
                      ToolCall{"c3", "create_item", "{}"}, ToolCall{"c4", "update_item", "{}"}};
  const Step step = loop.on_model_reply(state, reply);
  ASSERT_TRUE(std::holds_alternative<CallTools>(step));
  const CallTools& call_tools = std::get<CallTools>(step);

  // Results arrive out of order, and c4's result is missing (the runner lost it).
  std::vector<ToolObservation> results = {
      ToolObservation{"c3", "create_item", true, R"({"r":3})"},
      ToolObservation{"c1", "search_items", true, R"({"r":1})"},
  };
  const Step next = loop.on_tool_results(state, call_tools, results);
  EXPECT_TRUE(std::holds_alternative<CallModel>(next));

  ASSERT_EQ(state.messages.size(), 3u + 4u);
  const std::vector<std::string> expected_ids = {"c1", "c2", "c3", "c4"};
  for (std::size_t i = 0; i < expected_ids.size(); ++i) {
    const Message& m = state.messages[3 + i];
    EXPECT_EQ(m.role, Role::kTool);
    EXPECT_EQ(m.tool_call_id, expected_ids[i]);
  }
  EXPECT_EQ(state.messages[3].content, R"({"r":1})");
  EXPECT_EQ(error_code_of(state.messages[4].content), "tool_not_allowed");
  EXPECT_EQ(state.messages[5].content, R"({"r":3})");
  EXPECT_EQ(error_code_of(state.messages[6].content), "no_result");
}

TEST(ReactLoopTest, ToolErrorObservationIsFedBackVerbatim) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "text");
  ModelReply reply;
  reply.tool_calls = {ToolCall{"c1", "update_item", R"({"id":"x"})"}};
  const Step step = loop.on_model_reply(state, reply);
  ASSERT_TRUE(std::holds_alternative<CallTools>(step));
  const std::string failure = tool_error_json("not_found", "item \"x\" does not exist");
  loop.on_tool_results(state, std::get<CallTools>(step),
                       {ToolObservation{"c1", "update_item", false, failure}});
  ASSERT_EQ(state.messages.size(), 4u);
  EXPECT_EQ(state.messages[3].content, failure);
  EXPECT_EQ(error_code_of(state.messages[3].content), "not_found");
}

TEST(ReactLoopTest, ToolErrorJsonEscapesItsText) {
  const std::string json = tool_error_json("bad\"code", "line1\nline2 \\ \x01 文本");
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  ASSERT_FALSE(doc.HasParseError()) << json;
  EXPECT_STREQ(doc["error"]["code"].GetString(), "bad\"code");
  EXPECT_STREQ(doc["error"]["message"].GetString(), "line1\nline2 \\ \x01 文本");
}

TEST(ReactLoopTest, InvalidFinishArgumentsAreFedBackAndTheLoopContinues) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "text");
  FakeTools tools;
  // type has the wrong JSON type; message is fine.
  const ModelReply bad = parsed(
      tool_call_body("call_f1", "finish", R"("{\"type\":42,\"message\":\"done\"}")", 100, 10));
  ASSERT_TRUE(bad.finish.has_value());
  ASSERT_FALSE(bad.finish->problem.empty());

  const Step step = loop.on_model_reply(state, bad);
  ASSERT_TRUE(std::holds_alternative<CallTools>(step));
  const CallTools& call_tools = std::get<CallTools>(step);
  EXPECT_TRUE(call_tools.calls.empty());
  ASSERT_EQ(call_tools.refused.size(), 1u);
  EXPECT_EQ(call_tools.refused[0].call_id, "call_f1");

  EXPECT_TRUE(std::holds_alternative<CallModel>(
      loop.on_tool_results(state, call_tools, tools.run(call_tools))));
  ASSERT_EQ(state.messages.size(), 4u);
  const Message& observation = state.messages[3];
  EXPECT_EQ(observation.role, Role::kTool);
  EXPECT_EQ(observation.tool_call_id, "call_f1");
  EXPECT_EQ(error_code_of(observation.content), "invalid_finish");
  // The model is told what was wrong, not just that something was.
  EXPECT_NE(observation.content.find("finish.type"), std::string::npos) << observation.content;

  const Step last = loop.on_model_reply(
      state,
      parsed(tool_call_body("call_f2", "finish",
                            R"("{\"type\":\"error\",\"message\":\"日期不存在\"}")", 120, 10)));
  ASSERT_TRUE(std::holds_alternative<Finish>(last));
  EXPECT_EQ(std::get<Finish>(last).result.type, ResultType::kError);
  EXPECT_EQ(std::get<Finish>(last).result.message, "日期不存在");
  EXPECT_TRUE(tools.executed.empty());
}

TEST(ReactLoopTest, FinishBesideActionsDoesNotReportWorkThatNeverRan) {
  // Parallel tool calls: the model completes the todo and declares success in one message.
  // Finishing here would report action_completed while complete_todo never ran.
  const ReactLoop loop(Limits{}, ResultMarkers{}, {"search_items", "complete_todo"});
  ReactState state = loop.start("sys", "把报告待办标记为完成");
  const ModelReply reply = parsed(
      R"({"choices":[{"finish_reason":"tool_calls","message":{"role":"assistant","content":null,)"
      R"("tool_calls":[)"
      R"({"id":"c1","type":"function","function":{"name":"complete_todo","arguments":"{\"id\":\"todo_7\"}"}},)"
      R"({"id":"c2","type":"function","function":{"name":"finish","arguments":"{\"type\":\"action_completed\",\"message\":\"已完成\"}"}}]}}]})");
  ASSERT_TRUE(reply.finish.has_value());
  ASSERT_TRUE(reply.finish->problem.empty());

  const Step step = loop.on_model_reply(state, reply);
  ASSERT_TRUE(std::holds_alternative<CallTools>(step)) << "finished before the action ran";
  const CallTools& call_tools = std::get<CallTools>(step);
  ASSERT_EQ(call_tools.calls.size(), 1u);
  EXPECT_EQ(call_tools.calls[0].name, "complete_todo");
  ASSERT_EQ(call_tools.refused.size(), 1u);
  EXPECT_EQ(call_tools.refused[0].call_id, "c2");
  EXPECT_EQ(error_code_of(call_tools.refused[0].content), "invalid_finish");

  loop.on_tool_results(state, call_tools,
                       {ToolObservation{"c1", "complete_todo", true, R"({"status":"done"})"}});
  ASSERT_EQ(state.messages.size(), 5u);
  EXPECT_EQ(state.messages[3].tool_call_id, "c1");
  EXPECT_EQ(state.messages[4].tool_call_id, "c2");

  // Seeing the result, the model finishes alone.
  const Step last = loop.on_model_reply(
      state,
      parsed(tool_call_body("c3", "finish",
                            R"("{\"type\":\"action_completed\",\"message\":\"已完成\"}")", 10, 5)));
  ASSERT_TRUE(std::holds_alternative<Finish>(last));
  EXPECT_EQ(std::get<Finish>(last).result.type, ResultType::kActionCompleted);
}

TEST(ReactLoopTest, FinishArgumentsThatAreNotJsonAreFedBack) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "text");
  const Step step = loop.on_model_reply(
      state, parsed(tool_call_body("f", "finish", R"("{\"type\": \"action_com")", 1, 1)));
  ASSERT_TRUE(std::holds_alternative<CallTools>(step));
  ASSERT_EQ(std::get<CallTools>(step).refused.size(), 1u);
  EXPECT_EQ(error_code_of(std::get<CallTools>(step).refused[0].content), "invalid_finish");
}

// A loop that classifies plain text at once (no correction asked for).
ReactLoop classifying_loop() {
  Limits limits;
  limits.max_corrections = 0;
  return ReactLoop(limits, {}, kCalendarTools);
}

TEST(ReactLoopTest, PlainTextAnswersAreClassifiedByMarkers) {
  const ReactLoop loop = classifying_loop();
  struct Case {
    std::string text;
    ResultType expected;
  };
  const std::vector<Case> cases = {
      {"✅ 已将会议改到晚上8点", ResultType::kActionCompleted},
      {"⚠️ 找到两个周会，请说明日期", ResultType::kNeedClarification},
      {"❌ 2月30日不存在", ResultType::kError},
      // An error outranks the others; a question outranks success.
      {"✅ 已搜索 ❌ 但无法修改", ResultType::kError},
      {"⚠️ 需要确认 ❌ 失败", ResultType::kError},
      {"✅ 搜索完成 ⚠️ 有两个匹配", ResultType::kNeedClarification},
      // No marker: the fallback (action_completed by default).
      {"已完成", ResultType::kActionCompleted},
  };
  for (const Case& c : cases) {
    ReactState state = loop.start("sys", "text");
    state.tools_ok = 1;  // a tool did something: success is not refused
    ModelReply reply;
    reply.content = c.text;
    reply.finish_reason = "stop";
    const Step step = loop.on_model_reply(state, reply);
    ASSERT_TRUE(std::holds_alternative<Finish>(step)) << c.text;
    EXPECT_EQ(std::get<Finish>(step).result.type, c.expected) << c.text;
    EXPECT_EQ(std::get<Finish>(step).result.message, c.text);
    EXPECT_EQ(loop.classify_text(c.text).type, c.expected) << c.text;
  }
}

TEST(ReactLoopTest, EmojiMarkersMatchWithOrWithoutVariationSelector) {
  const ReactLoop loop = make_loop();
  // The default marker is U+26A0 U+FE0F; models often write the bare U+26A0.
  EXPECT_EQ(loop.classify_text("\u26a0 找到两个周会，请说明日期").type,
            ResultType::kNeedClarification);
  EXPECT_EQ(loop.classify_text("\u26a0\ufe0f 找到两个周会").type, ResultType::kNeedClarification);
  // And a configured bare marker matches text that carries the selector.
  ResultMarkers markers;
  markers.need_clarification = {"\u26a0"};
  markers.error = {"\u274c\ufe0f"};
  const ReactLoop bare = make_loop(10, markers);
  EXPECT_EQ(bare.classify_text("\u26a0\ufe0f 哪一个？").type, ResultType::kNeedClarification);
  EXPECT_EQ(bare.classify_text("\u274c 不存在").type, ResultType::kError);
  // The message keeps the model's exact text.
  EXPECT_EQ(bare.classify_text("\u26a0\ufe0f 哪一个？").message, "\u26a0\ufe0f 哪一个？");
}

TEST(ReactLoopTest, ConfiguredMarkersAndFallbackAreUsed) {
  ResultMarkers markers;
  markers.action_completed = {"[DONE]"};
  markers.need_clarification = {"[ASK]", "[WHICH]"};
  markers.error = {"[FAIL]"};
  markers.fallback = ResultType::kError;
  const ReactLoop loop = make_loop(10, markers);
  EXPECT_EQ(loop.classify_text("[DONE] moved").type, ResultType::kActionCompleted);
  EXPECT_EQ(loop.classify_text("[WHICH] one?").type, ResultType::kNeedClarification);
  EXPECT_EQ(loop.classify_text("[FAIL] no").type, ResultType::kError);
  EXPECT_EQ(loop.classify_text("✅ default markers are replaced").type, ResultType::kError);
  EXPECT_EQ(loop.classify_text("nothing at all").type, ResultType::kError);
}

TEST(ReactLoopTest, EmptyMarkerNeverMatches) {
  ResultMarkers markers;
  markers.error = {""};
  markers.fallback = ResultType::kNeedClarification;
  EXPECT_EQ(make_loop(10, markers).classify_text("text").type, ResultType::kNeedClarification);
}

TEST(ReactLoopTest, PlainTextFromJsonIsClassified) {
  const ReactLoop loop = classifying_loop();
  ReactState state = loop.start("sys", "text");
  const Step step = loop.on_model_reply(
      state,
      parsed(
          R"({"choices":[{"finish_reason":"stop","message":{"role":"assistant",)"
          R"("content":"❌ 没有找到该待办"}}],"usage":{"prompt_tokens":5,"completion_tokens":3}})"));
  ASSERT_TRUE(std::holds_alternative<Finish>(step));
  EXPECT_EQ(std::get<Finish>(step).result.type, ResultType::kError);
  EXPECT_EQ(std::get<Finish>(step).result.message, "❌ 没有找到该待办");
}

TEST(ReactLoopTest, LengthFinishReasonFailsTruncated) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "text");
  const Step step = loop.on_model_reply(
      state, parsed(R"({"choices":[{"finish_reason":"length","message":{"role":"assistant",)"
                    R"("content":"✅ 已将会议改到"}}]})"));
  ASSERT_TRUE(std::holds_alternative<Fail>(step));
  EXPECT_EQ(std::get<Fail>(step).reason, FailReason::kTruncated);
  EXPECT_FALSE(std::get<Fail>(step).message.empty());
  EXPECT_EQ(to_string(FailReason::kTruncated), "truncated");
}

TEST(ReactLoopTest, ContentFilterFails) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "text");
  const Step step = loop.on_model_reply(
      state, parsed(R"({"choices":[{"finish_reason":"content_filter","message":)"
                    R"({"role":"assistant","content":""}}]})"));
  ASSERT_TRUE(std::holds_alternative<Fail>(step));
  EXPECT_EQ(std::get<Fail>(step).reason, FailReason::kContentFilter);
  EXPECT_EQ(to_string(FailReason::kContentFilter), "content_filter");
}

TEST(ReactLoopTest, EmptyReplyFails) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "text");
  const Step step = loop.on_model_reply(
      state, parsed(R"({"choices":[{"finish_reason":"stop","message":{"role":"assistant",)"
                    R"("content":null}}],"usage":{"prompt_tokens":9,"completion_tokens":0}})"));
  ASSERT_TRUE(std::holds_alternative<Fail>(step));
  EXPECT_EQ(std::get<Fail>(step).reason, FailReason::kEmptyReply);
  EXPECT_EQ(to_string(FailReason::kEmptyReply), "empty_reply");
  // The failed call is still counted and billed.
  EXPECT_EQ(state.model_calls, 1);
  EXPECT_EQ(state.usage.input, 9);
}

TEST(ReactLoopTest, ToolsAskedOnTheLastAllowedCallFailMaxStepsWithoutRunningThem) {
  const ReactLoop loop = make_loop(/*max_steps=*/2);
  ReactState state = loop.start("sys", "text");
  FakeTools tools;
  const auto bodies = sample_flow_bodies();

  Step step = loop.on_model_reply(state, parsed(bodies[0]));
  ASSERT_TRUE(std::holds_alternative<CallTools>(step));
  step =
      loop.on_tool_results(state, std::get<CallTools>(step), tools.run(std::get<CallTools>(step)));
  ASSERT_TRUE(std::holds_alternative<CallModel>(step));

  step = loop.on_model_reply(state, parsed(bodies[1]));
  ASSERT_TRUE(std::holds_alternative<Fail>(step));
  EXPECT_EQ(std::get<Fail>(step).reason, FailReason::kMaxSteps);
  EXPECT_NE(std::get<Fail>(step).message.find('2'), std::string::npos);
  EXPECT_EQ(to_string(FailReason::kMaxSteps), "max_steps");
  ASSERT_EQ(tools.executed.size(), 1u);
  EXPECT_EQ(tools.executed[0].name, "search_items");
  EXPECT_EQ(state.model_calls, 2);
  // Both calls are billed.
  EXPECT_EQ(state.usage.input, 1200 + 1400);
}

TEST(ReactLoopTest, FinishOnTheLastAllowedCallSucceeds) {
  const ReactLoop loop = make_loop(/*max_steps=*/3);
  ReactState state = loop.start("sys", "text");
  FakeTools tools;
  std::vector<ModelReply> replies;
  for (const auto& body : sample_flow_bodies())
    replies.push_back(parsed(body));
  const Step last = drive(loop, state, replies, tools);
  ASSERT_TRUE(std::holds_alternative<Finish>(last));
  EXPECT_EQ(state.model_calls, 3);
}

TEST(ReactLoopTest, PlainTextOnTheLastAllowedCallIsClassified) {
  const ReactLoop loop = make_loop(/*max_steps=*/1);
  ReactState state = loop.start("sys", "text");
  ModelReply reply;
  reply.content = "⚠️ 哪一个？";
  const Step step = loop.on_model_reply(state, reply);
  ASSERT_TRUE(std::holds_alternative<Finish>(step));
  EXPECT_EQ(std::get<Finish>(step).result.type, ResultType::kNeedClarification);
}

TEST(ReactLoopTest, UsageIsSummedAcrossCalls) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "text");
  FakeTools tools;
  ModelReply first;
  first.tool_calls = {ToolCall{"c1", "search_items", "{}"}};
  first.usage = TokenUsage{1000, 200, 50, 10};
  ModelReply second;
  second.content = "✅ ok";
  second.usage = TokenUsage{1500, 1000, 70, 20};
  drive(loop, state, {first, second}, tools);
  EXPECT_EQ(state.usage.input, 2500);
  EXPECT_EQ(state.usage.cached_input, 1200);
  EXPECT_EQ(state.usage.output, 120);
  EXPECT_EQ(state.usage.reasoning, 30);

  ReactState from_json = loop.start("sys", "text");
  std::vector<ModelReply> replies;
  for (const auto& body : sample_flow_bodies())
    replies.push_back(parsed(body));
  drive(loop, from_json, replies, tools);
  EXPECT_EQ(from_json.usage.input, 1200 + 1400 + 1600);
  EXPECT_EQ(from_json.usage.output, 40 + 60 + 30);
}

void expect_same_messages(const std::vector<Message>& a, const std::vector<Message>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    EXPECT_EQ(a[i].role, b[i].role);
    EXPECT_EQ(a[i].content, b[i].content);
    EXPECT_EQ(a[i].tool_call_id, b[i].tool_call_id);
    EXPECT_EQ(a[i].name, b[i].name);
    ASSERT_EQ(a[i].tool_calls.size(), b[i].tool_calls.size());
    for (std::size_t j = 0; j < a[i].tool_calls.size(); ++j) {
      EXPECT_EQ(a[i].tool_calls[j].id, b[i].tool_calls[j].id);
      EXPECT_EQ(a[i].tool_calls[j].name, b[i].tool_calls[j].name);
      EXPECT_EQ(a[i].tool_calls[j].arguments, b[i].tool_calls[j].arguments);
    }
  }
}

TEST(ReactLoopTest, ReplayingCheckpointedStepsOnAFreshStateGivesTheSameConversation) {
  const ReactLoop loop = make_loop();
  FakeTools tools;
  // Ids missing in the provider's JSON are generated; replay must generate the same ones.
  std::vector<std::string> bodies = sample_flow_bodies();
  bodies[0] =
      R"({"choices":[{"finish_reason":"tool_calls","message":{"role":"assistant","content":"先搜索",)"
      R"("tool_calls":[{"type":"function","function":{"name":"search_items","arguments":{"keyword":"周会"}}},)"
      R"({"type":"function","function":{"name":"delete_item","arguments":""}}]}}],)"
      R"("usage":{"prompt_tokens":1000,"completion_tokens":20,"prompt_tokens_details":{"cached_tokens":900}}})";

  // The original run: checkpoint each reply and the observations the model was shown.
  ReactState original = loop.start("sys", "把周会改到晚上8点");
  std::vector<std::string> checkpointed_replies;
  std::vector<std::string> checkpointed_observations;
  Step step = CallModel{};
  for (const auto& body : bodies) {
    const ModelReply reply = parsed(body);
    checkpointed_replies.push_back(codec::model_reply_json(reply));
    step = loop.on_model_reply(original, reply);
    if (auto* call_tools = std::get_if<CallTools>(&step)) {
      const auto observations = tools.run(*call_tools);
      checkpointed_observations.push_back(codec::observations_json(observations));
      step = loop.on_tool_results(original, *call_tools, observations);
    }
  }
  ASSERT_TRUE(std::holds_alternative<Finish>(step));
  const std::size_t executed_before_resume = tools.executed.size();

  // The resumed run: same replies and observations from the checkpoint, no model, no tools.
  ReactState resumed = loop.start("sys", "把周会改到晚上8点");
  std::size_t next_observation = 0;
  Step replayed = CallModel{};
  for (const auto& json : checkpointed_replies) {
    auto reply = codec::parse_model_reply_json(json);
    ASSERT_TRUE(reply.ok());
    replayed = loop.on_model_reply(resumed, reply.value());
    if (auto* call_tools = std::get_if<CallTools>(&replayed)) {
      ASSERT_LT(next_observation, checkpointed_observations.size());
      auto observations =
          codec::parse_observations_json(checkpointed_observations[next_observation++]);
      ASSERT_TRUE(observations.ok());
      replayed = loop.on_tool_results(resumed, *call_tools, observations.value());
    }
  }

  EXPECT_EQ(tools.executed.size(), executed_before_resume);
  ASSERT_TRUE(std::holds_alternative<Finish>(replayed));
  EXPECT_EQ(std::get<Finish>(replayed).result.message, std::get<Finish>(step).result.message);
  expect_same_messages(original.messages, resumed.messages);
  EXPECT_EQ(original.model_calls, resumed.model_calls);
  EXPECT_EQ(original.tool_calls, resumed.tool_calls);
  EXPECT_EQ(original.usage.input, resumed.usage.input);
  EXPECT_EQ(original.usage.cached_input, resumed.usage.cached_input);
  EXPECT_EQ(original.usage.output, resumed.usage.output);
  // The request the next model call would send is byte for byte the same.
  const codec::ChatRequestOptions options{"deepseek-chat"};
  EXPECT_EQ(codec::build_chat_request(options, original.messages, {}),
            codec::build_chat_request(options, resumed.messages, {}));

  // The generated ids are what the tool messages answer.
  ASSERT_EQ(original.messages[2].tool_calls.size(), 2u);
  EXPECT_EQ(original.messages[3].tool_call_id, original.messages[2].tool_calls[0].id);
  EXPECT_EQ(original.messages[4].tool_call_id, original.messages[2].tool_calls[1].id);
  EXPECT_NE(original.messages[3].tool_call_id, original.messages[4].tool_call_id);
}

TEST(ReactLoopTest, ReplayingTheSameReplyValuesTwiceIsDeterministic) {
  const ReactLoop loop = make_loop();
  std::vector<ModelReply> replies;
  for (const auto& body : sample_flow_bodies())
    replies.push_back(parsed(body));
  FakeTools tools_a;
  FakeTools tools_b;
  ReactState a = loop.start("sys", "text");
  ReactState b = loop.start("sys", "text");
  drive(loop, a, replies, tools_a);
  drive(loop, b, replies, tools_b);
  expect_same_messages(a.messages, b.messages);
}

// ---- react_json: the model writes its action or answer as JSON text ----

// A chat completion whose assistant content is `text` (a react_json model's reply).
std::string text_body(const std::string& text, int prompt_tokens = 100,
                      const std::string& finish_reason = "stop") {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.String(text.c_str(), static_cast<rapidjson::SizeType>(text.size()));
  return R"({"choices":[{"finish_reason":")" + finish_reason +
         R"(","message":{"role":"assistant","content":)" + buffer.GetString() +
         R"(}}],"usage":{"prompt_tokens":)" + std::to_string(prompt_tokens) +
         R"(,"completion_tokens":20}})";
}

// What the model client hands the loop for a react_json model: parsed, then read.
ModelReply react_json(const std::string& text, int step, int prompt_tokens = 100) {
  return codec::read_react_json_reply(parsed(text_body(text, prompt_tokens)), step);
}

// Drives the loop with react_json texts, reading each as the model client does (the step
// is the number of assistant messages so far).
Step drive_react_json(const ReactLoop& loop, ReactState& state,
                      const std::vector<std::string>& texts, FakeTools& tools,
                      std::vector<ModelReply>* read = nullptr) {
  Step step = CallModel{};
  for (const std::string& text : texts) {
    EXPECT_TRUE(std::holds_alternative<CallModel>(step)) << "the loop stopped asking early";
    const int turn = static_cast<int>(
        std::count_if(state.messages.begin(), state.messages.end(),
                      [](const Message& m) { return m.role == Role::kAssistant; }));
    const ModelReply reply = react_json(text, turn);
    if (read)
      read->push_back(reply);
    step = loop.on_model_reply(state, reply);
    if (auto* call_tools = std::get_if<CallTools>(&step)) {
      step = loop.on_tool_results(state, *call_tools, tools.run(*call_tools));
    }
  }
  return step;
}

const std::vector<std::string> kReactJsonFlow = {
    // fenced, with text around it, action_input as an object
    "我先搜索周会。\n```json\n{\"thought\": \"先搜索\", \"action\": \"search_items\", "
    "\"action_input\": {\"keyword\": \"周会\", \"date\": \"2026-02-08\"}}\n```\n然后再改。",
    // bare, action_input as a JSON string holding an object
    R"({"thought":"找到了 evt_42","action":"update_item","action_input":"{\"id\":\"evt_42\",\"start\":\"2026-02-08T20:00:00+08:00\"}"})",
    // final as an object, inside a plain ``` fence
    "```\n{\"thought\":\"完成\",\"final\":{\"type\":\"action_completed\",\"message\":"
    "\"已将2月8日的周会改到晚上8点\"}}\n```",
};

TEST(ReactJsonLoopTest, SearchUpdateFinishFromTextReplies) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "把2月8日的周会改到晚上8点");
  FakeTools tools;
  const Step last = drive_react_json(loop, state, kReactJsonFlow, tools);

  ASSERT_TRUE(std::holds_alternative<Finish>(last));
  EXPECT_EQ(std::get<Finish>(last).result.type, ResultType::kActionCompleted);
  EXPECT_EQ(std::get<Finish>(last).result.message, "已将2月8日的周会改到晚上8点");
  ASSERT_EQ(tools.executed.size(), 2u);
  EXPECT_EQ(tools.executed[0].name, "search_items");
  EXPECT_EQ(tools.executed[0].id, "rj-0");
  EXPECT_EQ(tools.executed[0].arguments, R"({"keyword":"周会","date":"2026-02-08"})");
  EXPECT_EQ(tools.executed[1].name, "update_item");
  EXPECT_EQ(tools.executed[1].id, "rj-1");
  EXPECT_EQ(tools.executed[1].arguments, R"({"id":"evt_42","start":"2026-02-08T20:00:00+08:00"})");

  // The raw text is what the assistant turns keep (sent back verbatim).
  ASSERT_EQ(state.messages.size(), 7u);
  EXPECT_EQ(state.messages[2].content, kReactJsonFlow[0]);
  EXPECT_EQ(state.messages[3].role, Role::kTool);
  EXPECT_EQ(state.messages[3].tool_call_id, "rj-0");
  EXPECT_EQ(state.messages[3].content, tools.answers.at("search_items"));
  EXPECT_EQ(state.messages[4].content, kReactJsonFlow[1]);
  EXPECT_EQ(state.model_calls, 3);
  EXPECT_EQ(state.usage.input, 300);
}

TEST(ReactJsonLoopTest, FinalAsTextIsClassifiedByMarkers) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "删除周会");
  FakeTools tools;
  const Step last = drive_react_json(
      loop, state, {R"(好的。{"thought":"找不到","final":"❌ 没有找到周会"})"}, tools);
  ASSERT_TRUE(std::holds_alternative<Finish>(last));
  EXPECT_EQ(std::get<Finish>(last).result.type, ResultType::kError);
  EXPECT_EQ(std::get<Finish>(last).result.message, "❌ 没有找到周会");

  ReactState other = loop.start("sys", "x");
  const Step clarified =
      drive_react_json(loop, other, {R"({"final":"⚠️ 有两个周会：A、B"})"}, tools);
  ASSERT_TRUE(std::holds_alternative<Finish>(clarified));
  EXPECT_EQ(std::get<Finish>(clarified).result.type, ResultType::kNeedClarification);
}

TEST(ReactJsonLoopTest, FinishAsAnActionWithItsArgumentsInActionInput) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "x");
  FakeTools tools;
  const Step last = drive_react_json(
      loop, state,
      {R"({"thought":"两个匹配","action":"finish","action_input":{"type":"need_clarification","message":"哪一个？","options":["周会 A","周会 B"]}})"},
      tools);
  ASSERT_TRUE(std::holds_alternative<Finish>(last));
  const TaskResult& result = std::get<Finish>(last).result;
  EXPECT_EQ(result.type, ResultType::kNeedClarification);
  EXPECT_EQ(result.message, "哪一个？");
  EXPECT_EQ(result.options, (std::vector<std::string>{"周会 A", "周会 B"}));
  EXPECT_TRUE(tools.executed.empty());
}

TEST(ReactJsonLoopTest, InvalidFinalIsFedBackAndTheLoopContinues) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "x");
  FakeTools tools;
  const Step last = drive_react_json(loop, state,
                                     {R"({"final":{"type":"done","message":"ok"}})",
                                      R"({"final":{"type":"error","message":"ok"}})"},
                                     tools);
  ASSERT_TRUE(std::holds_alternative<Finish>(last));
  ASSERT_EQ(state.messages.size(), 5u);
  EXPECT_EQ(state.messages[3].role, Role::kTool);
  EXPECT_EQ(error_code_of(state.messages[3].content), "invalid_finish");
}

TEST(ReactJsonLoopTest, UnreadableReplyIsFedBackThenAGoodOneIsRun) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "把周会改到晚上8点");
  FakeTools tools;
  std::vector<ModelReply> read;
  const Step last =
      drive_react_json(loop, state,
                       {"我会先搜索一下周会，然后修改时间。",
                        R"({"action":"search_items","action_input":{"keyword":"周会"}})",
                        R"({"final":{"type":"action_completed","message":"已修改"}})"},
                       tools, &read);

  ASSERT_TRUE(std::holds_alternative<Finish>(last));
  ASSERT_EQ(read.size(), 3u);
  EXPECT_FALSE(read[0].unreadable.empty());
  EXPECT_TRUE(read[0].tool_calls.empty());
  EXPECT_FALSE(read[0].final_text.has_value());
  // The problem went back to the model as an observation, and the step was counted.
  EXPECT_EQ(state.messages[2].content, "我会先搜索一下周会，然后修改时间。");
  ASSERT_EQ(state.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(state.messages[3].role, Role::kTool);
  EXPECT_EQ(state.messages[3].tool_call_id, state.messages[2].tool_calls[0].id);
  EXPECT_EQ(error_code_of(state.messages[3].content), "unreadable_reply");
  EXPECT_NE(state.messages[3].content.find("exactly one JSON object"), std::string::npos);
  ASSERT_EQ(tools.executed.size(), 1u);
  EXPECT_EQ(tools.executed[0].name, "search_items");
  EXPECT_EQ(state.model_calls, 3);
  EXPECT_EQ(state.tool_calls, 1);
}

TEST(ReactJsonLoopTest, UnreadableRepliesEndAtMaxSteps) {
  const ReactLoop loop = make_loop(/*max_steps=*/3);
  ReactState state = loop.start("sys", "x");
  FakeTools tools;
  const Step last =
      drive_react_json(loop, state, {"嗯", "{\"thought\": \"oops\"", "```json\n{}\n```"}, tools);
  ASSERT_TRUE(std::holds_alternative<Fail>(last));
  EXPECT_EQ(std::get<Fail>(last).reason, FailReason::kMaxSteps);
  EXPECT_NE(std::get<Fail>(last).message.find("could not be read"), std::string::npos);
  EXPECT_EQ(state.model_calls, 3);
  EXPECT_TRUE(tools.executed.empty());
}

TEST(ReactJsonLoopTest, ToolOutsideTheAllowListIsRefused) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "x");
  FakeTools tools;
  const Step last = drive_react_json(
      loop, state, {R"({"action":"delete_item","action_input":{"id":"evt_1"}})"}, tools);
  ASSERT_TRUE(std::holds_alternative<CallModel>(last));
  EXPECT_TRUE(tools.executed.empty());
  EXPECT_EQ(error_code_of(state.messages.back().content), "tool_not_allowed");
}

TEST(ReactJsonLoopTest, LengthCutReplyFailsTruncatedNotAsAFormatProblem) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "x");
  const ModelReply reply = codec::read_react_json_reply(
      parsed(text_body(R"({"thought":"我先搜索","action":"search_it)", 10, "length")), 0);
  EXPECT_TRUE(reply.unreadable.empty());
  const Step step = loop.on_model_reply(state, reply);
  ASSERT_TRUE(std::holds_alternative<Fail>(step));
  EXPECT_EQ(std::get<Fail>(step).reason, FailReason::kTruncated);
}

TEST(ReactJsonLoopTest, ReplayFromCheckpointsGivesTheSameStateAndRequest) {
  const ReactLoop loop = make_loop();
  const std::vector<std::string> texts = {
      "随便说点什么",  // unreadable: its feedback must replay identically
      kReactJsonFlow[0], kReactJsonFlow[1], R"({"thought":"好了","final":"✅ 已改到晚上8点"})"};

  ReactState original = loop.start("sys", "把周会改到晚上8点");
  FakeTools tools;
  std::vector<std::string> replies_json;
  std::vector<std::string> observations_json;
  Step step = CallModel{};
  for (const std::string& text : texts) {
    const int turn = original.model_calls;
    const ModelReply reply = react_json(text, turn);
    replies_json.push_back(codec::model_reply_json(reply));
    step = loop.on_model_reply(original, reply);
    if (auto* call_tools = std::get_if<CallTools>(&step)) {
      const auto observations = tools.run(*call_tools);
      observations_json.push_back(codec::observations_json(observations));
      step = loop.on_tool_results(original, *call_tools, observations);
    }
  }
  ASSERT_TRUE(std::holds_alternative<Finish>(step));
  EXPECT_EQ(std::get<Finish>(step).result.type, ResultType::kActionCompleted);

  ReactState resumed = loop.start("sys", "把周会改到晚上8点");
  std::size_t next = 0;
  Step replayed = CallModel{};
  for (const std::string& json : replies_json) {
    auto reply = codec::parse_model_reply_json(json);
    ASSERT_TRUE(reply.ok());
    replayed = loop.on_model_reply(resumed, reply.value());
    if (auto* call_tools = std::get_if<CallTools>(&replayed)) {
      ASSERT_LT(next, observations_json.size());
      auto observations = codec::parse_observations_json(observations_json[next++]);
      ASSERT_TRUE(observations.ok());
      replayed = loop.on_tool_results(resumed, *call_tools, observations.value());
    }
  }
  ASSERT_TRUE(std::holds_alternative<Finish>(replayed));
  EXPECT_EQ(std::get<Finish>(replayed).result.message, std::get<Finish>(step).result.message);
  expect_same_messages(original.messages, resumed.messages);
  EXPECT_EQ(original.model_calls, resumed.model_calls);
  EXPECT_EQ(original.tool_calls, resumed.tool_calls);

  codec::ChatRequestOptions options{"qwen-plain"};
  options.protocol = codec::ChatProtocol::kReactJson;
  const std::vector<ports::ToolSchema> schemas = {codec::finish_tool_schema()};
  EXPECT_EQ(codec::build_chat_request(options, original.messages, schemas),
            codec::build_chat_request(options, resumed.messages, schemas));

  // Reading the same text again gives the same reply.
  EXPECT_EQ(codec::model_reply_json(react_json(kReactJsonFlow[1], 1)),
            codec::model_reply_json(react_json(kReactJsonFlow[1], 1)));
}

TEST(ReactLoopTest, LongToolResultsAreTruncatedInTheConversationNotInTheObservation) {
  const ReactLoop loop(Limits{10, 50}, ResultMarkers{}, kCalendarTools);
  ReactState state = loop.start("sys", "x");
  FakeTools tools;
  tools.answers["search_items"] = R"({"items":")" + std::string(200, 'a') + R"("})";
  ModelReply reply;
  reply.tool_calls = {ToolCall{"c1", "search_items", "{}"}};
  Step step = loop.on_model_reply(state, reply);
  ASSERT_TRUE(std::holds_alternative<CallTools>(step));
  const auto observations = tools.run(std::get<CallTools>(step));
  loop.on_tool_results(state, std::get<CallTools>(step), observations);
  EXPECT_EQ(observations[0].content.size(), 212u);  // checkpointed whole
  const std::string& kept = state.messages.back().content;
  rapidjson::Document doc;
  doc.Parse(kept.c_str());
  ASSERT_FALSE(doc.HasParseError()) << kept;
  EXPECT_TRUE(doc["truncated"].GetBool());
  EXPECT_EQ(doc["original_chars"].GetInt(), 212);
  EXPECT_EQ(std::string(doc["head"].GetString()), observations[0].content.substr(0, 50));

  // Short results, and the default limit of 4000, leave results alone.
  const ReactLoop lenient = make_loop();
  ReactState other = lenient.start("sys", "x");
  step = lenient.on_model_reply(other, reply);
  lenient.on_tool_results(other, std::get<CallTools>(step), observations);
  EXPECT_EQ(other.messages.back().content, observations[0].content);
}

}  // namespace
}  // namespace agentfleet::react

// ---- no false success ----

namespace agentfleet::react {
namespace {

ModelReply text_reply(const std::string& text) {
  ModelReply reply;
  reply.content = text;
  reply.finish_reason = "stop";
  return reply;
}

ModelReply finish_call(const std::string& type, const std::string& message) {
  ModelReply reply;
  const std::string arguments = R"({"type":")" + type + R"(","message":")" + message + R"("})";
  reply.tool_calls = {ToolCall{"call_finish", "finish", arguments}};
  reply.finish = codec::parse_finish_arguments(arguments);
  return reply;
}

ModelReply search_call(const std::string& id) {
  ModelReply reply;
  reply.tool_calls = {ToolCall{id, "search_items", R"({"keyword":"周会"})"}};
  return reply;
}

TEST(ReactLoopNoFalseSuccess, PlainTextIsAnsweredWithACorrectionNotGuessedIntoAResult) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "把周会改到晚上8点");
  const Step step = loop.on_model_reply(state, text_reply("✅ 已将周会改到晚上8点"));
  ASSERT_TRUE(std::holds_alternative<CallModel>(step));
  EXPECT_EQ(state.corrections, 1);
  ASSERT_EQ(state.messages.size(), 4u);
  EXPECT_EQ(state.messages[2].role, Role::kAssistant);
  EXPECT_EQ(state.messages[3].role, Role::kUser);
  EXPECT_EQ(state.messages[3].content, kCorrection);
}

TEST(ReactLoopNoFalseSuccess, AfterTheCorrectionsAnActionNoToolPerformedFails) {
  const ReactLoop loop = make_loop();  // two corrections
  ReactState state = loop.start("sys", "把周会改到晚上8点");
  EXPECT_TRUE(std::holds_alternative<CallModel>(loop.on_model_reply(state, text_reply("好的"))));
  EXPECT_TRUE(std::holds_alternative<CallModel>(loop.on_model_reply(state, text_reply("好的"))));
  const Step step = loop.on_model_reply(state, text_reply("✅ 已将周会改到晚上8点"));
  ASSERT_TRUE(std::holds_alternative<Fail>(step));
  EXPECT_EQ(std::get<Fail>(step).reason, FailReason::kUnperformedAction);
  EXPECT_EQ(to_string(FailReason::kUnperformedAction), "unperformed_action");
  EXPECT_NE(std::get<Fail>(step).message.find("已将周会改到晚上8点"), std::string::npos);
  EXPECT_EQ(state.corrections, 2);
  EXPECT_EQ(state.model_calls, 3);
}

TEST(ReactLoopNoFalseSuccess,
     AfterTheCorrectionsTextIsClassifiedWhenAToolActedOrItClaimsNoSuccess) {
  {
    const ReactLoop loop = make_loop();
    ReactState state = loop.start("sys", "删除2月30日的日程");
    loop.on_model_reply(state, text_reply("2月没有30日"));
    loop.on_model_reply(state, text_reply("2月没有30日"));
    const Step step = loop.on_model_reply(state, text_reply("❌ 2月30日不存在"));
    ASSERT_TRUE(std::holds_alternative<Finish>(step));
    EXPECT_EQ(std::get<Finish>(step).result.type, ResultType::kError);
  }
  {
    // A search that succeeded performed something: the marker's success stands.
    const ReactLoop loop = make_loop(10, ResultMarkers{});
    ReactState state = loop.start("sys", "查一下周会");
    FakeTools tools;
    const Step step = drive(loop, state,
                            {search_call("c1"), text_reply("周会在周三"), text_reply("周会在周三"),
                             text_reply("✅ 周会在周三")},
                            tools);
    ASSERT_TRUE(std::holds_alternative<Finish>(step));
    EXPECT_EQ(std::get<Finish>(step).result.type, ResultType::kActionCompleted);
    EXPECT_EQ(state.tools_ok, 1);
  }
}

TEST(ReactLoopNoFalseSuccess, CorrectionsStopAtTheLastStep) {
  const ReactLoop loop = make_loop(1);
  ReactState state = loop.start("sys", "text");
  const Step step = loop.on_model_reply(state, text_reply("❌ 不能"));
  ASSERT_TRUE(std::holds_alternative<Finish>(step));
  EXPECT_EQ(state.corrections, 0);
}

TEST(ReactLoopNoFalseSuccess, FinishingActionCompletedBeforeAnyToolSucceededIsRefused) {
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "把周会改到晚上8点");
  Step step = loop.on_model_reply(state, finish_call("action_completed", "已改好"));
  ASSERT_TRUE(std::holds_alternative<CallTools>(step));
  const CallTools& refused = std::get<CallTools>(step);
  EXPECT_TRUE(refused.calls.empty());
  ASSERT_EQ(refused.refused.size(), 1u);
  EXPECT_EQ(error_code_of(refused.refused[0].content), "invalid_finish");
  EXPECT_NE(refused.refused[0].content.find("no tool has done anything"), std::string::npos);

  // A tool that failed did nothing either.
  step = loop.on_tool_results(state, refused, {});
  ModelReply search = search_call("c1");
  step = loop.on_model_reply(state, search);
  ASSERT_TRUE(std::holds_alternative<CallTools>(step));
  step = loop.on_tool_results(
      state, std::get<CallTools>(step),
      {ToolObservation{"c1", "search_items", false, tool_error_json("unavailable", "down")}});
  step = loop.on_model_reply(state, finish_call("action_completed", "已改好"));
  ASSERT_TRUE(std::holds_alternative<CallTools>(step)) << "refused again";

  // Once a tool succeeded, the finish stands.
  step = loop.on_tool_results(state, std::get<CallTools>(step), {});
  step = loop.on_model_reply(state, search_call("c2"));
  step = loop.on_tool_results(state, std::get<CallTools>(step),
                              {ToolObservation{"c2", "search_items", true, R"({"items":[]})"}});
  step = loop.on_model_reply(state, finish_call("action_completed", "已改好"));
  ASSERT_TRUE(std::holds_alternative<Finish>(step));
  EXPECT_EQ(std::get<Finish>(step).result.message, "已改好");
}

TEST(ReactLoopNoFalseSuccess, ErrorAndClarificationNeedNoTool) {
  const ReactLoop loop = make_loop();
  for (const char* type : {"error", "need_clarification"}) {
    ReactState state = loop.start("sys", "删除2月30日的日程");
    const Step step = loop.on_model_reply(state, finish_call(type, "2月30日不存在"));
    ASSERT_TRUE(std::holds_alternative<Finish>(step)) << type;
  }
}

TEST(ReactLoopNoFalseSuccess, ACallWrittenAsTextRunsAsACall) {
  // What a Qwen model served without a tool parser answers, read by the model client.
  const ReactLoop loop = make_loop();
  ReactState state = loop.start("sys", "查一下周会");
  const ModelReply reply = codec::with_text_tool_calls(
      text_reply("<tool_call>\n{\"name\": \"search_items\", \"arguments\": {\"keyword\": "
                 "\"周会\"}}\n</tool_call>"),
      codec::all_text_call_formats());
  const Step step = loop.on_model_reply(state, reply);
  ASSERT_TRUE(std::holds_alternative<CallTools>(step));
  ASSERT_EQ(std::get<CallTools>(step).calls.size(), 1u);
  EXPECT_EQ(std::get<CallTools>(step).calls[0].arguments, R"({"keyword":"周会"})");
}

}  // namespace
}  // namespace agentfleet::react
