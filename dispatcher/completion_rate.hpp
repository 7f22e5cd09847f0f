#pragma once
// Tasks ended per second over a sliding window, as this replica's task feed sees their
// result events (GET /v1/fleet). One bucket per second of the window, so memory is fixed.
//
// Thread-safety: every method may be called from any thread.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

namespace agentfleet::dispatcher {

class CompletionRate {
 public:
  using Clock = std::chrono::steady_clock;
  explicit CompletionRate(std::chrono::seconds window = std::chrono::seconds(60));

  void record(Clock::time_point now);
  // The ends recorded in the `window` seconds up to `now`, per second of the window.
  double per_second(Clock::time_point now) const;
  int window_s() const { return static_cast<int>(buckets_.size()); }

 private:
  struct Bucket {
    std::int64_t second = -1;  // which second it counts (since the clock's epoch)
    std::uint64_t count = 0;
  };
  mutable std::mutex mutex_;
  std::vector<Bucket> buckets_;
};

}  // namespace agentfleet::dispatcher
