// The pure parts of the HTTP tool client: what a tool's answer shows the model, and how a
// GET call's arguments become its query.
#include <gtest/gtest.h>

#include "core/adapters/http/tool_client.hpp"

namespace agentfleet::http {
namespace {

TEST(ToolBody, DataEnvelopeIsUnwrapped) {
  EXPECT_EQ(read_tool_body(R"({"data":{"items":[1,2]}})").content, R"({"items":[1,2]})");
  EXPECT_EQ(read_tool_body(R"({"data":[1],"meta":{"page":1}})").content, "[1]");
  EXPECT_EQ(read_tool_body(R"({"data":"done","error":null})").content, R"("done")");
  EXPECT_TRUE(read_tool_body(R"({"data":{}})").ok);
}

TEST(ToolBody, BarePayloadIsKeptAsItIs) {
  EXPECT_EQ(read_tool_body(R"({"items":[],"total":0})").content, R"({"items":[],"total":0})");
  // "data" beside other fields is part of the payload, not an envelope.
  EXPECT_EQ(read_tool_body(R"({"data":1,"total":2})").content, R"({"data":1,"total":2})");
  EXPECT_EQ(read_tool_body("[1,2]").content, "[1,2]");
  EXPECT_EQ(read_tool_body("").content, "{}");
  EXPECT_EQ(read_tool_body("plain text").content, "plain text");
}

TEST(ToolBody, ErrorObjectIsAFailure) {
  ToolBody body = read_tool_body(R"({"error":{"code":"conflict","message":"busy at 8 pm"}})");
  EXPECT_FALSE(body.ok);
  EXPECT_NE(body.content.find("busy at 8 pm"), std::string::npos);
}

TEST(ToolBody, InvalidUtf8IsMadeStorable) {
  ToolBody body = read_tool_body(std::string("caf\xC3", 4));
  EXPECT_TRUE(body.ok);
  EXPECT_NE(body.content.find("\xEF\xBF\xBD"), std::string::npos);  // U+FFFD
}

TEST(ToolQuery, ArgumentsBecomeAPercentEncodedQuery) {
  EXPECT_EQ(query_of_arguments("{}"), "");
  EXPECT_EQ(query_of_arguments(R"({"keyword":"会议 8pm","limit":5,"done":true})"),
            "?keyword=%E4%BC%9A%E8%AE%AE%208pm&limit=5&done=true");
  EXPECT_EQ(query_of_arguments(R"({"ids":[1,2]})"), "?ids=%5B1%2C2%5D");
  EXPECT_EQ(query_of_arguments(R"({"a&b":"x=y"})"), "?a%26b=x%3Dy");
  EXPECT_EQ(query_of_arguments("not json"), "");
}

}  // namespace
}  // namespace agentfleet::http
