#include "core/billing/money.hpp"

#include <limits>
#include <utility>

namespace agentfleet::billing {

std::optional<std::int64_t> parse_decimal_micros(std::string_view text) {
  if (text.empty())
    return std::nullopt;
  bool negative = false;
  if (text.front() == '-' || text.front() == '+') {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  const auto dot = text.find('.');
  std::string_view whole = text.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? std::string_view{} : text.substr(dot + 1);
  if (whole.empty() && frac.empty())
    return std::nullopt;
  if (dot != std::string_view::npos && frac.empty())
    return std::nullopt;
  if (frac.size() > 6)
    return std::nullopt;
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t value = 0;
  for (char c : whole) {
    if (c < '0' || c > '9')
      return std::nullopt;
    if (value > (kMax - (c - '0')) / 10)
      return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value > kMax / kMicrosPerUnit)
    return std::nullopt;
  value *= kMicrosPerUnit;
  std::int64_t scale = kMicrosPerUnit / 10;
  for (char c : frac) {
    if (c < '0' || c > '9')
      return std::nullopt;
    if ((c - '0') * scale > kMax - value)
      return std::nullopt;
    value += (c - '0') * scale;
    scale /= 10;
  }
  return negative ? -value : value;
}

std::string format_micros(std::int64_t micros) {
  const bool negative = micros < 0;
  const std::uint64_t magnitude =
      negative ? static_cast<std::uint64_t>(-(micros + 1)) + 1 : static_cast<std::uint64_t>(micros);
  std::string frac = std::to_string(magnitude % kMicrosPerUnit);
  frac.insert(0, 6 - frac.size(), '0');
  return (negative ? "-" : "") + std::to_string(magnitude / kMicrosPerUnit) + "." + frac;
}

Exchange::Exchange(std::string target, std::map<std::string, std::int64_t, std::less<>> rates)
    : target_(std::move(target)), rates_(std::move(rates)) {}

bool Exchange::converts(std::string_view currency) const {
  return currency == target_ || rates_.find(currency) != rates_.end();
}

std::optional<std::int64_t> Exchange::to_target(std::int64_t micros,
                                                std::string_view currency) const {
  if (currency == target_)
    return micros;
  const auto rate = rates_.find(currency);
  if (rate == rates_.end())
    return std::nullopt;
  // micros * rate / 1e6, rounded away from zero: the whole units and the fraction apart, so
  // that no product overflows unnoticed.
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  const std::int64_t saturated = micros < 0 ? kMin : kMax;
  const std::int64_t whole = micros / kMicrosPerUnit;
  const std::int64_t fraction = micros % kMicrosPerUnit;  // |fraction| < 1e6, sign of micros
  std::int64_t converted = 0, part = 0;
  if (__builtin_mul_overflow(whole, rate->second, &converted) ||
      __builtin_mul_overflow(fraction, rate->second, &part)) {
    return saturated;
  }
  std::int64_t rounded = part / kMicrosPerUnit;
  if (part % kMicrosPerUnit != 0)
    rounded += part > 0 ? 1 : -1;
  if (__builtin_add_overflow(converted, rounded, &converted))
    return saturated;
  return converted;
}

std::int64_t Exchange::sum(const SpendByCurrency& spent,
                           std::vector<std::string>* unconverted) const {
  std::int64_t total = 0;
  for (const auto& [currency, micros] : spent) {
    const std::optional<std::int64_t> converted = to_target(micros, currency);
    if (!converted) {
      if (unconverted != nullptr)
        unconverted->push_back(currency);
      continue;
    }
    if (__builtin_add_overflow(total, *converted, &total))
      total = *converted < 0 ? std::numeric_limits<std::int64_t>::min()
                             : std::numeric_limits<std::int64_t>::max();
  }
  return total;
}

}  // namespace agentfleet::billing
