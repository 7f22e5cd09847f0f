#pragma once
// Exact money: integer micro-units of a currency (1 CNY = 1,000,000 micro-CNY). Decimal
// strings are parsed digit by digit, never through floating point. Plain values.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

// Micro-units spent per currency.
using SpendByCurrency = std::map<std::string, std::int64_t, std::less<>>;

// Amounts of several currencies in one (a budget's): each other currency at a fixed rate,
// the units of the target one unit of it is worth, exact to a micro-unit. Converted amounts
// are rounded up to the micro-unit (a budget errs on the side of stopping) and saturate
// instead of overflowing.
class Exchange {
 public:
  Exchange() = default;
  // `rates`: currency -> micro-units of `target` per unit; each more than zero.
  Exchange(std::string target, std::map<std::string, std::int64_t, std::less<>> rates);
  const std::string& target() const { return target_; }
  bool converts(std::string_view currency) const;
  // `micros` of `currency` in the target currency; nullopt for a currency without a rate.
  std::optional<std::int64_t> to_target(std::int64_t micros, std::string_view currency) const;
  // The sum of `spent` in the target currency (saturating); the currencies it has no rate
  // for are left out and named in `unconverted` when given.
  std::int64_t sum(const SpendByCurrency& spent,
                   std::vector<std::string>* unconverted = nullptr) const;

 private:
  std::string target_ = "CNY";
  std::map<std::string, std::int64_t, std::less<>> rates_;
};

}  // namespace agentfleet::billing
