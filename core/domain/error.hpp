#pragma once
// Expected failures on the data path are values, not exceptions: an Error carries a kind
// that says whether trying again can help. Each adapter maps its library's failures to
// these kinds in one place. Plain value types; thread-compatible.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace agentfleet {

enum class ErrorKind {
  kTransient,  // retrying later may succeed (connection lost, 5xx, serialization conflict)
  kTimeout,    // a deadline passed
  kInvalid,    // the input is wrong; retrying cannot help
  kNotFound,
  kConflict,   // e.g. an idempotency key reused with another body
  kLeaseLost,  // another attempt owns the task now; stop without writing
  kCancelled,
  kFatal,  // a bug or a misconfiguration
};

// Why a task that did not succeed ended: a closed set, in the task JSON, the result event,
// the `error` event of its stream and the `error_code` label of
// agentfleet_tasks_finished_total (docs/errors.md describes each). A code is added only
// with its row in docs/errors.md and its value in schemas/result_event.schema.json.
enum class ErrorCode {
  kCancelled,            // the user (or a cancelled batch) stopped it
  kScheduleTimeout,      // queued longer than schedule_timeout_s
  kDeadline,             // timeout_s ran out, or a wait the provider asked for would pass it
  kMaxSteps,             // max_steps model steps without a final answer
  kQuotaExceeded,        // the user's monthly budget is spent
  kMaxTokens,            // the task's own max_tokens is used up
  kMaxCost,              // the task's own max_cost is spent
  kAttemptsExhausted,    // its worker was lost max_attempts times
  kModelUnavailable,     // the model's endpoints failed (5xx, connection, bad answers)
  kModelOutOfQuota,      // the provider account is out of money on every endpoint
  kModelRejected,        // the provider refused the request (4xx: bad request, key, URL)
  kTruncated,            // the answer was cut at max_output_tokens
  kContentFilter,        // the provider's content filter withheld the answer
  kEmptyReply,           // the model answered nothing, again after a correction
  kNoPlan,               // plan_execute: no usable plan
  kUnperformedAction,    // the model reported an action that no tool performed
  kUnknownModel,         // the task names a model this worker does not have
  kModelNotAllowed,      // the user's tier may not use the task's model (allowed_models)
  kUnsupportedStrategy,  // the task's strategy cannot run on its model
  kParentUnavailable,    // a follow-up whose parent task could not be read
  kCheckpointMismatch,   // a saved step no longer matches the replay (settings changed)
  kInternal,             // agentfleet's own fault (an exception, a write the store refused)
};
std::string_view to_string(ErrorCode code);
std::optional<ErrorCode> parse_error_code(std::string_view text);
// Every code, in declaration order.
const std::vector<ErrorCode>& all_error_codes();

struct Error {
  ErrorKind kind = ErrorKind::kFatal;
  std::string message;
  // What the failure means for a task that ends of it, when the adapter knows (the model
  // client: model_out_of_quota, model_rejected, ...).
  std::optional<ErrorCode> code;

  bool retryable() const { return kind == ErrorKind::kTransient || kind == ErrorKind::kTimeout; }
};

std::string_view to_string(ErrorKind kind);

// Either a value or an Error. Deliberately small: `ok()`, `value()`, `error()`.
template <typename T>
class Result {
 public:
  // Default-constructed results are errors; Asio's co_spawn needs the default.
  Result() : data_(Error{ErrorKind::kFatal, "no result"}) {}
  Result(T value) : data_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : data_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  const Error& error() const { return std::get<Error>(data_); }

 private:
  std::variant<T, Error> data_;
};

struct Done {};  // the value of a Result that has nothing to return
using Status = Result<Done>;
inline Status ok_status() {
  return Done{};
}

}  // namespace agentfleet
