#pragma once
// What agentctl's exit code says, and how an HTTP answer or a transport failure becomes one;
// the one-line error text naming the request and the API's error; when a GET is retried.
// Pure functions, thread-safe.

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace agentfleet::agentctl {

// The exit codes scripts rely on (README.md and `agentctl --help` list them).
enum ExitCode : int {
  kExitOk = 0,
  kExitNotSucceeded = 1,  // the task or batch ended, but not (every task) succeeded
  kExitUsage = 2,         // bad flags, arguments or configuration
  kExitNotFound = 3,      // 404: no such task or batch (or dead letter at that offset)
  kExitRefused = 4,       // 401, 403: no key, a bad key, or a key that may not do this
  kExitRejected = 5,      // 400, 405, 409, 413, 422, other 4xx: the input was refused
  kExitThrottled = 6,     // 429: rate limited, queue full, too many uploads
  kExitUnavailable = 7,   // unreachable, timed out, 5xx, or a wait that gave up
};

// The text of the exit code table, for --help.
std::string exit_code_help();

// An HTTP status as an exit code: 2xx 0, 404 3, 401/403 4, 429 6, other 4xx 5, 5xx and
// anything else 7. Status 0 (no answer: connection refused, timeout) is 7.
int exit_code_for_http_status(int status);

// A task's final status as an exit code: succeeded 0; failed, timed_out, cancelled 1; a
// status that is not terminal (a wait that gave up) 7.
int exit_code_for_task_status(std::string_view status);

// A command that cannot go on: its exit code and one line for stderr.
struct CommandFailure : std::runtime_error {
  CommandFailure(int exit_code, const std::string& message)
      : std::runtime_error(message), code(exit_code) {}
  int code;
};

// Bad flags or arguments (exit 2).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One line about a refused request: "GET /v1/tasks/x: 404 not_found: no task x (at
// /path/task_id)". The API's error shape is {"error":{"code","message","path"}}; a body
// in another shape is quoted (its first 200 bytes).
std::string describe_http_failure(std::string_view method, std::string_view path, int status,
                                  std::string_view body);

// The credentials of a URL, the userinfo before its host ("user:pw" in
// `https://user:pw@host/x`); empty when there are none. A view into `url`.
std::string_view url_credentials(std::string_view url);
// A URL as messages show it: its credentials become "[redacted]"
// (`https://[redacted]@host/x`); anything else is kept.
std::string url_without_credentials(std::string_view url);

// Whether an idempotent GET is tried again, and after how long: only on a connection
// failure (nothing was answered) or a 503, at most `max_retries` times, backing off from
// 250 ms doubling to 2 s; a Retry-After of whole seconds is honoured up to 5 s.
// `retry` counts the retries made so far.
std::optional<std::chrono::milliseconds> retry_delay(int retry, int max_retries,
                                                     bool connect_failure, int status,
                                                     std::string_view retry_after);

}  // namespace agentfleet::agentctl
