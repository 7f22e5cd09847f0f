#pragma once
// Where limits read the time: an injectable monotonic clock. Production code uses
// SteadyClock; tests use ManualClock and move time by hand, so no test sleeps or reads the
// wall clock.
//
// Thread-safety: SteadyClock is stateless; ManualClock is not synchronized (a test drives
// it from one thread).

#include <chrono>

namespace agentfleet::limits {

class Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;

  virtual ~Clock() = default;
  virtual time_point now() const = 0;
};

class SteadyClock final : public Clock {
 public:
  time_point now() const override { return std::chrono::steady_clock::now(); }

  // One shared instance: the clock has no state.
  static SteadyClock& instance() {
    static SteadyClock clock;
    return clock;
  }
};

class ManualClock final : public Clock {
 public:
  // Starts far from the steady clock's epoch so `now() - something` never underflows.
  explicit ManualClock(time_point start = time_point(std::chrono::hours(24 * 365))) : now_(start) {}

  time_point now() const override { return now_; }
  void advance(duration by) { now_ += by; }
  void set(time_point to) { now_ = to; }

 private:
  time_point now_;
};

}  // namespace agentfleet::limits
