#pragma once
// Token buckets for a provider account's limits. A TokenBucket holds up to `capacity`
// units and refills continuously at `capacity` per `period`; a cost is taken whole or not
// at all, and a refused caller learns how long until it would fit. Its level may go below
// zero when a cost is corrected upwards after the fact (the debt delays later callers).
//
// ProviderLimits pairs a requests-per-minute and a tokens-per-minute bucket for one
// endpoint: a call takes one request and its estimated tokens before it is sent, and the
// estimate is corrected with the usage the reply reports.
//
// Time comes from the caller (`now`). Thread-safety: none; one owner thread.

#include <chrono>
#include <cstdint>

#include "core/limits/clock.hpp"

namespace agentfleet::limits {

class TokenBucket {
 public:
  // capacity 0 means unlimited: every acquire succeeds.
  TokenBucket(double capacity, std::chrono::milliseconds period, Clock::time_point now);

  bool unlimited() const { return capacity_ <= 0; }
  // How long until `cost` fits (zero when it fits now). A cost above the capacity is
  // treated as the capacity, so it fits once the bucket is full.
  std::chrono::milliseconds wait_for(double cost, Clock::time_point now);
  // Takes `cost` if it fits now; true when taken.
  bool try_acquire(double cost, Clock::time_point now);
  // Adds (negative: takes) units without a check: corrections after the fact. Never above
  // the capacity.
  void adjust(double delta, Clock::time_point now);
  double level(Clock::time_point now);

 private:
  void refill(Clock::time_point now);
  double clamp_cost(double cost) const { return cost > capacity_ ? capacity_ : cost; }

  double capacity_;
  double per_ms_;
  double level_;
  Clock::time_point last_;
};

// ~ characters / 3 for the prompt plus the output allowance: conservative for English
// and for CJK text alike before the provider reports real usage.
std::int64_t estimate_request_tokens(std::size_t request_chars, int max_output_tokens);

class ProviderLimits {
 public:
  // 0 = unlimited for either.
  ProviderLimits(std::int64_t requests_per_minute, std::int64_t tokens_per_minute,
                 Clock::time_point now);

  // Zero when one request of `tokens` fits now, else how long until both buckets have room.
  std::chrono::milliseconds wait_for(std::int64_t tokens, Clock::time_point now);
  // Takes one request and `tokens` if both fit now (all or nothing).
  bool try_acquire(std::int64_t tokens, Clock::time_point now);
  // After the call: the tokens really used replace the estimate (the difference is taken
  // or given back).
  void correct(std::int64_t estimated_tokens, std::int64_t actual_tokens, Clock::time_point now);

  TokenBucket& requests() { return requests_; }
  TokenBucket& tokens() { return tokens_; }

 private:
  TokenBucket requests_;
  TokenBucket tokens_;
};

}  // namespace agentfleet::limits
