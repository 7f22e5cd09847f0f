#include "core/billing/price_table.hpp"

#include <algorithm>
#include <tuple>

namespace agentfleet::billing {

namespace {
// Token counts times micro-prices times a micro-multiplier exceed 64 bits.
__extension__ using Wide = __int128;
}  // namespace

std::optional<int> parse_clock_minutes(std::string_view text) {
  if (text.size() != 5 || text[2] != ':')
    return std::nullopt;
  for (int i : {0, 1, 3, 4}) {
    if (text[static_cast<std::size_t>(i)] < '0' || text[static_cast<std::size_t>(i)] > '9') {
      return std::nullopt;
    }
  }
  const int hours = (text[0] - '0') * 10 + (text[1] - '0');
  const int minutes = (text[3] - '0') * 10 + (text[4] - '0');
  if (hours > 24 || minutes > 59 || (hours == 24 && minutes != 0))
    return std::nullopt;
  return hours * 60 + minutes;
}

PriceTable::PriceTable(TimeZone zone, std::vector<Price> prices)
    : zone_(std::move(zone)), prices_(std::move(prices)) {
  std::stable_sort(prices_.begin(), prices_.end(), [](const Price& a, const Price& b) {
    return std::tie(a.model, a.effective_year, a.effective_month, a.effective_day) <
           std::tie(b.model, b.effective_year, b.effective_month, b.effective_day);
  });
}

const Price* PriceTable::find(const std::string& model,
                              std::chrono::system_clock::time_point at) const {
  const LocalTime local = to_local(zone_, at);
  const auto today = std::make_tuple(local.year, local.month, local.day);
  const Price* found = nullptr;
  for (const Price& price : prices_) {
    if (price.model != model)
      continue;
    if (std::make_tuple(price.effective_year, price.effective_month, price.effective_day) <=
        today) {
      found = &price;  // sorted ascending: the last one not in the future wins
    }
  }
  return found;
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

  const LocalTime local = to_local(zone_, at);
  const int minute = local.hour * 60 + local.minute;
  for (const PriceWindow& window : price->windows) {
    const bool inside = window.from_minute <= window.to_minute
                            ? (minute >= window.from_minute && minute < window.to_minute)
                            : (minute >= window.from_minute || minute < window.to_minute);
    if (inside) {
      numerator *= window.multiplier_micros;
      denominator *= kMicrosPerUnit;
      break;
    }
  }
  // Round half up (costs are non-negative).
  const Wide micros = (numerator * 2 + denominator) / (denominator * 2);
  return Money{static_cast<std::int64_t>(micros), price->currency};
}

}  // namespace agentfleet::billing
