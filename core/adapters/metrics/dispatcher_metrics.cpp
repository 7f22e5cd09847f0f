#include "core/adapters/metrics/dispatcher_metrics.hpp"

#include "core/adapters/metrics/buckets.hpp"
#include "core/adapters/metrics/families.hpp"

namespace agentfleet::metrics {

std::string_view to_string(SubmitSource source) {
  switch (source) {
    case SubmitSource::kHttp:
      return "http";
    case SubmitSource::kTopic:
      return "topic";
  }
  return "other";
}

std::string_view to_string(SubmitOutcome outcome) {
  switch (outcome) {
    case SubmitOutcome::kAccepted:
      return "accepted";
    case SubmitOutcome::kDuplicate:
      return "duplicate";
    case SubmitOutcome::kRejected:
      return "rejected";
  }
  return "other";
}

std::string_view to_string(ThrottleReason reason) {
  switch (reason) {
    case ThrottleReason::kConcurrency:
      return "concurrency";
    case ThrottleReason::kRpm:
      return "rpm";
    case ThrottleReason::kTpm:
      return "tpm";
    case ThrottleReason::kBudget:
      return "budget";
    case ThrottleReason::kQueueFull:
      return "queue_full";
    case ThrottleReason::kFleetCapacity:
      return "fleet_capacity";
  }
  return "other";
}

std::string_view to_string(SchedulerEnd reason) {
  switch (reason) {
    case SchedulerEnd::kScheduleTimeout:
      return "schedule_timeout";
    case SchedulerEnd::kQuotaExceeded:
      return "quota_exceeded";
    case SchedulerEnd::kDeadline:
      return "deadline";
  }
  return "other";
}

std::string_view to_string(WaitKind kind) {
  switch (kind) {
    case WaitKind::kLongPoll:
      return "long_poll";
    case WaitKind::kEventStream:
      return "event_stream";
  }
  return "other";
}

std::string_view to_string(RecoveryReason reason) {
  switch (reason) {
    case RecoveryReason::kLeaseExpired:
      return "lease_expired";
    case RecoveryReason::kRedispatch:
      return "redispatch";
  }
  return "other";
}

struct DispatcherMetrics::Families {
  explicit Families(prometheus::Registry& r)
      : submitted(detail::counter(r, "agentfleet_tasks_submitted_total",
                                  "Task submissions, by source and outcome.")),
        http_requests(detail::counter(r, "agentfleet_http_requests_total",
                                      "API requests, by route template and status code.")),
        http_duration(detail::histogram(r, "agentfleet_http_request_duration_seconds",
                                        "API request duration, by route template.")),
        admissions(detail::counter(r, "agentfleet_scheduler_admissions_total",
                                   "Queued tasks the scheduler dispatched, by priority.")),
        throttled(detail::counter(r, "agentfleet_scheduler_throttled_total",
                                  "Admissions held back by a limit, by reason.")),
        pass_duration(detail::histogram(r, "agentfleet_scheduler_pass_duration_seconds",
                                        "Duration of one scheduler pass.")
                          .Add({}, buckets::kSchedulerPass)),
        recovered(detail::counter(r, "agentfleet_tasks_recovered_total",
                                  "Tasks dispatched again by recovery, by reason.")),
        exhausted(detail::counter(r, "agentfleet_tasks_recovery_exhausted_total",
                                  "Tasks recovery ended failed after too many attempts.")
                      .Add({})),
        leader(detail::gauge(r, "agentfleet_scheduler_is_leader",
                             "1 while this replica holds the scheduler's advisory lock.")
                   .Add({})),
        outbox_backlog(detail::gauge(r, "agentfleet_outbox_backlog_messages",
                                     "Rows in the outbox not yet published.")
                           .Add({})),
        outbox_published(detail::counter(r, "agentfleet_outbox_published_total",
                                         "Outbox rows published by this replica's relay, by "
                                         "topic.")),
        tasks(detail::gauge(r, "agentfleet_tasks_by_status",
                            "Tasks in each live status, from a periodic count.")),
        queue_depth(detail::gauge(r, "agentfleet_queue_depth",
                                  "Queued tasks waiting for the scheduler, by priority, from a "
                                  "periodic count.")),
        queue_wait(detail::histogram(r, "agentfleet_scheduler_queue_wait_seconds",
                                     "Submission to first dispatch of a task, by priority.")),
        scheduler_ended(detail::counter(r, "agentfleet_scheduler_ended_total",
                                        "Queued tasks the scheduler ended without running them, "
                                        "by reason.")),
        calls_settled(detail::counter(
            r, "agentfleet_scheduler_charges_settled_total",
            "Model calls a worker left in flight when it stopped, billed by the scheduler as "
            "unreconciled charges (reason worker_lost) at the estimate recorded before each "
            "was sent.")),
        open_streams(detail::gauge(r, "agentfleet_api_open_waits",
                                   "Open long polls and event streams, by kind.")),
        waiter_rereads(detail::counter(
            r, "agentfleet_api_waiter_rereads_total",
            "Reads of Postgres by long polls and event streams after their first: on the "
            "task's result, a gap in the task feed, or the safety timer; by kind.")) {}

  prometheus::Family<prometheus::Counter>& submitted;
  prometheus::Family<prometheus::Counter>& http_requests;
  prometheus::Family<prometheus::Histogram>& http_duration;
  prometheus::Family<prometheus::Counter>& admissions;
  prometheus::Family<prometheus::Counter>& throttled;
  prometheus::Histogram& pass_duration;
  prometheus::Family<prometheus::Counter>& recovered;
  prometheus::Counter& exhausted;
  prometheus::Gauge& leader;
  prometheus::Gauge& outbox_backlog;
  prometheus::Family<prometheus::Counter>& outbox_published;
  prometheus::Family<prometheus::Gauge>& tasks;
  prometheus::Family<prometheus::Gauge>& queue_depth;
  prometheus::Family<prometheus::Histogram>& queue_wait;
  prometheus::Family<prometheus::Counter>& scheduler_ended;
  prometheus::Family<prometheus::Counter>& calls_settled;
  prometheus::Family<prometheus::Gauge>& open_streams;
  prometheus::Family<prometheus::Counter>& waiter_rereads;
  detail::KnownValues topics;
};

DispatcherMetrics::DispatcherMetrics(MetricsRegistry& registry, const config::Config& config)
    : registry_(registry), f_(std::make_unique<Families>(registry.prometheus_registry())) {
  const auto& t = config.kafka.topics;
  for (const auto* topic : {&t.submit, &t.dispatch, &t.results, &t.events, &t.dlq})
    f_->topics.add(*topic);

  // Series that exist from the start, so rates and alerts see a zero instead of nothing.
  for (auto source : {SubmitSource::kHttp, SubmitSource::kTopic}) {
    for (auto outcome :
         {SubmitOutcome::kAccepted, SubmitOutcome::kDuplicate, SubmitOutcome::kRejected}) {
      f_->submitted.Add({{"source", std::string(to_string(source))},
                         {"outcome", std::string(to_string(outcome))}});
    }
  }
  for (auto priority : {Priority::kInteractive, Priority::kBatch})
    f_->admissions.Add({{"priority", std::string(agentfleet::to_string(priority))}});
  for (auto reason :
       {ThrottleReason::kConcurrency, ThrottleReason::kRpm, ThrottleReason::kTpm,
        ThrottleReason::kBudget, ThrottleReason::kQueueFull, ThrottleReason::kFleetCapacity}) {
    f_->throttled.Add({{"reason", std::string(to_string(reason))}});
  }
  for (auto reason : {RecoveryReason::kLeaseExpired, RecoveryReason::kRedispatch})
    f_->recovered.Add({{"reason", std::string(to_string(reason))}});
  for (auto status : {TaskStatus::kQueued, TaskStatus::kDispatched, TaskStatus::kRunning})
    f_->tasks.Add({{"status", std::string(agentfleet::to_string(status))}});
  f_->outbox_published.Add({{"topic", t.dispatch}});
  f_->outbox_published.Add({{"topic", t.results}});
  for (auto priority : {Priority::kInteractive, Priority::kBatch}) {
    const std::string label(agentfleet::to_string(priority));
    f_->queue_depth.Add({{"priority", label}});
    f_->queue_wait.Add({{"priority", label}}, buckets::kQueueWait);
  }
  for (auto reason :
       {SchedulerEnd::kScheduleTimeout, SchedulerEnd::kQuotaExceeded, SchedulerEnd::kDeadline})
    f_->scheduler_ended.Add({{"reason", std::string(to_string(reason))}});
  for (auto kind : {WaitKind::kLongPoll, WaitKind::kEventStream}) {
    f_->open_streams.Add({{"kind", std::string(to_string(kind))}});
    f_->waiter_rereads.Add({{"kind", std::string(to_string(kind))}});
  }
  f_->calls_settled.Add({});
}

DispatcherMetrics::~DispatcherMetrics() = default;

void DispatcherMetrics::task_submitted(SubmitSource source, SubmitOutcome outcome) {
  f_->submitted
      .Add({{"source", std::string(to_string(source))},
            {"outcome", std::string(to_string(outcome))}})
      .Increment();
}

void DispatcherMetrics::http_request(std::string_view route, int code, double seconds) {
  const std::string route_label(route);
  f_->http_requests.Add({{"route", route_label}, {"code", std::to_string(code)}}).Increment();
  f_->http_duration.Add({{"route", route_label}}, buckets::kHttpRequest).Observe(seconds);
}

void DispatcherMetrics::admitted(Priority priority, std::int64_t tasks) {
  if (tasks > 0) {
    f_->admissions.Add({{"priority", std::string(agentfleet::to_string(priority))}})
        .Increment(static_cast<double>(tasks));
  }
}

void DispatcherMetrics::throttled(ThrottleReason reason, std::int64_t tasks) {
  if (tasks > 0) {
    f_->throttled.Add({{"reason", std::string(to_string(reason))}})
        .Increment(static_cast<double>(tasks));
  }
}

void DispatcherMetrics::scheduler_pass(double seconds) {
  f_->pass_duration.Observe(seconds);
}

void DispatcherMetrics::recovered(RecoveryReason reason, std::int64_t tasks) {
  if (tasks > 0) {
    f_->recovered.Add({{"reason", std::string(to_string(reason))}})
        .Increment(static_cast<double>(tasks));
  }
}

void DispatcherMetrics::recovery_exhausted(std::int64_t tasks) {
  if (tasks > 0)
    f_->exhausted.Increment(static_cast<double>(tasks));
}

void DispatcherMetrics::set_leader(bool leader) {
  f_->leader.Set(leader ? 1 : 0);
}

void DispatcherMetrics::set_outbox_backlog(std::int64_t rows) {
  f_->outbox_backlog.Set(static_cast<double>(rows));
}

void DispatcherMetrics::outbox_published(std::string_view topic, std::int64_t messages) {
  if (messages > 0) {
    f_->outbox_published.Add({{"topic", f_->topics(topic)}})
        .Increment(static_cast<double>(messages));
  }
}

void DispatcherMetrics::set_tasks(TaskStatus status, std::int64_t tasks) {
  f_->tasks.Add({{"status", std::string(agentfleet::to_string(status))}})
      .Set(static_cast<double>(tasks));
}

void DispatcherMetrics::set_queue_depth(Priority priority, std::int64_t tasks) {
  f_->queue_depth.Add({{"priority", std::string(agentfleet::to_string(priority))}})
      .Set(static_cast<double>(tasks));
}

void DispatcherMetrics::queue_wait(Priority priority, double seconds) {
  f_->queue_wait
      .Add({{"priority", std::string(agentfleet::to_string(priority))}}, buckets::kQueueWait)
      .Observe(seconds);
}

void DispatcherMetrics::calls_settled(std::int64_t calls) {
  if (calls > 0)
    f_->calls_settled.Add({}).Increment(static_cast<double>(calls));
}

void DispatcherMetrics::scheduler_ended(SchedulerEnd reason, std::int64_t tasks) {
  if (tasks > 0) {
    f_->scheduler_ended.Add({{"reason", std::string(to_string(reason))}})
        .Increment(static_cast<double>(tasks));
  }
}

void DispatcherMetrics::wait_opened(WaitKind kind) {
  f_->open_streams.Add({{"kind", std::string(to_string(kind))}}).Increment();
}

void DispatcherMetrics::wait_closed(WaitKind kind) {
  f_->open_streams.Add({{"kind", std::string(to_string(kind))}}).Decrement();
}

void DispatcherMetrics::waiter_reread(WaitKind kind) {
  f_->waiter_rereads.Add({{"kind", std::string(to_string(kind))}}).Increment();
}

}  // namespace agentfleet::metrics
