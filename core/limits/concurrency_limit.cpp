#include "core/limits/concurrency_limit.hpp"

#include <algorithm>
#include <cmath>

namespace agentfleet::limits {

namespace {
// The value at fraction `q` of the sorted samples (nearest rank).
std::int64_t quantile(std::vector<std::int64_t>& samples, double q) {
  const std::size_t rank =
      std::min(samples.size() - 1,
               static_cast<std::size_t>(std::ceil(q * static_cast<double>(samples.size()))) - 1);
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(rank),
                   samples.end());
  return samples[rank];
}
}  // namespace

ConcurrencyLimit::ConcurrencyLimit(ConcurrencyLimitOptions options, time_point now)
    : options_(options),
      limit_(std::clamp(options.initial, std::max(1, options.min),
                        std::max(options.max, std::max(1, options.min)))),
      window_start_(now) {
  options_.min = std::max(1, options_.min);
  options_.max = std::max(options_.max, options_.min);
  options_.min_samples = std::max(1, options_.min_samples);
  options_.quiet_memory = std::max(1, options_.quiet_memory);
}

std::chrono::microseconds ConcurrencyLimit::quiet_round_trip() const {
  if (medians_us_.empty())
    return std::chrono::microseconds(0);
  return std::chrono::microseconds(*std::min_element(medians_us_.begin(), medians_us_.end()));
}

void ConcurrencyLimit::sample(std::chrono::microseconds round_trip, bool ok, time_point now) {
  samples_us_.push_back(std::max<std::int64_t>(0, round_trip.count()));
  failed_ = failed_ || !ok;
  close_window_if_due(now);
}

void ConcurrencyLimit::in_flight(int running, time_point now) {
  running_ = running;
  most_in_flight_ = std::max(most_in_flight_, running);
  close_window_if_due(now);
}

void ConcurrencyLimit::close_window_if_due(time_point now) {
  const auto age = now - window_start_;
  if (age < options_.window)
    return;
  const bool enough = static_cast<int>(samples_us_.size()) >= options_.min_samples;
  // A quiet worker (few writes) judges what it has after a few windows, so that a burst after
  // a lull is not judged by one old sample alone.
  if (!enough && age < 4 * options_.window && !failed_)
    return;
  ++counters_.windows;
  const bool busy = most_in_flight_ >= static_cast<int>(std::ceil(options_.busy_share * limit_));
  if (!samples_us_.empty()) {
    std::vector<std::int64_t> copy = samples_us_;
    const std::int64_t median = quantile(copy, 0.5);
    const std::int64_t p90 = quantile(copy, 0.9);
    // Until a quiet window has been seen, the target alone judges.
    const double threshold =
        medians_us_.empty()
            ? static_cast<double>(options_.target.count())
            : std::max(static_cast<double>(options_.target.count()),
                       options_.tolerance * static_cast<double>(quiet_round_trip().count()));
    const bool congested = failed_ || static_cast<double>(p90) > threshold;
    if (congested) {
      slow_start_ = false;
      limit_ = std::max(options_.min, static_cast<int>(std::floor(options_.backoff * limit_)));
      ++counters_.backoffs;
    } else if (busy && limit_ < options_.max) {
      const int grown = slow_start_
                            ? limit_ * 2
                            : limit_ + std::max(1, static_cast<int>(options_.increase * limit_));
      limit_ = std::min(options_.max, grown);
      ++counters_.increases;
    }
    // Only uncongested windows below the target say what a quiet round trip is: a worker
    // that starts on a congested database must not learn congestion as its baseline.
    if (!congested && median <= options_.target.count()) {
      medians_us_.push_back(median);
      if (static_cast<int>(medians_us_.size()) > options_.quiet_memory)
        medians_us_.pop_front();
    }
  } else if (failed_) {
    slow_start_ = false;
    limit_ = std::max(options_.min, static_cast<int>(std::floor(options_.backoff * limit_)));
    ++counters_.backoffs;
  }
  samples_us_.clear();
  failed_ = false;
  most_in_flight_ = running_;
  window_start_ = now;
}

}  // namespace agentfleet::limits
