// The pure parts of the HTTP tool client: what a tool's answer shows the model, how a
// GET call's arguments become its query, what a request carries and when it is sent again.
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

TEST(ToolRequest, CarriesTheTasksIdentityKeyAndAttemptAfterTheServiceHeaders) {
  config::ToolConfig tool;
  tool.name = "create_item";
  tool.headers = {{"Authorization", "Bearer s"}};
  ports::ToolInvocation call;
  call.task_id = "t1";
  call.user_id = "u1";
  call.idempotency_key = "t1:2:0";
  call.attempt = 3;
  call.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  const auto headers = tool_request_headers(tool, call);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"Authorization", "Bearer s"}, {"X-User-ID", "u1"},     {"X-Task-ID", "t1"},
      {"Idempotency-Key", "t1:2:0"}, {"X-Task-Attempt", "3"}, {"traceparent", call.traceparent}};
  EXPECT_EQ(headers, expected);
}

ClientResponse answer(int status, std::string body, std::string retry_after = {}) {
  ClientResponse response;
  response.status = status;
  response.body = std::move(body);
  if (!retry_after.empty())
    response.headers.set("Retry-After", retry_after);
  return response;
}

ClientResponse failed(ClientErrorKind kind) {
  ClientResponse response;
  response.error = kind;
  response.error_message = "x";
  return response;
}

TEST(ToolRetry, OnlyIdempotentToolsAreSentAgainAfterA5xxOrAConnectionFailure) {
  const auto now = std::chrono::system_clock::now();
  EXPECT_TRUE(tool_retry(true, 1, answer(503, "{}"), now).again);
  EXPECT_EQ(tool_retry(true, 2, answer(503, "{}"), now).wait, std::chrono::milliseconds(200));
  EXPECT_FALSE(tool_retry(true, kToolMaxSends, answer(503, "{}"), now).again) << "bounded";
  EXPECT_FALSE(tool_retry(false, 1, answer(503, "{}"), now).again)
      << "a non-idempotent call may have acted before it failed";
  EXPECT_TRUE(tool_retry(true, 1, failed(ClientErrorKind::kConnect), now).again);
  EXPECT_FALSE(tool_retry(false, 1, failed(ClientErrorKind::kConnect), now).again);
  // A timeout took the call's whole budget; a bad URL or TLS fails the same way again.
  EXPECT_FALSE(tool_retry(true, 1, failed(ClientErrorKind::kTimeout), now).again);
  EXPECT_FALSE(tool_retry(true, 1, failed(ClientErrorKind::kBadUrl), now).again);
  EXPECT_FALSE(tool_retry(true, 1, failed(ClientErrorKind::kTls), now).again);
  // A 4xx is the model's to read.
  EXPECT_FALSE(tool_retry(true, 1, answer(400, R"({"error":{"code":"bad"}})"), now).again);
  EXPECT_FALSE(tool_retry(true, 1, answer(409, R"({"error":{"code":"conflict"}})"), now).again);
}

TEST(ToolRetry, AKeyInUseIsAskedAgainForAnyToolAfterItsRetryAfter) {
  // The service runs the call with this key right now and will answer its stored outcome:
  // asking again runs nothing twice, even for a tool that is not idempotent.
  const auto now = std::chrono::system_clock::now();
  const auto in_use = [](std::string retry_after) {
    return answer(409, R"({"error":{"code":"idempotency_key_in_use","message":"busy"}})",
                  std::move(retry_after));
  };
  ToolRetry retry = tool_retry(false, 1, in_use("2"), now);
  EXPECT_TRUE(retry.again);
  EXPECT_EQ(retry.wait, std::chrono::seconds(2));
  EXPECT_EQ(tool_retry(false, 1, in_use(""), now).wait, std::chrono::milliseconds(500));
  EXPECT_EQ(tool_retry(false, 1, in_use("3600"), now).wait, std::chrono::seconds(5))
      << "a wait the service asks is capped";
  EXPECT_FALSE(tool_retry(false, kToolMaxInUseSends, in_use("1"), now).again) << "bounded";
  // A lower attempt than the service has seen is this worker's to give up: another attempt
  // owns the task.
  EXPECT_FALSE(
      tool_retry(true, 1, answer(409, R"({"error":{"code":"stale_attempt"}})"), now).again);
}

}  // namespace
}  // namespace agentfleet::http
