#pragma once
// Where limits and the task runner read the time: an injectable time source with a
// monotonic clock (deadlines, rates) and a wall clock (timestamps, prices in force, the
// prompt's "now"). Production code uses SteadyClock; tests use ManualClock and move both by
// hand, so no test sleeps or reads the wall clock.
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
  virtual std::chrono::system_clock::time_point wall_now() const = 0;
};

class SteadyClock final : public Clock {
 public:
  time_point now() const override { return std::chrono::steady_clock::now(); }
  std::chrono::system_clock::time_point wall_now() const override {
    return std::chrono::system_clock::now();
  }

  // One shared instance: the clock has no state.
  static SteadyClock& instance() {
    static SteadyClock clock;
    return clock;
  }
};

class ManualClock final : public Clock {
 public:
  // Starts far from the steady clock's epoch so `now() - something` never underflows; the
  // wall clock at 2026-11-25T04:00:00Z unless told otherwise. Both move together.
  explicit ManualClock(time_point start = time_point(std::chrono::hours(24 * 365)),
                       std::chrono::system_clock::time_point wall_start =
                           std::chrono::system_clock::time_point(std::chrono::seconds(1795579200)))
      : now_(start), wall_(wall_start) {}

  time_point now() const override { return now_; }
  std::chrono::system_clock::time_point wall_now() const override { return wall_; }
  void advance(duration by) {
    now_ += by;
    wall_ += std::chrono::duration_cast<std::chrono::system_clock::duration>(by);
  }
  void set(time_point to) {
    wall_ += std::chrono::duration_cast<std::chrono::system_clock::duration>(to - now_);
    now_ = to;
  }

 private:
  time_point now_;
  std::chrono::system_clock::time_point wall_;
};

}  // namespace agentfleet::limits
