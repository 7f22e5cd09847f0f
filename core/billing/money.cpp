#include "core/billing/money.hpp"

#include <limits>

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

}  // namespace agentfleet::billing
