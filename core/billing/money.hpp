#pragma once
// Exact money: integer micro-units of a currency (1 CNY = 1,000,000 micro-CNY). Decimal
// strings are parsed digit by digit, never through floating point. Plain values.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace agentfleet::billing {

inline constexpr std::int64_t kMicrosPerUnit = 1'000'000;

struct Money {
  std::int64_t micros = 0;
  std::string currency;
};

// "2", "2.5", "0.000001", "-1.25" -> micros. More than six decimals, junk, or overflow ->
// nullopt (a price finer than a micro-unit cannot be represented exactly).
std::optional<std::int64_t> parse_decimal_micros(std::string_view text);
// 1234567 -> "1.234567"; the inverse of parse_decimal_micros, always six decimals.
std::string format_micros(std::int64_t micros);

}  // namespace agentfleet::billing
