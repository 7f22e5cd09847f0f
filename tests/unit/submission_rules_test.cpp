// The rules the HTTP API, a batch upload and the submit topic share
// (dispatcher/submission_rules.hpp).
#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>
#include <variant>

#include "core/adapters/log.hpp"
#include "core/codec/otlp_trace.hpp"
#include "core/config/config.hpp"
#include "dispatcher/submission_rules.hpp"

namespace agentfleet::dispatcher {
namespace {

config::Config test_config() {
  return config::load_config_text(R"(
postgres: {url: x}
kafka: {bootstrap_servers: b}
models:
  - {name: m1, endpoints: [{url: "http://h/x"}]}
  - {name: m2, endpoints: [{url: "http://h/y"}]}
billing:
  prices:
    - {model: m1, effective_from: "2026-01-01", input_per_million: "1"}
    - {model: m2, effective_from: "2026-01-01", input_per_million: "1"}
task_defaults: {model: m2, tier: standard, priority: batch, time_zone: Europe/Berlin}
tiers:
  - {tier: standard, max_queued: 500}
  - {tier: free, max_queued: 20, allowed_models: [m1]}
tools:
  - name: t1
    description: A tool.
    url: http://127.0.0.1:8091/tools/t1
    parameters: {type: object, properties: {}}
)",
                                  "test.yaml");
}

codec::Submission parsed(const SubmissionRules& rules, const std::string& json) {
  auto read = rules.parse(json);
  if (auto* violation = std::get_if<codec::SchemaViolation>(&read))
    ADD_FAILURE() << json << ": " << violation->path << ": " << violation->message;
  return std::get<codec::Submission>(std::move(read));
}

bool is_v4_uuid(const std::string& id) {
  return id.size() == 36 && id[8] == '-' && id[13] == '-' && id[14] == '4' && id[18] == '-' &&
         std::string("89ab").find(id[19]) != std::string::npos && id[23] == '-';
}

TEST(SubmissionRules, ASubmissionThatNamesNothingGetsTheConfiguredDefaults) {
  const auto config = test_config();
  const SubmissionRules rules(config);
  const codec::Submission s = parsed(rules, R"({"user_id":"u1","text":"明天上午开会"})");
  EXPECT_EQ(s.spec.model, "m2");
  EXPECT_EQ(s.spec.priority, Priority::kBatch);
  EXPECT_EQ(s.spec.metadata.time_zone, "Europe/Berlin");
  EXPECT_EQ(rules.defaults().model, "m2");
  const codec::Submission named =
      parsed(rules, R"({"user_id":"u1","text":"x","model":"m1","priority":"interactive"})");
  EXPECT_EQ(named.spec.model, "m1");
  EXPECT_EQ(named.spec.priority, Priority::kInteractive);
}

TEST(SubmissionRules, AnUnknownModelOrToolIsRefusedWithItsPathAfterTheSchema) {
  const auto config = test_config();
  const SubmissionRules rules(config);
  // The schema passes: only the check beyond it knows what the configuration holds.
  const codec::Submission model = parsed(rules, R"({"user_id":"u1","text":"x","model":"m9"})");
  auto problem = rules.check(model.spec);
  ASSERT_TRUE(problem.has_value());
  EXPECT_EQ(problem->path, "/model");
  EXPECT_EQ(problem->message, "unknown model 'm9'");
  const codec::Submission tool =
      parsed(rules, R"({"user_id":"u1","text":"x","tools":["t1","nope"]})");
  problem = rules.check(tool.spec);
  ASSERT_TRUE(problem.has_value());
  EXPECT_EQ(problem->path, "/tools/1");
  EXPECT_EQ(problem->message, "unknown tool 'nope'");
  EXPECT_EQ(rules.check(parsed(rules, R"({"user_id":"u1","text":"x","tools":["t1"]})").spec),
            std::nullopt);
  // A schema violation is the parse's, with the field's path.
  auto bad = rules.parse(R"({"user_id":"u1"})");
  ASSERT_TRUE(std::holds_alternative<codec::SchemaViolation>(bad));
}

TEST(SubmissionRules, ANewTaskHasAnIdOfItsOwnAndContinuesTheCallersTraceOrStartsAtItsSpan) {
  const auto config = test_config();
  const SubmissionRules rules(config);
  const codec::Submission s = parsed(rules, R"({"user_id":"u1","text":"x"})");
  const std::string given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const ports::NewTask continued = rules.new_task(s, given);
  EXPECT_TRUE(is_v4_uuid(continued.spec.task_id)) << continued.spec.task_id;
  EXPECT_EQ(continued.traceparent, given);
  EXPECT_EQ(continued.spec.user_id, "u1");
  EXPECT_EQ(continued.canonical, s.canonical);

  const ports::NewTask started = rules.new_task(s, "not a traceparent");
  EXPECT_NE(started.spec.task_id, continued.spec.task_id);
  EXPECT_FALSE(log::trace_id_of(started.traceparent).empty()) << started.traceparent;
  // The new trace's parent is the span the exporter makes the root of the task's trace.
  EXPECT_EQ(started.traceparent.substr(36, 16), codec::task_span_id(started.spec.task_id));
  EXPECT_EQ(started.traceparent.substr(53, 2), "01");
}

TEST(SubmissionRules, ABatchsTasksShareTheUploadsTraceEachWithAnIdOfItsOwn) {
  const auto config = test_config();
  const SubmissionRules rules(config);
  const std::string trace = SubmissionRules::batch_traceparent("", "b-1");
  EXPECT_EQ(trace.substr(36, 16), codec::batch_span_id("b-1"));
  std::set<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    const ports::NewTask task =
        rules.batch_task(parsed(rules, R"({"user_id":"u1","text":"x"})"), trace);
    EXPECT_EQ(task.traceparent, trace);
    EXPECT_TRUE(is_v4_uuid(task.spec.task_id));
    ids.insert(task.spec.task_id);
  }
  EXPECT_EQ(ids.size(), 3u);
  const std::string given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
  EXPECT_EQ(SubmissionRules::batch_traceparent(given, "b-1"), given);
}

TEST(SubmissionRules, ATopicSubmissionWithoutAKeyIsKeyedByWhereItWasFirstRead) {
  TaskSpec unkeyed;
  SubmissionRules::key_by_origin(unkeyed, "agent.tasks.submit:2:41");
  EXPECT_EQ(unkeyed.idempotency_key, "kafka:agent.tasks.submit:2:41");
  TaskSpec keyed;
  keyed.idempotency_key = "order-7";
  SubmissionRules::key_by_origin(keyed, "agent.tasks.submit:2:41");
  EXPECT_EQ(keyed.idempotency_key, "order-7");
}

TEST(SubmissionRules, AnInsertIsHeldToTheUsersTierQueueAndModels) {
  const auto config = test_config();
  const SubmissionRules rules(config);
  const ports::QueueLimit limit = rules.queue_limit();
  EXPECT_EQ(limit("", std::nullopt), 500);  // no override: task_defaults.tier
  EXPECT_EQ(limit("free", std::nullopt), 20);
  EXPECT_EQ(limit("free", 7), 7);
  const ports::ModelCheck models = rules.model_check();
  EXPECT_EQ(models("free", "m1"), "");
  EXPECT_NE(models("free", "m2"), "");
  EXPECT_EQ(models("standard", "m2"), "");
}

}  // namespace
}  // namespace agentfleet::dispatcher
