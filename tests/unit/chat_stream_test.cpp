// A streamed chat completion put back together: text as it comes, tool calls by index with
// their arguments in fragments (interleaved), the finish reason, the final chunk's usage,
// bytes cut anywhere; and what is not a chat completion stream.

#include "core/codec/chat_stream.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/codec/openai_codec.hpp"

namespace agentfleet::codec {
namespace {

std::string event(const std::string& json) {
  return "data: " + json + "\n\n";
}

// DeepSeek- and OpenAI-shaped chunks: two tool calls whose argument fragments interleave,
// text before them, then the finish reason and a usage chunk without choices.
std::string two_calls_stream() {
  std::string s;
  s += ": keep-alive\n\n";
  s += event(
      R"({"id":"c","object":"chat.completion.chunk","model":"deepseek-chat","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]})");
  s += event(R"({"choices":[{"index":0,"delta":{"content":"我来"},"finish_reason":null}]})");
  s += event(R"({"choices":[{"index":0,"delta":{"content":"查一下。"},"finish_reason":null}]})");
  s += event(
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"search_items","arguments":""}}]}}]})");
  s += event(
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"create_item","arguments":"{\"ti"}}]}}]})");
  s += event(
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"keyword\":"}}]}}]})");
  s += event(
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"tle\":\"周会\"}"}}]}}]})");
  s += event(
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"周会\"}"}}]}}]})");
  s += event(R"({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]})");
  s += event(
      R"({"choices":[],"usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150,"prompt_tokens_details":{"cached_tokens":64}}})");
  s += "data: [DONE]\n\n";
  return s;
}

TEST(ChatStream, ToolCallsAreAssembledByIndexWhateverOrderTheirFragmentsCameIn) {
  ChatStreamAssembler stream;
  std::vector<std::string> texts;
  stream.on_text = [&](std::string_view t) { texts.emplace_back(t); };
  ASSERT_TRUE(stream.feed(two_calls_stream())) << stream.error();
  EXPECT_TRUE(stream.done());
  EXPECT_EQ(texts, (std::vector<std::string>{"我来", "查一下。"}))
      << "the empty first delta is not text";

  auto reply = parse_chat_response(stream.completion_json());
  ASSERT_TRUE(reply.ok()) << reply.error().message << "\n" << stream.completion_json();
  const ModelReply& r = reply.value();
  EXPECT_EQ(r.content, "我来查一下。");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].id, "call_a");
  EXPECT_EQ(r.tool_calls[0].name, "search_items");
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"keyword":"周会"})");
  EXPECT_EQ(r.tool_calls[1].id, "call_b");
  EXPECT_EQ(r.tool_calls[1].name, "create_item");
  EXPECT_EQ(r.tool_calls[1].arguments, R"({"title":"周会"})");
  EXPECT_EQ(r.finish_reason, "tool_calls");
  EXPECT_EQ(r.usage.input, 120);
  EXPECT_EQ(r.usage.cached_input, 64);
  EXPECT_EQ(r.usage.output, 30);
  EXPECT_FALSE(r.usage_estimated);
}

TEST(ChatStream, BytesCutAnywhereReadTheSameAsWhole) {
  const std::string whole = two_calls_stream();
  ChatStreamAssembler once;
  ASSERT_TRUE(once.feed(whole));
  // Every cut into two pieces, inside lines, CRLF-free events and multi-byte characters.
  for (std::size_t cut = 1; cut < whole.size(); cut += 7) {
    ChatStreamAssembler split;
    std::string texts;
    split.on_text = [&](std::string_view t) { texts += t; };
    ASSERT_TRUE(split.feed(whole.substr(0, cut)));
    ASSERT_TRUE(split.feed(whole.substr(cut)));
    EXPECT_TRUE(split.done()) << cut;
    EXPECT_EQ(split.completion_json(), once.completion_json()) << "cut at " << cut;
    EXPECT_EQ(texts, "我来查一下。") << cut;
  }
  // One byte at a time, with CRLF line ends.
  std::string crlf;
  for (char c : whole) {
    if (c == '\n')
      crlf += '\r';
    crlf += c;
  }
  ChatStreamAssembler bytes;
  for (char c : crlf)
    ASSERT_TRUE(bytes.feed(std::string_view(&c, 1)));
  EXPECT_EQ(bytes.completion_json(), once.completion_json());
}

TEST(ChatStream, ReasoningAndTextAreKeptApartAndAStreamWithoutUsageSaysSo) {
  ChatStreamAssembler stream;
  ASSERT_TRUE(stream.feed(
      event(R"({"choices":[{"index":0,"delta":{"reasoning_content":"先想"}}]})") +
      event(R"({"choices":[{"index":0,"delta":{"reasoning_content":"一想"}}]})") +
      event(R"({"choices":[{"index":0,"delta":{"content":"好的"},"finish_reason":"stop"}]})")));
  EXPECT_FALSE(stream.done()) << "no [DONE] yet";
  EXPECT_TRUE(stream.finished());
  auto reply = parse_chat_response(stream.completion_json());
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply.value().reasoning, "先想一想");
  EXPECT_EQ(reply.value().content, "好的");
  EXPECT_EQ(reply.value().finish_reason, "stop");
  EXPECT_TRUE(reply.value().usage_estimated) << "no usage chunk came";
}

TEST(ChatStream, AnErrorEventOrDataThatIsNotJsonEndsTheStream) {
  ChatStreamAssembler failed;
  EXPECT_FALSE(
      failed.feed(event(R"({"choices":[{"index":0,"delta":{"content":"半"}}]})") +
                  event(R"({"error":{"message":"Internal server error","type":"server_error"}})")));
  EXPECT_NE(failed.error().find("Internal server error"), std::string::npos) << failed.error();
  EXPECT_FALSE(failed.feed(event("[DONE]"))) << "nothing more is read";

  ChatStreamAssembler junk;
  EXPECT_FALSE(junk.feed("data: <html>502 Bad Gateway</html>\n\n"));
  EXPECT_NE(junk.error().find("not JSON"), std::string::npos);
}

TEST(ChatStream, AStreamedRequestAsksForTheUsageChunk) {
  ChatRequestOptions options{"deepseek-chat"};
  options.stream = true;
  const std::string body =
      build_chat_request(options, {Message{Role::kUser, "hi", {}, {}, {}}}, {});
  EXPECT_NE(body.find(R"("stream":true,"stream_options":{"include_usage":true})"),
            std::string::npos)
      << body;
  options.stream = false;
  EXPECT_EQ(
      build_chat_request(options, {Message{Role::kUser, "hi", {}, {}, {}}}, {}).find("stream"),
      std::string::npos);
}

}  // namespace
}  // namespace agentfleet::codec
