#include "core/adapters/metrics/trace_export_metrics.hpp"

#include "core/adapters/metrics/families.hpp"

namespace agentfleet::metrics {

struct TraceExportMetrics::Families {
  explicit Families(prometheus::Registry& r)
      : spans_exported(detail::counter(r, "agentfleet_otlp_spans_exported_total",
                                       "Spans the OTLP collector accepted.")
                           .Add({})),
        spans_dropped(detail::counter(r, "agentfleet_otlp_spans_dropped_total",
                                      "Spans dropped because their export request failed "
                                      "telemetry.otlp.max_attempts times.")
                          .Add({})),
        tasks_dropped(detail::counter(r, "agentfleet_otlp_tasks_dropped_total",
                                      "Ended tasks whose trace was not exported, by reason: "
                                      "queue_full (or left at shutdown), unreadable.")),
        queue_full(tasks_dropped.Add({{"reason", "queue_full"}})),
        unreadable(tasks_dropped.Add({{"reason", "unreadable"}})),
        requests(detail::counter(r, "agentfleet_otlp_requests_total",
                                 "OTLP export requests sent, repeats included, by outcome.")),
        requests_ok(requests.Add({{"outcome", "ok"}})),
        requests_failed(requests.Add({{"outcome", "failed"}})),
        queued(detail::gauge(r, "agentfleet_otlp_queue_tasks",
                             "Ended tasks waiting for their trace to be exported.")
                   .Add({})) {}

  prometheus::Counter& spans_exported;
  prometheus::Counter& spans_dropped;
  prometheus::Family<prometheus::Counter>& tasks_dropped;
  prometheus::Counter& queue_full;
  prometheus::Counter& unreadable;
  prometheus::Family<prometheus::Counter>& requests;
  prometheus::Counter& requests_ok;
  prometheus::Counter& requests_failed;
  prometheus::Gauge& queued;
};

TraceExportMetrics::TraceExportMetrics(MetricsRegistry& registry)
    : f_(std::make_unique<Families>(registry.prometheus_registry())) {}

TraceExportMetrics::~TraceExportMetrics() = default;

void TraceExportMetrics::set(const otlp::SpanExporterStats& t, std::size_t queued) {
  auto add = [](prometheus::Counter& c, std::uint64_t now, std::uint64_t& seen) {
    if (now > seen)
      c.Increment(static_cast<double>(now - seen));
    seen = now;
  };
  add(f_->spans_exported, t.spans_exported, seen_.spans_exported);
  add(f_->spans_dropped, t.spans_dropped, seen_.spans_dropped);
  add(f_->queue_full, t.tasks_dropped, seen_.tasks_dropped);
  add(f_->unreadable, t.tasks_unreadable, seen_.tasks_unreadable);
  add(f_->requests_ok, t.requests_ok, seen_.requests_ok);
  add(f_->requests_failed, t.requests_failed, seen_.requests_failed);
  f_->queued.Set(static_cast<double>(queued));
}

}  // namespace agentfleet::metrics
