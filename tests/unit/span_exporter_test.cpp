// The trace exporter's queue, batching and retries, with a scripted source and sink: it never
// blocks an offer, bounds what it keeps, repeats only what is worth repeating, and counts
// everything it drops.

#include "core/adapters/otlp/span_exporter.hpp"

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <chrono>
#include <deque>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/adapters/otlp/otlp_http_sink.hpp"

namespace agentfleet::otlp {
namespace {

using std::chrono::milliseconds;

const std::string kTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

// Tasks of one model step each: three spans (task, attempt, chat) plus the queue span.
std::string task_doc(const std::string& id) {
  return R"({"task_id": ")" + id + R"(", "status": "succeeded", "model": "m", "attempt": 1,
    "created_at": "2026-11-28T21:00:00Z", "dispatched_at": "2026-11-28T21:00:00.1Z",
    "started_at": "2026-11-28T21:00:00.2Z", "finished_at": "2026-11-28T21:00:01Z",
    "trace": [{"step": 0, "attempt": 1, "at": "2026-11-28T21:00:00.9Z", "model_latency_ms": 500,
               "usage": {"input_tokens": 10, "output_tokens": 2}, "tool_calls": []}]})";
}
constexpr std::size_t kSpansPerTask = 4;

class FakeSource : public TraceSource {
 public:
  Result<std::optional<TaskTrace>> read(const std::string& task_id) override {
    reads.push_back(task_id);
    if (task_id == "store-down")
      return Error{ErrorKind::kTransient, "connection refused"};
    if (task_id == "gone")
      return std::optional<TaskTrace>();
    if (task_id == "throws")
      throw std::runtime_error("a planted failure");
    if (task_id == "garbled")
      return std::optional<TaskTrace>(TaskTrace{"{not json", {}});
    return std::optional<TaskTrace>(TaskTrace{task_doc(task_id), {{0, {"m", "0.5", "CNY"}}}});
  }
  std::vector<std::string> reads;
};

class FakeSink : public SpanSink {
 public:
  SendOutcome send(const std::string& body, std::chrono::steady_clock::time_point) override {
    bodies.push_back(body);
    if (outcomes.empty())
      return SendOutcome{true, false, std::nullopt, ""};
    SendOutcome next = outcomes.front();
    outcomes.pop_front();
    return next;
  }
  std::size_t spans_in(std::size_t request) const {
    rapidjson::Document doc;
    doc.Parse(bodies.at(request).c_str());
    return doc["resourceSpans"][0]["scopeSpans"][0]["spans"].Size();
  }
  std::deque<SendOutcome> outcomes;
  std::vector<std::string> bodies;
};

SendOutcome unavailable(std::optional<milliseconds> retry_after = std::nullopt) {
  return SendOutcome{false, true, retry_after, "HTTP 503"};
}

struct Fixture {
  explicit Fixture(SpanExporterOptions options = {})
      : exporter(source, sink, with_defaults(std::move(options)), [this](milliseconds d) {
          pauses.push_back(d);
          return keep_going;
        }) {}
  static SpanExporterOptions with_defaults(SpanExporterOptions o) {
    o.resource = {{"service.name", std::string("agentfleet")}};
    return o;
  }
  FakeSource source;
  FakeSink sink;
  std::vector<milliseconds> pauses;
  bool keep_going = true;
  SpanExporter exporter;
};

TEST(SpanExporter, ExportsTheQueuedTasksInRequestsOfBoundedSize) {
  SpanExporterOptions options;
  options.batch_spans = 10;  // two tasks (8 spans) fit, three do not
  Fixture f(options);
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(f.exporter.offer("t" + std::to_string(i), kTraceparent));
  EXPECT_EQ(f.exporter.queued(), 5u);
  f.exporter.export_queued();
  EXPECT_EQ(f.exporter.queued(), 0u);
  EXPECT_EQ(f.source.reads, (std::vector<std::string>{"t0", "t1", "t2", "t3", "t4"}));
  ASSERT_EQ(f.sink.bodies.size(), 3u);
  EXPECT_EQ(f.sink.spans_in(0), 2 * kSpansPerTask);
  EXPECT_EQ(f.sink.spans_in(1), 2 * kSpansPerTask);
  EXPECT_EQ(f.sink.spans_in(2), kSpansPerTask);
  const SpanExporterStats s = f.exporter.stats();
  EXPECT_EQ(s.tasks_offered, 5u);
  EXPECT_EQ(s.spans_exported, 5 * kSpansPerTask);
  EXPECT_EQ(s.requests_ok, 3u);
  EXPECT_EQ(s.spans_dropped + s.tasks_dropped + s.requests_failed, 0u);
}

TEST(SpanExporter, ATaskLargerThanABatchGoesWholeInARequestOfItsOwn) {
  SpanExporterOptions options;
  options.batch_spans = 2;
  Fixture f(options);
  f.exporter.offer("a", kTraceparent);
  f.exporter.offer("b", kTraceparent);
  f.exporter.export_queued();
  ASSERT_EQ(f.sink.bodies.size(), 2u);
  EXPECT_EQ(f.sink.spans_in(0), kSpansPerTask);
  EXPECT_EQ(f.sink.spans_in(1), kSpansPerTask);
}

TEST(SpanExporter, AFullQueueDropsAndCountsWithoutBlocking) {
  SpanExporterOptions options;
  options.queue_tasks = 3;
  Fixture f(options);
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(f.exporter.offer("t" + std::to_string(i), kTraceparent));
  EXPECT_FALSE(f.exporter.offer("t3", kTraceparent));
  EXPECT_FALSE(f.exporter.offer("t4", kTraceparent));
  EXPECT_EQ(f.exporter.queued(), 3u);
  EXPECT_EQ(f.exporter.stats().tasks_dropped, 2u);
  f.exporter.export_queued();
  EXPECT_TRUE(f.exporter.offer("t5", kTraceparent));  // room again
}

TEST(SpanExporter, AnUnavailableCollectorIsTriedAgainWithGrowingPausesThenTheSpansAreDropped) {
  SpanExporterOptions options;
  options.max_attempts = 4;
  options.backoff = milliseconds(100);
  options.max_backoff = milliseconds(250);
  Fixture f(options);
  f.sink.outcomes = {unavailable(), unavailable(), unavailable(), unavailable(), unavailable()};
  f.exporter.offer("t0", kTraceparent);
  f.exporter.export_queued();
  EXPECT_EQ(f.sink.bodies.size(), 4u);  // max_attempts, no more
  EXPECT_EQ(f.pauses,
            (std::vector<milliseconds>{milliseconds(100), milliseconds(200), milliseconds(250)}));
  const SpanExporterStats s = f.exporter.stats();
  EXPECT_EQ(s.requests_failed, 4u);
  EXPECT_EQ(s.spans_dropped, kSpansPerTask);
  EXPECT_EQ(s.spans_exported, 0u);
  // The same body each time.
  EXPECT_EQ(f.sink.bodies[0], f.sink.bodies[3]);
}

TEST(SpanExporter, RetryAfterLengthensThePauseUpToItsBound) {
  SpanExporterOptions options;
  options.backoff = milliseconds(100);
  options.max_backoff = milliseconds(5000);
  Fixture f(options);
  f.sink.outcomes = {unavailable(milliseconds(2000)), unavailable(milliseconds(60000))};
  f.exporter.offer("t0", kTraceparent);
  f.exporter.export_queued();
  EXPECT_EQ(f.pauses, (std::vector<milliseconds>{milliseconds(2000), milliseconds(5000)}));
  EXPECT_EQ(f.exporter.stats().spans_exported, kSpansPerTask);  // the third send went through
}

TEST(SpanExporter, AFinalRefusalIsNotRepeated) {
  Fixture f;
  f.sink.outcomes = {SendOutcome{false, false, std::nullopt, "HTTP 400: bad span"}};
  f.exporter.offer("t0", kTraceparent);
  f.exporter.offer("t1", kTraceparent);
  f.exporter.export_queued();
  EXPECT_EQ(f.sink.bodies.size(), 1u);
  EXPECT_TRUE(f.pauses.empty());
  EXPECT_EQ(f.exporter.stats().spans_dropped, 2 * kSpansPerTask);
}

TEST(SpanExporter, APauseCutShortByStoppingDropsTheRequest) {
  Fixture f;
  f.keep_going = false;
  f.sink.outcomes = {unavailable()};
  f.exporter.offer("t0", kTraceparent);
  f.exporter.export_queued();
  EXPECT_EQ(f.sink.bodies.size(), 1u);
  EXPECT_EQ(f.exporter.stats().spans_dropped, kSpansPerTask);
}

TEST(SpanExporter, TasksItCannotReadAreCountedAndTheOthersGoOn) {
  Fixture f;
  for (const char* id : {"store-down", "gone", "garbled", "ok"})
    f.exporter.offer(id, kTraceparent);
  f.exporter.offer("bad-traceparent", "not-a-traceparent");
  f.exporter.export_queued();
  const SpanExporterStats s = f.exporter.stats();
  EXPECT_EQ(s.tasks_unreadable, 4u);
  EXPECT_EQ(s.spans_exported, kSpansPerTask);
  ASSERT_EQ(f.sink.bodies.size(), 1u);
}

TEST(SpanExporter, ItsThreadExportsWhatIsOfferedAndStopDropsWhatIsLeft) {
  SpanExporterOptions options;
  options.flush_interval = milliseconds(10);
  Fixture f(options);
  f.exporter.start();
  f.exporter.offer("t0", kTraceparent);
  // Bounded wait for the thread's export (it flushes after 10 ms).
  for (int i = 0; i < 500 && f.exporter.stats().spans_exported == 0; ++i)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(f.exporter.stats().spans_exported, kSpansPerTask);
  f.exporter.stop(milliseconds(0));
  EXPECT_FALSE(f.exporter.offer("late", kTraceparent));
  EXPECT_EQ(f.exporter.stats().tasks_dropped, 1u);
}

TEST(SpanExporter, AnExceptionInAnExportDoesNotEndItsThread) {
  SpanExporterOptions options;
  options.flush_interval = milliseconds(10);
  Fixture f(options);
  // Both queued before the thread starts: the throw ends the first export with the second
  // task still queued, which the thread must then export.
  f.exporter.offer("throws", kTraceparent);
  f.exporter.offer("t1", kTraceparent);
  f.exporter.start();
  for (int i = 0; i < 500 && f.exporter.stats().spans_exported == 0; ++i)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_EQ(f.exporter.stats().spans_exported, kSpansPerTask) << "the next task is exported";
  f.exporter.stop(milliseconds(0));
}

TEST(OtlpHttpSink, TheOtlpSpecificationsRetryableAnswersAreRetried) {
  EXPECT_EQ(OtlpHttpSink::traces_url("http://collector:4318"), "http://collector:4318/v1/traces");
  EXPECT_EQ(OtlpHttpSink::traces_url("http://collector:4318//"), "http://collector:4318/v1/traces");
  auto answer = [](int status, std::string retry_after = "") {
    http::ClientResponse r;
    r.status = status;
    if (!retry_after.empty())
      r.headers.set("Retry-After", retry_after);
    return OtlpHttpSink::outcome_of(r);
  };
  EXPECT_TRUE(answer(200).ok);
  EXPECT_TRUE(answer(202).ok);
  for (int status : {429, 502, 503, 504}) {
    EXPECT_FALSE(answer(status).ok);
    EXPECT_TRUE(answer(status).retryable) << status;
  }
  for (int status : {400, 401, 404, 413, 500})
    EXPECT_FALSE(answer(status).retryable) << status;
  EXPECT_EQ(answer(429, "7").retry_after, milliseconds(7000));
  EXPECT_FALSE(answer(429, "Wed, 21 Oct 2026 07:28:00 GMT").retry_after.has_value());
  http::ClientResponse refused;
  refused.error = http::ClientErrorKind::kConnect;
  refused.error_message = "connection refused";
  EXPECT_TRUE(OtlpHttpSink::outcome_of(refused).retryable);
  refused.error = http::ClientErrorKind::kBadUrl;
  EXPECT_FALSE(OtlpHttpSink::outcome_of(refused).retryable);
}

}  // namespace
}  // namespace agentfleet::otlp
