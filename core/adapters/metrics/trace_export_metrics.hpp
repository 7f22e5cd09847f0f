#pragma once
// The trace exporter's metrics (otlp::SpanExporter): spans exported and dropped, ended tasks
// dropped (the queue full, the task unreadable), export requests by outcome, and the queue.
// set() is called with the exporter's running totals (a render hook) and adds what is new.
//
// Lifecycle: construct after the MetricsRegistry; one per registry. Thread-safety: set() from
// one thread at a time (render hooks run under the registry's lock).

#include <cstddef>
#include <memory>

#include "core/adapters/metrics/metrics_registry.hpp"
#include "core/adapters/otlp/span_exporter.hpp"

namespace agentfleet::metrics {

class TraceExportMetrics {
 public:
  explicit TraceExportMetrics(MetricsRegistry& registry);
  ~TraceExportMetrics();
  TraceExportMetrics(const TraceExportMetrics&) = delete;
  TraceExportMetrics& operator=(const TraceExportMetrics&) = delete;

  void set(const otlp::SpanExporterStats& totals, std::size_t queued);

 private:
  struct Families;
  std::unique_ptr<Families> f_;
  otlp::SpanExporterStats seen_;
};

}  // namespace agentfleet::metrics
