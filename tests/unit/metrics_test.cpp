#include <gtest/gtest.h>

#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "core/adapters/metrics/db_pool_metrics.hpp"
#include "core/adapters/metrics/dispatcher_metrics.hpp"
#include "core/adapters/metrics/metrics_registry.hpp"
#include "core/adapters/metrics/scrape_refresh.hpp"
#include "core/adapters/metrics/trace_export_metrics.hpp"
#include "core/adapters/metrics/worker_metrics.hpp"
#include "core/domain/build_info.hpp"
#include "core/limits/clock.hpp"

namespace agentfleet::metrics {
namespace {

config::Config test_config() {
  config::Config c;
  config::ModelConfig model;
  model.name = "m1";
  config::ModelEndpoint endpoint;
  endpoint.url = "https://key:secret@api.example.com:8443/v1/chat/completions";
  model.endpoints.push_back(endpoint);
  endpoint.url = "http://127.0.0.1:8090/v1/chat/completions";
  model.endpoints.push_back(endpoint);
  c.models.push_back(model);
  config::ToolConfig tool;
  tool.name = "search_items";
  c.tools.push_back(tool);
  config::PriceConfig price;
  price.model = "m1";
  price.currency = "CNY";
  c.billing.prices.push_back(price);
  return c;
}

// The value of the one sample line that starts with `series` ("name{labels}"), or -1.
double sample(const std::string& text, const std::string& series) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(series + " ", 0) == 0)
      return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

// Every label name used by any sample line.
std::set<std::string> label_names(const std::string& text) {
  std::set<std::string> names;
  static const std::regex kLabel(R"(([a-zA-Z_][a-zA-Z0-9_]*)=")");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#')
      continue;
    const auto open = line.find('{');
    if (open == std::string::npos)
      continue;
    const std::string labels = line.substr(open, line.rfind('}') - open);
    for (std::sregex_iterator it(labels.begin(), labels.end(), kLabel), end; it != end; ++it)
      names.insert((*it)[1]);
  }
  return names;
}

class WorkerMetricsTest : public ::testing::Test {
 protected:
  config::Config config_ = test_config();
  MetricsRegistry registry_{RegistryOptions{.process_metrics = false}};
  WorkerMetrics metrics_{registry_, config_};
};

TEST_F(WorkerMetricsTest, EveryFamilyIsDeclaredWithItsType) {
  metrics_.task_finished(TaskStatus::kSucceeded, ResultType::kActionCompleted, std::nullopt, 1.5);
  metrics_.queue_wait(Priority::kBatch, 3);
  metrics_.model_request("m1", "http://127.0.0.1:8090/v1/chat/completions", ModelOutcome::kOk, 0.2);
  metrics_.model_retry("m1", ModelOutcome::kRateLimited);
  metrics_.tool_call("search_items", ToolOutcome::kOk, 0.01);
  const std::string text = registry_.render();
  for (const char* line : {
           "# TYPE agentfleet_tasks_finished_total counter",
           "# TYPE agentfleet_task_duration_seconds histogram",
           "# TYPE agentfleet_task_queue_wait_seconds histogram",
           "# TYPE agentfleet_task_claims_total counter",
           "# TYPE agentfleet_tasks_in_flight gauge",
           "# TYPE agentfleet_consumer_paused gauge",
           "# TYPE agentfleet_leases_lost_total counter",
           "# TYPE agentfleet_dead_letters_total counter",
           "# TYPE agentfleet_model_requests_total counter",
           "# TYPE agentfleet_model_request_duration_seconds histogram",
           "# TYPE agentfleet_model_retries_total counter",
           "# TYPE agentfleet_model_tokens_total counter",
           "# TYPE agentfleet_model_cost_total counter",
           "# TYPE agentfleet_tool_calls_total counter",
           "# TYPE agentfleet_tool_call_duration_seconds histogram",
           "# TYPE agentfleet_consumer_lag_messages gauge",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line;
  }
  // Without process metrics, nothing but agentfleet_ families.
  EXPECT_EQ(text.find("process_"), std::string::npos);
}

TEST_F(WorkerMetricsTest, CountersIncrementPerLabelSet) {
  metrics_.task_finished(TaskStatus::kSucceeded, ResultType::kActionCompleted, std::nullopt, 1);
  metrics_.task_finished(TaskStatus::kSucceeded, ResultType::kActionCompleted, std::nullopt, 2);
  metrics_.task_finished(TaskStatus::kTimedOut, std::nullopt, ErrorCode::kDeadline, 31);
  metrics_.claim(ClaimOutcome::kSkipped);
  metrics_.dead_letter(DeadLetterReason::kNotJson);
  metrics_.lease_lost();
  const std::string text = registry_.render();
  EXPECT_EQ(
      sample(
          text,
          R"(agentfleet_tasks_finished_total{error_code="none",result_type="action_completed",status="succeeded"})"),
      2);
  EXPECT_EQ(
      sample(
          text,
          R"(agentfleet_tasks_finished_total{error_code="deadline",result_type="none",status="timed_out"})"),
      1);
  EXPECT_EQ(sample(text, R"(agentfleet_task_claims_total{outcome="skipped"})"), 1);
  // Declared from the start at zero, so a rate() sees the first increment.
  EXPECT_EQ(sample(text, R"(agentfleet_task_claims_total{outcome="claimed"})"), 0);
  EXPECT_EQ(sample(text, R"(agentfleet_task_claims_total{outcome="store_unavailable"})"), 0);
  EXPECT_EQ(sample(text, R"(agentfleet_dead_letters_total{reason="not_json"})"), 1);
  EXPECT_EQ(sample(text, R"(agentfleet_dead_letters_total{reason="unknown_task"})"), 0);
  EXPECT_EQ(sample(text, "agentfleet_leases_lost_total"), 1);
}

TEST_F(WorkerMetricsTest, HistogramsHaveBucketsForTheirRange) {
  metrics_.task_finished(TaskStatus::kSucceeded, ResultType::kActionCompleted, std::nullopt, 0.7);
  metrics_.task_finished(TaskStatus::kSucceeded, ResultType::kActionCompleted, std::nullopt, 250);
  metrics_.queue_wait(Priority::kBatch, 5400);
  metrics_.model_request("m1", "http://127.0.0.1:8090/v1/chat/completions", ModelOutcome::kOk,
                         0.012);
  const std::string text = registry_.render();
  const std::string task = R"(agentfleet_task_duration_seconds_bucket{status="succeeded",le=")";
  EXPECT_EQ(sample(text, task + R"(0.5"})"), 0);
  EXPECT_EQ(sample(text, task + R"(1"})"), 1);
  EXPECT_EQ(sample(text, task + R"(180"})"), 1);
  EXPECT_EQ(sample(text, task + R"(300"})"), 2);
  EXPECT_EQ(sample(text, task + R"(+Inf"})"), 2);
  EXPECT_EQ(sample(text, R"(agentfleet_task_duration_seconds_count{status="succeeded"})"), 2);
  EXPECT_DOUBLE_EQ(sample(text, R"(agentfleet_task_duration_seconds_sum{status="succeeded"})"),
                   250.7);
  const std::string wait = R"(agentfleet_task_queue_wait_seconds_bucket{priority="batch",le=")";
  EXPECT_EQ(sample(text, wait + R"(3600"})"), 0);
  EXPECT_EQ(sample(text, wait + R"(7200"})"), 1);
  const std::string model = R"(agentfleet_model_request_duration_seconds_bucket{model="m1",le=")";
  EXPECT_EQ(sample(text, model + R"(0.01"})"), 0);
  EXPECT_EQ(sample(text, model + R"(0.025"})"), 1);
  EXPECT_EQ(sample(text, model + R"(120"})"), 1);
}

TEST_F(WorkerMetricsTest, TokensAreSplitIntoDisjointKindsAndCostIsInUnits) {
  TokenUsage usage;
  usage.input = 1000;
  usage.cached_input = 400;
  usage.output = 300;
  usage.reasoning = 100;
  metrics_.tokens("m1", usage);
  metrics_.cost("m1", "CNY", 2'500'000);
  const std::string text = registry_.render();
  EXPECT_EQ(sample(text, R"(agentfleet_model_tokens_total{kind="input",model="m1"})"), 600);
  EXPECT_EQ(sample(text, R"(agentfleet_model_tokens_total{kind="cached_input",model="m1"})"), 400);
  EXPECT_EQ(sample(text, R"(agentfleet_model_tokens_total{kind="output",model="m1"})"), 200);
  EXPECT_EQ(sample(text, R"(agentfleet_model_tokens_total{kind="reasoning",model="m1"})"), 100);
  EXPECT_DOUBLE_EQ(sample(text, R"(agentfleet_model_cost_total{currency="CNY",model="m1"})"), 2.5);
}

TEST_F(WorkerMetricsTest, NamesOutsideTheConfigurationBecomeOther) {
  // A model may invent tool names; they must not create series.
  metrics_.tool_call("drop_tables_now", ToolOutcome::kRefused, 0);
  metrics_.tool_call("search_items", ToolOutcome::kTimeout, 60);
  metrics_.model_request("m1", "https://key:secret@api.example.com:8443/v1/chat/completions",
                         ModelOutcome::kServerError, 1);
  metrics_.model_request("m1", "api.example.com:8443", ModelOutcome::kServerError, 1);
  metrics_.model_request("nope", "http://elsewhere/", ModelOutcome::kOk, 1);
  metrics_.set_consumer_lag("agent.tasks.dispatch", 42);
  const std::string text = registry_.render();
  EXPECT_EQ(sample(text, R"(agentfleet_tool_calls_total{outcome="refused",tool="other"})"), 1);
  EXPECT_EQ(text.find("drop_tables_now"), std::string::npos);
  EXPECT_EQ(sample(text, R"(agentfleet_tool_calls_total{outcome="timeout",tool="search_items"})"),
            1);
  // A refused call never ran: no latency observed for it.
  EXPECT_EQ(sample(text, R"(agentfleet_tool_call_duration_seconds_count{tool="other"})"), -1);
  EXPECT_EQ(
      sample(
          text,
          R"(agentfleet_model_requests_total{endpoint="api.example.com:8443",model="m1",outcome="server_error"})"),
      2);
  EXPECT_EQ(text.find("secret"), std::string::npos);
  EXPECT_EQ(
      sample(text,
             R"(agentfleet_model_requests_total{endpoint="other",model="other",outcome="ok"})"),
      1);
  EXPECT_EQ(sample(text, R"(agentfleet_consumer_lag_messages{topic="agent.tasks.dispatch"})"), 42);
}

TEST_F(WorkerMetricsTest, GaugesFollowTheLastValue) {
  metrics_.set_in_flight(7);
  metrics_.set_in_flight(3);
  metrics_.set_paused(true);
  DbPoolMetrics pool(registry_);
  pool.set_pool(2, 4);
  pool.queue_wait(0.003);
  const std::string text = registry_.render();
  EXPECT_EQ(sample(text, "agentfleet_tasks_in_flight"), 3);
  EXPECT_EQ(sample(text, "agentfleet_consumer_paused"), 1);
  EXPECT_EQ(sample(text, "agentfleet_db_pool_connections_in_use"), 2);
  EXPECT_EQ(sample(text, "agentfleet_db_pool_connections"), 4);
  EXPECT_EQ(sample(text, R"(agentfleet_db_queue_wait_seconds_bucket{le="0.005"})"), 1);
}

// Every label either process may export; a user, task or batch id is none of them. The
// metric sets take no such argument, so this holds after calling every method.
const std::set<std::string> kAllowedLabels = {
    "status",   "result_type", "priority", "outcome", "model", "endpoint", "reason", "kind",
    "currency", "tool",        "topic",    "source",  "route", "code",     "le",     "error_code"};

TEST(MetricsLabels, NoPerUserLabelExists) {
  const config::Config config = test_config();
  MetricsRegistry registry(RegistryOptions{.process_metrics = false});
  WorkerMetrics worker(registry, config);
  DispatcherMetrics dispatcher(registry, config);
  worker.task_finished(TaskStatus::kFailed, ResultType::kError, ErrorCode::kMaxSteps, 1);
  worker.queue_wait(Priority::kInteractive, 1);
  worker.claim(ClaimOutcome::kClaimed);
  worker.set_in_flight(1);
  worker.set_paused(false);
  worker.lease_lost();
  worker.dead_letter(DeadLetterReason::kSchema);
  worker.model_request("m1", "x", ModelOutcome::kTimeout, 1);
  worker.model_retry("m1", ModelOutcome::kTimeout);
  worker.tokens("m1", TokenUsage{10, 0, 5, 0});
  worker.cost("m1", "USD", 1);
  worker.tool_call("search_items", ToolOutcome::kInvalidArguments, 0);
  worker.set_consumer_lag("t", 1);
  DbPoolMetrics pool(registry);
  pool.set_pool(1, 1);
  pool.queue_wait(0.1);
  dispatcher.task_submitted(SubmitSource::kTopic, SubmitOutcome::kRejected);
  dispatcher.http_request("/v1/tasks/{id}", 404, 0.01);
  dispatcher.admitted(Priority::kBatch, 1);
  dispatcher.throttled(ThrottleReason::kBudget, 1);
  dispatcher.scheduler_pass(0.01);
  dispatcher.recovered(RecoveryReason::kRedispatch, 1);
  dispatcher.recovery_exhausted(1);
  dispatcher.set_leader(true);
  dispatcher.set_outbox_backlog(3);
  dispatcher.outbox_published("agent.tasks.results", 2);
  dispatcher.set_tasks(TaskStatus::kQueued, 5);
  TraceExportMetrics traces(registry);
  traces.set(otlp::SpanExporterStats{1, 1, 1, 1, 1, 1, 1}, 1);
  const std::string text = registry.render();
  for (const auto& name : label_names(text)) {
    EXPECT_TRUE(kAllowedLabels.count(name)) << "unexpected label " << name;
    EXPECT_EQ(name.find("user"), std::string::npos);
  }
}

// The exporter's running totals become counters that only grow by what is new.
TEST(TraceExportMetricsTest, CountsWhatTheExporterDidSinceTheLastScrape) {
  MetricsRegistry registry(RegistryOptions{.process_metrics = false});
  TraceExportMetrics traces(registry);
  otlp::SpanExporterStats totals;
  totals.tasks_offered = 10;
  totals.tasks_dropped = 2;
  totals.tasks_unreadable = 1;
  totals.spans_exported = 40;
  totals.spans_dropped = 4;
  totals.requests_ok = 3;
  totals.requests_failed = 2;
  traces.set(totals, 5);
  traces.set(totals, 5);  // a second scrape with nothing new adds nothing
  totals.spans_exported = 44;
  totals.requests_ok = 4;
  traces.set(totals, 0);
  const std::string text = registry.render();
  EXPECT_EQ(sample(text, "agentfleet_otlp_spans_exported_total"), 44);
  EXPECT_EQ(sample(text, "agentfleet_otlp_spans_dropped_total"), 4);
  EXPECT_EQ(sample(text, R"(agentfleet_otlp_tasks_dropped_total{reason="queue_full"})"), 2);
  EXPECT_EQ(sample(text, R"(agentfleet_otlp_tasks_dropped_total{reason="unreadable"})"), 1);
  EXPECT_EQ(sample(text, R"(agentfleet_otlp_requests_total{outcome="ok"})"), 4);
  EXPECT_EQ(sample(text, R"(agentfleet_otlp_requests_total{outcome="failed"})"), 2);
  EXPECT_EQ(sample(text, "agentfleet_otlp_queue_tasks"), 0);
}

TEST(DispatcherMetricsTest, CountsSubmissionsRequestsAndScheduling) {
  const config::Config config = test_config();
  MetricsRegistry registry(RegistryOptions{.process_metrics = false});
  DispatcherMetrics metrics(registry, config);
  metrics.task_submitted(SubmitSource::kHttp, SubmitOutcome::kAccepted);
  metrics.task_submitted(SubmitSource::kHttp, SubmitOutcome::kAccepted);
  metrics.http_request("/v1/tasks", 201, 0.004);
  metrics.admitted(Priority::kInteractive, 3);
  metrics.recovered(RecoveryReason::kLeaseExpired, 2);
  metrics.set_leader(true);
  metrics.set_outbox_backlog(12);
  metrics.outbox_published("agent.tasks.dispatch", 3);
  metrics.outbox_published("not-a-topic", 1);
  metrics.set_tasks(TaskStatus::kRunning, 4);
  metrics.scheduler_pass(0.002);
  const std::string text = metrics.registry().render();
  EXPECT_EQ(sample(text, R"(agentfleet_tasks_submitted_total{outcome="accepted",source="http"})"),
            2);
  EXPECT_EQ(sample(text, R"(agentfleet_tasks_submitted_total{outcome="duplicate",source="http"})"),
            0);
  // Dead-lettered submit-topic messages are counted here; the series exists before the first.
  EXPECT_EQ(sample(text, R"(agentfleet_tasks_submitted_total{outcome="rejected",source="topic"})"),
            0);
  EXPECT_EQ(sample(text, R"(agentfleet_http_requests_total{code="201",route="/v1/tasks"})"), 1);
  EXPECT_EQ(
      sample(text,
             R"(agentfleet_http_request_duration_seconds_bucket{route="/v1/tasks",le="0.005"})"),
      1);
  EXPECT_EQ(sample(text, R"(agentfleet_scheduler_admissions_total{priority="interactive"})"), 3);
  EXPECT_EQ(sample(text, R"(agentfleet_scheduler_admissions_total{priority="batch"})"), 0);
  EXPECT_EQ(sample(text, R"(agentfleet_scheduler_throttled_total{reason="queue_full"})"), 0);
  EXPECT_EQ(sample(text, R"(agentfleet_tasks_recovered_total{reason="lease_expired"})"), 2);
  EXPECT_EQ(sample(text, "agentfleet_scheduler_is_leader"), 1);
  EXPECT_EQ(sample(text, "agentfleet_outbox_backlog_messages"), 12);
  EXPECT_EQ(sample(text, R"(agentfleet_outbox_published_total{topic="agent.tasks.dispatch"})"), 3);
  EXPECT_EQ(sample(text, R"(agentfleet_outbox_published_total{topic="other"})"), 1);
  EXPECT_EQ(sample(text, R"(agentfleet_tasks_by_status{status="running"})"), 4);
  EXPECT_EQ(sample(text, R"(agentfleet_tasks_by_status{status="queued"})"), 0);
  EXPECT_EQ(sample(text, R"(agentfleet_scheduler_pass_duration_seconds_bucket{le="0.0025"})"), 1);
}

TEST(MetricsRegistryTest, RendersValidExpositionLinesWithProcessMetrics) {
  MetricsRegistry registry;
  const std::string text = registry.render();
  EXPECT_GT(sample(text, "process_resident_memory_bytes"), 0);
  EXPECT_GT(sample(text, "process_open_fds"), 0);
  EXPECT_GT(sample(text, "process_start_time_seconds"), 1e9);
  EXPECT_GE(sample(text, "process_cpu_seconds_total"), 0);
  // Which build this is, for dashboards that compare versions during a rollout.
  const BuildInfo& build = build_info();
  EXPECT_FALSE(build.version.empty());
  EXPECT_EQ(sample(text, "agentfleet_build_info{build_type=\"" + std::string(build.build_type) +
                             "\",compiler=\"" + std::string(build.compiler) + "\",version=\"" +
                             std::string(build.version) + "\"}"),
            1);
  static const std::regex kSample(
      R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"]*",?)*\})? \S+$)");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#')
      continue;
    EXPECT_TRUE(std::regex_match(line, kSample)) << line;
  }
}

TEST(ProcStat, ParsesFieldsAfterACommandNameWithParentheses) {
  // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
  // stime cutime cstime priority nice threads itrealvalue starttime vsize rss ...
  const std::string text =
      "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 "
      "123456 104857600 2560 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0\n";
  const auto stat = parse_proc_stat(text);
  ASSERT_TRUE(stat);
  EXPECT_EQ(stat->utime_ticks, 250u);
  EXPECT_EQ(stat->stime_ticks, 50u);
  EXPECT_EQ(stat->start_ticks, 123456u);
  EXPECT_EQ(stat->virtual_bytes, 104857600u);
  EXPECT_EQ(stat->resident_pages, 2560);
  EXPECT_FALSE(parse_proc_stat("4242 (short) S 1 2 3"));
  EXPECT_FALSE(parse_proc_stat("no parenthesis"));
}

TEST(ProcStat, ReadsBootTime) {
  EXPECT_EQ(parse_boot_time("cpu  1 2 3\nintr 5\nbtime 1767225600\nprocesses 9\n"), 1767225600);
  EXPECT_FALSE(parse_boot_time("cpu 1 2 3\n"));
}

TEST(EndpointLabel, IsHostAndPortWithoutCredentials) {
  EXPECT_EQ(endpoint_label("https://api.example.com/v1/chat/completions"), "api.example.com");
  EXPECT_EQ(endpoint_label("http://u:p@127.0.0.1:8090/v1/chat/completions?x=1"), "127.0.0.1:8090");
  EXPECT_EQ(endpoint_label("api.example.com:8443"), "api.example.com:8443");
}

TEST(ScrapeRefresh, AScrapeReadsOncePerIntervalAndNothingIsReadUnscraped) {
  limits::ManualClock clock;
  ScrapeRefresh refresh(clock, std::chrono::seconds(15));
  {
    auto claim = refresh.claim();
    ASSERT_TRUE(claim) << "the first scrape reads";
    EXPECT_FALSE(refresh.claim()) << "one reading at a time: the others serve the last";
    claim.succeeded();
  }
  clock.advance(std::chrono::seconds(14));
  EXPECT_FALSE(refresh.claim()) << "within the interval the last reading is served";
  // However long nobody scrapes, the next scrape reads once.
  clock.advance(std::chrono::hours(1));
  auto claim = refresh.claim();
  ASSERT_TRUE(claim);
  claim.succeeded();
  EXPECT_FALSE(refresh.claim());
}

TEST(ScrapeRefresh, AClaimMayOutliveItsRefresh) {
  // A reading left suspended when its process stops is destroyed after the object that
  // handed it out (AddressSanitizer would catch a claim that gave itself back to freed memory).
  limits::ManualClock clock;
  auto refresh = std::make_unique<ScrapeRefresh>(clock, std::chrono::seconds(15));
  auto claim = refresh->claim();
  ASSERT_TRUE(claim);
  refresh.reset();
  claim.succeeded();
  auto abandoned = std::make_unique<ScrapeRefresh>(clock, std::chrono::seconds(15))->claim();
  EXPECT_TRUE(abandoned);
}

TEST(ScrapeRefresh, AReadingThatFailedOrWasAbandonedIsTakenAgainByTheNextScrape) {
  limits::ManualClock clock;
  ScrapeRefresh refresh(clock, std::chrono::seconds(15));
  {
    auto claim = refresh.claim();
    ASSERT_TRUE(claim);
    // Not succeeded: Postgres did not answer, or the reading threw.
  }
  auto again = refresh.claim();
  ASSERT_TRUE(again) << "no time has passed, yet nothing was read";
  again.succeeded();
  clock.advance(std::chrono::seconds(15));
  EXPECT_TRUE(refresh.claim());
}

}  // namespace
}  // namespace agentfleet::metrics
