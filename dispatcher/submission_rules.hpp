#pragma once
// The rules every way a task comes in shares: the HTTP API's submit and retry, a batch
// upload's lines (batch_lines.hpp) and the submit topic (submit_ingest.hpp). What a
// submission gets from configuration where it names nothing, what is checked beyond its
// schema (its model and tools exist), the id and trace context of a new task, the key of a
// topic submission that carries none, and the limits the store holds an insert to (the
// user's queue, the models of the user's tier). Each way in calls these and nothing else for
// them, so a rule changed here changes for all three. Pure functions of the configuration;
// thread-safe.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "core/codec/task_codec.hpp"
#include "core/config/config.hpp"
#include "core/domain/task.hpp"
#include "core/ports/api_store.hpp"

namespace agentfleet::dispatcher {

class SubmissionRules {
 public:
  // `config` must outlive the rules.
  explicit SubmissionRules(const config::Config& config);

  // What a submission gets where it names nothing (task_defaults), and its text's limit.
  const codec::SubmissionDefaults& defaults() const { return defaults_; }
  // A submission read against task_submission.schema.json, with `defaults` (defaults() when
  // not given: a batch's lines take the batch's user and priority too).
  std::variant<codec::Submission, codec::SchemaViolation> parse(std::string_view json) const;
  std::variant<codec::Submission, codec::SchemaViolation> parse(
      std::string_view json, const codec::SubmissionDefaults& defaults) const;
  // The checks beyond the schema: the model and every tool named exist. Apart from parse,
  // because the HTTP API answers a caller who may not act for the user first.
  std::optional<codec::SchemaViolation> check(const TaskSpec& spec) const;

  // A new task to insert, with an id of its own. Its trace continues `incoming` (a caller's
  // W3C traceparent) when that is valid, else starts at the task's own span.
  ports::NewTask new_task(codec::Submission submission, std::string_view incoming) const;
  // A task of a batch upload: every task of the upload carries the upload's trace context
  // (batch_traceparent).
  ports::NewTask batch_task(codec::Submission submission,
                            const std::string& batch_traceparent) const;
  // A batch upload's trace context: `incoming` continued, else a new trace rooted at the
  // batch's span.
  static std::string batch_traceparent(std::string_view incoming, std::string_view batch_id);
  // A submission read from the submit topic without an idempotency key of its own is keyed
  // by `origin`, the place it was first read (a replayed dead letter carries it), so that a
  // replay makes no second task. A key the submission names is kept.
  static void key_by_origin(TaskSpec& spec, std::string_view origin);

  // The limits an insert is held to: the user's queue (max_queued of their tier, or their
  // override), and the models of their tier.
  ports::QueueLimit queue_limit() const;
  ports::ModelCheck model_check() const;

 private:
  const config::Config& config_;
  codec::SubmissionDefaults defaults_;
};

// The defaults a submission gets from configuration (SubmissionRules::defaults).
codec::SubmissionDefaults submission_defaults(const config::Config& config);
// The checks beyond a submission's schema (SubmissionRules::check).
std::optional<codec::SchemaViolation> check_references(const config::Config& config,
                                                       const TaskSpec& spec);

// What is wrong with an id a URL names (a user or a batch), or nothing. Ids are stored only
// as task_submission.schema.json allows them: 1 to `max_chars` characters of UTF-8 without
// control characters. Anything else names nothing stored, would make Postgres refuse the
// query (not UTF-8) and must never reach a header (CR, LF).
std::optional<std::string> id_problem(std::string_view id, std::size_t max_chars);
// The most characters of a user id (task_submission.schema.json).
inline constexpr std::size_t kMaxUserIdChars = 128;
// The most bytes of a batch id (an upload's ?batch_id=).
inline constexpr std::size_t kMaxBatchIdBytes = 200;

// A random (version 4) UUID.
std::string new_task_id();
// A W3C traceparent: the incoming one's trace, parent and flags as version 00 when it is
// valid, else a new trace whose parent id is `own_span_id` (16 hex digits; random when
// empty): the span the trace exporter makes the root of the task's trace (the task's
// codec::task_span_id, a batch's codec::batch_span_id), so no span names a parent that was
// never exported.
std::string traceparent_for(std::string_view incoming, std::string_view own_span_id = {});

}  // namespace agentfleet::dispatcher
