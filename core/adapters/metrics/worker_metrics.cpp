#include "core/adapters/metrics/worker_metrics.hpp"

#include "core/adapters/metrics/buckets.hpp"
#include "core/adapters/metrics/families.hpp"

namespace agentfleet::metrics {

using detail::KnownValues;

std::string_view to_string(ClaimOutcome outcome) {
  switch (outcome) {
    case ClaimOutcome::kClaimed:
      return "claimed";
    case ClaimOutcome::kSkipped:
      return "skipped";
    case ClaimOutcome::kStoreUnavailable:
      return "store_unavailable";
  }
  return "other";
}

std::string_view to_string(ModelOutcome outcome) {
  switch (outcome) {
    case ModelOutcome::kOk:
      return "ok";
    case ModelOutcome::kRateLimited:
      return "rate_limited";
    case ModelOutcome::kQuotaExhausted:
      return "quota_exhausted";
    case ModelOutcome::kServerError:
      return "server_error";
    case ModelOutcome::kClientError:
      return "client_error";
    case ModelOutcome::kTimeout:
      return "timeout";
    case ModelOutcome::kConnectionError:
      return "connection_error";
    case ModelOutcome::kInvalidResponse:
      return "invalid_response";
    case ModelOutcome::kCircuitOpen:
      return "circuit_open";
    case ModelOutcome::kThrottled:
      return "throttled";
  }
  return "other";
}

std::string_view to_string(ToolOutcome outcome) {
  switch (outcome) {
    case ToolOutcome::kOk:
      return "ok";
    case ToolOutcome::kError:
      return "error";
    case ToolOutcome::kRefused:
      return "refused";
    case ToolOutcome::kInvalidArguments:
      return "invalid_arguments";
    case ToolOutcome::kTimeout:
      return "timeout";
    case ToolOutcome::kOutcomeUnknown:
      return "outcome_unknown";
  }
  return "other";
}

std::string_view to_string(DeadLetterReason reason) {
  switch (reason) {
    case DeadLetterReason::kNotJson:
      return "not_json";
    case DeadLetterReason::kSchema:
      return "schema";
    case DeadLetterReason::kUnknownTask:
      return "unknown_task";
  }
  return "other";
}

std::string endpoint_label(std::string_view url) {
  auto scheme = url.find("://");
  std::string_view rest = scheme == std::string_view::npos ? url : url.substr(scheme + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  // Credentials in a URL never become a label.
  if (const auto at = rest.rfind('@'); at != std::string_view::npos)
    rest.remove_prefix(at + 1);
  return std::string(rest);
}

struct WorkerMetrics::Families {
  explicit Families(prometheus::Registry& r)
      : tasks_finished(detail::counter(r, "agentfleet_tasks_finished_total",
                                       "Tasks this worker ended, by status, result type "
                                       "(none when the model did not finish) and error code "
                                       "(none for a success; docs/errors.md).")),
        task_duration(detail::histogram(r, "agentfleet_task_duration_seconds",
                                        "Time from claim to the end of the task, by status.")),
        queue_wait(detail::histogram(r, "agentfleet_task_queue_wait_seconds",
                                     "Time from the task's creation to its claim, by priority.")),
        claims(detail::counter(r, "agentfleet_task_claims_total",
                               "Dispatch messages handled, by claim outcome.")),
        in_flight(
            detail::gauge(r, "agentfleet_tasks_in_flight", "Tasks running in this worker now.")
                .Add({})),
        paused(detail::gauge(r, "agentfleet_consumer_paused",
                             "1 while the consumer is paused because the worker is full.")
                   .Add({})),
        leases_lost(detail::counter(r, "agentfleet_leases_lost_total",
                                    "Runs stopped without writing: another attempt owned the "
                                    "task, or this worker fenced itself.")
                        .Add({})),
        in_flight_limit(detail::gauge(r, "agentfleet_worker_in_flight_limit",
                                      "The adaptive in-flight limit: tasks this worker takes at "
                                      "once now (reported to the scheduler as its capacity).")
                            .Add({})),
        db_round_trip_quiet(detail::gauge(r, "agentfleet_worker_db_round_trip_quiet_seconds",
                                          "The quiet round trip to Postgres the in-flight limit "
                                          "judges congestion against.")
                                .Add({})),
        fences(detail::counter(r, "agentfleet_worker_fences_total",
                               "Times this worker fenced itself: no renewal of its liveness held "
                               "within the lease minus the margin.")
                   .Add({})),
        handed_back(detail::counter(r, "agentfleet_worker_tasks_handed_back_total",
                                    "Tasks this worker stopped running and handed back to the "
                                    "queue (store errors, fences, drains), not counted as lost "
                                    "attempts.")
                        .Add({})),
        declined(detail::counter(r, "agentfleet_worker_dispatches_declined_total",
                                 "Dispatch messages this worker left unclaimed because their task "
                                 "needs what this version cannot do (agentfleet-needs header); "
                                 "the scheduler dispatches them again.")
                     .Add({})),
        dead_letters(detail::counter(r, "agentfleet_dead_letters_total",
                                     "Messages sent to the dead-letter topic, by reason.")),
        model_requests(detail::counter(r, "agentfleet_model_requests_total",
                                       "HTTP attempts at model endpoints, by outcome.")),
        model_duration(detail::histogram(r, "agentfleet_model_request_duration_seconds",
                                         "Duration of one HTTP attempt at a model endpoint.")),
        model_retries(detail::counter(r, "agentfleet_model_retries_total",
                                      "Model attempts retried, by the reason of the retry.")),
        tokens(detail::counter(r, "agentfleet_model_tokens_total",
                               "Tokens of model calls, by disjoint kind: input (not cached), "
                               "cached_input, output (not reasoning), reasoning.")),
        cost(detail::counter(r, "agentfleet_model_cost_total",
                             "Cost of model calls in units of the currency (the bill itself "
                             "is exact in Postgres; this is for dashboards).")),
        charges_unreconciled(detail::counter(
            r, "agentfleet_model_charges_unreconciled_total",
            "Model calls the provider may have charged for whose answer was lost to the task "
            "(timeout, connection_lost, unreadable, abandoned, lease_lost), billed as "
            "unreconciled.")),
        usage_estimated(detail::counter(r, "agentfleet_model_usage_estimated_total",
                                        "Model calls billed from a local token estimate: the "
                                        "provider reported no usage, or no answer came.")),
        tool_calls(
            detail::counter(r, "agentfleet_tool_calls_total", "Tool calls, by tool and outcome.")),
        tool_duration(detail::histogram(r, "agentfleet_tool_call_duration_seconds",
                                        "Duration of one tool call, by tool.")),
        consumer_lag(detail::gauge(r, "agentfleet_consumer_lag_messages",
                                   "Messages not yet read on the worker's assigned partitions.")) {}

  prometheus::Family<prometheus::Counter>& tasks_finished;
  prometheus::Family<prometheus::Histogram>& task_duration;
  prometheus::Family<prometheus::Histogram>& queue_wait;
  prometheus::Family<prometheus::Counter>& claims;
  prometheus::Gauge& in_flight;
  prometheus::Gauge& paused;
  prometheus::Counter& leases_lost;
  prometheus::Gauge& in_flight_limit;
  prometheus::Gauge& db_round_trip_quiet;
  prometheus::Counter& fences;
  prometheus::Counter& handed_back;
  prometheus::Counter& declined;
  prometheus::Family<prometheus::Counter>& dead_letters;
  prometheus::Family<prometheus::Counter>& model_requests;
  prometheus::Family<prometheus::Histogram>& model_duration;
  prometheus::Family<prometheus::Counter>& model_retries;
  prometheus::Family<prometheus::Counter>& tokens;
  prometheus::Family<prometheus::Counter>& cost;
  prometheus::Family<prometheus::Counter>& charges_unreconciled;
  prometheus::Family<prometheus::Counter>& usage_estimated;
  prometheus::Family<prometheus::Counter>& tool_calls;
  prometheus::Family<prometheus::Histogram>& tool_duration;
  prometheus::Family<prometheus::Gauge>& consumer_lag;

  KnownValues models;
  KnownValues endpoints;
  KnownValues tools;
  KnownValues currencies;
  KnownValues topics;
};

WorkerMetrics::WorkerMetrics(MetricsRegistry& registry, const config::Config& config)
    : f_(std::make_unique<Families>(registry.prometheus_registry())) {
  for (const auto& model : config.models) {
    f_->models.add(model.name);
    for (const auto& endpoint : model.endpoints) {
      f_->endpoints.add(endpoint.name);  // what the model client reports
      f_->endpoints.add(endpoint_label(endpoint.url));
    }
  }
  for (const auto& tool : config.tools)
    f_->tools.add(tool.name);
  for (const auto& price : config.billing.prices)
    f_->currencies.add(price.currency);
  f_->topics.add(config.kafka.topics.dispatch);

  // Series that exist from the start, so rates and alerts see a zero instead of nothing.
  for (auto outcome :
       {ClaimOutcome::kClaimed, ClaimOutcome::kSkipped, ClaimOutcome::kStoreUnavailable}) {
    f_->claims.Add({{"outcome", std::string(to_string(outcome))}});
  }
  for (auto reason :
       {DeadLetterReason::kNotJson, DeadLetterReason::kSchema, DeadLetterReason::kUnknownTask}) {
    f_->dead_letters.Add({{"reason", std::string(to_string(reason))}});
  }
  for (const auto& model : f_->models.values()) {
    for (const char* kind : {"input", "cached_input", "output", "reasoning"})
      f_->tokens.Add({{"model", model}, {"kind", kind}});
    for (ChargeLoss reason :
         {ChargeLoss::kTimeout, ChargeLoss::kConnectionLost, ChargeLoss::kUnreadable,
          ChargeLoss::kAbandoned, ChargeLoss::kLeaseLost}) {
      f_->charges_unreconciled.Add({{"model", model}, {"reason", std::string(to_string(reason))}});
    }
    f_->usage_estimated.Add({{"model", model}});
  }
  for (const auto& price : config.billing.prices)
    f_->cost.Add({{"model", f_->models(price.model)}, {"currency", price.currency}});
  for (const auto& tool : f_->tools.values()) {
    f_->tool_calls.Add({{"tool", tool}, {"outcome", "ok"}});
    f_->tool_calls.Add({{"tool", tool}, {"outcome", "error"}});
  }
  f_->consumer_lag.Add({{"topic", config.kafka.topics.dispatch}});
}

WorkerMetrics::~WorkerMetrics() = default;

void WorkerMetrics::task_finished(TaskStatus status, std::optional<ResultType> result,
                                  std::optional<ErrorCode> code, double seconds) {
  const std::string status_label(agentfleet::to_string(status));
  f_->tasks_finished
      .Add({{"status", status_label},
            {"result_type", result ? std::string(agentfleet::to_string(*result)) : "none"},
            {"error_code", code ? std::string(agentfleet::to_string(*code)) : "none"}})
      .Increment();
  f_->task_duration.Add({{"status", status_label}}, buckets::kTaskDuration).Observe(seconds);
}

void WorkerMetrics::queue_wait(Priority priority, double seconds) {
  f_->queue_wait
      .Add({{"priority", std::string(agentfleet::to_string(priority))}}, buckets::kQueueWait)
      .Observe(seconds);
}

void WorkerMetrics::claim(ClaimOutcome outcome) {
  f_->claims.Add({{"outcome", std::string(to_string(outcome))}}).Increment();
}

void WorkerMetrics::set_in_flight(std::size_t tasks) {
  f_->in_flight.Set(static_cast<double>(tasks));
}

void WorkerMetrics::set_paused(bool paused) {
  f_->paused.Set(paused ? 1 : 0);
}

void WorkerMetrics::lease_lost() {
  f_->leases_lost.Increment();
}

void WorkerMetrics::set_in_flight_limit(int limit, double quiet_round_trip_seconds) {
  f_->in_flight_limit.Set(limit);
  f_->db_round_trip_quiet.Set(quiet_round_trip_seconds);
}

void WorkerMetrics::fenced() {
  f_->fences.Increment();
}

void WorkerMetrics::handed_back(int tasks) {
  f_->handed_back.Increment(tasks);
}

void WorkerMetrics::dispatch_declined() {
  f_->declined.Increment();
}

void WorkerMetrics::dead_letter(DeadLetterReason reason) {
  f_->dead_letters.Add({{"reason", std::string(to_string(reason))}}).Increment();
}

void WorkerMetrics::model_request(std::string_view model, std::string_view endpoint,
                                  ModelOutcome outcome, double seconds) {
  const std::string model_label = f_->models(model);
  std::string endpoint_value = f_->endpoints(endpoint);
  if (endpoint_value == detail::kOther)
    endpoint_value = f_->endpoints(endpoint_label(endpoint));
  f_->model_requests
      .Add({{"model", model_label},
            {"endpoint", endpoint_value},
            {"outcome", std::string(to_string(outcome))}})
      .Increment();
  f_->model_duration.Add({{"model", model_label}}, buckets::kModelRequest).Observe(seconds);
}

void WorkerMetrics::model_retry(std::string_view model, ModelOutcome reason) {
  f_->model_retries.Add({{"model", f_->models(model)}, {"reason", std::string(to_string(reason))}})
      .Increment();
}

void WorkerMetrics::charge_unreconciled(std::string_view model, ChargeLoss reason, bool estimated) {
  f_->charges_unreconciled
      .Add({{"model", f_->models(model)}, {"reason", std::string(to_string(reason))}})
      .Increment();
  if (estimated)
    usage_estimated(model);
}

void WorkerMetrics::usage_estimated(std::string_view model) {
  f_->usage_estimated.Add({{"model", f_->models(model)}}).Increment();
}

void WorkerMetrics::tokens(std::string_view model, const TokenUsage& usage) {
  const std::string label = f_->models(model);
  auto add = [&](const char* kind, std::int64_t count) {
    if (count > 0)
      f_->tokens.Add({{"model", label}, {"kind", kind}}).Increment(static_cast<double>(count));
  };
  // Providers count cached tokens inside input and reasoning inside output.
  add("input", usage.input - usage.cached_input);
  add("cached_input", usage.cached_input);
  add("output", usage.output - usage.reasoning);
  add("reasoning", usage.reasoning);
}

void WorkerMetrics::cost(std::string_view model, std::string_view currency, std::int64_t micros) {
  if (micros <= 0)
    return;
  f_->cost.Add({{"model", f_->models(model)}, {"currency", f_->currencies(currency)}})
      .Increment(static_cast<double>(micros) / 1e6);
}

void WorkerMetrics::tool_call(std::string_view tool, ToolOutcome outcome, double seconds) {
  const std::string label = f_->tools(tool);
  f_->tool_calls.Add({{"tool", label}, {"outcome", std::string(to_string(outcome))}}).Increment();
  // A refused, invalid or unsent call never reached the tool: it has no latency to report.
  if (outcome == ToolOutcome::kRefused || outcome == ToolOutcome::kInvalidArguments ||
      outcome == ToolOutcome::kOutcomeUnknown)
    return;
  f_->tool_duration.Add({{"tool", label}}, buckets::kToolCall).Observe(seconds);
}

void WorkerMetrics::set_consumer_lag(std::string_view topic, std::int64_t messages) {
  f_->consumer_lag.Add({{"topic", f_->topics(topic)}}).Set(static_cast<double>(messages));
}

}  // namespace agentfleet::metrics
