#include "dispatcher/batch_lines.hpp"

#include <algorithm>
#include <variant>

#include "dispatcher/submission_rules.hpp"

namespace agentfleet::dispatcher {

BatchLines::BatchLines(const SubmissionRules& rules, BatchLineOptions options,
                       std::function<bool(const std::string&)> may_act_for)
    : rules_(rules), options_(std::move(options)), may_act_for_(std::move(may_act_for)) {
  // The upload named its user: a line without one is that user's.
  options_.defaults.user_id = options_.user_id;
}

void BatchLines::fail(const std::string& at, const std::string& message) {
  failed_ = true;
  if (errors_.size() < options_.max_reported)
    errors_.push_back({"/line/" + std::to_string(lines_) + (at == "/" ? "" : at), message});
}

std::optional<codec::Submission> BatchLines::take(std::string_view line) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos)
    return std::nullopt;  // blank lines (a trailing newline) are not tasks
  ++lines_;
  if (lines_ > options_.max_lines) {
    too_many_ = true;
    return std::nullopt;
  }
  if (line.size() > options_.max_line_bytes) {
    fail("/", "the line is longer than " + std::to_string(options_.max_line_bytes) + " bytes");
    return std::nullopt;
  }
  auto parsed = rules_.parse(line, options_.defaults);
  if (auto* violation = std::get_if<codec::SchemaViolation>(&parsed)) {
    fail(violation->path.empty() ? "/" : violation->path, violation->message);
    return std::nullopt;
  }
  auto& submission = std::get<codec::Submission>(parsed);
  TaskSpec& spec = submission.spec;
  if (options_.user_id.empty()) {
    options_.user_id = spec.user_id;
    if (!may_act_for_(options_.user_id)) {
      not_permitted_ = true;
      fail("/user_id", "this key may not act for user '" + options_.user_id + "'");
      return std::nullopt;
    }
  }
  if (spec.user_id != options_.user_id) {
    fail("/user_id", "every task of a batch belongs to its user '" + options_.user_id + "'");
    return std::nullopt;
  }
  if (!spec.batch_id.empty() && spec.batch_id != options_.batch_id) {
    fail("/batch_id", "the line names batch '" + spec.batch_id + "', the upload is batch '" +
                          options_.batch_id + "'");
    return std::nullopt;
  }
  if (auto problem = rules_.check(spec)) {
    fail(problem->path, problem->message);
    return std::nullopt;
  }
  if (failed())
    return std::nullopt;  // nothing will be stored; the rest are only checked
  spec.batch_id = options_.batch_id;
  return std::move(submission);
}

UploadPace::UploadPace(Clock::time_point start, std::chrono::seconds timeout,
                       std::chrono::seconds window, std::int64_t min_bytes_per_s)
    : deadline_(start + timeout),
      timeout_(timeout),
      window_(window),
      min_bytes_per_s_(min_bytes_per_s) {}

std::optional<std::string> UploadPace::read(std::size_t bytes, Clock::duration waited,
                                            Clock::time_point now) {
  received_ += bytes;
  waiting_ += waited;
  if (now > deadline_)
    return "the upload took longer than " + std::to_string(timeout_.count()) + " s";
  if (waiting_ <= window_)
    return std::nullopt;
  const double seconds = std::chrono::duration<double>(waiting_).count();
  const std::uint64_t counted = received_ - std::min(blank_, received_);
  if (static_cast<double>(counted) / seconds >= static_cast<double>(min_bytes_per_s_))
    return std::nullopt;
  return "the upload sent " + std::to_string(counted) + " bytes of task lines" +
         (blank_ > 0 ? " (and " + std::to_string(std::min(blank_, received_)) +
                           " of blank lines, which are not tasks)"
                     : std::string()) +
         " in " + std::to_string(static_cast<long long>(seconds)) +
         " s of waiting for it, less than " + std::to_string(min_bytes_per_s_) + " bytes a second";
}

}  // namespace agentfleet::dispatcher
