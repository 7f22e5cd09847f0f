// llm-sim's response styles (provider variants), the react_json protocol, the default
// scenario for load, and the scenario keys latency/style/faults, without sockets.

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <chrono>
#include <string>
#include <variant>
#include <vector>

#include "core/codec/text_tool_calls.hpp"
#include "tools/llm_sim/scenario.hpp"
#include "tools/llm_sim/simulator.hpp"

namespace agentfleet::llm_sim {
namespace {

using rapidjson::Value;

const std::chrono::system_clock::time_point kNow{std::chrono::seconds{1740830400}};

const char* const kScenarios = R"(
scenarios:
  - name: groups
    match: '^groups'
    steps:
      - calls: [{tool: get_event_groups}]
      - finish: {type: action_completed, message: "{{count r.groups}} groups"}
  - name: bench
    match: '^bench:(?:\s*steps=(\d+))?(?:\s*calls=(\d+))?'
    steps:
      - repeat: "{{match.1}}"
        calls:
          - tool: search_items
            repeat: "{{match.2}}"
            arguments: {item_type: any, keyword: bench, limit: 1}
      - finish: {type: action_completed, message: "bench {{step}}"}
  - name: meeting
    match: '^move'
    steps:
      - content: 先查找。
        calls: [{tool: search_items, arguments: {item_type: event, date: "2025-02-08"}}]
      - branches:
          - when: {error: true}
            finish: {type: error, message: "失败：{{r.error.message}}"}
          - when: {count: r.items, eq: 1}
            calls: [{tool: update_item, arguments: {id: "{{r.items.0.id}}", start_time: "20:00"}}]
          - when: {count: r.items, min: 2}
            finish:
              type: need_clarification
              message: "{{count r.items}} 个会议"
              options_from: {path: r.items, format: "{{title}}"}
          - finish: {type: error, message: 没有会议}
      - finish: {type: action_completed, message: "已修改「{{r.item.title}}」"}
)";

std::string json_text(const Value& value) {
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> writer(out);
  value.Accept(writer);
  return std::string(out.GetString(), out.GetSize());
}

// A conversation as a client builds it, in either protocol.
class Conversation {
 public:
  Conversation(const std::string& text, bool react) : react_(react) {
    doc_.SetObject();
    auto& a = doc_.GetAllocator();
    doc_.AddMember("model", "sim", a);
    doc_.AddMember("messages", Value(rapidjson::kArrayType), a);
    add("system", react ? "You are an agent. 2025-02-05\nProtocol: react_json\nTools: ..."
                        : "You are an agent. 2025-02-05");
    add("user", text);
    if (!react) {
      Value tools(rapidjson::kArrayType);
      for (const char* name : {"search_items", "update_item", "get_event_groups", "finish"}) {
        Value function(rapidjson::kObjectType);
        function.AddMember("name", Value(name, a), a);
        Value tool(rapidjson::kObjectType);
        tool.AddMember("type", "function", a);
        tool.AddMember("function", function, a);
        tools.PushBack(tool, a);
      }
      doc_.AddMember("tools", tools, a);
    }
  }
  void add(const char* role, const std::string& content) {
    auto& a = doc_.GetAllocator();
    Value message(rapidjson::kObjectType);
    message.AddMember("role", Value(role, a), a);
    message.AddMember("content", Value(content.c_str(), a), a);
    doc_["messages"].PushBack(message, a);
  }
  void add_raw(const Value& message) {
    Value copy(message, doc_.GetAllocator());
    doc_["messages"].PushBack(copy, doc_.GetAllocator());
  }
  // Echoes the reply and answers it with `result` the way this protocol does.
  void answer(const Value& reply, const std::string& result) {
    if (react_) {
      add("assistant", reply["content"].GetString());
      add("user", "Observation: " + result);
      return;
    }
    add_raw(reply);
    if (reply.HasMember("tool_calls")) {
      for (const auto& call : reply["tool_calls"].GetArray()) {
        auto& a = doc_.GetAllocator();
        Value message(rapidjson::kObjectType);
        message.AddMember("role", "tool", a);
        message.AddMember("tool_call_id", Value(call["id"].GetString(), a), a);
        message.AddMember("content", Value(result.c_str(), a), a);
        doc_["messages"].PushBack(message, a);
      }
    }
  }
  std::string body() const { return json_text(doc_); }

 private:
  bool react_;
  rapidjson::Document doc_;
};

struct Reply {
  Completion completion;
  rapidjson::Document response;
  const Value& message() const { return response["choices"][0]["message"]; }
  std::string finish_reason() const { return response["choices"][0]["finish_reason"].GetString(); }
  const Value& usage() const { return response["usage"]; }
  // react_json: the content object, fence removed; `fenced` says whether it had one.
  rapidjson::Document react(bool* fenced = nullptr) const {
    std::string text = message()["content"].GetString();
    const bool has_fence = text.rfind("```json\n", 0) == 0;
    if (has_fence) {
      EXPECT_EQ(text.substr(text.size() - 4), "\n```");
      text = text.substr(8, text.size() - 12);
    }
    if (fenced != nullptr) {
      *fenced = has_fence;
    }
    rapidjson::Document document;
    document.Parse(text.c_str());
    EXPECT_FALSE(document.HasParseError()) << text;
    return document;
  }
};

Reply ask(const Simulator& simulator, const std::string& body,
          ResponseStyle style = ResponseStyle::kOpenAI) {
  CompletionOptions options;
  options.style = style;
  auto result = simulator.complete(body, kNow, 1, options);
  Reply reply;
  if (auto* error = std::get_if<RequestError>(&result)) {
    ADD_FAILURE() << error->message;
    return reply;
  }
  reply.completion = std::get<Completion>(result);
  reply.response.Parse(reply.completion.body.c_str());
  EXPECT_FALSE(reply.response.HasParseError()) << reply.completion.body;
  return reply;
}

Simulator simulator() {
  return Simulator(parse_scenarios(kScenarios, "test.yaml"));
}

// --- response styles ---------------------------------------------------------------------

TEST(LlmSimStyleTest, EveryStyleNameRoundTrips) {
  for (const auto style :
       {ResponseStyle::kOpenAI, ResponseStyle::kArgumentsObject, ResponseStyle::kArgumentsEmpty,
        ResponseStyle::kMissingIds, ResponseStyle::kContentWithToolCalls,
        ResponseStyle::kReasoningContent, ResponseStyle::kDeepseekUsage,
        ResponseStyle::kLegacyFunctionCall, ResponseStyle::kHermesText, ResponseStyle::kLlamaText,
        ResponseStyle::kMistralText, ResponseStyle::kJsonText, ResponseStyle::kDeepseekThinking,
        ResponseStyle::kNoUsage}) {
    EXPECT_EQ(parse_response_style(response_style_name(style)), style);
  }
  EXPECT_FALSE(parse_response_style("anthropic"));
}

TEST(LlmSimStyleTest, ArgumentsAsObjectOrEmptyAndCallsWithoutIds) {
  const Simulator sim = simulator();
  const std::string bench = Conversation("bench: steps=1 calls=2", false).body();
  const std::string groups = Conversation("groups", false).body();

  const Reply object = ask(sim, bench, ResponseStyle::kArgumentsObject);
  ASSERT_EQ(object.message()["tool_calls"].Size(), 2u);
  const Value& arguments = object.message()["tool_calls"][0]["function"]["arguments"];
  ASSERT_TRUE(arguments.IsObject());
  EXPECT_STREQ(arguments["keyword"].GetString(), "bench");
  EXPECT_EQ(arguments["limit"].GetInt(), 1);

  const Reply empty = ask(sim, groups, ResponseStyle::kArgumentsEmpty);
  EXPECT_STREQ(empty.message()["tool_calls"][0]["function"]["arguments"].GetString(), "");
  EXPECT_STREQ(ask(sim, groups).message()["tool_calls"][0]["function"]["arguments"].GetString(),
               "{}");
  // Calls with arguments keep them.
  EXPECT_STRNE(ask(sim, bench, ResponseStyle::kArgumentsEmpty)
                   .message()["tool_calls"][0]["function"]["arguments"]
                   .GetString(),
               "");

  const Reply no_ids = ask(sim, bench, ResponseStyle::kMissingIds);
  for (const auto& call : no_ids.message()["tool_calls"].GetArray()) {
    EXPECT_FALSE(call.HasMember("id"));
    EXPECT_STREQ(call["type"].GetString(), "function");
  }
}

TEST(LlmSimStyleTest, ContentReasoningAndLegacyFunctionCall) {
  const Simulator sim = simulator();
  const std::string bench = Conversation("bench: steps=1 calls=2", false).body();

  const Reply plain = ask(sim, bench);
  EXPECT_TRUE(plain.message()["content"].IsNull());
  const Reply content = ask(sim, bench, ResponseStyle::kContentWithToolCalls);
  EXPECT_TRUE(content.message()["content"].IsString());
  EXPECT_EQ(content.message()["tool_calls"].Size(), 2u);

  const Reply reasoning = ask(sim, bench, ResponseStyle::kReasoningContent);
  ASSERT_TRUE(reasoning.message()["reasoning_content"].IsString());
  const std::int64_t reasoning_tokens =
      reasoning.usage()["completion_tokens_details"]["reasoning_tokens"].GetInt64();
  EXPECT_GT(reasoning_tokens, 0);
  EXPECT_EQ(reasoning.completion.usage.reasoning_tokens, reasoning_tokens);
  // Reasoning tokens are inside completion_tokens.
  EXPECT_EQ(reasoning.usage()["completion_tokens"].GetInt64(),
            plain.usage()["completion_tokens"].GetInt64() + reasoning_tokens);

  const Reply legacy = ask(sim, bench, ResponseStyle::kLegacyFunctionCall);
  EXPECT_FALSE(legacy.message().HasMember("tool_calls"));
  EXPECT_STREQ(legacy.message()["function_call"]["name"].GetString(), "search_items");
  EXPECT_TRUE(legacy.message()["function_call"]["arguments"].IsString());
  EXPECT_EQ(legacy.finish_reason(), "function_call");
}

TEST(LlmSimStyleTest, ThinkingModeRefusesAToolTurnWhoseReasoningIsNotSentBack) {
  const Simulator sim = simulator();
  Conversation conversation("bench: steps=2 calls=1", false);
  const Reply first = ask(sim, conversation.body(), ResponseStyle::kDeepseekThinking);
  ASSERT_TRUE(first.message()["reasoning_content"].IsString());
  ASSERT_TRUE(first.message().HasMember("tool_calls"));

  // Sent back as it came: answered.
  Conversation echoed("bench: steps=2 calls=1", false);
  echoed.answer(first.message(), R"({"items":[]})");
  EXPECT_TRUE(
      ask(sim, echoed.body(), ResponseStyle::kDeepseekThinking).message().HasMember("tool_calls"));
  // Empty reasoning is still reasoning sent back.
  rapidjson::Document blank;
  blank.CopyFrom(first.message(), blank.GetAllocator());
  blank["reasoning_content"].SetString("");
  Conversation empty("bench: steps=2 calls=1", false);
  empty.answer(blank, R"({"items":[]})");
  CompletionOptions thinking;
  thinking.style = ResponseStyle::kDeepseekThinking;
  EXPECT_TRUE(std::holds_alternative<Completion>(sim.complete(empty.body(), kNow, 2, thinking)));

  // Dropped: refused as DeepSeek refuses it, naming the message.
  rapidjson::Document dropped;
  dropped.CopyFrom(first.message(), dropped.GetAllocator());
  dropped.RemoveMember("reasoning_content");
  Conversation without("bench: steps=2 calls=1", false);
  without.answer(dropped, R"({"items":[]})");
  auto result = sim.complete(without.body(), kNow, 3, thinking);
  auto* error = std::get_if<RequestError>(&result);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->message,
            "The reasoning_content in the thinking mode must be passed back to the API.");
  EXPECT_EQ(error->param, "messages[2].reasoning_content");
  // Other styles do not care.
  EXPECT_TRUE(std::holds_alternative<Completion>(
      sim.complete(without.body(), kNow, 4, CompletionOptions{})));
}

TEST(LlmSimStyleTest, TextStylesWriteTheCallsAsTextTheWorkerReadsBack) {
  const Simulator sim = simulator();
  const std::string bench = Conversation("bench: steps=1 calls=2", false).body();
  const Reply native = ask(sim, bench);
  const auto& native_calls = native.message()["tool_calls"];
  ASSERT_EQ(native_calls.Size(), 2u);
  const std::pair<ResponseStyle, codec::TextCallFormat> styles[] = {
      {ResponseStyle::kHermesText, codec::TextCallFormat::kHermes},
      {ResponseStyle::kLlamaText, codec::TextCallFormat::kLlama},
      {ResponseStyle::kMistralText, codec::TextCallFormat::kMistral},
      {ResponseStyle::kJsonText, codec::TextCallFormat::kJson},
  };
  for (const auto& [style, format] : styles) {
    const Reply text = ask(sim, bench, style);
    EXPECT_FALSE(text.message().HasMember("tool_calls")) << response_style_name(style);
    EXPECT_EQ(text.finish_reason(), "stop");
    ASSERT_TRUE(text.message()["content"].IsString());
    const std::string content = text.message()["content"].GetString();
    // Its own format reads it back as the native calls.
    auto read = codec::read_text_tool_calls(content, {format});
    ASSERT_TRUE(read.has_value()) << content;
    ASSERT_EQ(read->calls.size(), 2u) << content;
    for (std::size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(read->calls[i].name, native_calls[i]["function"]["name"].GetString());
      EXPECT_EQ(read->calls[i].arguments, native_calls[i]["function"]["arguments"].GetString());
    }
  }
}

TEST(LlmSimStyleTest, DeepseekUsageCountsCacheHitsAndMisses) {
  const Simulator sim = simulator();
  Conversation chat("bench: steps=2 calls=1", false);
  chat.answer(ask(sim, chat.body()).message(), R"({"items":[],"count":0})");
  const Reply openai = ask(sim, chat.body());
  const Reply deepseek = ask(sim, chat.body(), ResponseStyle::kDeepseekUsage);
  const std::int64_t cached = openai.usage()["prompt_tokens_details"]["cached_tokens"].GetInt64();
  EXPECT_GT(cached, 0);
  EXPECT_FALSE(deepseek.usage().HasMember("prompt_tokens_details"));
  EXPECT_EQ(deepseek.usage()["prompt_cache_hit_tokens"].GetInt64(), cached);
  EXPECT_EQ(deepseek.usage()["prompt_cache_hit_tokens"].GetInt64() +
                deepseek.usage()["prompt_cache_miss_tokens"].GetInt64(),
            deepseek.usage()["prompt_tokens"].GetInt64());
  EXPECT_EQ(deepseek.usage()["total_tokens"].GetInt64(), openai.usage()["total_tokens"].GetInt64());
}

TEST(LlmSimStyleTest, NoUsageAnswersTheSameWithoutAUsageObjectAndStillCountsTheTokens) {
  const Simulator sim = simulator();
  const std::string bench = Conversation("bench: steps=1 calls=1", false).body();
  const Reply openai = ask(sim, bench);
  const Reply bare = ask(sim, bench, ResponseStyle::kNoUsage);
  EXPECT_FALSE(bare.response.HasMember("usage"));
  EXPECT_EQ(bare.completion.usage.prompt_tokens, openai.usage()["prompt_tokens"].GetInt64())
      << "the stats count what it would have reported";
  EXPECT_EQ(bare.message()["tool_calls"][0]["function"]["name"].GetString(),
            std::string(openai.message()["tool_calls"][0]["function"]["name"].GetString()));
}

TEST(LlmSimStyleTest, UsageIsTheSameInEveryStyleButReasoning) {
  const Simulator sim = simulator();
  const std::string bench = Conversation("bench: steps=1 calls=3", false).body();
  const Reply openai = ask(sim, bench);
  for (const auto style : {ResponseStyle::kArgumentsObject, ResponseStyle::kArgumentsEmpty,
                           ResponseStyle::kMissingIds, ResponseStyle::kContentWithToolCalls,
                           ResponseStyle::kDeepseekUsage, ResponseStyle::kLegacyFunctionCall}) {
    const Reply reply = ask(sim, bench, style);
    EXPECT_EQ(reply.completion.style, style);
    EXPECT_EQ(reply.usage()["prompt_tokens"].GetInt64(), openai.usage()["prompt_tokens"].GetInt64())
        << response_style_name(style);
    EXPECT_EQ(reply.usage()["completion_tokens"].GetInt64(),
              openai.usage()["completion_tokens"].GetInt64())
        << response_style_name(style);
    EXPECT_EQ(ask(sim, bench, style).completion.body, reply.completion.body);  // deterministic
  }
}

TEST(LlmSimStyleTest, AScenarioStyleWinsOverTheCallersAndResultsOfLegacyCallsAreRead) {
  const Simulator sim(parse_scenarios(R"(
scenarios:
  - name: legacy
    match: '^move'
    style: legacy_function_call
    steps:
      - calls: [{tool: search_items, arguments: {item_type: event}}]
      - branches:
          - when: {count: r.items, eq: 2}
            finish: {type: action_completed, message: two}
          - finish: {type: error, message: other}
)",
                                      "t.yaml"));
  Conversation chat("move it", false);
  const Reply first = ask(sim, chat.body(), ResponseStyle::kMissingIds);
  EXPECT_EQ(first.completion.style, ResponseStyle::kLegacyFunctionCall);
  ASSERT_TRUE(first.message().HasMember("function_call"));
  chat.add_raw(first.message());
  chat.add("function", R"({"items":[{"id":1},{"id":2}]})");  // the legacy result message
  const Reply second = ask(sim, chat.body());
  EXPECT_STREQ(second.message()["function_call"]["name"].GetString(), "finish");
  rapidjson::Document arguments;
  arguments.Parse(second.message()["function_call"]["arguments"].GetString());
  EXPECT_STREQ(arguments["message"].GetString(), "two");
}

// --- react_json -----------------------------------------------------------------------------

TEST(LlmSimReactJsonTest, ActionsAndFinalAsJsonContentFencedEveryOtherStep) {
  const Simulator sim = simulator();
  Conversation chat("move the meeting", true);
  const Reply first = ask(sim, chat.body());
  EXPECT_EQ(first.completion.protocol, Protocol::kReactJson);
  EXPECT_EQ(first.completion.scenario, "meeting");
  EXPECT_FALSE(first.message().HasMember("tool_calls"));
  EXPECT_EQ(first.finish_reason(), "stop");
  bool fenced = true;
  const auto action = first.react(&fenced);
  EXPECT_FALSE(fenced);  // step 0
  EXPECT_STREQ(action["thought"].GetString(), "先查找。");
  EXPECT_STREQ(action["action"].GetString(), "search_items");
  EXPECT_STREQ(action["action_input"]["date"].GetString(), "2025-02-08");

  chat.answer(first.message(), R"({"items":[{"id":"e2","title":"团队会议"}],"count":1})");
  const Reply second = ask(sim, chat.body());
  EXPECT_EQ(second.completion.step, 1u);
  const auto update = second.react(&fenced);
  EXPECT_TRUE(fenced);  // step 1
  EXPECT_STREQ(update["action"].GetString(), "update_item");
  EXPECT_STREQ(update["action_input"]["id"].GetString(), "e2");

  chat.answer(second.message(), R"({"item":{"id":"e2","title":"团队会议"}})");
  const Reply third = ask(sim, chat.body());
  const auto final_answer = third.react(&fenced);
  EXPECT_FALSE(fenced);
  EXPECT_FALSE(final_answer.HasMember("action"));
  EXPECT_STREQ(final_answer["final"]["type"].GetString(), "action_completed");
  EXPECT_STREQ(final_answer["final"]["message"].GetString(), "已修改「团队会议」");
  EXPECT_TRUE(final_answer["final"]["options"].IsArray());
  EXPECT_TRUE(final_answer["thought"].IsString());
  // Usage is counted on the content, as for any text answer.
  EXPECT_GT(third.usage()["completion_tokens"].GetInt64(), 1);
  EXPECT_GT(third.usage()["prompt_tokens_details"]["cached_tokens"].GetInt64(), 0);
}

TEST(LlmSimReactJsonTest, ObservationsAreBranchedOnLikeToolResults) {
  const Simulator sim = simulator();
  {
    Conversation chat("move the meeting", true);
    chat.answer(ask(sim, chat.body()).message(),
                R"({"items":[{"title":"晨会"},{"title":"评审"}],"count":2})");
    const auto final_answer = ask(sim, chat.body()).react();
    EXPECT_STREQ(final_answer["final"]["type"].GetString(), "need_clarification");
    EXPECT_STREQ(final_answer["final"]["message"].GetString(), "2 个会议");
    ASSERT_EQ(final_answer["final"]["options"].Size(), 2u);
    EXPECT_STREQ(final_answer["final"]["options"][1].GetString(), "评审");
  }
  {
    Conversation chat("move the meeting", true);
    chat.answer(ask(sim, chat.body()).message(),
                R"({"error":{"code":"timeout","message":"工具超时"}})");
    const auto final_answer = ask(sim, chat.body()).react();
    EXPECT_STREQ(final_answer["final"]["type"].GetString(), "error");
    EXPECT_STREQ(final_answer["final"]["message"].GetString(), "失败：工具超时");
  }
  {  // An observation is not the user's text: the scenario stays the same.
    Conversation chat("bench: steps=2 calls=3", true);
    const Reply first = ask(sim, chat.body());
    EXPECT_STREQ(first.react()["action"].GetString(), "search_items");  // one action per step
    chat.answer(first.message(), R"({"items":[],"count":0})");
    const Reply second = ask(sim, chat.body());
    EXPECT_EQ(second.completion.scenario, "bench");
    chat.answer(second.message(), R"({"items":[],"count":0})");
    EXPECT_STREQ(ask(sim, chat.body()).react()["final"]["message"].GetString(), "bench 2");
  }
}

TEST(LlmSimReactJsonTest, TheMarkerMustBeALineOfItsOwn) {
  const Simulator sim = simulator();
  rapidjson::Document request;
  request.Parse(R"({"messages":[
    {"role":"system","content":"We do not use Protocol: react_json here"},
    {"role":"user","content":"groups"}],
    "tools":[{"type":"function","function":{"name":"get_event_groups"}}]})");
  const Reply reply = ask(sim, json_text(request));
  EXPECT_EQ(reply.completion.protocol, Protocol::kFunctionCalling);
  EXPECT_TRUE(reply.message().HasMember("tool_calls"));
}

// --- default scenario, scenario keys ---------------------------------------------------------

TEST(LlmSimDefaultScenarioTest, AnyTextRunsTheGenericScenarioWhenAskedTo) {
  const Simulator sim(parse_scenarios(kScenarios, "t.yaml"), "bench: steps=2 calls=3");
  Conversation chat("任何一句话", false);
  const Reply first = ask(sim, chat.body());
  EXPECT_EQ(first.completion.scenario, "bench");
  EXPECT_EQ(first.message()["tool_calls"].Size(), 3u);
  chat.answer(first.message(), R"({"items":[],"count":0})");
  chat.answer(ask(sim, chat.body()).message(), R"({"items":[],"count":0})");
  const Reply done = ask(sim, chat.body());
  EXPECT_STREQ(done.message()["tool_calls"][0]["function"]["name"].GetString(), "finish");
  // Matching text still picks its own scenario.
  EXPECT_EQ(ask(sim, Conversation("groups", false).body()).completion.scenario, "groups");

  const Simulator by_name(parse_scenarios(kScenarios, "t.yaml"), "groups");
  EXPECT_EQ(ask(by_name, Conversation("hello", false).body()).completion.scenario, "groups");
  EXPECT_THROW(Simulator(parse_scenarios(kScenarios, "t.yaml"), "nothing like it"),
               std::invalid_argument);
}

TEST(LlmSimScenarioKeysTest, LatencyStyleAndFaultsLoad) {
  const ScenarioSet set = parse_scenarios(R"(
scenarios:
  - name: slow
    match: '^slow'
    latency: "lognormal:200:0.5"
    style: reasoning_content
    faults:
      - {mode: http_503, probability: 0.25}
      - {mode: http_429, retry_after_s: 2, count: 3, step: 1}
    steps:
      - finish: {type: error, message: x}
  - name: fixed
    match: '^fixed'
    latency_ms: 150
    steps:
      - finish: {type: error, message: x}
)",
                                          "t.yaml");
  const Scenario& slow = set.scenarios[0];
  EXPECT_EQ(slow.latency->describe(), "lognormal:200:0.5");
  EXPECT_EQ(slow.style, ResponseStyle::kReasoningContent);
  ASSERT_EQ(slow.faults.size(), 2u);
  EXPECT_EQ(slow.faults[0].mode, sim::FaultMode::kHttp503);
  EXPECT_EQ(slow.faults[0].probability, 0.25);
  EXPECT_EQ(slow.faults[0].scope, "slow");
  EXPECT_EQ(slow.faults[1].count, 3);
  EXPECT_EQ(slow.faults[1].step, 1);
  EXPECT_EQ(set.scenarios[1].latency->describe(), "fixed:150");

  const Simulator sim(set);
  EXPECT_EQ(ask(sim, Conversation("slow", false).body()).completion.latency->describe(),
            "lognormal:200:0.5");
}

TEST(LlmSimScenarioKeysTest, BadLatencyStyleOrFaultNameThePlace) {
  const auto error_of = [](const std::string& extra) {
    try {
      parse_scenarios("scenarios:\n  - name: a\n    match: x\n" + extra +
                          "    steps:\n      - finish: {type: error, message: x}\n",
                      "t.yaml");
    } catch (const ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of("    latency: \"uniform:9:1\"\n").find("t.yaml:4:14: /scenarios/0/latency"),
            std::string::npos);
  EXPECT_NE(error_of("    style: fancy\n").find("/scenarios/0/style: unknown style 'fancy'"),
            std::string::npos);
  EXPECT_NE(error_of("    faults: [{mode: http_500, probability: 2}]\n")
                .find("/scenarios/0/faults/0/probability"),
            std::string::npos);
  EXPECT_NE(
      error_of("    faults: [{mode: http_500, scenario: b}]\n").find("unknown key 'scenario'"),
      std::string::npos);
  EXPECT_NE(error_of("    latency: 5\n    latency_ms: 5\n").find("both"), std::string::npos);
}

}  // namespace
}  // namespace agentfleet::llm_sim
