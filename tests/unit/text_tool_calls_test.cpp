// Tool calls written as text, in the shapes open models served without a tool-call parser
// answer with (codec/text_tool_calls.hpp).

#include "core/codec/text_tool_calls.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/config/config.hpp"

namespace agentfleet::codec {
namespace {

const std::set<TextCallFormat> kAll = default_text_call_formats();

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

// One test a format, each with what the model's chat template makes it write: two calls
// where the format allows them, nested arguments and a CJK string.

TEST(TextToolCalls, GraniteToolCallTokenAndArrayAreCalls) {
  const TextCalls found = read(
      "<|tool_call|>[{\"name\": \"update_event\", \"arguments\": {\"title\": "
      "\"把周会改到晚上8点\", "
      "\"when\": {\"hour\": 20, \"minute\": 0}}}, {\"name\": \"notify\", \"arguments\": "
      "{\"to\": [\"team\"]}}]");
  ASSERT_EQ(found.calls.size(), 2u);
  EXPECT_EQ(found.calls[0].name, "update_event");
  EXPECT_EQ(found.calls[0].arguments,
            R"({"title":"把周会改到晚上8点","when":{"hour":20,"minute":0}})");
  EXPECT_EQ(found.calls[1].arguments, R"({"to":["team"]})");
  EXPECT_EQ(found.text, "");
}

TEST(TextToolCalls, JambaArrayAndMiniMaxLinesBetweenToolCallsTagsAreCalls) {
  const TextCalls jamba = read(
      "<tool_calls>[{\"name\": \"update_event\", \"arguments\": {\"title\": \"把周会改到晚上8点\", "
      "\"when\": {\"hour\": 20}}}, {\"name\": \"notify\", \"arguments\": {}}]</tool_calls>");
  ASSERT_EQ(jamba.calls.size(), 2u);
  EXPECT_EQ(jamba.calls[0].arguments, R"({"title":"把周会改到晚上8点","when":{"hour":20}})");
  EXPECT_EQ(jamba.calls[1].name, "notify");

  // MiniMax-Text-01: a thought, then one object a line.
  const TextCalls minimax = read(
      "好的，我来改。\n<tool_calls>\n{\"name\": \"update_event\", \"arguments\": {\"title\": "
      "\"把周会改到晚上8点\", \"when\": {\"hour\": 20}}}\n{\"name\": \"notify\", \"arguments\": "
      "{\"to\": [\"team\"]}}\n</tool_calls>");
  ASSERT_EQ(minimax.calls.size(), 2u);
  EXPECT_EQ(minimax.calls[1].arguments, R"({"to":["team"]})");
  EXPECT_EQ(minimax.text, "好的，我来改。");
}

TEST(TextToolCalls, InternLmPluginActionIsACall) {
  const TextCalls found = read(
      "我来修改周会时间。<|action_start|><|plugin|>\n{\"name\": \"update_event\", \"parameters\": "
      "{\"title\": \"把周会改到晚上8点\", \"when\": {\"hour\": 20}}}<|action_end|>\n");
  ASSERT_EQ(found.calls.size(), 1u);
  EXPECT_EQ(found.calls[0].name, "update_event");
  EXPECT_EQ(found.calls[0].arguments, R"({"title":"把周会改到晚上8点","when":{"hour":20}})");
  EXPECT_EQ(found.text, "我来修改周会时间。");
}

TEST(TextToolCalls, Qwen3CoderXmlParametersAreCallsWithJsonOrStringValues) {
  const TextCalls found = read(
      "我先找到周会。\n<tool_call>\n<function=search_items>\n<parameter=keyword>"
      "\n把周会改到晚上8点\n"
      "</parameter>\n<parameter=limit>\n5\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
      "<function=update_event>\n<parameter=when>\n{\"hour\": 20, \"minute\": 0}\n</parameter>\n"
      "<parameter=note>\n第一行\n第二行\n</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(found.calls.size(), 2u);
  EXPECT_EQ(found.calls[0].name, "search_items");
  EXPECT_EQ(found.calls[0].arguments, R"({"keyword":"把周会改到晚上8点","limit":5})");
  EXPECT_EQ(found.calls[1].arguments, R"({"when":{"hour":20,"minute":0},"note":"第一行\n第二行"})");
  EXPECT_EQ(found.text, "我先找到周会。");
}

TEST(TextToolCalls, Glm45ArgKeyValuePairsAreCalls) {
  const TextCalls found = read(
      "\n<tool_call>search_items\n<arg_key>keyword</arg_key>\n<arg_value>把周会改到晚上8点</"
      "arg_value>\n"
      "</tool_call>\n<tool_call>update_event\n<arg_key>when</arg_key>\n<arg_value>{\"hour\": 20}"
      "</arg_value>\n<arg_key>all_day</arg_key>\n<arg_value>false</arg_value>\n</tool_call>");
  ASSERT_EQ(found.calls.size(), 2u);
  EXPECT_EQ(found.calls[0].arguments, R"({"keyword":"把周会改到晚上8点"})");
  EXPECT_EQ(found.calls[1].name, "update_event");
  EXPECT_EQ(found.calls[1].arguments, R"({"when":{"hour":20},"all_day":false})");
  EXPECT_EQ(found.text, "");
}

TEST(TextToolCalls, DeepSeekToolCallTokensAreCallsInV3AndV31Shapes) {
  const TextCalls v3 = read(
      "我来改周会。<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>update_event\n"
      "```json\n{\"title\": \"把周会改到晚上8点\", \"when\": {\"hour\": "
      "20}}\n```<｜tool▁call▁end｜>\n"
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>notify\n```json\n{\"to\": [\"team\"]}\n```"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  ASSERT_EQ(v3.calls.size(), 2u);
  EXPECT_EQ(v3.calls[0].name, "update_event");
  EXPECT_EQ(v3.calls[0].arguments, R"({"title":"把周会改到晚上8点","when":{"hour":20}})");
  EXPECT_EQ(v3.calls[1].arguments, R"({"to":["team"]})");
  EXPECT_EQ(v3.text, "我来改周会。");

  const TextCalls v31 = read(
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>update_event<｜tool▁sep｜>{\"title\": "
      "\"把周会改到晚上8点\", \"when\": {\"hour\": 20}}<｜tool▁call▁end｜><｜tool▁call▁begin｜>"
      "notify<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  ASSERT_EQ(v31.calls.size(), 2u);
  EXPECT_EQ(v31.calls[0].arguments, R"({"title":"把周会改到晚上8点","when":{"hour":20}})");
  EXPECT_EQ(v31.calls[1].name, "notify");
  EXPECT_EQ(v31.calls[1].arguments, "{}");
}

TEST(TextToolCalls, FunctionaryRecipientsAreCallsAndAllIsText) {
  const TextCalls found = read(
      ">>>all\n我来改周会。\n>>>update_event\n{\"title\": \"把周会改到晚上8点\", \"when\": "
      "{\"hour\": "
      "20}}\n>>>notify\n{\"to\": [\"team\"]}");
  ASSERT_EQ(found.calls.size(), 2u);
  EXPECT_EQ(found.calls[0].name, "update_event");
  EXPECT_EQ(found.calls[0].arguments, R"({"title":"把周会改到晚上8点","when":{"hour":20}})");
  EXPECT_EQ(found.calls[1].arguments, R"({"to":["team"]})");
  EXPECT_EQ(found.text, "我来改周会。");
  EXPECT_FALSE(read_text_tool_calls(">>>all\n已把周会改到晚上8点", kAll));
}

TEST(TextToolCalls, CommandR7bActionIsCallsAndItsPlanIsText) {
  const TextCalls found = read(
      "<|START_THINKING|>我先改时间，再通知大家。<|END_THINKING|><|START_ACTION|>[\n"
      "    {\"tool_call_id\": \"0\", \"tool_name\": \"update_event\", \"parameters\": {\"title\": "
      "\"把周会改到晚上8点\", \"when\": {\"hour\": 20}}},\n    {\"tool_call_id\": \"1\", "
      "\"tool_name\": \"notify\", \"parameters\": {\"to\": [\"team\"]}}\n]<|END_ACTION|>");
  ASSERT_EQ(found.calls.size(), 2u);
  EXPECT_EQ(found.calls[0].name, "update_event");
  EXPECT_EQ(found.calls[0].arguments, R"({"title":"把周会改到晚上8点","when":{"hour":20}})");
  EXPECT_EQ(found.calls[1].name, "notify");
  EXPECT_EQ(found.text, "我先改时间，再通知大家。");
}

TEST(TextToolCalls, NemotronToolCallTagsHoldAnArrayOfCalls) {
  const TextCalls found = read(
      "<TOOLCALL>[{\"name\": \"update_event\", \"arguments\": {\"title\": \"把周会改到晚上8点\", "
      "\"when\": {\"hour\": 20}}}, {\"name\": \"notify\", \"arguments\": {\"to\": [\"team\"]}}]"
      "</TOOLCALL>");
  ASSERT_EQ(found.calls.size(), 2u);
  EXPECT_EQ(found.calls[0].arguments, R"({"title":"把周会改到晚上8点","when":{"hour":20}})");
  EXPECT_EQ(found.calls[1].name, "notify");
}

TEST(TextToolCalls, FireFunctionAndPhi4FunctoolsArrayIsCalls) {
  const TextCalls found = read(
      " functools[{\"name\": \"update_event\", \"arguments\": {\"title\": \"把周会改到晚上8点\", "
      "\"when\": {\"hour\": 20}}}, {\"name\": \"notify\", \"arguments\": {\"to\": [\"team\"]}}]");
  ASSERT_EQ(found.calls.size(), 2u);
  EXPECT_EQ(found.calls[0].arguments, R"({"title":"把周会改到晚上8点","when":{"hour":20}})");
  EXPECT_EQ(found.calls[1].arguments, R"({"to":["team"]})");
  EXPECT_EQ(found.text, "");
  // Phi-4-mini writes it without the blank.
  EXPECT_EQ(read("functools[{\"name\": \"notify\", \"arguments\": {}}]").calls.size(), 1u);
}

TEST(TextToolCalls, AFencedCallAfterProseIsACallAndTheProseIsKept) {
  const TextCalls found = read(
      "好的，我会把周会改到晚上8点。\n\n```json\n{\"name\": \"update_event\", \"arguments\": "
      "{\"title\": \"把周会改到晚上8点\", \"when\": {\"hour\": 20}}}\n```\n");
  ASSERT_EQ(found.calls.size(), 1u);
  EXPECT_EQ(found.calls[0].name, "update_event");
  EXPECT_EQ(found.calls[0].arguments, R"({"title":"把周会改到晚上8点","when":{"hour":20}})");
  EXPECT_EQ(found.text, "好的，我会把周会改到晚上8点。");

  const TextCalls array = read(
      "Two steps:\n```tool_call\n[{\"name\": \"search_items\", \"parameters\": {\"keyword\": "
      "\"周会\"}}, {\"name\": \"notify\", \"parameters\": {}}]\n```\nThen I report back.");
  ASSERT_EQ(array.calls.size(), 2u);
  EXPECT_EQ(array.calls[0].arguments, R"({"keyword":"周会"})");
  EXPECT_EQ(array.text, "Two steps:\n\nThen I report back.");
}

TEST(TextToolCalls, PythonicListIsReadOnlyWhenConfigured) {
  const std::string answer =
      "[update_event(title='把周会改到晚上8点', when={'hour': 20, \"minute\": 0}, all_day=False, "
      "tags=[\"周会\", None], weight=1.5), notify(to=['team'])]";
  EXPECT_FALSE(read_text_tool_calls(answer, kAll)) << "not in the default set";
  const TextCalls found = read(answer, {TextCallFormat::kPythonic});
  ASSERT_EQ(found.calls.size(), 2u);
  EXPECT_EQ(found.calls[0].id, "text_call_0");
  EXPECT_EQ(found.calls[0].name, "update_event");
  EXPECT_EQ(found.calls[0].arguments,
            R"({"title":"把周会改到晚上8点","when":{"hour":20,"minute":0},"all_day":false,)"
            R"("tags":["周会",null],"weight":1.5})");
  EXPECT_EQ(found.calls[1].arguments, R"({"to":["team"]})");
  // Llama 4 wraps it in its python tokens.
  EXPECT_EQ(read("<|python_start|>[get_time()]<|python_end|>", {TextCallFormat::kPythonic})
                .calls.at(0)
                .arguments,
            "{}");
  // A list that is not calls stays an answer.
  for (const char* text : {"[1, 2, 3]", "[周会A, 周会B]", "[f(x)]", "[f(a=b)]", "see [f(a=1)]"})
    EXPECT_FALSE(read_text_tool_calls(text, {TextCallFormat::kPythonic})) << text;
}

TEST(TextToolCalls, ProseThatMentionsATagOrFencesOtherJsonIsText) {
  for (const char* text : {
           "请用 <|tool_call|> 标签调用工具",
           "Jamba 用 <tool_calls> 标签，MiniMax 也是",
           "InternLM 以 <|action_start|><|plugin|> 开始调用",
           "Qwen3-Coder 写 <tool_call><function=名字> 的形式",
           "GLM 写 <tool_call>search_items 但没有结束",
           "DeepSeek 的 <｜tool▁calls▁begin｜> 是一个特殊标记",
           ">>> print('把周会改到晚上8点')",
           "Command R 用 <|START_ACTION|> 开始",
           "Nemotron 用 <TOOLCALL> 标签",
           "import functools\nfunctools.partial(f)",
           "结果如下：\n```json\n{\"name\": \"周会\", \"time\": \"20:00\"}\n```",
           "示例：\n```json\n{\"name\": \"update_event\", \"arguments\": {}, \"id\": 1}\n```",
           "代码：\n```python\n{\"name\": \"update_event\", \"arguments\": {}}\n```",
           "[update_event(title='周会')]",
       }) {
    EXPECT_FALSE(read_text_tool_calls(text, kAll).has_value()) << text;
  }
}

TEST(TextToolCalls, TheDefaultIsEveryFormatButPythonicAndTheConfigurationSaysSo) {
  std::set<TextCallFormat> expected = all_text_call_formats();
  expected.erase(TextCallFormat::kPythonic);
  EXPECT_EQ(default_text_call_formats(), expected);
  std::set<TextCallFormat> configured;
  for (const std::string& name : config::ModelConfig{}.text_tool_calls)
    configured.insert(parse_text_call_format(name).value());
  EXPECT_EQ(configured, expected);
}

TEST(TextToolCalls, FormatNamesRoundTrip) {
  for (TextCallFormat format : all_text_call_formats())
    EXPECT_EQ(parse_text_call_format(to_string(format)), format);
  EXPECT_FALSE(parse_text_call_format("xml"));
}

}  // namespace
}  // namespace agentfleet::codec
