#include "core/limits/retry_policy.hpp"

#include <algorithm>

namespace agentfleet::limits {

using std::chrono::milliseconds;

milliseconds backoff_ceiling(const RetryPolicy& policy, int attempt) {
  const milliseconds base = std::max(policy.base, milliseconds(0));
  const milliseconds cap = std::max(policy.cap, milliseconds(0));
  // Doubling stops once the cap is reached, so a large attempt number cannot overflow.
  milliseconds ceiling = base;
  for (int i = 0; i < attempt && ceiling < cap; ++i)
    ceiling *= 2;
  return std::min(ceiling, cap);
}

milliseconds full_jitter_delay(const RetryPolicy& policy, int attempt, const RandomSource& random) {
  const auto ceiling = static_cast<std::uint64_t>(backoff_ceiling(policy, attempt).count());
  if (ceiling == 0)
    return milliseconds(0);
  return milliseconds(static_cast<milliseconds::rep>(random() % (ceiling + 1)));
}

std::string_view to_string(AttemptFailure failure) {
  switch (failure) {
    case AttemptFailure::kRateLimited:
      return "rate_limited";
    case AttemptFailure::kServerError:
      return "server_error";
    case AttemptFailure::kTimeout:
      return "timeout";
    case AttemptFailure::kConnectError:
      return "connect_error";
    case AttemptFailure::kBadResponse:
      return "bad_response";
    case AttemptFailure::kRejected:
      return "rejected";
    case AttemptFailure::kQuotaExhausted:
      return "quota_exhausted";
  }
  return "unknown";
}

namespace {
RetryDecision give_up(std::string reason, bool deadline_reached = false) {
  RetryDecision d;
  d.action = RetryDecision::Action::kGiveUp;
  d.reason = std::move(reason);
  d.deadline_reached = deadline_reached;
  return d;
}

RetryDecision failover(std::string reason) {
  RetryDecision d;
  d.action = RetryDecision::Action::kFailover;
  d.reason = std::move(reason);
  return d;
}
}  // namespace

RetryDecision decide_retry(const RetryPolicy& policy, const RetryInput& input,
                           const RandomSource& random) {
  if (input.failure == AttemptFailure::kRejected)
    return give_up("the request was rejected; retrying cannot help");
  if (input.failure == AttemptFailure::kQuotaExhausted) {
    if (input.other_endpoint_available)
      return failover("out of quota");
    return give_up("out of quota on every endpoint");
  }
  if (input.now >= input.deadline)
    return give_up("the deadline passed", true);
  if (input.retries_done >= policy.max_retries) {
    return give_up("gave up after " + std::to_string(input.retries_done) +
                   " retries (max_retries " + std::to_string(policy.max_retries) + ")");
  }
  if (input.other_endpoint_available)
    return failover(std::string(to_string(input.failure)));

  RetryDecision d;
  d.action = RetryDecision::Action::kRetryAfter;
  d.delay = input.server_delay ? std::max(*input.server_delay, milliseconds(0))
                               : full_jitter_delay(policy, input.retries_done, random);
  if (input.now + d.delay >= input.deadline) {
    const auto left = std::chrono::duration_cast<milliseconds>(input.deadline - input.now).count();
    RetryDecision out =
        give_up(std::string(input.server_delay ? "the server asked to wait " : "a backoff of ") +
                std::to_string(d.delay.count()) + " ms, more than the " + std::to_string(left) +
                " ms left before the deadline");
    out.no_time_to_wait = true;
    return out;
  }
  return d;
}

}  // namespace agentfleet::limits
