#include "dispatcher/completion_rate.hpp"

#include <algorithm>

namespace agentfleet::dispatcher {

namespace {
std::int64_t second_of(CompletionRate::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}
}  // namespace

CompletionRate::CompletionRate(std::chrono::seconds window)
    : buckets_(static_cast<std::size_t>(std::max<std::int64_t>(1, window.count()))) {}

void CompletionRate::record(Clock::time_point now) {
  const std::int64_t second = second_of(now);
  std::lock_guard lock(mutex_);
  Bucket& b =
      buckets_[static_cast<std::size_t>(second % static_cast<std::int64_t>(buckets_.size()))];
  if (b.second != second)
    b = Bucket{second, 0};
  ++b.count;
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
