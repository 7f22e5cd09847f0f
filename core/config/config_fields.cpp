// The configuration's declarative description (config_fields.hpp): one table per object of
// schemas/config.schema.json that the reader fills property by property.
#include "core/config/config_fields.hpp"

#include "core/config/config_reader.hpp"

namespace agentfleet::config {
namespace detail {

const Fields<PostgresConfig> kPostgresFields = {
    {"url", &PostgresConfig::url},
    {"pool_size", &PostgresConfig::pool_size},
    {"statement_timeout_ms", &PostgresConfig::statement_timeout_ms},
    {"connect_timeout_s", &PostgresConfig::connect_timeout_s},
    {"require_synchronous_replication", &PostgresConfig::require_synchronous_replication},
};
const Fields<KafkaConfig> kKafkaFields = {
    {"bootstrap_servers", &KafkaConfig::bootstrap_servers},
    {"client_id", &KafkaConfig::client_id},
    {"worker_group", &KafkaConfig::worker_group},
    {"dispatcher_group", &KafkaConfig::dispatcher_group},
    {"delivery_timeout_ms", &KafkaConfig::delivery_timeout_ms},
};
const Fields<KafkaTopics> kTopicFields = {
    {"submit", &KafkaTopics::submit},   {"dispatch", &KafkaTopics::dispatch},
    {"results", &KafkaTopics::results}, {"events", &KafkaTopics::events},
    {"dlq", &KafkaTopics::dlq},
};
const Fields<HttpListen> kHttpFields = {
    {"host", &HttpListen::host},
    {"port", &HttpListen::port},
    {"max_connections", &HttpListen::max_connections},
    {"max_connections_per_address", &HttpListen::max_connections_per_address},
    {"idle_timeout_s", &HttpListen::idle_timeout_s},
    {"header_timeout_s", &HttpListen::header_timeout_s},
    {"request_timeout_s", &HttpListen::request_timeout_s},
};
const Fields<DispatcherConfig> kDispatcherFields = {
    {"scheduler_interval_ms", &DispatcherConfig::scheduler_interval_ms},
    {"scheduler_min_gap_ms", &DispatcherConfig::scheduler_min_gap_ms},
    {"housekeeping_interval_ms", &DispatcherConfig::housekeeping_interval_ms},
    {"scheduler_idle_ms", &DispatcherConfig::scheduler_idle_ms},
    {"scheduler_batch", &DispatcherConfig::scheduler_batch},
    {"redispatch_after_s", &DispatcherConfig::redispatch_after_s},
    {"max_attempts", &DispatcherConfig::max_attempts},
    {"relay_interval_ms", &DispatcherConfig::relay_interval_ms},
    {"relay_idle_ms", &DispatcherConfig::relay_idle_ms},
    {"relay_batch", &DispatcherConfig::relay_batch},
    {"max_text_chars", &DispatcherConfig::max_text_chars},
    {"max_active_tasks", &DispatcherConfig::max_active_tasks},
    {"batch_share_percent", &DispatcherConfig::batch_share_percent},
    {"task_token_estimate", &DispatcherConfig::task_token_estimate},
    {"leader_retry_ms", &DispatcherConfig::leader_retry_ms},
    {"leader_silence_s", &DispatcherConfig::leader_silence_s},
    {"max_batch_lines", &DispatcherConfig::max_batch_lines},
    {"max_batch_uploads", &DispatcherConfig::max_batch_uploads},
    {"max_batch_uploads_per_caller", &DispatcherConfig::max_batch_uploads_per_caller},
    {"stream_heartbeat_s", &DispatcherConfig::stream_heartbeat_s},
    {"max_streams_per_caller", &DispatcherConfig::max_streams_per_caller},
    {"max_streams", &DispatcherConfig::max_streams},
    {"max_long_polls_per_caller", &DispatcherConfig::max_long_polls_per_caller},
    {"max_long_polls", &DispatcherConfig::max_long_polls},
    {"batch_upload_timeout_s", &DispatcherConfig::batch_upload_timeout_s},
    {"batch_upload_min_bytes_per_s", &DispatcherConfig::batch_upload_min_bytes_per_s},
    {"batch_upload_rate_window_s", &DispatcherConfig::batch_upload_rate_window_s},
};
const Fields<AuthConfig> kAuthFields = {
    {"mode", &AuthConfig::mode},
    {"user_header", &AuthConfig::user_header},
    {"admin_header", &AuthConfig::admin_header},
    {"gateway_key_header", &AuthConfig::gateway_key_header},
};
const Fields<ApiKey> kApiKeyFields = {
    {"name", &ApiKey::name},
    {"sha256", &ApiKey::sha256},
    {"admin", &ApiKey::admin},
    {"users", &ApiKey::users},
};
const Fields<ApiKey> kGatewayKeyFields = {
    {"name", &ApiKey::name},
    {"sha256", &ApiKey::sha256},
};
const Fields<WorkerConfig> kWorkerFields = {
    {"id", &WorkerConfig::id},
    {"max_in_flight", &WorkerConfig::max_in_flight},
    {"lease_s", &WorkerConfig::lease_s},
    {"heartbeat_s", &WorkerConfig::heartbeat_s},
    {"db_threads", &WorkerConfig::db_threads},
    {"max_tool_calls_per_step", &WorkerConfig::max_tool_calls_per_step},
    {"trace_result_chars", &WorkerConfig::trace_result_chars},
    {"shutdown_grace_s", &WorkerConfig::shutdown_grace_s},
    {"cancel_poll_ms", &WorkerConfig::cancel_poll_ms},
    {"in_flight_initial", &WorkerConfig::in_flight_initial},
    {"in_flight_min", &WorkerConfig::in_flight_min},
    {"round_trip_target_ms", &WorkerConfig::round_trip_target_ms},
    {"heartbeat_timeout_ms", &WorkerConfig::heartbeat_timeout_ms},
};
const Fields<TaskDefaults> kTaskDefaultFields = {
    {"model", &TaskDefaults::model},
    {"timeout_s", &TaskDefaults::timeout_s},
    {"schedule_timeout_s", &TaskDefaults::schedule_timeout_s},
    {"max_steps", &TaskDefaults::max_steps},
    {"priority", &TaskDefaults::priority},
    {"tier", &TaskDefaults::tier},
    {"time_zone", &TaskDefaults::time_zone},
    {"locale", &TaskDefaults::locale},
    {"strategy", &TaskDefaults::strategy},
};
const Fields<ModelConfig> kModelFields = {
    {"name", &ModelConfig::name},
    {"provider_model", &ModelConfig::provider_model},
    {"protocol", &ModelConfig::protocol},
    {"call_timeout_s", &ModelConfig::call_timeout_s},
    {"max_retries", &ModelConfig::max_retries},
    {"quota_cooloff_s", &ModelConfig::quota_cooloff_s},
    {"context_window_tokens", &ModelConfig::context_window_tokens},
    {"max_output_tokens", &ModelConfig::max_output_tokens},
    {"text_tool_calls", &ModelConfig::text_tool_calls},
    {"stream", &ModelConfig::stream},
};
const Fields<ModelEndpoint> kEndpointFields = {
    {"name", &ModelEndpoint::name},
    {"url", &ModelEndpoint::url},
    {"api_key", &ModelEndpoint::api_key},
    {"requests_per_minute", &ModelEndpoint::requests_per_minute},
    {"tokens_per_minute", &ModelEndpoint::tokens_per_minute},
};
const Fields<ModelRetryConfig> kRetryFields = {
    {"base_ms", &ModelRetryConfig::base_ms},
    {"max_ms", &ModelRetryConfig::max_ms},
};
const Fields<CircuitBreakerConfig> kBreakerFields = {
    {"failure_threshold", &CircuitBreakerConfig::failure_threshold},
    {"open_s", &CircuitBreakerConfig::open_s},
};
const Fields<ToolConfig> kToolFields = {
    {"name", &ToolConfig::name},
    {"description", &ToolConfig::description},
    {"category", &ToolConfig::category},
    {"url", &ToolConfig::url},
    {"method", &ToolConfig::method},
    {"timeout_s", &ToolConfig::timeout_s},
    {"idempotent", &ToolConfig::idempotent},
};
const Fields<BillingConfig> kBillingFields = {
    {"time_zone", &BillingConfig::time_zone},
    {"holidays", &BillingConfig::holidays},
    {"budget_currency", &BillingConfig::budget_currency},
};
const Fields<PriceConfig> kPriceFields = {
    {"model", &PriceConfig::model},
    {"currency", &PriceConfig::currency},
    {"effective_from", &PriceConfig::effective_from},
    {"time_zone", &PriceConfig::time_zone},
    {"input_per_million", &PriceConfig::input_per_million},
    {"cached_input_per_million", &PriceConfig::cached_input_per_million},
    {"output_per_million", &PriceConfig::output_per_million},
};
const Fields<PriceWindow> kWindowFields = {
    {"from", &PriceWindow::from},
    {"to", &PriceWindow::to},
    {"multiplier", &PriceWindow::multiplier},
    {"days", &PriceWindow::days},
};
const Fields<ReactConfig> kReactFields = {
    {"system_prompt", &ReactConfig::system_prompt},
    {"system_prompt_file", &ReactConfig::system_prompt_file},
    {"tool_result_context_chars", &ReactConfig::tool_result_context_chars},
};
const Fields<ResultMarkers> kMarkerFields = {
    {"action_completed", &ResultMarkers::action_completed},
    {"need_clarification", &ResultMarkers::need_clarification},
    {"error", &ResultMarkers::error},
    {"fallback", &ResultMarkers::fallback},
};
const Fields<PlanExecuteConfig> kPlanExecuteFields = {
    {"reflection", &PlanExecuteConfig::reflection},
    {"pass_confidence", &PlanExecuteConfig::pass_confidence},
    {"max_corrections", &PlanExecuteConfig::max_corrections},
    {"weights/accuracy", &PlanExecuteConfig::weight_accuracy},
    {"weights/completeness", &PlanExecuteConfig::weight_completeness},
    {"weights/relevance", &PlanExecuteConfig::weight_relevance},
    {"weights/logic", &PlanExecuteConfig::weight_logic},
};
const Fields<UserTierLimits> kTierFields = {
    {"tier", &UserTierLimits::tier},
    {"strategy", &UserTierLimits::strategy},
    {"allowed_models", &UserTierLimits::allowed_models},
};
const Fields<UserLimits> kTierLimitFields = {
    {"max_concurrency", &UserLimits::max_concurrency},
    {"requests_per_minute", &UserLimits::requests_per_minute},
    {"tokens_per_minute", &UserLimits::tokens_per_minute},
    {"max_queued", &UserLimits::max_queued},
    {"weight", &UserLimits::weight},
};
const Fields<MetricsConfig> kMetricsFields = {
    {"host", &MetricsConfig::host},
    {"port", &MetricsConfig::port},
    {"refresh_interval_s", &MetricsConfig::refresh_interval_s},
};
const Fields<OtlpConfig> kOtlpFields = {
    {"endpoint", &OtlpConfig::endpoint},
    {"service_name", &OtlpConfig::service_name},
    {"timeout_ms", &OtlpConfig::timeout_ms},
    {"queue_tasks", &OtlpConfig::queue_tasks},
    {"batch_spans", &OtlpConfig::batch_spans},
    {"flush_interval_ms", &OtlpConfig::flush_interval_ms},
    {"max_attempts", &OtlpConfig::max_attempts},
    {"max_attribute_chars", &OtlpConfig::max_attribute_chars},
};
const Fields<TelemetryConfig> kTelemetryFields = {
    {"trace_link", &TelemetryConfig::trace_link},
};

}  // namespace detail

namespace {

using namespace detail;

template <typename S>
void describe(std::vector<DescribedField>& out, const std::string& object,
              const Fields<S>& fields) {
  static constexpr const char* kTypes[] = {"string", "integer", "integer",
                                           "number", "boolean", "array"};
  for (const Field<S>& field : fields) {
    const std::string_view name(field.name);
    const auto slash = name.find('/');
    out.push_back({slash == std::string_view::npos
                       ? object
                       : object + "/" + std::string(name.substr(0, slash)),
                   std::string(slash == std::string_view::npos ? name : name.substr(slash + 1)),
                   kTypes[field.member.index()]});
  }
}

}  // namespace

std::vector<DescribedField> described_fields() {
  std::vector<DescribedField> out;
  describe(out, "/postgres", kPostgresFields);
  describe(out, "/kafka", kKafkaFields);
  describe(out, "/kafka/topics", kTopicFields);
  describe(out, "/dispatcher", kDispatcherFields);
  describe(out, "/dispatcher/http", kHttpFields);
  describe(out, "/auth", kAuthFields);
  describe(out, "/auth/api_keys/*", kApiKeyFields);
  describe(out, "/auth/gateway_keys/*", kGatewayKeyFields);
  describe(out, "/worker", kWorkerFields);
  describe(out, "/task_defaults", kTaskDefaultFields);
  describe(out, "/models/*", kModelFields);
  describe(out, "/models/*/endpoints/*", kEndpointFields);
  describe(out, "/models/*/retry", kRetryFields);
  describe(out, "/models/*/circuit_breaker", kBreakerFields);
  describe(out, "/tools/*", kToolFields);
  describe(out, "/billing", kBillingFields);
  describe(out, "/billing/prices/*", kPriceFields);
  describe(out, "/billing/prices/*/windows/*", kWindowFields);
  describe(out, "/react", kReactFields);
  describe(out, "/react/markers", kMarkerFields);
  describe(out, "/plan_execute", kPlanExecuteFields);
  describe(out, "/tiers/*", kTierFields);
  describe(out, "/tiers/*", kTierLimitFields);
  describe(out, "/metrics", kMetricsFields);
  describe(out, "/telemetry", kTelemetryFields);
  describe(out, "/telemetry/otlp", kOtlpFields);
  return out;
}

std::vector<DescribedField> hand_read_fields() {
  // Maps of text, enums, a JSON Schema value, decimals and arrays of objects: each read by
  // code of its own in config.cpp.
  return {
      {"/kafka", "properties", ""},       {"/kafka", "consumer_properties", ""},
      {"/models/*", "endpoints", ""},     {"/models/*", "reasoning_echo", ""},
      {"/tools/*", "headers", ""},        {"/tools/*", "permission", ""},
      {"/tools/*", "parameters", ""},     {"/billing", "prices", ""},
      {"/billing", "exchange_rates", ""}, {"/billing/prices/*", "windows", ""},
      {"/tiers/*", "monthly_budget", ""}, {"/tiers/*", "tool_permission", ""},
      {"/auth", "api_keys", ""},          {"/auth", "gateway_keys", ""},
      {"/telemetry/otlp", "headers", ""},
  };
}

}  // namespace agentfleet::config
