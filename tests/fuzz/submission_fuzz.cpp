// submission_fuzz: the task submission codec on untrusted bodies (see README.md).
//   - codec::parse_submission: the body of POST /v1/tasks and the value of a message on the
//     submit topic (Api::submit, SubmitIngest::ingest), with the default SubmissionDefaults
//     and again, when accepted, with a max_text_chars small enough to refuse it;
//   - the batch upload's JSON Lines path (Api::submit_batch): the input cut at '\n' the way
//     the upload cuts its body, blank lines skipped, each line parse_submission with
//     priority batch;
//   - codec::parse_dispatch_message: the dispatch topic the worker reads.
// None of them throws on input: any exception, crash, leak or UB is a finding. An accepted
// submission must also keep what the schema promises (checked below).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>

#include <rapidjson/document.h>

#include "core/codec/json_text.hpp"
#include "core/codec/task_codec.hpp"

namespace {

using agentfleet::codec::Submission;
using agentfleet::codec::SubmissionDefaults;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "submission_fuzz: invariant broken: %s\n", what);
    std::abort();
  }
}

// Storable in Postgres and headers: valid UTF-8 without NUL (what sanitize_text keeps).
bool storable(const std::string& text) {
  return agentfleet::codec::sanitize_text(text) == text;
}

// What an accepted submission promises whoever stores and runs it.
void check_accepted(const Submission& submission, const SubmissionDefaults& defaults) {
  const auto& spec = submission.spec;
  require(!spec.user_id.empty() && spec.user_id.size() <= 4 * 128, "user_id length");
  require(!spec.text.empty(), "text is empty");
  require(agentfleet::codec::count_code_points(spec.text) <= defaults.max_text_chars,
          "text longer than max_text_chars");
  require(storable(spec.user_id) && storable(spec.text) && storable(spec.model) &&
              storable(spec.idempotency_key) && storable(spec.batch_id) &&
              storable(spec.metadata.device_id) && storable(spec.metadata.time_zone) &&
              storable(spec.metadata.locale),
          "a NUL character or bytes that are not UTF-8 got through");
  require(spec.timeout_s >= 1 && spec.timeout_s <= 3600, "timeout_s out of range");
  require(spec.schedule_timeout_s >= 1 && spec.schedule_timeout_s <= 604800,
          "schedule_timeout_s out of range");
  require(spec.max_steps >= 1 && spec.max_steps <= 50, "max_steps out of range");
  require(!spec.model.empty(), "model is empty");
  if (spec.tools) {
    require(spec.tools->size() <= 64, "more than 64 tools");
    for (const auto& tool : *spec.tools)
      require(!tool.empty() && storable(tool), "a tool name");
  }
  rapidjson::Document canonical;
  require(agentfleet::codec::parse_json(canonical, submission.canonical) && canonical.IsObject(),
          "the canonical form is not a JSON object");
}

SubmissionDefaults http_defaults() {
  SubmissionDefaults defaults;
  defaults.model = "m1";
  return defaults;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  static const SubmissionDefaults kDefaults = http_defaults();

  // The whole input as one body (HTTP, submit topic).
  auto parsed = agentfleet::codec::parse_submission(input, kDefaults);
  if (const auto* submission = std::get_if<Submission>(&parsed)) {
    check_accepted(*submission, kDefaults);
    SubmissionDefaults strict = kDefaults;
    strict.max_text_chars = 3;
    auto again = agentfleet::codec::parse_submission(input, strict);
    require(std::holds_alternative<Submission>(again) ==
                (agentfleet::codec::count_code_points(submission->spec.text) <= 3),
            "max_text_chars is not what decides");
  } else {
    const auto& violation = std::get<agentfleet::codec::SchemaViolation>(parsed);
    require(!violation.message.empty(), "a violation without a message");
  }

  // The input as a JSON Lines batch body, cut as Api::submit_batch cuts it (a single line
  // is the body above again: not parsed twice).
  SubmissionDefaults batch = kDefaults;
  batch.priority = agentfleet::Priority::kBatch;
  const bool several_lines = input.find('\n') != std::string_view::npos;
  std::size_t start = 0;
  while (several_lines && start <= input.size()) {
    const std::size_t nl = input.find('\n', start);
    const std::string_view line =
        input.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) {
      auto one = agentfleet::codec::parse_submission(line, batch);
      if (const auto* submission = std::get_if<Submission>(&one))
        check_accepted(*submission, batch);
    }
    if (nl == std::string_view::npos)
      break;
    start = nl + 1;
  }

  // The dispatch message the worker reads.
  auto dispatch = agentfleet::codec::parse_dispatch_message(input);
  if (const auto* message = std::get_if<agentfleet::codec::DispatchMessage>(&dispatch))
    require(!message->task_id.empty(), "a dispatch message without a task id");

  (void)agentfleet::codec::looks_like_timestamp(input);
  return 0;
}
