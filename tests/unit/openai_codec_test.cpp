// The OpenAI-compatible codec: the tolerant response parser against the variants real
// providers send, the finish declaration, and the request the worker sends.
#include "core/codec/openai_codec.hpp"

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "core/codec/checkpoint_codec.hpp"
#include "core/codec/json_schema.hpp"
#include "core/codec/react_json_codec.hpp"
#include "core/react/context_budget.hpp"

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

TEST(OpenAiCodecTest, AConversationEncodedAsItGrowsSendsWhatBuildingItWholeSends) {
  const ports::ToolSchema search{"search_items", "Search the calendar.",
                                 R"({"type":"object","properties":{"keyword":{"type":"string"}}})"};
  const std::vector<ports::ToolSchema> tools{search, finish_tool_schema()};
  const std::string tools_json = encode_tools(tools);
  const ChatRequestOptions options{"deepseek-chat", 512};
  const std::vector<Message> whole = sample_conversation();
  std::vector<Message> conversation;
  ConversationEncoder encoder;
  std::uint64_t reused = 0;
  for (std::size_t size : {2u, 4u, 6u}) {
    const std::size_t before = conversation.size();
    conversation.assign(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(size));
    encoder.sync(1, conversation);
    EXPECT_EQ(assemble_chat_request(options, encoder.json(), tools_json),
              build_chat_request(options, conversation, tools));
    EXPECT_EQ(encoder.estimated_tokens(), react::estimate_tokens(conversation));
    // What was encoded for an earlier call is not encoded again.
    reused += before;
    EXPECT_EQ(encoder.reused(), reused);
  }
  // The same call again appends nothing and sends the same.
  encoder.sync(1, conversation);
  EXPECT_EQ(assemble_chat_request(options, encoder.json(), tools_json),
            build_chat_request(options, conversation, tools));
  // No tools: none in the request, as build_chat_request leaves them out.
  EXPECT_EQ(assemble_chat_request(options, encoder.json(), encode_tools({})),
            build_chat_request(options, conversation, {}));
}

TEST(OpenAiCodecTest, AnotherConversationOrOneBuiltAnewIsEncodedWhole) {
  const ChatRequestOptions options{"m"};
  ConversationEncoder encoder;
  const std::vector<Message> first = sample_conversation();
  encoder.sync(1, first);
  // The same length under another number (plan_execute's next role): nothing of the first
  // is kept.
  std::vector<Message> second = first;
  second[1].content = "把周会改到明天";
  encoder.sync(2, second);
  EXPECT_EQ(assemble_chat_request(options, encoder.json(), ""),
            build_chat_request(options, second, {}));
  EXPECT_EQ(encoder.estimated_tokens(), react::estimate_tokens(second));
  // 0: a list built anew for each call, never appended to.
  second[0].content = "换一个提示";
  encoder.sync(0, second);
  EXPECT_EQ(assemble_chat_request(options, encoder.json(), ""),
            build_chat_request(options, second, {}));
  second[0].content = "再换一个";
  encoder.sync(0, second);
  EXPECT_EQ(assemble_chat_request(options, encoder.json(), ""),
            build_chat_request(options, second, {}));
  EXPECT_EQ(encoder.reused(), 0u);
  // A shorter list under the same number starts over.
  encoder.sync(3, second);
  const std::vector<Message> shorter(second.begin(), second.begin() + 2);
  encoder.sync(3, shorter);
  EXPECT_EQ(assemble_chat_request(options, encoder.json(), ""),
            build_chat_request(options, shorter, {}));
}

// The reasoning_content each assistant message of `json`'s request carries, "-" for none.
std::vector<std::string> echoed_reasoning(const std::string& json) {
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  std::vector<std::string> out;
  for (const auto& m : doc["messages"].GetArray()) {
    if (std::string(m["role"].GetString()) != "assistant")
      continue;
    auto it = m.FindMember("reasoning_content");
    out.push_back(it == m.MemberEnd() ? "-" : it->value.GetString());
  }
  return out;
}

TEST(OpenAiCodecTest, AssistantsReasoningIsSentBackAsTheModelsConfigurationSays) {
  std::vector<Message> conversation = sample_conversation();
  conversation[2].reasoning = "先查周会";  // a tool turn with reasoning; the second has none
  conversation.push_back(Message{Role::kAssistant, "已改好", {}, {}, {}, "可以回答了"});
  ChatRequestOptions options{"deepseek-reasoner"};
  EXPECT_EQ(echoed_reasoning(build_chat_request(options, conversation, {})),
            (std::vector<std::string>{"-", "-", "-"}));
  // DeepSeek's thinking mode: every turn with tool calls, "" when it had no reasoning.
  options.reasoning_echo = ReasoningEcho::kToolTurns;
  EXPECT_EQ(echoed_reasoning(build_chat_request(options, conversation, {})),
            (std::vector<std::string>{"先查周会", "", "-"}));
  options.reasoning_echo = ReasoningEcho::kAll;
  EXPECT_EQ(echoed_reasoning(build_chat_request(options, conversation, {})),
            (std::vector<std::string>{"先查周会", "", "可以回答了"}));

  // The kept encoding writes the same, and starts over when the echo changes.
  ConversationEncoder encoder;
  for (ReasoningEcho echo : {ReasoningEcho::kToolTurns, ReasoningEcho::kNone}) {
    options.reasoning_echo = echo;
    encoder.sync(1, conversation, echo);
    EXPECT_EQ(encoder.echo(), echo);
    EXPECT_EQ(assemble_chat_request(options, encoder.json(), ""),
              build_chat_request(options, conversation, {}));
  }
  EXPECT_EQ(encoder.reused(), 0u);
  // What is echoed counts in the estimate.
  encoder.sync(1, conversation, ReasoningEcho::kAll);
  EXPECT_EQ(encoder.estimated_tokens(), react::estimate_tokens(conversation) +
                                            react::estimate_tokens("先查周会") +
                                            react::estimate_tokens("可以回答了"));
}

TEST(OpenAiCodecTest, ArgumentsAreKeptCanonicalWhateverTheProviderWrote) {
  // Blanks, a fence, a fence with its language tag: the tool gets, and the model reads back,
  // the same compact object.
  for (const char* written : {R"(,"arguments":"{ \"keyword\" : \"周会\",\n  \"limit\": 5 }")",
                              R"(,"arguments":"```json\n{\"keyword\":\"周会\",\"limit\":5}\n```")",
                              R"(,"arguments":"```\n{\"keyword\": \"周会\", \"limit\": 5}```")",
                              R"(,"arguments":"  {\"keyword\":\"周会\",\"limit\":5}\n")"}) {
    const ModelReply reply = one_call(written);
    ASSERT_EQ(reply.tool_calls.size(), 1u) << written;
    EXPECT_EQ(reply.tool_calls[0].arguments, R"({"keyword":"周会","limit":5})") << written;
  }
  // Text that holds no object stays as it is: the tool-call check refuses it, saying why.
  EXPECT_EQ(one_call(R"(,"arguments":"keyword=周会")").tool_calls[0].arguments, "keyword=周会");
  EXPECT_EQ(one_call(R"(,"arguments":"[1,2]")").tool_calls[0].arguments, "[1,2]");
  // What the next request sends back is that canonical text.
  ModelReply reply = one_call(R"(,"arguments":"```json\n{\"keyword\": \"周会\"}\n```")");
  std::vector<Message> conversation{
      Message{Role::kAssistant, "", reply.tool_calls, {}, {}},
  };
  const std::string sent = build_chat_request(ChatRequestOptions{"m"}, conversation, {});
  EXPECT_NE(sent.find(R"("arguments":"{\"keyword\":\"周会\"}")"), std::string::npos) << sent;
}

// ---- react_json ----

TEST(ReactJsonCodecTest, RequestHasNoToolsAndTheAddendumAndObservationsAsUserMessages) {
  const ports::ToolSchema search{"search_items", "Search the calendar.",
                                 R"({"type":"object","properties":{"keyword":{"type":"string"}}})"};
  std::vector<Message> conversation = {
      Message{Role::kSystem, "你是执行器。", {}, {}, {}},
      Message{Role::kUser, "把周会改到晚上8点", {}, {}, {}},
      Message{Role::kAssistant,
              "```json\n{\"action\":\"search_items\",\"action_input\":{\"keyword\":\"周会\"}}\n```",
              {ToolCall{"rj-0", "search_items", R"({"keyword":"周会"})"}},
              {},
              {}},
      Message{Role::kTool, R"({"items":[]})", {}, "rj-0", "search_items"},
  };
  ChatRequestOptions options{"plain-model", 256};
  options.protocol = ChatProtocol::kReactJson;
  const std::string json =
      build_chat_request(options, conversation, {search, finish_tool_schema()});
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  ASSERT_FALSE(doc.HasParseError()) << json;
  EXPECT_FALSE(doc.HasMember("tools"));
  EXPECT_FALSE(doc.HasMember("tool_choice"));
  EXPECT_EQ(doc["temperature"].GetDouble(), 0.0);
  EXPECT_EQ(doc["max_tokens"].GetInt(), 256);

  const auto& messages = doc["messages"];
  ASSERT_EQ(messages.Size(), 4u);
  EXPECT_STREQ(messages[0]["role"].GetString(), "system");
  const std::string system = messages[0]["content"].GetString();
  EXPECT_EQ(system.rfind("你是执行器。", 0), 0u);
  EXPECT_NE(system.find("\nProtocol: react_json\n"), std::string::npos);
  EXPECT_NE(system.find("### search_items\nSearch the calendar."), std::string::npos);
  EXPECT_NE(system.find(search.parameters), std::string::npos);
  EXPECT_NE(system.find("### finish\n"), std::string::npos);
  EXPECT_NE(system.find(finish_tool_schema().parameters), std::string::npos);
  EXPECT_EQ(system.find("### finish\n"), system.rfind("### finish\n"));  // listed once
  EXPECT_STREQ(messages[1]["role"].GetString(), "user");
  EXPECT_STREQ(messages[1]["content"].GetString(), "把周会改到晚上8点");

  EXPECT_STREQ(messages[2]["role"].GetString(), "assistant");
  EXPECT_EQ(std::string(messages[2]["content"].GetString()), conversation[2].content);
  EXPECT_FALSE(messages[2].HasMember("tool_calls"));

  EXPECT_STREQ(messages[3]["role"].GetString(), "user");
  EXPECT_STREQ(messages[3]["content"].GetString(), R"(Observation: {"items":[]})");
  EXPECT_FALSE(messages[3].HasMember("tool_call_id"));
  EXPECT_FALSE(messages[3].HasMember("name"));

  // The addendum lists finish even when the caller passed no tools.
  EXPECT_NE(react_json_addendum({}).find("### finish\n"), std::string::npos);
  EXPECT_EQ(chat_protocol("react_json"), ChatProtocol::kReactJson);
  EXPECT_EQ(chat_protocol("function_calling"), ChatProtocol::kFunctionCalling);
}

TEST(ReactJsonCodecTest, WithoutASystemMessageTheAddendumComesFirst) {
  ChatRequestOptions options{"m"};
  options.protocol = ChatProtocol::kReactJson;
  const std::string json =
      build_chat_request(options, {Message{Role::kUser, "hi", {}, {}, {}}}, {});
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  ASSERT_FALSE(doc.HasParseError()) << json;
  ASSERT_EQ(doc["messages"].Size(), 2u);
  EXPECT_STREQ(doc["messages"][0]["role"].GetString(), "system");
  EXPECT_NE(std::string(doc["messages"][0]["content"].GetString()).find("Protocol: react_json"),
            std::string::npos);
}

TEST(ReactJsonCodecTest, AnAssistantTurnWithOnlyToolCallsIsWrittenAsProtocolJson) {
  ChatRequestOptions options{"m"};
  options.protocol = ChatProtocol::kReactJson;
  const std::string json = build_chat_request(
      options,
      {Message{
          Role::kAssistant, "", {ToolCall{"c", "search_items", R"({"keyword":"a"})"}}, {}, {}}},
      {});
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  ASSERT_FALSE(doc.HasParseError()) << json;
  EXPECT_STREQ(doc["messages"][1]["content"].GetString(),
               R"({"action":"search_items","action_input":{"keyword":"a"}})");
}

ModelReply read_text(const std::string& text, int step = 0,
                     const std::string& finish_reason = "stop") {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.String(text.c_str(), static_cast<rapidjson::SizeType>(text.size()));
  return read_react_json_reply(
      parse_ok(response(std::string(R"("content":)") + buffer.GetString(), "", finish_reason)),
      step);
}

TEST(ReactJsonCodecTest, ActionVariants) {
  const std::string expected = R"({"keyword":"周会"})";
  for (
      const std::string& text : {
          std::string(
              R"({"thought":"t","action":"search_items","action_input":{"keyword":"周会"}})"),
          std::string("```json\n{\"action\": \"search_items\", \"action_input\": {\"keyword\": "
                      "\"周会\"}}\n```"),
          std::string("好的，我来搜索：\n```\n{\"action\":\"search_items\",\"action_input\":"
                      "\"{\\\"keyword\\\":\\\"周会\\\"}\"}\n```\n稍等。"),
          std::string(
              R"(Thought: 先搜索 {"action":"search_items","action_input":"{\"keyword\": \"周会\"}"} done)"),
          std::string(
              "```json{\"action\":\"search_items\",\"action_input\":{\"keyword\":\"周会\"}}```"),
      }) {
    SCOPED_TRACE(text);
    const ModelReply reply = read_text(text, 4);
    EXPECT_TRUE(reply.unreadable.empty()) << reply.unreadable;
    ASSERT_EQ(reply.tool_calls.size(), 1u);
    EXPECT_EQ(reply.tool_calls[0].id, "rj-4");
    EXPECT_EQ(reply.tool_calls[0].name, "search_items");
    EXPECT_EQ(reply.tool_calls[0].arguments, expected);
    EXPECT_FALSE(reply.finish.has_value());
    EXPECT_EQ(reply.content, text);  // the raw text, sent back verbatim
  }
  const ModelReply no_input = read_text(R"({"action":"search_items"})");
  ASSERT_EQ(no_input.tool_calls.size(), 1u);
  EXPECT_EQ(no_input.tool_calls[0].arguments, "{}");
  const ModelReply thought = read_text(R"({"thought":"先搜索","action":"search_items"})");
  EXPECT_EQ(thought.reasoning, "先搜索");
}

TEST(ReactJsonCodecTest, FinalVariants) {
  const ModelReply object = read_text(
      R"({"thought":"done","final":{"type":"error","message":"日期不存在","options":[]}})");
  ASSERT_EQ(object.tool_calls.size(), 1u);
  EXPECT_EQ(object.tool_calls[0].name, "finish");
  ASSERT_TRUE(object.finish.has_value());
  EXPECT_TRUE(object.finish->problem.empty());
  EXPECT_EQ(object.finish->result.type, ResultType::kError);
  EXPECT_EQ(object.finish->result.message, "日期不存在");

  const ModelReply action = read_text(
      R"({"action":"finish","action_input":"{\"type\":\"action_completed\",\"message\":\"ok\"}"})");
  ASSERT_TRUE(action.finish.has_value());
  EXPECT_EQ(action.finish->result.type, ResultType::kActionCompleted);

  const ModelReply both =
      read_text(R"({"action":"finish","final":{"type":"action_completed","message":"done"}})");
  ASSERT_TRUE(both.finish.has_value());
  EXPECT_EQ(both.finish->result.message, "done");

  const ModelReply text = read_text(R"({"thought":"x","final":"✅ 已完成"})");
  EXPECT_TRUE(text.tool_calls.empty());
  ASSERT_TRUE(text.final_text.has_value());
  EXPECT_EQ(*text.final_text, "✅ 已完成");

  const ModelReply bad_finish = read_text(R"({"final":{"type":"maybe","message":"?"}})");
  ASSERT_TRUE(bad_finish.finish.has_value());
  EXPECT_FALSE(bad_finish.finish->problem.empty());
  EXPECT_TRUE(bad_finish.unreadable.empty());
}

TEST(ReactJsonCodecTest, UnreadableRepliesSayWhatWasWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {"我先搜索一下。", "no JSON object"},
      {R"({"thought": "oops", "action": )", "no valid JSON object"},
      {R"({"thought":"only thinking"})", R"(neither "action" nor "final")"},
      {R"({"action":"search_items","final":"done"})", "not both"},
      {R"({"action":42})", "name of a tool"},
      {R"({"action":"search_items","action_input":[1,2]})", "action_input"},
      {R"({"action":"search_items","action_input":"not json"})", "action_input"},
      {R"({"final":17})", R"("final" must be an object)"},
      {R"({"final":""})", "must not be empty"},
  };
  for (const auto& [text, needle] : cases) {
    SCOPED_TRACE(text);
    const ModelReply reply = read_text(text);
    EXPECT_NE(reply.unreadable.find(needle), std::string::npos) << reply.unreadable;
    EXPECT_NE(reply.unreadable.find("exactly one JSON object"), std::string::npos);
    EXPECT_TRUE(reply.tool_calls.empty());
    EXPECT_FALSE(reply.finish.has_value());
    EXPECT_FALSE(reply.final_text.has_value());
    EXPECT_EQ(reply.content, text);
  }
}

TEST(ReactJsonCodecTest, NativeToolCallsAndCutRepliesPassThrough) {
  const ModelReply native = read_react_json_reply(one_call(R"(,"arguments":"{}")"), 3);
  ASSERT_EQ(native.tool_calls.size(), 1u);
  EXPECT_EQ(native.tool_calls[0].id, "call_1");
  EXPECT_TRUE(native.unreadable.empty());

  const ModelReply cut = read_text(R"({"action":"search_it)", 0, "length");
  EXPECT_TRUE(cut.unreadable.empty());
  EXPECT_TRUE(cut.tool_calls.empty());
}

TEST(ReactJsonCodecTest, ManyBracesCostBoundedWork) {
  std::string text(100000, '{');
  const ModelReply reply = read_text(text);
  EXPECT_FALSE(reply.unreadable.empty());
}

TEST(ReactJsonCodecTest, CheckpointKeepsFinalTextAndUnreadable) {
  for (const std::string& text : {std::string(R"({"final":"✅ ok"})"), std::string("嗯")}) {
    const ModelReply reply = read_text(text, 2);
    auto back = parse_model_reply_json(model_reply_json(reply));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back.value().final_text, reply.final_text);
    EXPECT_EQ(back.value().unreadable, reply.unreadable);
    EXPECT_EQ(back.value().content, reply.content);
  }
  // A function-calling reply's checkpoint has neither member.
  const std::string plain = model_reply_json(one_call(R"(,"arguments":"{}")"));
  EXPECT_EQ(plain.find("final_text"), std::string::npos);
  EXPECT_EQ(plain.find("unreadable"), std::string::npos);
}

TEST(ReactJsonCodecTest, ToolTokenEstimateFollowsTheProtocol) {
  const ports::ToolSchema search{"search_items", "Search the calendar.",
                                 R"({"type":"object","properties":{"keyword":{"type":"string"}}})"};
  EXPECT_EQ(estimate_tool_tokens({}, ChatProtocol::kFunctionCalling), 0);
  const auto function_calling =
      estimate_tool_tokens({search, finish_tool_schema()}, ChatProtocol::kFunctionCalling);
  const auto react = estimate_tool_tokens({search, finish_tool_schema()}, ChatProtocol::kReactJson);
  EXPECT_GT(function_calling, 100);
  EXPECT_GT(react, function_calling);  // the addendum also explains the reply format
}

}  // namespace
}  // namespace agentfleet::codec
