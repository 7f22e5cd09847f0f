#pragma once
// Tasks ended per second over a sliding window, as this replica's task feed sees their
// result events (GET /v1/fleet). One bucket per second of the window, so memory is fixed.
// Beside it, a short history for the fleet page's chart: the ends per `history_bucket`
// (10 s) over the last `history_buckets` (180: half an hour), also fixed in size, kept
// whether anyone looks or not.
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
  // `started`: when the replica began to count; the history holds no bucket before it.
  explicit CompletionRate(std::chrono::seconds window = std::chrono::seconds(60),
                          std::chrono::seconds history_bucket = std::chrono::seconds(10),
                          int history_buckets = 180,
                          Clock::time_point started = Clock::time_point::min());

  void record(Clock::time_point now);
  // The ends recorded in the `window` seconds up to `now`, per second of the window.
  double per_second(Clock::time_point now) const;
  int window_s() const { return static_cast<int>(buckets_.size()); }
  // The ends of each history bucket, oldest first, the last the one `now` falls in (still
  // filling): history_buckets counts, 0 where none were recorded, but none from before
  // `started` (a replica up for a minute has six).
  std::vector<std::uint64_t> history(Clock::time_point now) const;
  int history_bucket_s() const { return history_bucket_s_; }

 private:
  struct Bucket {
    std::int64_t second = -1;  // which second (or history bucket) it counts, since the epoch
    std::uint64_t count = 0;
  };
  mutable std::mutex mutex_;
  std::vector<Bucket> buckets_;
  int history_bucket_s_;
  std::vector<Bucket> history_;
  std::int64_t first_slot_;  // the bucket `started` falls in
};

}  // namespace agentfleet::dispatcher
