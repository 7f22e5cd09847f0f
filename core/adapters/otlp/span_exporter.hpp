#pragma once
// Exports the traces of ended tasks to an OpenTelemetry collector, off the hot path.
//
// A run that ended its task offers (task id, traceparent): the offer takes a lock for a
// push and never blocks; when `queue_tasks` are already waiting the task is dropped and
// counted. A thread of the exporter's own takes what is queued (after `flush_interval`, or
// at once when a batch is full), reads each task's stored trace (TraceSource: the task's
// document and the bills of its model calls), builds its spans (codec::task_spans) and
// sends them in requests of at most `batch_spans` spans (SpanSink: OTLP/HTTP JSON). A
// request that fails in a way worth repeating (no answer, 429, 5xx) is sent again after
// `backoff`, doubled each time (or the collector's Retry-After, up to `max_backoff`), at
// most `max_attempts` times in all; then its spans are dropped and counted. Nothing here
// retries without bound, and nothing it does reaches the runs.
//
// stop() exports what is queued within its grace and drops (counts) the rest.
//
// Lifecycle: construct, start(), offer() from any thread, stop() (the destructor stops).
// The source and the sink are used from the exporter's thread only.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/codec/otlp_trace.hpp"
#include "core/domain/error.hpp"

namespace agentfleet::otlp {

// What the store keeps of an ended task for its trace.
struct TaskTrace {
  std::string task_json;                 // the API's task document
  std::map<int, codec::StepCost> costs;  // its model calls' bills, by step
};

// Port: reads a task's trace. nullopt: no such task (deleted since). Blocking; called from
// the exporter's thread only.
class TraceSource {
 public:
  virtual ~TraceSource() = default;
  virtual Result<std::optional<TaskTrace>> read(const std::string& task_id) = 0;
};

struct SendOutcome {
  bool ok = false;
  bool retryable = false;  // no answer, 429, 5xx: worth sending again
  std::optional<std::chrono::milliseconds> retry_after;
  std::string message;  // why it failed
};

// Port: delivers one export request body before `deadline`. Blocking; exporter thread only.
class SpanSink {
 public:
  virtual ~SpanSink() = default;
  virtual SendOutcome send(const std::string& body,
                           std::chrono::steady_clock::time_point deadline) = 0;
};

struct SpanExporterOptions {
  std::size_t queue_tasks = 2048;  // ended tasks waiting to be exported; beyond: dropped
  std::size_t batch_spans = 512;   // spans per request (a task's spans are never split)
  std::chrono::milliseconds flush_interval{2000};
  std::chrono::milliseconds timeout{5000};  // each request's deadline
  int max_attempts = 3;                     // sends of one request, the first included
  std::chrono::milliseconds backoff{500};
  std::chrono::milliseconds max_backoff{5000};
  std::vector<codec::SpanAttribute> resource;  // service.name and the like
  std::string version;                         // the instrumentation scope's
  codec::TaskSpansOptions spans;
};

struct SpanExporterStats {
  std::uint64_t tasks_offered = 0;
  std::uint64_t tasks_dropped = 0;     // the queue was full, or stop() left them
  std::uint64_t tasks_unreadable = 0;  // the source failed, or the task could not be read
  std::uint64_t spans_exported = 0;
  std::uint64_t spans_dropped = 0;    // their request failed max_attempts times
  std::uint64_t requests_ok = 0;      // sends the collector accepted
  std::uint64_t requests_failed = 0;  // sends that failed, repeats included
};

class SpanExporter {
 public:
  // `pause(d)` waits d before a request is sent again; it returns false when the exporter
  // stops meanwhile (the default waits on the exporter's own condition). Tests pass their
  // own to run without sleeping.
  using Pause = std::function<bool(std::chrono::milliseconds)>;
  SpanExporter(TraceSource& source, SpanSink& sink, SpanExporterOptions options, Pause pause = {});
  ~SpanExporter();
  SpanExporter(const SpanExporter&) = delete;
  SpanExporter& operator=(const SpanExporter&) = delete;

  // Queues an ended task's export; false (and counted) when the queue is full or stopped.
  // Never blocks on the exporter's work. Thread-safe.
  bool offer(std::string task_id, std::string traceparent);

  void start();
  // Exports what is queued within `grace`, drops the rest, joins the thread. Idempotent.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));

  // Exports everything queued now, on the caller's thread (the exporter thread's round;
  // tests call it without start()).
  void export_queued();

  SpanExporterStats stats() const;
  std::size_t queued() const;

 private:
  struct Item {
    std::string task_id;
    std::string traceparent;
  };
  void run();
  // Sends one request of these spans, repeating as the options allow.
  void send(const std::vector<codec::Span>& spans);
  // Now + the request timeout; once stopping, no later than the end of stop()'s grace.
  std::chrono::steady_clock::time_point request_deadline() const;
  bool wait(std::chrono::milliseconds d);

  TraceSource& source_;
  SpanSink& sink_;
  const SpanExporterOptions options_;
  Pause pause_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point stop_by_{};
  std::thread thread_;
  std::chrono::steady_clock::time_point warned_at_{};  // the exporter thread's

  std::atomic<std::uint64_t> offered_{0}, dropped_{0}, unreadable_{0}, exported_{0},
      spans_dropped_{0}, requests_ok_{0}, requests_failed_{0};
};

}  // namespace agentfleet::otlp
