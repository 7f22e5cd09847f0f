#include "core/limits/circuit_breaker.hpp"

namespace agentfleet::limits {

CircuitBreaker::State CircuitBreaker::state(Clock::time_point now) const {
  if (state_ == State::kOpen && now >= open_until_)
    return State::kHalfOpen;
  return state_;
}

bool CircuitBreaker::can_pass(Clock::time_point now) const {
  switch (state_) {
    case State::kClosed:
      return true;
    case State::kOpen:
      return now >= open_until_;
    case State::kHalfOpen:
      // The probe is out; a probe silent for a whole open period is presumed lost.
      return now >= probe_started_ + policy_.open_for;
  }
  return false;
}

bool CircuitBreaker::try_pass(Clock::time_point now) {
  if (!can_pass(now))
    return false;
  if (state_ != State::kClosed) {
    state_ = State::kHalfOpen;
    probe_started_ = now;
  }
  return true;
}

void CircuitBreaker::record_success() {
  state_ = State::kClosed;
  failures_ = 0;
}

void CircuitBreaker::record_failure(Clock::time_point now) {
  ++failures_;
  if (policy_.failure_threshold <= 0)
    return;
  if (state_ == State::kHalfOpen || failures_ >= policy_.failure_threshold) {
    state_ = State::kOpen;
    open_until_ = now + policy_.open_for;
  }
}

Clock::time_point CircuitBreaker::next_probe_at() const {
  if (state_ == State::kHalfOpen)
    return probe_started_ + policy_.open_for;
  return open_until_;
}

std::string_view to_string(CircuitBreaker::State state) {
  switch (state) {
    case CircuitBreaker::State::kClosed:
      return "closed";
    case CircuitBreaker::State::kOpen:
      return "open";
    case CircuitBreaker::State::kHalfOpen:
      return "half_open";
  }
  return "unknown";
}

}  // namespace agentfleet::limits
