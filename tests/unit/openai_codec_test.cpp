// The OpenAI-compatible codec: the tolerant response parser against the variants real
// providers send, the finish declaration, and the request the worker sends.
#include "core/codec/openai_codec.hpp"

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "core/codec/json_schema.hpp"

namespace agentfleet::codec {
namespace {

ModelReply parse_ok(const std::string& body) {
  auto reply = parse_chat_response(body);
  EXPECT_TRUE(reply.ok()) << (reply.ok() ? "" : reply.error().message) << "\n" << body;
  return reply.ok() ? reply.value() : ModelReply{};
}

// A response whose assistant message has `message_fields` (without braces) and the given
// top-level `extra` members.
std::string response(const std::string& message_fields, const std::string& extra = "",
                     const std::string& finish_reason = "tool_calls") {
  return R"({"id":"chatcmpl-9","object":"chat.completion","model":"provider-model-1",)"
         R"("choices":[{"index":0,"finish_reason":")" +
         finish_reason + R"(","message":{"role":"assistant",)" + message_fields + "}}]" +
         (extra.empty() ? "" : "," + extra) + "}";
}

ModelReply one_call(const std::string& arguments_member) {
  return parse_ok(response(
      R"("content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"search_items")" +
      arguments_member + "}}]"));
}

TEST(OpenAiCodecTest, ArgumentsAsJsonString) {
  const ModelReply reply = one_call(R"(,"arguments":"{\"keyword\":\"周会\",\"limit\":5}")");
  ASSERT_EQ(reply.tool_calls.size(), 1u);
  EXPECT_EQ(reply.tool_calls[0].id, "call_1");
  EXPECT_EQ(reply.tool_calls[0].name, "search_items");
  EXPECT_EQ(reply.tool_calls[0].arguments, R"({"keyword":"周会","limit":5})");
  EXPECT_EQ(reply.finish_reason, "tool_calls");
  EXPECT_EQ(reply.provider_model, "provider-model-1");
  EXPECT_FALSE(reply.finish.has_value());
}

TEST(OpenAiCodecTest, ArgumentsAsObjectAreSerialized) {
  const ModelReply reply = one_call(R"(,"arguments":{"keyword":"周会","range":{"from":1}})");
  ASSERT_EQ(reply.tool_calls.size(), 1u);
  rapidjson::Document doc;
  doc.Parse(reply.tool_calls[0].arguments.c_str());
  ASSERT_FALSE(doc.HasParseError()) << reply.tool_calls[0].arguments;
  ASSERT_TRUE(doc.IsObject());
  EXPECT_STREQ(doc["keyword"].GetString(), "周会");
  EXPECT_EQ(doc["range"]["from"].GetInt(), 1);
}

TEST(OpenAiCodecTest, EmptyNullOrMissingArgumentsBecomeEmptyObject) {
  for (const std::string& member : std::vector<std::string>{
           R"(,"arguments":"")", R"(,"arguments":"  \n")", R"(,"arguments":null)", std::string()}) {
    const ModelReply reply = one_call(member);
    ASSERT_EQ(reply.tool_calls.size(), 1u) << member;
    EXPECT_EQ(reply.tool_calls[0].arguments, "{}") << member;
  }
}

TEST(OpenAiCodecTest, MissingAndRepeatedCallIdsBecomeUnique) {
  const ModelReply reply = parse_ok(
      response(R"("content":null,"tool_calls":[)"
               R"({"type":"function","function":{"name":"a","arguments":"{}"}},)"
               R"({"id":"dup","type":"function","function":{"name":"b","arguments":"{}"}},)"
               R"({"id":"dup","type":"function","function":{"name":"c","arguments":"{}"}},)"
               R"({"id":"","type":"function","function":{"name":"d","arguments":"{}"}},)"
               R"({"id":"call_0","type":"function","function":{"name":"e","arguments":"{}"}}])"));
  ASSERT_EQ(reply.tool_calls.size(), 5u);
  std::set<std::string> ids;
  for (const ToolCall& call : reply.tool_calls) {
    EXPECT_FALSE(call.id.empty()) << call.name;
    ids.insert(call.id);
  }
  EXPECT_EQ(ids.size(), 5u);
  EXPECT_EQ(reply.tool_calls[1].id, "dup");  // the first use of an id is kept
  // Order of the calls is preserved.
  EXPECT_EQ(reply.tool_calls[0].name, "a");
  EXPECT_EQ(reply.tool_calls[4].name, "e");
}

TEST(OpenAiCodecTest, ParsingIsDeterministicForGeneratedIds) {
  const std::string body = response(
      R"("content":null,"tool_calls":[{"function":{"name":"a"}},{"function":{"name":"b"}}])");
  const ModelReply first = parse_ok(body);
  const ModelReply second = parse_ok(body);
  ASSERT_EQ(first.tool_calls.size(), 2u);
  ASSERT_EQ(second.tool_calls.size(), 2u);
  EXPECT_EQ(first.tool_calls[0].id, second.tool_calls[0].id);
  EXPECT_EQ(first.tool_calls[1].id, second.tool_calls[1].id);
}

TEST(OpenAiCodecTest, MalformedToolCallEntriesAreSkipped) {
  const ModelReply reply = parse_ok(
      response(R"("content":null,"tool_calls":[42,{"id":"x"},{"id":"y","function":"nope"},)"
               R"({"id":"z","function":{"name":"ok","arguments":"{}"}}])"));
  ASSERT_EQ(reply.tool_calls.size(), 1u);
  EXPECT_EQ(reply.tool_calls[0].id, "z");
}

TEST(OpenAiCodecTest, ContentAlongsideToolCallsIsKept) {
  const ModelReply reply = parse_ok(response(
      R"("content":"我先搜索一下。","tool_calls":[{"id":"c","type":"function","function":{"name":"search_items","arguments":"{}"}}])"));
  EXPECT_EQ(reply.content, "我先搜索一下。");
  ASSERT_EQ(reply.tool_calls.size(), 1u);
}

TEST(OpenAiCodecTest, ContentAsArrayOfPartsIsJoined) {
  const ModelReply reply = parse_ok(response(
      R"("content":[{"type":"text","text":"✅ 已完成"},{"type":"image_url","image_url":{}},)"
      R"({"type":"text","text":"：周会改到20:00"},"!"])",
      "", "stop"));
  EXPECT_EQ(reply.content, "✅ 已完成：周会改到20:00!");
  EXPECT_TRUE(reply.tool_calls.empty());
  EXPECT_EQ(reply.finish_reason, "stop");
}

TEST(OpenAiCodecTest, ReasoningContentIsCaptured) {
  const ModelReply reply = parse_ok(
      response(R"("content":"✅ ok","reasoning_content":"用户想改会议时间……")", "", "stop"));
  EXPECT_EQ(reply.reasoning, "用户想改会议时间……");
  EXPECT_EQ(reply.content, "✅ ok");

  const ModelReply other =
      parse_ok(response(R"("content":"x","reasoning":"thinking")", "", "stop"));
  EXPECT_EQ(other.reasoning, "thinking");
}

TEST(OpenAiCodecTest, LegacyFunctionCallBecomesAToolCall) {
  const ModelReply reply = parse_ok(response(
      R"("content":null,"function_call":{"name":"search_items","arguments":"{\"keyword\":\"报告\"}"})",
      "", "function_call"));
  ASSERT_EQ(reply.tool_calls.size(), 1u);
  EXPECT_EQ(reply.tool_calls[0].name, "search_items");
  EXPECT_EQ(reply.tool_calls[0].arguments, R"({"keyword":"报告"})");
  EXPECT_FALSE(reply.tool_calls[0].id.empty());
}

TEST(OpenAiCodecTest, LegacyFinishFunctionCallIsParsedAsFinish) {
  const ModelReply reply = parse_ok(response(
      R"("content":null,"function_call":{"name":"finish","arguments":"{\"type\":\"action_completed\",\"message\":\"done\"}"})"));
  ASSERT_TRUE(reply.finish.has_value());
  EXPECT_TRUE(reply.finish->problem.empty());
  EXPECT_EQ(reply.finish->result.message, "done");
}

TEST(OpenAiCodecTest, FinishToolCallIsParsed) {
  const ModelReply reply = parse_ok(response(
      R"("content":null,"tool_calls":[{"id":"f","type":"function","function":{"name":"finish",)"
      R"("arguments":{"type":"need_clarification","message":"哪一个？","options":["A","B"]}}}])"));
  ASSERT_TRUE(reply.finish.has_value());
  EXPECT_TRUE(reply.finish->problem.empty());
  EXPECT_EQ(reply.finish->result.type, ResultType::kNeedClarification);
  EXPECT_EQ(reply.finish->result.message, "哪一个？");
  EXPECT_EQ(reply.finish->result.options, (std::vector<std::string>{"A", "B"}));
}

TEST(OpenAiCodecTest, UsageWithCachedAndReasoningDetails) {
  const ModelReply reply = parse_ok(
      response(R"("content":"x")",
               R"("usage":{"prompt_tokens":1000,"completion_tokens":300,"total_tokens":1300,)"
               R"("prompt_tokens_details":{"cached_tokens":800},)"
               R"("completion_tokens_details":{"reasoning_tokens":200}})",
               "stop"));
  EXPECT_EQ(reply.usage.input, 1000);
  EXPECT_EQ(reply.usage.cached_input, 800);
  EXPECT_EQ(reply.usage.output, 300);
  EXPECT_EQ(reply.usage.reasoning, 200);
}

TEST(OpenAiCodecTest, DeepSeekCacheHitTokens) {
  const ModelReply reply =
      parse_ok(response(R"("content":"x")",
                        R"("usage":{"prompt_tokens":1000,"completion_tokens":50,)"
                        R"("prompt_cache_hit_tokens":600,"prompt_cache_miss_tokens":400})",
                        "stop"));
  EXPECT_EQ(reply.usage.input, 1000);
  EXPECT_EQ(reply.usage.cached_input, 600);
  EXPECT_EQ(reply.usage.output, 50);
}

TEST(OpenAiCodecTest, CachedNeverExceedsInput) {
  const ModelReply reply =
      parse_ok(response(R"("content":"x")",
                        R"("usage":{"prompt_tokens":100,"completion_tokens":5,)"
                        R"("prompt_tokens_details":{"cached_tokens":5000}})",
                        "stop"));
  EXPECT_EQ(reply.usage.input, 100);
  EXPECT_EQ(reply.usage.cached_input, 100);
}

TEST(OpenAiCodecTest, MissingOrOddUsageIsZeroNotAnError) {
  const ModelReply none = parse_ok(response(R"("content":"x")", "", "stop"));
  EXPECT_EQ(none.usage.input, 0);
  EXPECT_EQ(none.usage.output, 0);

  const ModelReply odd =
      parse_ok(response(R"("content":"x")",
                        R"("usage":{"prompt_tokens":"12","completion_tokens":-4,)"
                        R"("prompt_tokens_details":null,"completion_tokens_details":{}})",
                        "stop"));
  EXPECT_EQ(odd.usage.input, 0);
  EXPECT_EQ(odd.usage.output, 0);
  EXPECT_EQ(odd.usage.cached_input, 0);
  EXPECT_EQ(odd.usage.reasoning, 0);
}

TEST(OpenAiCodecTest, NotAChatCompletionIsInvalid) {
  for (const std::string body :
       {"", "not json", "[]", R"("text")", "{}", R"({"choices":[]})", R"({"choices":{}})",
        R"({"choices":[1]})", R"({"choices":[{"finish_reason":"stop"}]})",
        R"({"error":{"message":"Rate limit","type":"rate_limit_error"}})",
        R"({"choices":[{"message":{"content":"x"}})"}) {
    auto reply = parse_chat_response(body);
    ASSERT_FALSE(reply.ok()) << body;
    EXPECT_EQ(reply.error().kind, ErrorKind::kInvalid) << body;
    EXPECT_FALSE(reply.error().retryable()) << body;
    EXPECT_FALSE(reply.error().message.empty());
  }
}

TEST(OpenAiCodecTest, FinishArgumentsParsed) {
  const FinishCall ok = parse_finish_arguments(R"({"type":"action_completed","message":"已完成"})");
  EXPECT_TRUE(ok.problem.empty());
  EXPECT_EQ(ok.result.type, ResultType::kActionCompleted);
  EXPECT_EQ(ok.result.message, "已完成");
  EXPECT_TRUE(ok.result.options.empty());

  const FinishCall error = parse_finish_arguments(R"({"type":"error","message":"不存在"})");
  EXPECT_TRUE(error.problem.empty());
  EXPECT_EQ(error.result.type, ResultType::kError);

  // Some models say result_type.
  const FinishCall alias =
      parse_finish_arguments(R"({"result_type":"need_clarification","message":"?"})");
  EXPECT_TRUE(alias.problem.empty());
  EXPECT_EQ(alias.result.type, ResultType::kNeedClarification);
}

TEST(OpenAiCodecTest, FinishOptionsAreCappedAtFive) {
  const FinishCall finish = parse_finish_arguments(
      R"({"type":"need_clarification","message":"哪个？","options":["1","2",3,"4","5","6","7"]})");
  EXPECT_TRUE(finish.problem.empty());
  EXPECT_EQ(finish.result.options, (std::vector<std::string>{"1", "2", "4", "5", "6"}));
}

TEST(OpenAiCodecTest, InvalidFinishArgumentsExplainTheProblem) {
  for (const std::string arguments : {"", "not json", "[]", "{}", R"({"type":42,"message":"x"})",
                                      R"({"type":"done","message":"x"})", R"({"type":"error"})",
                                      R"({"type":"error","message":7})"}) {
    const FinishCall finish = parse_finish_arguments(arguments);
    EXPECT_FALSE(finish.problem.empty()) << arguments;
  }
  EXPECT_NE(parse_finish_arguments(R"({"type":"error","message":7})").problem.find("message"),
            std::string::npos);
}

TEST(OpenAiCodecTest, FinishSchemaIsAValidSchemaThatMatchesTheParser) {
  const ports::ToolSchema& schema = finish_tool_schema();
  EXPECT_EQ(schema.name, "finish");
  EXPECT_FALSE(schema.description.empty());
  rapidjson::Document doc;
  doc.Parse(schema.parameters.c_str());
  ASSERT_FALSE(doc.HasParseError());
  const CompiledSchema compiled(doc);

  rapidjson::Document good;
  good.Parse(R"({"type":"need_clarification","message":"m","options":["a","b"]})");
  EXPECT_FALSE(compiled.validate(good).has_value());
  rapidjson::Document bad_type;
  bad_type.Parse(R"({"type":"done","message":"m"})");
  EXPECT_TRUE(compiled.validate(bad_type).has_value());
  rapidjson::Document six_options;
  six_options.Parse(
      R"({"type":"need_clarification","message":"m","options":["1","2","3","4","5","6"]})");
  EXPECT_TRUE(compiled.validate(six_options).has_value());
  rapidjson::Document no_message;
  no_message.Parse(R"({"type":"error"})");
  EXPECT_TRUE(compiled.validate(no_message).has_value());
}

std::vector<Message> sample_conversation() {
  return {
      Message{Role::kSystem, "你是执行器。\n规则：\"不要提问\"", {}, {}, {}},
      Message{Role::kUser, "把周会改到晚上8点", {}, {}, {}},
      Message{Role::kAssistant,
              "",
              {ToolCall{"call_1", "search_items", R"({"keyword":"周会"})"}},
              {},
              {}},
      Message{Role::kTool, R"({"items":[]})", {}, "call_1", "search_items"},
      Message{Role::kAssistant, "再查一次", {ToolCall{"call_2", "search_items", "{}"}}, {}, {}},
      Message{Role::kTool, R"({"error":{"code":"x","message":"y"}})", {}, "call_2", ""},
  };
}

TEST(OpenAiCodecTest, BuildChatRequestIsValidJsonWithTemperatureZero) {
  const ports::ToolSchema search{"search_items", "Search the calendar.",
                                 R"({"type":"object","properties":{"keyword":{"type":"string"}}})"};
  const std::string json =
      build_chat_request(ChatRequestOptions{"deepseek-chat", 512}, sample_conversation(),
                         {search, finish_tool_schema()});
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  ASSERT_FALSE(doc.HasParseError()) << json;
  ASSERT_TRUE(doc.IsObject());
  EXPECT_STREQ(doc["model"].GetString(), "deepseek-chat");
  ASSERT_TRUE(doc["temperature"].IsNumber());
  EXPECT_EQ(doc["temperature"].GetDouble(), 0.0);
  EXPECT_EQ(doc["max_tokens"].GetInt(), 512);

  const auto& messages = doc["messages"];
  ASSERT_EQ(messages.Size(), 6u);
  EXPECT_STREQ(messages[0]["role"].GetString(), "system");
  EXPECT_STREQ(messages[0]["content"].GetString(), "你是执行器。\n规则：\"不要提问\"");
  EXPECT_STREQ(messages[1]["role"].GetString(), "user");

  // An assistant message that only calls tools has content null.
  EXPECT_STREQ(messages[2]["role"].GetString(), "assistant");
  EXPECT_TRUE(messages[2]["content"].IsNull());
  ASSERT_EQ(messages[2]["tool_calls"].Size(), 1u);
  const auto& call = messages[2]["tool_calls"][0];
  EXPECT_STREQ(call["id"].GetString(), "call_1");
  EXPECT_STREQ(call["type"].GetString(), "function");
  EXPECT_STREQ(call["function"]["name"].GetString(), "search_items");
  ASSERT_TRUE(call["function"]["arguments"].IsString());  // JSON text, as OpenAI expects
  EXPECT_STREQ(call["function"]["arguments"].GetString(), R"({"keyword":"周会"})");

  EXPECT_STREQ(messages[3]["role"].GetString(), "tool");
  EXPECT_STREQ(messages[3]["tool_call_id"].GetString(), "call_1");
  EXPECT_STREQ(messages[3]["content"].GetString(), R"({"items":[]})");
  EXPECT_FALSE(messages[0].HasMember("tool_call_id"));
  EXPECT_FALSE(messages[1].HasMember("tool_calls"));

  EXPECT_STREQ(messages[4]["content"].GetString(), "再查一次");
  EXPECT_STREQ(messages[5]["tool_call_id"].GetString(), "call_2");

  const auto& tools = doc["tools"];
  ASSERT_EQ(tools.Size(), 2u);
  EXPECT_STREQ(tools[0]["type"].GetString(), "function");
  EXPECT_STREQ(tools[0]["function"]["name"].GetString(), "search_items");
  EXPECT_TRUE(tools[0]["function"]["parameters"].IsObject());
  const auto& finish = tools[1]["function"];
  EXPECT_STREQ(finish["name"].GetString(), "finish");
  const auto& parameters = finish["parameters"];
  ASSERT_TRUE(parameters.IsObject());
  std::set<std::string> required;
  for (const auto& r : parameters["required"].GetArray())
    required.insert(r.GetString());
  EXPECT_EQ(required, (std::set<std::string>{"type", "message"}));
  std::set<std::string> types;
  for (const auto& t : parameters["properties"]["type"]["enum"].GetArray())
    types.insert(t.GetString());
  EXPECT_EQ(types, (std::set<std::string>{"action_completed", "need_clarification", "error"}));
  EXPECT_EQ(parameters["properties"]["options"]["maxItems"].GetInt(), 5);
}

TEST(OpenAiCodecTest, BuildChatRequestWithoutToolsOmitsThem) {
  const std::string json =
      build_chat_request(ChatRequestOptions{"m"}, {Message{Role::kUser, "hi", {}, {}, {}}}, {});
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  ASSERT_FALSE(doc.HasParseError()) << json;
  EXPECT_FALSE(doc.HasMember("tools"));
  EXPECT_EQ(doc["temperature"].GetDouble(), 0.0);
}

TEST(OpenAiCodecTest, RequestRoundTripsThroughAProviderEcho) {
  // What the loop sends is what a provider would answer with: same tool call, same id.
  const std::vector<Message> conversation = sample_conversation();
  const std::string request = build_chat_request(ChatRequestOptions{"m"}, conversation, {});
  rapidjson::Document doc;
  doc.Parse(request.c_str());
  ASSERT_FALSE(doc.HasParseError());
  const auto& call = doc["messages"][2]["tool_calls"][0];
  const std::string echoed = response(
      R"("content":null,"tool_calls":[{"id":")" + std::string(call["id"].GetString()) +
      R"(","type":"function","function":{"name":"search_items","arguments":{"keyword":"周会"}}}])");
  const ModelReply reply = parse_ok(echoed);
  ASSERT_EQ(reply.tool_calls.size(), 1u);
  EXPECT_EQ(reply.tool_calls[0].id, conversation[2].tool_calls[0].id);
  EXPECT_EQ(reply.tool_calls[0].arguments, conversation[2].tool_calls[0].arguments);
}

}  // namespace
}  // namespace agentfleet::codec
