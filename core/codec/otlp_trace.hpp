#pragma once
// A task's trace as OpenTelemetry spans, and spans as an OTLP/HTTP JSON export request.
// Pure functions, thread-safe.
//
// The spans are built from what the API shows of an ended task (its GET /v1/tasks/{id}
// document: the row's times and every checkpointed step with its model call and tool calls),
// its traceparent, and the cost of each model call (the ledger). Every span id is derived
// from the task id (and the step, the call), so a trace exported twice names the same spans.
//
//   task                                 created_at .. finished_at (the root)
//   ├─ queue                             created_at .. dispatched_at
//   └─ attempt N                         one per attempt that left a step, and the last
//      ├─ chat <model>                   each model call: at - model_latency_ms .. at
//      └─ execute_tool <tool>            each tool call: at .. at + latency_ms
//
// The root joins the caller's trace: its parent is the traceparent's parent id, unless that
// id is one the dispatcher made up for a submission without a traceparent (task_span_id of
// the task, batch_span_id of its batch), and then the root has no parent.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/domain/error.hpp"

namespace agentfleet::codec {

using SpanValue = std::variant<std::string, std::int64_t, double, bool>;
struct SpanAttribute {
  std::string key;
  SpanValue value;
  bool operator==(const SpanAttribute&) const = default;
};

// OTLP's numbering.
enum class SpanKind { kInternal = 1, kServer = 2, kClient = 3, kProducer = 4, kConsumer = 5 };
enum class SpanStatus { kUnset = 0, kOk = 1, kError = 2 };

struct Span {
  std::string trace_id;        // 32 lower-case hex digits
  std::string span_id;         // 16 lower-case hex digits
  std::string parent_span_id;  // empty: a root
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  std::int64_t start_ns = 0;  // since the Unix epoch
  std::int64_t end_ns = 0;
  std::vector<SpanAttribute> attributes;
  SpanStatus status = SpanStatus::kUnset;
  std::string status_message;

  // The attribute `key`'s value, or nullptr.
  const SpanValue* attribute(std::string_view key) const;
};

// A model call's bill (a usage_ledger row), by step.
struct StepCost {
  std::string model;
  std::string cost;  // decimal text
  std::string currency;
};

// The root span's id of task `task_id`, and the id the dispatcher puts in the traceparent it
// makes for a batch without one. 16 hex digits, never all zeros.
std::string task_span_id(std::string_view task_id);
std::string batch_span_id(std::string_view batch_id);

struct TaskSpansOptions {
  // Longer attribute values (tool arguments and results, errors) are cut to this many
  // characters (whole UTF-8 characters).
  std::size_t max_attribute_chars = 1024;
};

// The spans of the task `task_json` (the API's task document) in the trace `traceparent`
// (a W3C traceparent; the task's). An error (kInvalid) when the document or the traceparent
// cannot be read; a task that has not ended yields its spans so far, the root ending at
// its last step.
Result<std::vector<Span>> task_spans(std::string_view task_json, std::string_view traceparent,
                                     const std::map<int, StepCost>& costs,
                                     const TaskSpansOptions& options = {});

// An OTLP/HTTP JSON ExportTraceServiceRequest of `spans`, under one resource with
// `resource` attributes (service.name and the like) and the instrumentation scope
// "agentfleet" at `scope_version`.
std::string otlp_trace_request(const std::vector<Span>& spans,
                               const std::vector<SpanAttribute>& resource,
                               std::string_view scope_version);

// Nanoseconds since the Unix epoch of an RFC 3339 time ("2026-11-28T21:06:32.352694+00:00",
// "...Z"); nullopt when it is not one.
std::optional<std::int64_t> parse_rfc3339_ns(std::string_view text);

}  // namespace agentfleet::codec
