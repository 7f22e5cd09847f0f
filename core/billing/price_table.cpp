#include "core/billing/price_table.hpp"

#include <algorithm>
#include <array>
#include <tuple>

namespace agentfleet::billing {

namespace {
// Token counts times micro-prices times a micro-multiplier exceed 64 bits.
__extension__ using Wide = __int128;

// Digits at text[at, at + n) as a number; nullopt when any is not a digit.
std::optional<int> digits(std::string_view text, std::size_t at, std::size_t n) {
  if (at + n > text.size())
    return std::nullopt;
  int value = 0;
  for (std::size_t i = at; i < at + n; ++i) {
    if (text[i] < '0' || text[i] > '9')
      return std::nullopt;
    value = value * 10 + (text[i] - '0');
  }
  return value;
}
}  // namespace

std::optional<int> parse_clock_minutes(std::string_view text) {
  if (text.size() != 5 || text[2] != ':')
    return std::nullopt;
  const auto hours = digits(text, 0, 2);
  const auto minutes = digits(text, 3, 2);
  if (!hours || !minutes || *hours > 24 || *minutes > 59 || (*hours == 24 && *minutes != 0))
    return std::nullopt;
  return *hours * 60 + *minutes;
}

std::optional<std::chrono::sys_days> parse_date(std::string_view text) {
  using namespace std::chrono;
  if (text.size() != 10 || text[4] != '-' || text[7] != '-')
    return std::nullopt;
  const auto y = digits(text, 0, 4);
  const auto m = digits(text, 5, 2);
  const auto d = digits(text, 8, 2);
  // The years a price or a holiday can be about: the clock counts nanoseconds from 1970,
  // which overflow before 1678 and after 2262.
  if (!y || !m || !d || *y < kFirstYear || *y > kLastYear)
    return std::nullopt;
  const year_month_day date{year{*y}, month{static_cast<unsigned>(*m)},
                            day{static_cast<unsigned>(*d)}};
  if (!date.ok())
    return std::nullopt;
  return sys_days{date};
}

std::optional<std::chrono::sys_seconds> parse_effective_from(std::string_view text,
                                                             const TimeZone& zone) {
  using namespace std::chrono;
  const auto date = parse_date(text.substr(0, 10));
  if (!date)
    return std::nullopt;
  if (text.size() == 10)
    return from_local(zone, sys_seconds{*date});
  // YYYY-MM-DDTHH:MM[:SS](Z|±HH:MM)
  if (text[10] != 'T' && text[10] != 't')
    return std::nullopt;
  const auto clock = parse_clock_minutes(text.substr(11, 5));
  if (!clock || *clock == 24 * 60)
    return std::nullopt;
  std::size_t at = 16;
  int second = 0;
  if (at < text.size() && text[at] == ':') {
    const auto s = digits(text, at + 1, 2);
    if (!s || *s > 59)
      return std::nullopt;
    second = *s;
    at += 3;
  }
  seconds offset{0};
  const std::string_view zone_part = text.substr(std::min(at, text.size()));
  if (zone_part == "Z" || zone_part == "z") {
    offset = seconds{0};
  } else if (zone_part.size() == 6 && (zone_part[0] == '+' || zone_part[0] == '-')) {
    const auto off = parse_clock_minutes(zone_part.substr(1));
    if (!off || *off >= 24 * 60)
      return std::nullopt;
    offset = minutes{zone_part[0] == '+' ? *off : -*off};
  } else {
    return std::nullopt;
  }
  return sys_seconds{*date} + minutes{*clock} + seconds{second} - offset;
}

std::optional<unsigned> parse_day_kind(std::string_view name) {
  static constexpr std::array<std::string_view, 7> kWeekdays = {"sun", "mon", "tue", "wed",
                                                                "thu", "fri", "sat"};
  for (std::size_t i = 0; i < kWeekdays.size(); ++i) {
    if (name == kWeekdays[i])
      return 1u << i;
  }
  if (name == "holiday")
    return kHoliday;
  return std::nullopt;
}

PriceTable::PriceTable(TimeZone zone, std::vector<Price> prices,
                       std::vector<std::chrono::sys_days> holidays)
    : zone_(std::move(zone)), prices_(std::move(prices)), holidays_(std::move(holidays)) {
  std::stable_sort(prices_.begin(), prices_.end(), [](const Price& a, const Price& b) {
    return std::tie(a.model, a.effective_from) < std::tie(b.model, b.effective_from);
  });
  std::sort(holidays_.begin(), holidays_.end());
}

const Price* PriceTable::find(const std::string& model,
                              std::chrono::system_clock::time_point at) const {
  const Price* found = nullptr;
  for (const Price& price : prices_) {
    if (price.model == model && price.effective_from <= at)
      found = &price;  // sorted ascending: the last one not in the future wins
  }
  return found;
}

std::int64_t PriceTable::multiplier_micros(const Price& price,
                                           std::chrono::system_clock::time_point at) const {
  using namespace std::chrono;
  if (price.windows.empty())
    return kMicrosPerUnit;
  const LocalTime local = to_local(price.zone ? *price.zone : zone_, at);
  const int minute = local.hour * 60 + local.minute;
  const sys_days today{year{local.year} / local.month / local.day};
  for (const PriceWindow& window : price.windows) {
    const bool wraps = window.from_minute > window.to_minute;
    const bool inside = wraps ? (minute >= window.from_minute || minute < window.to_minute)
                              : (minute >= window.from_minute && minute < window.to_minute);
    if (!inside)
      continue;
    if (window.days != kEveryDay) {
      // The day the window began: the day before, in the small hours of one that wraps.
      const bool began_yesterday = wraps && minute < window.to_minute;
      const sys_days began = began_yesterday ? today - days{1} : today;
      const unsigned weekday = began_yesterday ? (local.weekday + 6) % 7 : local.weekday;
      const bool holiday = std::binary_search(holidays_.begin(), holidays_.end(), began);
      if ((window.days & (holiday ? kHoliday : 1u << weekday)) == 0)
        continue;
    }
    return window.multiplier_micros;
  }
  return kMicrosPerUnit;
}

Money PriceTable::cost(const std::string& model, const TokenUsage& usage,
                       std::chrono::system_clock::time_point at) const {
  const Price* price = find(model, at);
  if (!price)
    return Money{0, prices_.empty() ? std::string("CNY") : prices_.front().currency};
  // Providers count cached tokens inside the prompt tokens: charge them once, at the cached
  // price, and the remainder at the input price. Reasoning tokens are inside output.
  const Wide cached = std::clamp<std::int64_t>(usage.cached_input, 0, usage.input);
  const Wide fresh = usage.input - cached;
  Wide numerator = fresh * price->input_per_million_micros +
                   cached * price->cached_input_per_million_micros +
                   static_cast<Wide>(usage.output) * price->output_per_million_micros;
  Wide denominator = 1'000'000;  // prices are per million tokens
  if (const std::int64_t multiplier = multiplier_micros(*price, at); multiplier != kMicrosPerUnit) {
    numerator *= multiplier;
    denominator *= kMicrosPerUnit;
  }
  // Round half up (costs are non-negative).
  const Wide micros = (numerator * 2 + denominator) / (denominator * 2);
  return Money{static_cast<std::int64_t>(micros), price->currency};
}

}  // namespace agentfleet::billing
