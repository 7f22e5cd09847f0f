// llm-sim's streamed answers: the same completion as server-sent events, its calls'
// argument fragments interleaved; read back by the worker's assembler, it is the same answer.

#include "tools/llm_sim/streaming.hpp"

#include <gtest/gtest.h>

#include <string>

#include "core/codec/chat_stream.hpp"
#include "core/codec/openai_codec.hpp"

namespace agentfleet::llm_sim {
namespace {

const char* kCompletion = R"({"id":"chatcmpl-1","object":"chat.completion","model":"sim-model",
  "choices":[{"index":0,"message":{"role":"assistant","content":"我来查一下日程。",
    "reasoning_content":"先查再改",
    "tool_calls":[
      {"id":"call_1","type":"function","function":{"name":"search_items","arguments":"{\"item_type\":\"any\",\"keyword\":\"周会\",\"limit\":1}"}},
      {"id":"call_2","type":"function","function":{"name":"create_item","arguments":"{\"title\":\"周会改到晚上8点\"}"}}]},
    "finish_reason":"tool_calls"}],
  "usage":{"prompt_tokens":321,"completion_tokens":45,"total_tokens":366}})";

TEST(LlmSimStreaming, AStreamedAnswerReadsBackAsTheWholeOne) {
  const auto events = stream_events(kCompletion, /*include_usage=*/true);
  ASSERT_TRUE(events);
  codec::ChatStreamAssembler stream;
  std::string text;
  int pieces = 0;
  stream.on_text = [&](std::string_view t) {
    text += t;
    ++pieces;
  };
  // As the server writes it: 37 bytes at a time.
  for (std::size_t at = 0; at < events->size(); at += 37)
    ASSERT_TRUE(stream.feed(events->substr(at, 37))) << stream.error();
  EXPECT_TRUE(stream.done());
  EXPECT_EQ(text, "我来查一下日程。");
  EXPECT_EQ(pieces, 3) << "three code points a delta";

  auto whole = codec::parse_chat_response(kCompletion);
  auto streamed = codec::parse_chat_response(stream.completion_json());
  ASSERT_TRUE(whole.ok() && streamed.ok());
  EXPECT_EQ(streamed.value().content, whole.value().content);
  EXPECT_EQ(streamed.value().reasoning, whole.value().reasoning);
  ASSERT_EQ(streamed.value().tool_calls.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(streamed.value().tool_calls[i].id, whole.value().tool_calls[i].id);
    EXPECT_EQ(streamed.value().tool_calls[i].name, whole.value().tool_calls[i].name);
    EXPECT_EQ(streamed.value().tool_calls[i].arguments, whole.value().tool_calls[i].arguments);
  }
  EXPECT_EQ(streamed.value().finish_reason, "tool_calls");
  EXPECT_EQ(streamed.value().usage.input, 321);
  EXPECT_EQ(streamed.value().usage.output, 45);
}

TEST(LlmSimStreaming, FragmentsOfSeveralCallsInterleaveAndUsageComesOnlyWhenAskedFor) {
  const auto events = stream_events(kCompletion, /*include_usage=*/false);
  ASSERT_TRUE(events);
  // The second call's first fragment comes before the first call's last.
  const std::size_t second_first = events->find(R"("index":1,"function":{"arguments")");
  const std::size_t first_last = events->rfind(R"("index":0,"function":{"arguments")");
  ASSERT_NE(second_first, std::string::npos);
  ASSERT_NE(first_last, std::string::npos);
  EXPECT_LT(second_first, first_last);
  EXPECT_EQ(events->find("\"usage\""), std::string::npos);
  EXPECT_EQ(events->substr(events->size() - 14), "data: [DONE]\n\n");
  EXPECT_FALSE(stream_events("not json", true));

  EXPECT_TRUE(
      stream_request(R"({"stream":true,"stream_options":{"include_usage":true}})").include_usage);
  EXPECT_FALSE(stream_request(R"({"stream":false})").stream);
  EXPECT_FALSE(stream_request("{").stream);
}

}  // namespace
}  // namespace agentfleet::llm_sim
