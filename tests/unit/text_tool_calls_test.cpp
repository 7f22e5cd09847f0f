// Tool calls written as text, in the shapes open models served without a tool-call parser
// answer with (codec/text_tool_calls.hpp).

#include "core/codec/text_tool_calls.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace agentfleet::codec {
namespace {

const std::set<TextCallFormat> kAll = all_text_call_formats();

TextCalls read(std::string_view content, const std::set<TextCallFormat>& formats = kAll) {
  auto found = read_text_tool_calls(content, formats);
  EXPECT_TRUE(found.has_value()) << content;
  return found.value_or(TextCalls{});
}

TEST(TextToolCalls, QwenHermesTagsAreCallsWithCanonicalArgumentsAndStableIds) {
  // As Qwen 2.5 answers through vLLM without --tool-call-parser.
  const TextCalls found = read(
      "我先搜索周会。\n<tool_call>\n{\"name\": \"search_items\", \"arguments\": {\"keyword\": "
      "\"周会\", \"limit\": 5}}\n</tool_call>\n<tool_call>\n{\"name\": \"search_items\", "
      "\"arguments\": {\"keyword\": \"例会\"}}\n</tool_call>");
  ASSERT_EQ(found.calls.size(), 2u);
  EXPECT_EQ(found.calls[0].id, "text_call_0");
  EXPECT_EQ(found.calls[0].name, "search_items");
  EXPECT_EQ(found.calls[0].arguments, R"({"keyword":"周会","limit":5})");
  EXPECT_EQ(found.calls[1].id, "text_call_1");
  EXPECT_EQ(found.calls[1].arguments, R"({"keyword":"例会"})");
  EXPECT_EQ(found.text, "我先搜索周会。");
}

TEST(TextToolCalls, AHermesCallCutOffBeforeItsClosingTagIsReadWhenItsJsonIsWhole) {
  const TextCalls found =
      read("<tool_call>\n{\"name\": \"create_item\", \"arguments\": {\"title\": \"周会\"}}\n");
  ASSERT_EQ(found.calls.size(), 1u);
  EXPECT_EQ(found.calls[0].arguments, R"({"title":"周会"})");
  EXPECT_FALSE(read_text_tool_calls("<tool_call>\n{\"name\": \"create_item\", \"argu", kAll));
}

TEST(TextToolCalls, ArgumentsWrittenAsAJsonStringAreParsedAndRewritten) {
  const TextCalls found = read(
      R"(<tool_call>{"name": "search_items", "arguments": "{\"keyword\": \"周会\"}"}</tool_call>)");
  ASSERT_EQ(found.calls.size(), 1u);
  EXPECT_EQ(found.calls[0].arguments, R"({"keyword":"周会"})");
  // Arguments that are not an object stay text, for the tool-call check to refuse.
  EXPECT_EQ(read(R"(<tool_call>{"name": "search_items", "arguments": "周会"}</tool_call>)")
                .calls.at(0)
                .arguments,
            "周会");
  EXPECT_EQ(read(R"(<tool_call>{"name": "search_items"}</tool_call>)").calls.at(0).arguments, "{}");
}

TEST(TextToolCalls, LlamaFunctionTagsAndPythonTagAreCalls) {
  const TextCalls tags = read(
      "<function=search_items>{\"keyword\": \"周会\"}</function><function=create_item>{\"title\": "
      "\"周会\"}</function>");
  ASSERT_EQ(tags.calls.size(), 2u);
  EXPECT_EQ(tags.calls[0].name, "search_items");
  EXPECT_EQ(tags.calls[1].arguments, R"({"title":"周会"})");

  const TextCalls python = read(
      "<|python_tag|>{\"name\": \"search_items\", \"parameters\": {\"keyword\": \"周会\"}}; "
      "{\"name\": \"create_item\", \"parameters\": {\"title\": \"x\"}}");
  ASSERT_EQ(python.calls.size(), 2u);
  EXPECT_EQ(python.calls[0].arguments, R"({"keyword":"周会"})");
  EXPECT_EQ(python.calls[1].name, "create_item");
}

TEST(TextToolCalls, MistralToolCallsArrayIsCalls) {
  const TextCalls found = read(
      "[TOOL_CALLS] [{\"name\": \"search_items\", \"arguments\": {\"keyword\": \"周会\"}}, "
      "{\"name\": \"finish\", \"arguments\": {\"type\": \"error\", \"message\": \"x\"}}]");
  ASSERT_EQ(found.calls.size(), 2u);
  EXPECT_EQ(found.calls[1].name, "finish");
  EXPECT_EQ(found.text, "");
}

TEST(TextToolCalls, AnAnswerThatIsOneCallObjectFencedOrNotIsACall) {
  const TextCalls bare = read(R"({"name": "search_items", "arguments": {"keyword": "周会"}})");
  ASSERT_EQ(bare.calls.size(), 1u);
  const TextCalls fenced =
      read("```json\n{\"name\": \"search_items\", \"arguments\": {\"keyword\": \"周会\"}}\n```");
  ASSERT_EQ(fenced.calls.size(), 1u);
  EXPECT_EQ(fenced.calls[0].arguments, R"({"keyword":"周会"})");
  // The OpenAI shape written out as text.
  const TextCalls wrapped = read(
      R"([{"type": "function", "function": {"name": "create_item", "arguments": "{\"title\":\"周会\"}"}}])");
  ASSERT_EQ(wrapped.calls.size(), 1u);
  EXPECT_EQ(wrapped.calls[0].name, "create_item");
  EXPECT_EQ(wrapped.calls[0].arguments, R"({"title":"周会"})");
}

TEST(TextToolCalls, TextThatOnlyMentionsJsonOrATagIsText) {
  for (const char* text : {
           "已把周会改到晚上8点 ✅",
           "已创建：{\"id\": \"evt_1\"}",
           R"({"result": "ok", "id": 3})",
           R"({"name": "周会"})",  // untagged, a call must name its arguments
           "请用 <tool_call> 标签调用工具",
           "[TOOL_CALLS] 没有",
           "```json\n{\"items\": []}\n```",
           "",
       }) {
    EXPECT_FALSE(read_text_tool_calls(text, kAll).has_value()) << text;
  }
}

TEST(TextToolCalls, OnlyTheConfiguredFormatsAreRead) {
  const std::string hermes =
      R"(<tool_call>{"name": "search_items", "arguments": {"keyword": "x"}}</tool_call>)";
  EXPECT_FALSE(read_text_tool_calls(hermes, {TextCallFormat::kJson, TextCallFormat::kMistral}));
  EXPECT_TRUE(read_text_tool_calls(hermes, {TextCallFormat::kHermes}));
  EXPECT_FALSE(read_text_tool_calls(hermes, {}));
}

TEST(TextToolCalls, HostileNestingInsideATagIsTextNotACrash) {
  const std::string deep = "<tool_call>" + std::string(200000, '[') + "</tool_call>";
  EXPECT_FALSE(read_text_tool_calls(deep, kAll));
  const std::string python = "<|python_tag|>" + std::string(200000, '{');
  EXPECT_FALSE(read_text_tool_calls(python, kAll));
}

TEST(TextToolCalls, AReplyWithCallsInItsTextGetsThemAndItsFinishParsed) {
  ModelReply reply;
  reply.content =
      "<tool_call>\n{\"name\": \"finish\", \"arguments\": {\"type\": \"need_clarification\", "
      "\"message\": \"哪一个？\", \"options\": [\"周会A\", \"周会B\"]}}\n</tool_call>";
  reply.finish_reason = "stop";
  const ModelReply read = with_text_tool_calls(reply, kAll);
  ASSERT_EQ(read.tool_calls.size(), 1u);
  EXPECT_EQ(read.content, "");
  ASSERT_TRUE(read.finish.has_value());
  EXPECT_TRUE(read.finish->problem.empty()) << read.finish->problem;
  EXPECT_EQ(read.finish->result.type, ResultType::kNeedClarification);
  EXPECT_EQ(read.finish->result.options, (std::vector<std::string>{"周会A", "周会B"}));

  // Native calls are never second-guessed.
  ModelReply native;
  native.content = R"(<tool_call>{"name": "create_item", "arguments": {}}</tool_call>)";
  native.tool_calls = {ToolCall{"c1", "search_items", "{}"}};
  const ModelReply kept = with_text_tool_calls(native, kAll);
  ASSERT_EQ(kept.tool_calls.size(), 1u);
  EXPECT_EQ(kept.tool_calls[0].name, "search_items");
  EXPECT_EQ(kept.content, native.content);
}

TEST(TextToolCalls, FormatNamesRoundTrip) {
  for (TextCallFormat format : all_text_call_formats())
    EXPECT_EQ(parse_text_call_format(to_string(format)), format);
  EXPECT_FALSE(parse_text_call_format("xml"));
}

}  // namespace
}  // namespace agentfleet::codec
