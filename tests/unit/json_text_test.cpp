#include "core/codec/json_text.hpp"

#include <gtest/gtest.h>

#include "core/codec/openai_codec.hpp"

namespace agentfleet::codec {
namespace {

TEST(ParseJson, AcceptsOrdinaryDocuments) {
  rapidjson::Document doc;
  ASSERT_TRUE(parse_json(doc, R"({"a":[1,{"b":"会议"}],"c":null})"));
  EXPECT_STREQ(doc["a"][1]["b"].GetString(), "会议");
}

TEST(ParseJson, RefusesNestingBombsInsteadOfExhaustingTheStack) {
  rapidjson::Document doc;
  EXPECT_FALSE(parse_json(doc, std::string(200'000, '[')));
  std::string deep;
  for (int i = 0; i < kMaxJsonDepth + 1; ++i)
    deep += "{\"a\":";
  deep += "1" + std::string(kMaxJsonDepth + 1, '}');
  EXPECT_FALSE(parse_json(doc, deep));
  // Brackets inside strings are text, not nesting.
  EXPECT_TRUE(parse_json(doc, "{\"s\":\"" + std::string(1000, '[') + "\"}"));
}

TEST(ParseJson, RefusesInvalidUtf8) {
  rapidjson::Document doc;
  EXPECT_FALSE(parse_json(doc, "{\"s\":\"\xff\xfe\"}"));
}

TEST(LoneSurrogateEscape, FindsALowSurrogateThatNoHighOneOpens) {
  // Where the lone one starts: its backslash.
  EXPECT_EQ(lone_surrogate_escape(R"({"s":"\udc00"})"), 6u);
  EXPECT_EQ(lone_surrogate_escape(R"({"s":"ab\uDFFF"})"), 8u);
  // After a character that is not a high surrogate escape, or across strings.
  EXPECT_EQ(lone_surrogate_escape(R"({"s":"\u0041\udc00"})"), 12u);
  EXPECT_EQ(lone_surrogate_escape(R"({"a":"\ud800","b":"\udc00"})"), 19u);
  EXPECT_EQ(lone_surrogate_escape(R"({"s":"\ud800x\udc00"})"), 13u);
  // A pair is a character; escaped backslashes and text outside strings are not escapes.
  EXPECT_EQ(lone_surrogate_escape(R"({"s":"\ud83d\ude00"})"), std::nullopt);
  EXPECT_EQ(lone_surrogate_escape(R"({"s":"\\udc00"})"), std::nullopt);
  EXPECT_EQ(lone_surrogate_escape(R"({"s":"\"\\","t":"udc00"})"), std::nullopt);
  EXPECT_EQ(lone_surrogate_escape(R"({"s":"\udc0"})"), std::nullopt);  // not an escape
  EXPECT_EQ(lone_surrogate_escape(""), std::nullopt);
  // parse_json refuses it (RapidJSON alone would store bytes that are not UTF-8) and takes
  // the pair.
  rapidjson::Document doc;
  EXPECT_FALSE(parse_json(doc, R"({"s":"\udc00"})"));
  ASSERT_TRUE(parse_json(doc, R"({"s":"\ud83d\ude00"})"));
  EXPECT_STREQ(doc["s"].GetString(), "\xF0\x9F\x98\x80");
}

TEST(ParseChatResponse, ADeepOrGarbledBodyIsAnErrorValue) {
  EXPECT_FALSE(parse_chat_response(std::string(200'000, '[')).ok());
  EXPECT_FALSE(parse_chat_response("{\"choices\":\"\xc3\x28\"}").ok());
}

TEST(ParseChatResponse, NulCharactersAreDroppedFromWhatTheModelWrote) {
  auto reply = parse_chat_response(
      R"({"choices":[{"message":{"content":"a\u0000b","tool_calls":[)"
      R"({"id":"c","function":{"name":"finish","arguments":"{\"type\":\"error\",\"message\":\"x\\u0000y\"}"}}]}}]})");
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply.value().content, "ab");
  ASSERT_TRUE(reply.value().finish);
  EXPECT_EQ(reply.value().finish->result.message, "xy");
}

TEST(SanitizeText, ReplacesInvalidSequencesAndDropsNul) {
  EXPECT_EQ(sanitize_text("ok 会议"), "ok 会议");
  EXPECT_EQ(sanitize_text(std::string("a\0b", 3)), "ab");
  EXPECT_EQ(sanitize_text("\xff"), "\xEF\xBF\xBD");
  // A multi-byte character cut in half, an overlong '/', a UTF-16 surrogate.
  EXPECT_EQ(sanitize_text("\xe4\xbc"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(sanitize_text("\xc0\xaf"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(sanitize_text("\xed\xa0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Utf8SequenceAt, GivesTheCodePointAndLengthOrZeroForAnInvalidStart) {
  const std::string text = "a完\xf0\x9f\x98\x80";
  EXPECT_EQ(utf8_sequence_at(text, 0).length, 1u);
  EXPECT_EQ(utf8_sequence_at(text, 0).code_point, U'a');
  EXPECT_EQ(utf8_sequence_at(text, 1).length, 3u);
  EXPECT_EQ(utf8_sequence_at(text, 1).code_point, U'完');
  EXPECT_EQ(utf8_sequence_at(text, 4).length, 4u);
  EXPECT_EQ(utf8_sequence_at(text, 4).code_point, U'\U0001F600');
  EXPECT_EQ(utf8_sequence_at(text, 2).length, 0u) << "inside a character";
  EXPECT_EQ(utf8_sequence_at("\xc0\xaf", 0).length, 0u) << "overlong";
  EXPECT_EQ(utf8_sequence_at("\xe4\xbc", 0).length, 0u) << "cut short";
  EXPECT_EQ(utf8_sequence_at("a", 1).length, 0u) << "past the end";
}

}  // namespace
}  // namespace agentfleet::codec
