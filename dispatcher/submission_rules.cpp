#include "dispatcher/submission_rules.hpp"

#include <random>
#include <utility>

#include "core/adapters/log.hpp"
#include "core/codec/json_text.hpp"
#include "core/codec/otlp_trace.hpp"
#include "dispatcher/user_limits.hpp"

namespace agentfleet::dispatcher {

namespace {
std::string random_hex(std::size_t bytes) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < bytes; ++i) {
    const auto byte = static_cast<unsigned>(rng() & 0xff);
    out.push_back(kHex[byte >> 4]);
    out.push_back(kHex[byte & 0xf]);
  }
  return out;
}

}  // namespace

SubmissionRules::SubmissionRules(const config::Config& config)
    : config_(config), defaults_(submission_defaults(config)) {}

std::variant<codec::Submission, codec::SchemaViolation> SubmissionRules::parse(
    std::string_view json) const {
  return codec::parse_submission(json, defaults_);
}

std::variant<codec::Submission, codec::SchemaViolation> SubmissionRules::parse(
    std::string_view json, const codec::SubmissionDefaults& defaults) const {
  return codec::parse_submission(json, defaults);
}

std::optional<codec::SchemaViolation> SubmissionRules::check(const TaskSpec& spec) const {
  return check_references(config_, spec);
}

ports::NewTask SubmissionRules::new_task(codec::Submission submission,
                                         std::string_view incoming) const {
  std::string task_id = new_task_id();
  std::string traceparent = traceparent_for(incoming, codec::task_span_id(task_id));
  ports::NewTask task{std::move(submission.spec), std::move(submission.canonical),
                      std::move(traceparent)};
  task.spec.task_id = std::move(task_id);
  return task;
}

ports::NewTask SubmissionRules::batch_task(codec::Submission submission,
                                           const std::string& batch_traceparent) const {
  ports::NewTask task{std::move(submission.spec), std::move(submission.canonical),
                      batch_traceparent};
  task.spec.task_id = new_task_id();
  return task;
}

std::string SubmissionRules::batch_traceparent(std::string_view incoming,
                                               std::string_view batch_id) {
  return traceparent_for(incoming, codec::batch_span_id(batch_id));
}

void SubmissionRules::key_by_origin(TaskSpec& spec, std::string_view origin) {
  if (spec.idempotency_key.empty())
    spec.idempotency_key = "kafka:" + std::string(origin);
}

ports::QueueLimit SubmissionRules::queue_limit() const {
  return dispatcher::queue_limit(config_);
}

ports::ModelCheck SubmissionRules::model_check() const {
  return dispatcher::model_check(config_);
}

std::string new_task_id() {
  std::string hex = random_hex(16);
  hex[12] = '4';                                              // version 4
  hex[16] = "89ab"[static_cast<unsigned char>(hex[16]) % 4];  // RFC 4122 variant
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20);
}

std::string traceparent_for(std::string_view incoming, std::string_view own_span_id) {
  // A valid W3C traceparent (version, 32 hex trace id, 16 hex parent id, 2 hex flags)
  // continues the caller's trace: rebuilt as version 00 from its validated parts, so a later
  // version's extra fields are dropped, not stored and forwarded. Anything else starts a new
  // trace.
  if (const std::string_view trace = log::trace_id_of(incoming); !trace.empty()) {
    return "00-" + std::string(trace) + "-" + std::string(incoming.substr(36, 16)) + "-" +
           std::string(incoming.substr(53, 2));
  }
  return "00-" + random_hex(16) + "-" +
         (own_span_id.size() == 16 ? std::string(own_span_id) : random_hex(8)) + "-01";
}

codec::SubmissionDefaults submission_defaults(const config::Config& config) {
  codec::SubmissionDefaults defaults;
  defaults.model = config.task_defaults.model;
  defaults.timeout_s = config.task_defaults.timeout_s;
  defaults.schedule_timeout_s = config.task_defaults.schedule_timeout_s;
  defaults.max_steps = config.task_defaults.max_steps;
  defaults.priority =
      parse_priority(config.task_defaults.priority).value_or(Priority::kInteractive);
  defaults.time_zone = config.task_defaults.time_zone;
  defaults.locale = config.task_defaults.locale;
  defaults.max_text_chars = static_cast<std::size_t>(config.dispatcher.max_text_chars);
  return defaults;
}

std::optional<codec::SchemaViolation> check_references(const config::Config& config,
                                                       const TaskSpec& spec) {
  if (!config.find_model(spec.model))
    return codec::SchemaViolation{"/model", "unknown model '" + spec.model + "'"};
  if (spec.tools) {
    for (std::size_t i = 0; i < spec.tools->size(); ++i) {
      if (!config.find_tool((*spec.tools)[i])) {
        return codec::SchemaViolation{"/tools/" + std::to_string(i),
                                      "unknown tool '" + (*spec.tools)[i] + "'"};
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> id_problem(std::string_view id, std::size_t max_chars) {
  if (id.empty())
    return "must not be empty";
  if (codec::sanitize_text(id) != id)
    return "must be valid UTF-8 without NUL characters";
  for (const char c : id) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      return "must not contain control characters";
  }
  if (codec::count_code_points(id) > max_chars)
    return "must be at most " + std::to_string(max_chars) + " characters";
  return std::nullopt;
}

}  // namespace agentfleet::dispatcher
