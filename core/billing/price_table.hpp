#pragma once
// Prices per model over time, as providers publish them. Each price applies from an instant
// (a change at a set hour of a set zone: "2025-09-05T16:00+08:00"; a bare date is the start
// of that day in the price's zone) and may have windows of the day with a multiplier
// (off-peak at half price), on every day or on some weekdays and holidays only, read on the
// wall clock of the price's zone. The price in force at the moment of the call applies.
// Costs are computed in exact integer arithmetic and rounded half-up to a micro-unit once
// per call. Immutable after construction; safe to share across threads.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/billing/money.hpp"
#include "core/domain/task.hpp"
#include "core/domain/time_zone.hpp"

namespace agentfleet::billing {

// The kinds of day a window applies on: bit w for weekday w (0 = Sunday), and kHoliday for a
// date of the holiday calendar, which is a holiday and not its weekday.
inline constexpr unsigned kHoliday = 1u << 7;
inline constexpr unsigned kEveryDay = 0xFFu;

struct PriceWindow {
  int from_minute = 0;  // minutes after local midnight, inclusive
  int to_minute = 0;    // exclusive; to < from wraps past midnight
  std::int64_t multiplier_micros = kMicrosPerUnit;
  // The days the window applies on, by the day it begins (a window that wraps past midnight
  // belongs to the day before in its small hours).
  unsigned days = kEveryDay;
};

struct Price {
  std::string model;
  std::string currency;
  std::chrono::sys_seconds effective_from{};  // the instant the price applies from
  std::int64_t input_per_million_micros = 0;
  std::int64_t cached_input_per_million_micros = 0;
  std::int64_t output_per_million_micros = 0;
  std::vector<PriceWindow> windows;
  // The zone whose wall clock and calendar its windows and the holidays are read in; null:
  // the table's.
  std::shared_ptr<const TimeZone> zone;
};

class PriceTable {
 public:
  // `holidays`: local dates (of each price's zone) on which windows for holidays apply.
  PriceTable(TimeZone zone, std::vector<Price> prices,
             std::vector<std::chrono::sys_days> holidays = {});

  // The price of `model` in force at `at`, or nullptr when none is.
  const Price* find(const std::string& model, std::chrono::system_clock::time_point at) const;
  // Cost of one call. A model without a price costs zero in `fallback_currency`; the
  // caller decides whether that is acceptable (the loader refuses it for configured models).
  Money cost(const std::string& model, const TokenUsage& usage,
             std::chrono::system_clock::time_point at) const;
  // The multiplier of `price` at `at`: its first window that holds then, else one.
  std::int64_t multiplier_micros(const Price& price,
                                 std::chrono::system_clock::time_point at) const;

 private:
  TimeZone zone_;
  std::vector<Price> prices_;                    // sorted by model, then effective_from
  std::vector<std::chrono::sys_days> holidays_;  // sorted
};

// "HH:MM" -> minutes after midnight.
std::optional<int> parse_clock_minutes(std::string_view text);
// The years a date in prices or holidays may name (the wall clock's range, with room).
inline constexpr int kFirstYear = 1970;
inline constexpr int kLastYear = 2200;
// When a price applies from: "YYYY-MM-DD" (the start of that day in `zone`), or an RFC 3339
// instant with its offset, "YYYY-MM-DDTHH:MM[:SS]" then "Z" or "+HH:MM"/"-HH:MM". nullopt for
// anything else, a date that does not exist, or a year outside kFirstYear..kLastYear.
std::optional<std::chrono::sys_seconds> parse_effective_from(std::string_view text,
                                                             const TimeZone& zone);
// "YYYY-MM-DD" -> the day, when it exists and its year is within kFirstYear..kLastYear.
std::optional<std::chrono::sys_days> parse_date(std::string_view text);
// A kind of day a window names: "sun" … "sat" (its weekday's bit), "holiday" (kHoliday).
std::optional<unsigned> parse_day_kind(std::string_view name);

}  // namespace agentfleet::billing
