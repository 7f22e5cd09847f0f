#pragma once
// The lines of a batch upload (POST /v1/batches), checked one at a time as they stream in.
// Each line is a task submission (task_submission.schema.json) of the batch's user: the
// query's `user_id` (a line without one is that user's), else the first line's (which the
// caller must be allowed to act for);
// a line that names another batch, another user, an unknown model or tool, or is longer
// than the line limit, is an error reported by its line number (`/line/N/...`). Once there
// is an error no line is handed out any more (nothing of the batch is stored), but the rest
// are still checked, so that the answer names the first few problems. Blank lines are not
// tasks. Past `max_lines` tasks the upload is too big (413).
//
// Pure: no I/O, not thread-safe (one per upload).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/codec/task_codec.hpp"
#include "core/config/config.hpp"
#include "dispatcher/submission_rules.hpp"

namespace agentfleet::dispatcher {

struct BatchLineError {
  std::string path;  // "/line/N" and the JSON path within the line; "/query/..." for the query
  std::string message;
};

struct BatchLineOptions {
  std::string batch_id;
  std::string user_id;  // from the query; empty: the first task's user
  codec::SubmissionDefaults defaults;
  std::int64_t max_lines = 1000000;
  std::size_t max_line_bytes = 256 * 1024;
  std::size_t max_reported = 10;  // errors listed; the rest only make the upload fail
};

class BatchLines {
 public:
  // `may_act_for(user)`: whether the caller may submit for that user.
  // `rules` must outlive the lines.
  BatchLines(const SubmissionRules& rules, BatchLineOptions options,
             std::function<bool(const std::string&)> may_act_for);

  // One line, without its newline. The task to store (its batch set, no task id yet), or
  // nullopt: a blank line, a bad line (recorded), or any line once the upload has failed.
  std::optional<codec::Submission> take(std::string_view line);

  bool failed() const { return failed_ || too_many_; }
  // The first max_reported problems, in line order.
  const std::vector<BatchLineError>& errors() const { return errors_; }
  // More than max_lines tasks.
  bool too_many() const { return too_many_; }
  // The batch's user (the first line's) is one the caller may not act for.
  bool not_permitted() const { return not_permitted_; }
  // Lines taken that are not blank.
  std::int64_t lines() const { return lines_; }
  const std::string& user_id() const { return options_.user_id; }

 private:
  void fail(const std::string& at, const std::string& message);

  const SubmissionRules& rules_;
  BatchLineOptions options_;
  std::function<bool(const std::string&)> may_act_for_;
  std::vector<BatchLineError> errors_;
  std::int64_t lines_ = 0;
  bool failed_ = false;
  bool too_many_ = false;
  bool not_permitted_ = false;
};

// How fast a batch upload's body comes in: it must have ended by its deadline and, once
// the server has spent `window` waiting for the client's bytes, have sent at least
// `min_bytes_per_s` of task lines on average over that waiting (the server's own time,
// writing slices to Postgres, is not counted against the client). Blank lines are not
// tasks: their bytes count for nothing, so a client sending only blank lines (which holds
// an upload slot) is cut once the window has passed, and an upload lasts at most about the
// window plus its size over the rate. Pure, like BatchLines.
class UploadPace {
 public:
  using Clock = std::chrono::steady_clock;
  UploadPace(Clock::time_point start, std::chrono::seconds timeout, std::chrono::seconds window,
             std::int64_t min_bytes_per_s);

  // One read of the body: `bytes` came after waiting `waited`; `now` is after it. Why the
  // upload is cut (the 408's message), or nullopt.
  std::optional<std::string> read(std::size_t bytes, Clock::duration waited, Clock::time_point now);
  // Of the bytes read, `bytes` were a blank line and its newline.
  void blank(std::size_t bytes) { blank_ += bytes; }

 private:
  Clock::time_point deadline_;
  std::chrono::seconds timeout_;
  std::chrono::seconds window_;
  std::int64_t min_bytes_per_s_;
  std::uint64_t received_ = 0;
  std::uint64_t blank_ = 0;
  Clock::duration waiting_{};
};

}  // namespace agentfleet::dispatcher
