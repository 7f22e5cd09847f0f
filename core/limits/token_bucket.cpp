#include "core/limits/token_bucket.hpp"

#include <algorithm>
#include <cmath>

namespace agentfleet::limits {

using std::chrono::milliseconds;

TokenBucket::TokenBucket(double capacity, milliseconds period, Clock::time_point now)
    : capacity_(capacity > 0 ? capacity : 0),
      per_ms_(capacity > 0 && period.count() > 0 ? capacity / static_cast<double>(period.count())
                                                 : 0),
      level_(capacity_),
      last_(now) {}

void TokenBucket::refill(Clock::time_point now) {
  if (now <= last_)
    return;
  const double elapsed_ms = std::chrono::duration<double, std::milli>(now - last_).count();
  level_ = std::min(capacity_, level_ + elapsed_ms * per_ms_);
  last_ = now;
}

milliseconds TokenBucket::wait_for(double cost, Clock::time_point now) {
  if (unlimited())
    return milliseconds(0);
  refill(now);
  const double missing = clamp_cost(cost) - level_;
  if (missing <= 0)
    return milliseconds(0);
  if (per_ms_ <= 0)
    return milliseconds::max();
  // Rounded up, so that after waiting the cost really fits.
  return milliseconds(static_cast<milliseconds::rep>(std::ceil(missing / per_ms_)));
}

bool TokenBucket::try_acquire(double cost, Clock::time_point now) {
  if (unlimited())
    return true;
  if (wait_for(cost, now).count() > 0)
    return false;
  level_ -= clamp_cost(cost);
  return true;
}

void TokenBucket::adjust(double delta, Clock::time_point now) {
  if (unlimited())
    return;
  refill(now);
  level_ = std::min(capacity_, level_ + delta);
}

double TokenBucket::level(Clock::time_point now) {
  refill(now);
  return level_;
}

std::int64_t estimate_request_tokens(std::size_t request_chars, int max_output_tokens) {
  return static_cast<std::int64_t>((request_chars + 2) / 3) + std::max(max_output_tokens, 0);
}

ProviderLimits::ProviderLimits(std::int64_t requests_per_minute, std::int64_t tokens_per_minute,
                               Clock::time_point now)
    : requests_(static_cast<double>(requests_per_minute), std::chrono::minutes(1), now),
      tokens_(static_cast<double>(tokens_per_minute), std::chrono::minutes(1), now) {}

milliseconds ProviderLimits::wait_for(std::int64_t tokens, Clock::time_point now) {
  return std::max(requests_.wait_for(1, now), tokens_.wait_for(static_cast<double>(tokens), now));
}

bool ProviderLimits::try_acquire(std::int64_t tokens, Clock::time_point now) {
  if (wait_for(tokens, now).count() > 0)
    return false;
  requests_.try_acquire(1, now);
  tokens_.try_acquire(static_cast<double>(tokens), now);
  return true;
}

void ProviderLimits::correct(std::int64_t estimated_tokens, std::int64_t actual_tokens,
                             Clock::time_point now) {
  tokens_.adjust(static_cast<double>(estimated_tokens - actual_tokens), now);
}

}  // namespace agentfleet::limits
