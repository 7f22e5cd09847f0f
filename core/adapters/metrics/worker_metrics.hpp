#pragma once
// The worker's metrics, as named methods: task outcomes and durations, claims, model
// requests, tokens and cost, tool calls, dead letters, leases, consumer lag and pause (the
// Postgres pool has DbPoolMetrics). Every label value is either an enum below or a name from
// configuration (model, endpoint, tool, topic, currency); any other name is counted as `other`. No
// method takes a user, task or batch id: per-user series cannot be created.
//
// Lifecycle: construct after the MetricsRegistry, before the components that report;
// keep both alive until they stop. Thread-safety: every method may be called from any
// thread (prometheus-cpp metrics are atomic; adding a series takes its family's lock).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/adapters/metrics/metrics_registry.hpp"
#include "core/config/config.hpp"
#include "core/domain/task.hpp"

namespace agentfleet::metrics {

enum class ClaimOutcome { kClaimed, kSkipped, kStoreUnavailable };
// The outcome of one HTTP attempt at a model endpoint; also the reason of a retry.
enum class ModelOutcome {
  kOk,
  kRateLimited,     // 429 with time to wait
  kQuotaExhausted,  // 429 meaning the account is out of money
  kServerError,     // 5xx
  kClientError,     // other 4xx
  kTimeout,
  kConnectionError,
  kInvalidResponse,  // not JSON, or not a chat completion
  kCircuitOpen,      // not sent: the endpoint's breaker is open
  kThrottled,        // not sent: the provider account's request/token limits had no room
};
// kOutcomeUnknown: a call of a tool that is not idempotent, left by an earlier attempt
// without a saved answer, and not sent again.
enum class ToolOutcome { kOk, kError, kRefused, kInvalidArguments, kTimeout, kOutcomeUnknown };
enum class DeadLetterReason { kNotJson, kSchema, kUnknownTask };

std::string_view to_string(ClaimOutcome outcome);
std::string_view to_string(ModelOutcome outcome);
std::string_view to_string(ToolOutcome outcome);
std::string_view to_string(DeadLetterReason reason);

// host[:port] of an endpoint URL, the `endpoint` label: "https://api.x.com/v1/chat" ->
// "api.x.com".
std::string endpoint_label(std::string_view url);

class WorkerMetrics {
 public:
  // Models, their endpoints, tools, currencies and topics are taken from `config`.
  WorkerMetrics(MetricsRegistry& registry, const config::Config& config);
  ~WorkerMetrics();
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  // ---- tasks ----
  // A run that ended the task: its status, result type (when the model finished) and
  // the time from claim to finish.
  // `code`: the task's error code (label "none" for a success).
  void task_finished(TaskStatus status, std::optional<ResultType> result,
                     std::optional<ErrorCode> code, double seconds);
  // Time from the task's creation to this claim.
  void queue_wait(Priority priority, double seconds);
  void claim(ClaimOutcome outcome);
  void set_in_flight(std::size_t tasks);
  // 1 while the consumer is paused because the worker is full.
  void set_paused(bool paused);
  void lease_lost();
  // The adaptive in-flight limit and the quiet round trip it judges by.
  void set_in_flight_limit(int limit, double quiet_round_trip_seconds);
  void fenced();
  void handed_back(int tasks);
  // A dispatch message left unclaimed: its task needs what this version cannot do.
  void dispatch_declined();
  void dead_letter(DeadLetterReason reason);

  // ---- model ----
  // One HTTP attempt; `endpoint` is the configured URL (or its endpoint_label).
  void model_request(std::string_view model, std::string_view endpoint, ModelOutcome outcome,
                     double seconds);
  void model_retry(std::string_view model, ModelOutcome reason);
  // The usage of one model call, split into disjoint kinds: input (not from cache),
  // cached_input, output (not reasoning), reasoning; their sum is the call's total.
  void tokens(std::string_view model, const TokenUsage& usage);
  // The cost of one model call in micro-units of `currency`, exported in units.
  void cost(std::string_view model, std::string_view currency, std::int64_t micros);

  // A model call the provider may have charged for whose answer was lost to the task,
  // billed as unreconciled (counted as estimated too when its usage is an estimate).
  void charge_unreconciled(std::string_view model, ChargeLoss reason, bool estimated);
  // A model call billed from a local token estimate.
  void usage_estimated(std::string_view model);

  // ---- tools ----
  // `seconds` is ignored for refused and invalid calls (they never reached the tool).
  void tool_call(std::string_view tool, ToolOutcome outcome, double seconds);

  // ---- transport ----
  // Messages behind this worker on `topic`, summed over its assigned partitions.
  void set_consumer_lag(std::string_view topic, std::int64_t messages);

 private:
  struct Families;
  std::unique_ptr<Families> f_;
};

}  // namespace agentfleet::metrics
