// The log line's shape (docs/logs.md): one JSON object with ts, level, component, the
// task's fields when the line is about a task, the caller's fields, msg; secrets redacted.
#include "core/adapters/log.hpp"

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>

#include "core/config/config.hpp"
#include "dispatcher/api.hpp"

namespace agentfleet::log {
namespace {

rapidjson::Document parsed(const std::string& line) {
  EXPECT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line";
  rapidjson::Document doc;
  doc.Parse(line.c_str());
  EXPECT_FALSE(doc.HasParseError()) << line;
  EXPECT_TRUE(doc.IsObject()) << line;
  return doc;
}

TEST(LogLine, PlainLineHasTsLevelComponentFieldsAndMsgInOrder) {
  const std::string line = format_line("2026-11-23T02:33:41.458Z", "warn", "kafka", nullptr,
                                       "offset commit failed", {{"partitions", "t/1"}});
  EXPECT_EQ(line, R"({"ts":"2026-11-23T02:33:41.458Z","level":"warn","component":"kafka",)"
                  R"("partitions":"t/1","msg":"offset commit failed"})"
                  "\n");
  parsed(line);
}

TEST(LogLine, TaskLineCarriesTheTaskContextWithNumbersAsNumbers) {
  TaskContext task;
  task.task_id = "0d7afaf0-0dbf-48e5-a75a-73c7d95bd687";
  task.user_id = "u1";
  task.batch_id = "b1";
  task.attempt = 2;
  task.step = 0;
  task.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  const auto doc = parsed(
      format_line("t", "info", "worker", &task, "tool call failed", {{"tool", "create_item"}}));
  EXPECT_STREQ(doc["task_id"].GetString(), "0d7afaf0-0dbf-48e5-a75a-73c7d95bd687");
  EXPECT_STREQ(doc["user_id"].GetString(), "u1");
  EXPECT_STREQ(doc["batch_id"].GetString(), "b1");
  ASSERT_TRUE(doc["attempt"].IsInt());
  EXPECT_EQ(doc["attempt"].GetInt(), 2);
  ASSERT_TRUE(doc["step"].IsInt());
  EXPECT_EQ(doc["step"].GetInt(), 0);
  EXPECT_STREQ(doc["trace_id"].GetString(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_STREQ(doc["tool"].GetString(), "create_item");
  EXPECT_STREQ(doc["msg"].GetString(), "tool call failed");
}

TEST(LogLine, UnknownTaskFieldsAreLeftOut) {
  TaskContext task;
  task.task_id = "t1";
  const auto doc = parsed(format_line("t", "info", "worker", &task, "claim failed", {}));
  EXPECT_TRUE(doc.HasMember("task_id"));
  for (const char* absent : {"user_id", "batch_id", "attempt", "step", "trace_id"})
    EXPECT_FALSE(doc.HasMember(absent)) << absent;
}

TEST(LogLine, EscapesControlCharactersAndQuotes) {
  const auto doc = parsed(format_line("t", "error", "worker", nullptr, "a\"b\nc\\d", {}));
  EXPECT_STREQ(doc["msg"].GetString(), "a\"b\nc\\d");
}

TEST(LogLine, RedactsCredentialsAndRegisteredSecretsInMessagesAndFields) {
  add_secret("planted-log-test-secret");
  add_secret("abc");  // too short to register
  const std::string line = format_line(
      "t", "warn", "api", nullptr,
      "store unavailable: postgresql://agent:pw123@db/agentfleet planted-log-test-secret",
      {{"detail", "password=hunter22"}, {"other", "xplanted-log-test-secretx abc"}});
  EXPECT_EQ(line.find("pw123"), std::string::npos) << line;
  EXPECT_EQ(line.find("hunter22"), std::string::npos) << line;
  EXPECT_EQ(line.find("planted-log-test-secret"), std::string::npos) << line;
  const auto doc = parsed(line);
  EXPECT_STREQ(doc["msg"].GetString(),
               "store unavailable: postgresql://agent:[redacted]@db/agentfleet [redacted]");
  EXPECT_STREQ(doc["other"].GetString(), "x[redacted]x abc");
}

TEST(LogLine, ConfigurationSecretsAreRegistered) {
  const auto config = config::load_config_text(R"(
postgres: {url: "postgresql://agent:pg-planted-pw@db:5432/agentfleet"}
kafka:
  bootstrap_servers: b
  properties: {sasl.username: fleet, sasl.password: kafka-planted-pw}
models:
  - name: m1
    endpoints: [{url: "http://h/x", api_key: "model-planted-key"}]
tools:
  - name: t1
    description: a tool
    url: "http://tools/t1"
    headers: {Authorization: "Bearer tool-planted-token"}
    parameters: {type: object}
billing:
  prices:
    - {model: m1, effective_from: "2026-01-01", input_per_million: "1"}
telemetry:
  otlp:
    endpoint: "https://otel:otlp-planted-pw@collector:4318"
    headers: {x-honeycomb-team: otlp-planted-key, Authorization: "Basic otlp-planted-basic"}
)",
                                               "test.yaml");
  protect_config_secrets(config);
  const std::string line =
      format_line("t", "error", "kafka", nullptr,
                  "pg-planted-pw kafka-planted-pw model-planted-key tool-planted-token fleet "
                  "otlp-planted-pw otlp-planted-key otlp-planted-basic",
                  {});
  EXPECT_STREQ(
      parsed(line)["msg"].GetString(),
      "[redacted] [redacted] [redacted] [redacted] fleet [redacted] [redacted] [redacted]");
}

TEST(TraceId, IsTheTraceIdPartOfAValidTraceparent) {
  EXPECT_EQ(trace_id_of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
  // A later version may append fields.
  EXPECT_EQ(trace_id_of("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
  for (const char* bad :
       {"", "junk", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01",
        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01"}) {
    EXPECT_EQ(trace_id_of(bad), "") << bad;
  }
}

TEST(TraceId, TheDispatcherKeepsAValidTraceparentAndStartsATraceOtherwise) {
  const std::string given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  EXPECT_EQ(dispatcher::traceparent_for(given), given);
  // A later version continues the trace as version 00; its extra fields are dropped.
  EXPECT_EQ(dispatcher::traceparent_for(
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra-fields"),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  EXPECT_EQ(dispatcher::traceparent_for("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            given);
  for (const char* replaced :
       {"", "00-zz-yy-01", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}) {
    const std::string made = dispatcher::traceparent_for(replaced);
    EXPECT_NE(made, replaced);
    EXPECT_FALSE(trace_id_of(made).empty()) << made;
  }
}

}  // namespace
}  // namespace agentfleet::log
