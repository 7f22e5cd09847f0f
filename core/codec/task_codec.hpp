#pragma once
// JSON <-> task values for the submission (HTTP body and submit topic), the dispatch
// message and the result event. Parsing validates against the schemas in schemas/ first,
// so every error names the JSON path of the problem. Pure functions.

#include <chrono>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/codec/json_schema.hpp"
#include "core/domain/task.hpp"

namespace agentfleet::codec {

struct SubmissionDefaults {
  // The user of a submission that names none (a batch upload's lines, when the upload names
  // its user); empty: user_id is required.
  std::string user_id;
  std::string model;
  int timeout_s = 30;
  int schedule_timeout_s = 3600;
  int max_steps = 10;
  Priority priority = Priority::kInteractive;
  std::string time_zone = "Asia/Shanghai";
  std::string locale = "zh-CN";
  std::size_t max_text_chars = 5000;  // Unicode code points
};

// A submission as parsed: the spec (without task_id) and a canonical form of the body for
// idempotency comparisons (same key + same canonical body = the same request).
struct Submission {
  TaskSpec spec;
  std::string canonical;
};

std::variant<Submission, SchemaViolation> parse_submission(std::string_view json,
                                                           const SubmissionDefaults& defaults);

// The submission a stored task's canonical form (Submission::canonical) stands for, as a
// submission body parse_submission() takes: what a retry of the task submits again. The
// batch, when it had one, is left out (a retry is a task of its own); `idempotency_key` is
// set when not empty. nullopt when `canonical` is not such a form.
std::optional<std::string> submission_from_canonical(std::string_view canonical,
                                                     std::string_view idempotency_key = {});
// A retry's canonical form: the request's, naming the task it retries (so that one
// idempotency key cannot name retries of two tasks). submission_from_canonical() leaves it
// out again.
std::string canonical_with_retry_of(std::string_view canonical, std::string_view retry_of);

// Written by the scheduler (the statement that marks the task dispatched writes it to the
// outbox: the fragment dispatch_marked of core/adapters/pg/sql/scheduler.sql); read by the
// worker.
struct DispatchMessage {
  std::string task_id;
  std::string user_id;
  Priority priority = Priority::kInteractive;
  std::string dispatched_at;  // RFC 3339 UTC with milliseconds
};
std::variant<DispatchMessage, SchemaViolation> parse_dispatch_message(std::string_view json);

// The dispatch message's header that names what its task needs of the worker that runs it:
// words of the form kind:value separated by spaces ("strategy:plan_only feature:follow_up";
// written by the fragment dispatch_marked of core/adapters/pg/sql/scheduler.sql). A header, not a
// payload field: a payload field the schema does not know makes a message a dead letter. Kinds:
// strategy (a strategy the task asked for), feature (follow_up: it continues a parent's
// conversation; spend_limits: it has its own max_tokens or max_cost); a later version may
// add words of any kind.
inline constexpr std::string_view kNeedsHeader = "agentfleet-needs";
// The words of `header` this build cannot meet, in their order (empty: it can run the task;
// a missing or empty header needs nothing).
std::vector<std::string> unmet_needs(std::string_view header);

struct ResultEvent {
  std::string task_id;
  std::string user_id;
  std::string batch_id;
  TaskStatus status = TaskStatus::kFailed;
  std::optional<TaskResult> result;
  std::string error;
  std::string error_code;  // quota_exceeded, schedule_timeout, ... (empty: none)
  int attempt = 0;
  int steps = 0;
  int tool_calls = 0;
  TokenUsage usage;
  std::string cost;  // "0.001234"
  std::string currency;
  std::string finished_at;
};
std::string result_event_json(const ResultEvent& event);

struct ProgressEvent {
  std::string task_id;
  std::string user_id;
  int seq = 0;
  int attempt = 0;
  std::string event;  // step | action | execution | delta | done | error
  int step = 0;
  std::string tool;
  std::string data_json = "{}";  // an object
  std::string at;
};
std::string progress_event_json(const ProgressEvent& event);

// Unicode code points of UTF-8 text (invalid bytes count one each).
std::size_t count_code_points(std::string_view utf8);
// RFC 3339 UTC with milliseconds: "2026-11-22T03:04:05.123Z".
std::string format_rfc3339(std::chrono::system_clock::time_point t);
// Whether `text` has the shape of a date (2026-11-01) or an RFC 3339 time
// (2026-11-01T08:00:00+08:00, 2026-11-01 08:00:00Z): digits and separators in their
// places, as Postgres reads them. Whether that day exists (a 30th of February) is not
// checked here.
bool looks_like_timestamp(std::string_view text);

}  // namespace agentfleet::codec
