#pragma once
// When to try a failed call again: exponential backoff with full jitter, and one decision
// function that weighs the attempt count, the kind of failure, a delay the server asked
// for (Retry-After) and the call's deadline. Pure functions; the random source is
// injected so tests replay a schedule from a seed.
//
// Thread-safety: plain values and free functions; a RandomSource is the caller's to guard.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/limits/clock.hpp"

namespace agentfleet::limits {

// Uniform 64-bit values; a seeded std::mt19937_64 wrapped in std::ref is one.
using RandomSource = std::function<std::uint64_t()>;

struct RetryPolicy {
  std::chrono::milliseconds base{250};  // backoff before the first retry is up to `base`
  std::chrono::milliseconds cap{20000};
  int max_retries = 3;  // attempts of one call are at most max_retries + 1
};

// Full jitter: uniform in [0, min(cap, base * 2^attempt)], where attempt 0 is the delay
// after the first failure.
std::chrono::milliseconds backoff_ceiling(const RetryPolicy& policy, int attempt);
std::chrono::milliseconds full_jitter_delay(const RetryPolicy& policy, int attempt,
                                            const RandomSource& random);

// Why an attempt failed, as far as retrying is concerned.
enum class AttemptFailure {
  kRateLimited,     // 429: the endpoint is busy; retryable
  kServerError,     // 500, 502, 503, 504: retryable
  kTimeout,         // the attempt ran out of time: retryable while the call has time left
  kConnectError,    // resolve/connect/reset: retryable
  kBadResponse,     // 2xx whose body is not a chat completion: retryable
  kRejected,        // 400, 401, 403 and other 4xx: never retried
  kQuotaExhausted,  // the account is out of money: never retried on a timer
};
std::string_view to_string(AttemptFailure failure);

struct RetryInput {
  int retries_done = 0;  // retries already made in this call (0 after the first attempt)
  AttemptFailure failure = AttemptFailure::kServerError;
  std::optional<std::chrono::milliseconds> server_delay;  // Retry-After, when the server sent one
  Clock::time_point now;
  Clock::time_point deadline;  // of the whole call
  // Another endpoint can take the call now (healthy, has room, not yet failed in this call).
  bool other_endpoint_available = false;
};

struct RetryDecision {
  enum class Action { kRetryAfter, kFailover, kGiveUp };
  Action action = Action::kGiveUp;
  std::chrono::milliseconds delay{0};  // kRetryAfter: wait this long, then the same endpoint
  std::string reason;                  // kGiveUp (and kFailover): why, for the error message
  bool deadline_reached = false;       // kGiveUp because the deadline has already passed
  bool no_time_to_wait = false;        // kGiveUp because the wait would end past the deadline
};

// The rules, in order:
//   - kRejected: give up. kQuotaExhausted: fail over when another endpoint is available
//     (it does not count as a retry of the call), else give up.
//   - max_retries reached: give up.
//   - another endpoint available: fail over now (a different endpoint is independent of
//     this one's trouble; no reason to wait).
//   - else wait: the server's delay when present (never shorter), else full jitter; a wait
//     that ends at or past the deadline means give up now, never sleep past it.
RetryDecision decide_retry(const RetryPolicy& policy, const RetryInput& input,
                           const RandomSource& random);

}  // namespace agentfleet::limits
