#pragma once
// Prices per model over time. Each price has an effective-from date (local midnight in the
// table's zone) and optional time-of-day windows with a multiplier (off-peak at half
// price); the price in force at the moment of the call applies. Costs are computed in
// exact integer arithmetic and rounded half-up to a micro-unit once per call.
// Immutable after construction; safe to share across threads.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/billing/money.hpp"
#include "core/domain/task.hpp"
#include "core/domain/time_zone.hpp"

namespace agentfleet::billing {

struct PriceWindow {
  int from_minute = 0;  // minutes after local midnight, inclusive
  int to_minute = 0;    // exclusive; to < from wraps past midnight
  std::int64_t multiplier_micros = kMicrosPerUnit;
};

struct Price {
  std::string model;
  std::string currency;
  int effective_year = 1970, effective_month = 1, effective_day = 1;
  std::int64_t input_per_million_micros = 0;
  std::int64_t cached_input_per_million_micros = 0;
  std::int64_t output_per_million_micros = 0;
  std::vector<PriceWindow> windows;
};

class PriceTable {
 public:
  PriceTable(TimeZone zone, std::vector<Price> prices);

  // The price of `model` in force at `at`, or nullptr when none is.
  const Price* find(const std::string& model, std::chrono::system_clock::time_point at) const;
  // Cost of one call. A model without a price costs zero in `fallback_currency`; the
  // caller decides whether that is acceptable (the loader refuses it for configured models).
  Money cost(const std::string& model, const TokenUsage& usage,
             std::chrono::system_clock::time_point at) const;

 private:
  TimeZone zone_;
  std::vector<Price> prices_;  // sorted by model, then effective date
};

// "HH:MM" -> minutes after midnight.
std::optional<int> parse_clock_minutes(std::string_view text);

}  // namespace agentfleet::billing
