#include "dispatcher/completion_rate.hpp"

#include <algorithm>
#include <limits>

namespace agentfleet::dispatcher {

namespace {
std::int64_t second_of(CompletionRate::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}
}  // namespace

CompletionRate::CompletionRate(std::chrono::seconds window, std::chrono::seconds history_bucket,
                               int history_buckets, Clock::time_point started)
    : buckets_(static_cast<std::size_t>(std::max<std::int64_t>(1, window.count()))),
      history_bucket_s_(static_cast<int>(std::max<std::int64_t>(1, history_bucket.count()))),
      history_(static_cast<std::size_t>(std::max(1, history_buckets))),
      first_slot_(started == Clock::time_point::min() ? std::numeric_limits<std::int64_t>::min()
                                                      : second_of(started) / history_bucket_s_) {}

void CompletionRate::record(Clock::time_point now) {
  const std::int64_t second = second_of(now);
  const std::int64_t slot = second / history_bucket_s_;
  std::lock_guard lock(mutex_);
  Bucket& b =
      buckets_[static_cast<std::size_t>(second % static_cast<std::int64_t>(buckets_.size()))];
  if (b.second != second)
    b = Bucket{second, 0};
  ++b.count;
  Bucket& h = history_[static_cast<std::size_t>(slot % static_cast<std::int64_t>(history_.size()))];
  if (h.second != slot)
    h = Bucket{slot, 0};
  ++h.count;
}

std::vector<std::uint64_t> CompletionRate::history(Clock::time_point now) const {
  const std::int64_t last = second_of(now) / history_bucket_s_;
  // Every bucket, or those since the replica started (never fewer than the one of `now`).
  std::int64_t n = static_cast<std::int64_t>(history_.size());
  if (first_slot_ > last - n)
    n = std::max<std::int64_t>(1, last - first_slot_ + 1);
  std::vector<std::uint64_t> out(static_cast<std::size_t>(n), 0);
  std::lock_guard lock(mutex_);
  for (const Bucket& h : history_) {
    if (h.second > last - n && h.second <= last)
      out[static_cast<std::size_t>(n - 1 - (last - h.second))] = h.count;
  }
  return out;
}

double CompletionRate::per_second(Clock::time_point now) const {
  const std::int64_t second = second_of(now);
  const auto window = static_cast<std::int64_t>(buckets_.size());
  std::uint64_t total = 0;
  std::lock_guard lock(mutex_);
  for (const Bucket& b : buckets_) {
    if (b.second > second - window && b.second <= second)
      total += b.count;
  }
  return static_cast<double>(total) / static_cast<double>(window);
}

}  // namespace agentfleet::dispatcher
