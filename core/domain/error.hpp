#pragma once
// Expected failures on the data path are values, not exceptions: an Error carries a kind
// that says whether trying again can help. Each adapter maps its library's failures to
// these kinds in one place. Plain value types; thread-compatible.

#include <string>
#include <utility>
#include <variant>

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

struct Error {
  ErrorKind kind = ErrorKind::kFatal;
  std::string message;

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
