#pragma once
// A circuit breaker for one endpoint. Closed: calls pass, consecutive failures are
// counted; `failure_threshold` of them in a row open it. Open: calls are refused for
// `open_for`; then it is half-open and lets exactly one probe through. The probe's success
// closes it, its failure opens it again for another `open_for`. A probe that never reports
// back (its caller was cancelled) is given up after `open_for` and another is let through.
//
// Time comes from the caller (`now`), so tests drive it with a ManualClock.
// Thread-safety: none; one owner thread (the model client's io thread).

#include <chrono>
#include <string_view>

#include "core/limits/clock.hpp"

namespace agentfleet::limits {

struct CircuitBreakerPolicy {
  int failure_threshold = 5;  // consecutive failures that open the breaker; 0 disables it
  std::chrono::milliseconds open_for{30000};
};

class CircuitBreaker {
 public:
  enum class State { kClosed, kOpen, kHalfOpen };

  explicit CircuitBreaker(CircuitBreakerPolicy policy = {}) : policy_(policy) {}

  // Whether a call may go now, without taking anything (for choosing an endpoint).
  bool can_pass(Clock::time_point now) const;
  // Takes the right to call: true in closed; in half-open, true for the one probe.
  bool try_pass(Clock::time_point now);
  void record_success();
  void record_failure(Clock::time_point now);

  State state(Clock::time_point now) const;
  // When an open breaker lets its next probe through (meaningful when !can_pass(now)).
  Clock::time_point next_probe_at() const;
  int consecutive_failures() const { return failures_; }

 private:
  CircuitBreakerPolicy policy_;
  State state_ = State::kClosed;
  int failures_ = 0;
  Clock::time_point open_until_{};
  Clock::time_point probe_started_{};
};

std::string_view to_string(CircuitBreaker::State state);

}  // namespace agentfleet::limits
