#pragma once
// The configuration both binaries read: one YAML file, parsed, each value's `${VAR}` /
// `${VAR:-default}` filled from the environment, converted to JSON, validated against
// schemas/config.schema.json, then
// turned into these plain structs with their defaults. Everything below the loader takes
// these structs and never sees YAML. Immutable once loaded; safe to share across threads.

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/billing/money.hpp"
#include "core/billing/price_table.hpp"
#include "core/domain/conversation.hpp"
#include "core/domain/user_limits.hpp"

namespace agentfleet::config {

// Thrown by the loader; `what()` names the file and the JSON path of the problem
// (for example "config/agentfleet.yaml: /kafka/topics/results: expected string").
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct PostgresConfig {
  std::string url;    // libpq connection string or URI
  int pool_size = 8;  // connections (and threads) per process
  int statement_timeout_ms = 5000;
  int connect_timeout_s = 5;
  // Readiness (/readyz of both processes) fails while commits do not wait for a synchronous
  // standby (pg::judge_replication): a failover could then lose committed steps.
  bool require_synchronous_replication = false;

  bool operator==(const PostgresConfig&) const = default;
};

struct KafkaTopics {
  std::string submit = "agent.tasks.submit";
  std::string dispatch = "agent.tasks.dispatch";
  std::string results = "agent.tasks.results";
  std::string events = "agent.tasks.events";
  std::string dlq = "agent.tasks.dlq";

  bool operator==(const KafkaTopics&) const = default;
};

struct KafkaConfig {
  std::string bootstrap_servers;
  std::string client_id = "agentfleet";
  std::string worker_group = "agentfleet-workers";
  std::string dispatcher_group = "agentfleet-dispatchers";
  KafkaTopics topics;
  int delivery_timeout_ms = 30000;
  // Extra librdkafka properties passed through verbatim (security.protocol, sasl.*, ...).
  std::map<std::string, std::string> properties;
  // Consumers only, applied after `properties` (session.timeout.ms, ...).
  std::map<std::string, std::string> consumer_properties;

  bool operator==(const KafkaConfig&) const = default;
};

struct HttpListen {
  std::string host = "127.0.0.1";
  int port = 8080;
  // Open connections at most, in all and from one client address: over a cap a connection
  // is answered 503 (all) or 429 (one address) with Retry-After, and closed.
  int max_connections = 4096;
  int max_connections_per_address = 1024;
  // A keep-alive connection waits this long for its next request; a request's head must
  // arrive within header_timeout_s of its first byte, and a request read whole (head and
  // body) within request_timeout_s.
  int idle_timeout_s = 60;
  int header_timeout_s = 10;
  int request_timeout_s = 30;

  bool operator==(const HttpListen&) const = default;
};

struct DispatcherConfig {
  HttpListen http;
  int scheduler_interval_ms = 50;
  // The least time between two scheduler passes: the wake-ups of a burst of submissions and
  // results are served by one pass.
  int scheduler_min_gap_ms = 5;
  // Recovery, queue timeouts and cancelled batches are looked at at most this often (and at
  // once again while they find a full pass of work): they are about time, not wake-ups.
  int housekeeping_interval_ms = 500;
  // The scheduler's wait when nothing is queued or under way (a submission wakes it at
  // once); less than half of leader_silence_s, which its session must not stay silent for.
  int scheduler_idle_ms = 4000;
  int scheduler_batch = 200;
  // A dispatched task no worker has claimed after this long is published again (its message
  // may have been lost with a worker); duplicates are harmless, the claim admits one.
  int redispatch_after_s = 60;
  // Claims of a task whose lease expired each time before it ends failed.
  int max_attempts = 5;
  int relay_interval_ms = 50;
  // The relay's longest wait after a pass that found nothing due (its replica's scheduler and
  // API wake it at once when they write outbox rows; it looks again sooner when a row it saw
  // falls due sooner); at most the 10 s a worker's fallback waits. Not longer by default: under
  // a flood, another user's p99 wait was 82-103 ms in seven runs with 10 s against 72-88 ms in
  // six with 1 s (docs/performance.md).
  int relay_idle_ms = 1000;
  int relay_batch = 500;
  int max_text_chars = 5000;
  // Fleet-wide cap on dispatched + running tasks of all users (0: none): the capacity the
  // scheduler shares out fairly when it is scarce.
  std::int64_t max_active_tasks = 0;
  // Of a pass's admissions, the share (percent, rounded up) kept for waiting batch work
  // so it never starves behind interactive work.
  int batch_share_percent = 20;
  // Tokens a task of a user is charged at dispatch before the user's real usage is known.
  std::int64_t task_token_estimate = 4000;
  // How often a replica that is not the scheduler tries to become it.
  int leader_retry_ms = 1000;
  // A scheduler connection that sends Postgres nothing for this long is ended by the server
  // (idle_session_timeout), releasing the scheduler lock: when the active replica's path to
  // Postgres goes silent, another replica takes over within about this plus leader_retry_ms.
  int leader_silence_s = 10;
  // POST /v1/batches: most lines per batch, uploads at once per replica, and of those at
  // most max_batch_uploads_per_caller for one caller (a key that acts for the users it lists,
  // a gateway user, or a key that acts for any user, per user): one tenant cannot hold every
  // upload slot of a replica.
  int max_batch_lines = 1000000;
  int max_batch_uploads = 2;
  int max_batch_uploads_per_caller = 1;
  // Server-sent events: a comment line this often keeps proxies from closing the stream.
  int stream_heartbeat_s = 15;
  // Event streams and long polls (?wait=N, POST /v1/plan) open at once on a replica, per
  // caller (an API key, a gateway user) and in all; over a cap: 429 / 503 with Retry-After.
  int max_streams_per_caller = 100;
  int max_streams = 5000;
  int max_long_polls_per_caller = 200;
  int max_long_polls = 10000;
  // POST /v1/batches: an upload must end within this, and after its first
  // batch_upload_rate_window_s send at least batch_upload_min_bytes_per_s of task lines on
  // average (blank lines do not count; else 408, nothing stored): a trickling client holds
  // neither a place nor a transaction for long, and an upload lasts at most about its
  // window plus its size over that rate.
  int batch_upload_timeout_s = 3600;
  int batch_upload_min_bytes_per_s = 8192;
  int batch_upload_rate_window_s = 30;

  bool operator==(const DispatcherConfig&) const = default;
};

struct ApiKey {
  std::string name;                // in logs, never the key
  std::string sha256;              // hex SHA-256 of the key; the key itself is never configured
  bool admin = false;              // admin keys act for every user and may change limits
  std::vector<std::string> users;  // the users a non-admin key may act for ("*": any)

  bool operator==(const ApiKey&) const = default;
};

// Who may call the dispatcher's API. `api_keys`: `Authorization: Bearer <key>` (or
// `X-API-Key`), matched by its SHA-256. `gateway`: a trusted gateway in front has
// authenticated the caller and names the user in `user_header` (and admin in
// `admin_header: true`). `none`: no checks (a private test setup only).
struct AuthConfig {
  std::string mode = "api_keys";
  std::vector<ApiKey> api_keys;
  std::string user_header = "X-User-ID";
  std::string admin_header = "X-Admin";
  // gateway mode: the gateway proves each request came through it with one of these
  // secrets (SHA-256 only, like api keys; `users` and `admin` unused) in
  // `gateway_key_header`; without it the identity headers are not believed.
  std::vector<ApiKey> gateway_keys;
  std::string gateway_key_header = "X-Gateway-Key";

  bool operator==(const AuthConfig&) const = default;
};

struct WorkerConfig {
  std::string id;  // defaults to "<hostname>-<pid>" when empty
  int max_in_flight = 2000;
  int lease_s = 30;
  int heartbeat_s = 10;
  int db_threads = 4;
  int max_tool_calls_per_step = 5;
  int trace_result_chars = 500;
  int shutdown_grace_s = 30;
  // How often running tasks are checked for a cancellation request between heartbeats.
  int cancel_poll_ms = 500;
  // The adaptive in-flight limit (limits/concurrency_limit): starts at in_flight_initial,
  // stays within [in_flight_min, max_in_flight], backs off when a quarter-second window's
  // p90 round trip to Postgres exceeds max(round_trip_target_ms, 3 x the quiet round trip).
  int in_flight_initial = 64;
  int in_flight_min = 8;
  int round_trip_target_ms = 100;
  // Statement timeout of the lease keeper's own connection: a heartbeat slower than this
  // fails and is tried again at the next tick.
  int heartbeat_timeout_ms = 2000;

  bool operator==(const WorkerConfig&) const = default;
};

struct TaskDefaults {
  std::string model;  // the first model when empty
  int timeout_s = 30;
  int schedule_timeout_s = 3600;
  int max_steps = 10;
  std::string priority = "interactive";
  std::string tier = "standard";  // of a user without an override in user_limits
  std::string time_zone = "Asia/Shanghai";
  std::string locale = "zh-CN";
  std::string strategy = "react";  // of tasks that name none and whose tier names none

  bool operator==(const TaskDefaults&) const = default;
};

struct ModelEndpoint {
  std::string name;     // in logs and metrics; the URL's host when not given (unique per model)
  std::string url;      // full URL of the chat completions endpoint
  std::string api_key;  // empty: no Authorization header
  // Limits of the provider account behind this endpoint; 0 = unlimited.
  std::int64_t requests_per_minute = 0;
  std::int64_t tokens_per_minute = 0;

  bool operator==(const ModelEndpoint&) const = default;
};

struct ModelRetryConfig {
  int base_ms = 250;  // full-jitter backoff: uniform in [0, min(max_ms, base_ms * 2^retry)]
  int max_ms = 20000;

  bool operator==(const ModelRetryConfig&) const = default;
};

struct CircuitBreakerConfig {
  int failure_threshold = 5;  // consecutive failures of an endpoint that open its breaker
  int open_s = 30;            // how long it stays open before one probe is let through

  bool operator==(const CircuitBreakerConfig&) const = default;
};

struct ModelConfig {
  std::string name;                           // what tasks ask for
  std::string provider_model;                 // the "model" sent to the endpoint; name when empty
  std::string protocol = "function_calling";  // or "react_json"
  std::vector<ModelEndpoint> endpoints;       // at least one
  int call_timeout_s = 60;
  int max_retries = 3;
  ModelRetryConfig retry;
  CircuitBreakerConfig circuit_breaker;
  int quota_cooloff_s = 300;  // an endpoint out of quota (money) leaves the rotation this long
  int context_window_tokens = 32000;
  int max_output_tokens = 1024;
  // function_calling: the formats in which tool calls written as text (a model served
  // without a tool-call parser) are read as calls (codec/text_tool_calls.hpp); [] reads none.
  // By default every format but pythonic (codec::default_text_call_formats).
  std::vector<std::string> text_tool_calls = {
      "hermes",      "llama",     "mistral",     "json",         "granite",
      "jamba",       "internlm",  "qwen3_coder", "glm45",        "deepseek",
      "functionary", "command_r", "nemotron",    "firefunction", "fenced"};
  // function_calling: which assistant turns carry their reasoning back as
  // `reasoning_content`: none, tool_turns (DeepSeek's thinking mode requires it there) or
  // all.
  ReasoningEcho reasoning_echo = ReasoningEcho::kNone;
  // Ask for answers as a stream (`"stream": true`): the task's event stream shows the text
  // as the model writes it; each attempt then has a connection of its own.
  bool stream = false;

  bool operator==(const ModelConfig&) const = default;
};

using agentfleet::Permission;  // core/domain/user_limits.hpp

struct ToolConfig {
  std::string name;
  std::string description;
  std::string category;
  std::string url;  // the arguments are the JSON body (POST, PUT, PATCH) or the query (GET)
  std::string method = "POST";  // POST, PUT, PATCH or GET
  // Extra request headers: service credentials (from secrets, via ${VAR}); never logged.
  std::vector<std::pair<std::string, std::string>> headers;
  int timeout_s = 60;
  // A call sent twice under its Idempotency-Key acts once (docs/tools.md): retried, and
  // re-sent by a resumed task. Otherwise sent once; a resumed task reports outcome_unknown.
  bool idempotent = false;
  Permission permission = Permission::kRead;
  std::string parameters_schema;  // JSON Schema of the arguments, serialized JSON text

  bool operator==(const ToolConfig&) const = default;
};

struct PriceWindow {
  std::string from;              // "HH:MM" on the wall clock of the price's zone
  std::string to;                // "HH:MM", exclusive; may wrap past midnight
  std::string multiplier = "1";  // decimal string, e.g. "0.5" for off-peak half price
  // The days it applies on ("mon" … "sun", "holiday"), by the day it begins; empty: every day.
  std::vector<std::string> days;

  bool operator==(const PriceWindow&) const = default;
};

struct PriceConfig {
  std::string model;
  std::string currency = "CNY";
  // "YYYY-MM-DD" (the start of that day in the price's zone) or an RFC 3339 instant with its
  // offset ("2025-09-05T16:00+08:00").
  std::string effective_from;
  // Decimal strings per million tokens; parsed exactly by billing, never as double.
  std::string input_per_million = "0";
  std::string cached_input_per_million = "0";
  std::string output_per_million = "0";
  std::vector<PriceWindow> windows;
  // The IANA zone of its dates, windows and holidays (the provider's); empty: billing's.
  std::string time_zone;

  bool operator==(const PriceConfig&) const = default;
};

struct BillingConfig {
  // The zone of prices that name none, and of the month a budget counts.
  std::string time_zone = "Asia/Shanghai";
  std::vector<PriceConfig> prices;
  // Dates ("YYYY-MM-DD", local to each price's zone) on which windows for `holiday` apply
  // instead of those for their weekday.
  std::vector<std::string> holidays;
  // The currency budgets are kept in (tiers' and users' monthly_budget); the loader sets it
  // to the first price's currency (else CNY) when the file gives none.
  std::string budget_currency;
  // What one unit of another currency is worth in the budget currency, as a decimal string
  // (USD: "7.2"). Every price currency other than the budget currency has one.
  std::map<std::string, std::string> exchange_rates;

  bool operator==(const BillingConfig&) const = default;
};

// The exchange of a loaded configuration (its rates are valid).
billing::Exchange budget_exchange(const BillingConfig& billing);
// The price table of a loaded configuration (its prices are valid; zones are loaded from
// the system's zoneinfo).
billing::PriceTable price_table(const BillingConfig& billing);

struct ResultMarkers {
  std::vector<std::string> action_completed = {"✅"};
  std::vector<std::string> need_clarification = {"⚠️"};
  std::vector<std::string> error = {"❌"};
  std::string fallback = "action_completed";  // result type when no marker matches

  bool operator==(const ResultMarkers&) const = default;
};

struct ReactConfig {
  // The template in use: the inline `system_prompt`, or the text of `system_prompt_file`
  // (which the loader reads; giving both is an error); empty selects the built-in prompt.
  std::string system_prompt;
  // As written in the file; the loader resolves a relative path against the folder of the
  // configuration file (of source_name for load_config_text) and reads it.
  std::string system_prompt_file;
  int tool_result_context_chars = 4000;  // longer tool results are truncated in the context
  ResultMarkers markers;

  bool operator==(const ReactConfig&) const = default;
};

struct UserTierLimits {
  std::string tier;
  // The limits of the tier's users (monthly_budget is read as a decimal, "0": unlimited).
  UserLimits limits;
  std::string strategy;  // "react" or "plan_execute" for tasks that name none; empty: default
  // The models the tier's users may run (names of models[]); empty: every model.
  std::vector<std::string> allowed_models;

  bool operator==(const UserTierLimits&) const = default;
};

// The plan_execute strategy (core/react/plan_execute.hpp).
struct PlanExecuteConfig {
  std::string reflection = "at_end";  // every_step, every_third_step or at_end
  double pass_confidence = 0.7;       // the critic's weighted score that passes
  int max_corrections = 3;            // new plans after the first
  double weight_accuracy = 0.4;
  double weight_completeness = 0.3;
  double weight_relevance = 0.2;
  double weight_logic = 0.1;

  bool operator==(const PlanExecuteConfig&) const = default;
};

struct MetricsConfig {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: no metrics listener
  // The least time between two readings of the slow gauges, read once at start and then
  // when a scrape finds the last reading older: the dispatcher's task and outbox counts
  // (queries), the worker's consumer lag (a broker round trip).
  int refresh_interval_s = 15;

  bool operator==(const MetricsConfig&) const = default;
};

// OpenTelemetry traces of ended tasks, exported over OTLP/HTTP (JSON) by the worker
// (otlp::SpanExporter). No endpoint: none are exported.
struct OtlpConfig {
  std::string endpoint;  // the collector's base URL; spans go to <endpoint>/v1/traces
  std::map<std::string, std::string> headers;  // sent with every export request
  std::string service_name = "agentfleet";     // the resource's service.name
  int timeout_ms = 5000;                       // each export request's deadline
  int queue_tasks = 2048;  // ended tasks waiting to be exported; beyond: dropped, counted
  int batch_spans = 512;   // spans per request
  int flush_interval_ms = 2000;
  int max_attempts = 3;  // sends of one request, the first included
  int max_attribute_chars = 1024;

  bool operator==(const OtlpConfig&) const = default;
};

struct TelemetryConfig {
  OtlpConfig otlp;
  // A task's trace in the tracing backend the spans go to: a URL with {trace_id} where the
  // trace id goes (Jaeger: http://jaeger:16686/trace/{trace_id}). The console links each
  // task's trace id through it (GET /v1/whoami tells it); empty: ids shown without a link.
  std::string trace_link;

  bool operator==(const TelemetryConfig&) const = default;
};

struct Config {
  std::string source;  // path the configuration was read from
  PostgresConfig postgres;
  KafkaConfig kafka;
  DispatcherConfig dispatcher;
  WorkerConfig worker;
  TaskDefaults task_defaults;
  std::vector<ModelConfig> models;
  std::vector<ToolConfig> tools;
  BillingConfig billing;
  ReactConfig react;
  PlanExecuteConfig plan_execute;
  std::vector<UserTierLimits> tiers;
  MetricsConfig metrics;
  TelemetryConfig telemetry;
  AuthConfig auth;

  const ModelConfig* find_model(const std::string& name) const;
  const ToolConfig* find_tool(const std::string& name) const;
  const UserTierLimits* find_tier(const std::string& name) const;
  // A user's tier: the one named (their override) when known, else task_defaults.tier's;
  // nullptr when neither is configured.
  const UserTierLimits* tier_for(const std::string& user_tier) const;
  // The limits that apply to a user: their tier's (as tier_for finds it; the built-in
  // UserLimits when none is configured) with their overrides.
  UserLimits limits_for(const UserLimitOverrides& overrides) const;
  // The highest tool level a user may call: their own override when set (a level name),
  // else their tier's (as tier_for finds it), else write.
  Permission tool_permission_for(const std::string& user_tier,
                                 const std::string& user_override) const;
  // Why a user of tier `user_tier` (their own override; empty: task_defaults.tier) may not
  // run `model` (its tier's allowed_models); empty when they may.
  std::string model_refusal(const std::string& user_tier, const std::string& model) const;
  // A user's monthly budget in micro-units of billing.budget_currency (0: none): their own
  // when set, else their tier's (as above).
  std::int64_t monthly_budget_micros_for(const std::string& user_tier,
                                         std::optional<std::int64_t> user_override) const;
  // The strategy of a task that names none: its user's tier's (as above), else
  // task_defaults.strategy.
  const std::string& strategy_for(const std::string& user_tier) const;

  bool operator==(const Config&) const = default;
};

// Replaces `${VAR}` and `${VAR:-default}` in one string from `lookup` (the environment by
// default). `$${` is a literal `${`. An unset variable without a default is an error
// naming the variable. The loader applies it to each YAML value after parsing.
using EnvLookup = std::optional<std::string> (*)(const std::string& name);
std::optional<std::string> process_environment(const std::string& name);
std::string interpolate(const std::string& text, EnvLookup lookup = process_environment);

// $AGENTFLEET_CONFIG when set, else config/agentfleet.yaml (relative to the working
// directory); `--config FILE` overrides it in both binaries.
std::string default_config_path();

// Reads, parses, fills in each value's references, validates and converts. Throws
// ConfigError.
Config load_config_file(const std::string& path, EnvLookup lookup = process_environment);
Config load_config_text(const std::string& yaml_text, const std::string& source_name,
                        EnvLookup lookup = process_environment);

using agentfleet::parse_permission;
using agentfleet::to_string;

}  // namespace agentfleet::config
