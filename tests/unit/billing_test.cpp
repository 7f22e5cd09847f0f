// Exact money and the price table: decimal parsing, cost of one model call with cached and
// reasoning tokens, rounding, effective dates and time-of-day windows in the table's zone.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/billing/money.hpp"
#include "core/billing/price_table.hpp"

namespace agentfleet::billing {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;
using std::chrono::sys_days;
using std::chrono::system_clock;
using std::chrono::year;

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

// A UTC instant built from a civil date and time: no wall clock in these tests.
system_clock::time_point utc(int y, unsigned m, unsigned d, int hh = 0, int mm = 0, int ss = 0) {
  return sys_days{year{y} / static_cast<int>(m) / static_cast<int>(d)} + hours(hh) + minutes(mm) +
         seconds(ss);
}

// A price table in China Standard Time, where the first users are billed.
const TimeZone kShanghai = TimeZone::fixed("+08", hours(8));

Price price(std::string model, int y, int m, int d, std::int64_t input, std::int64_t cached,
            std::int64_t output) {
  Price p;
  p.model = std::move(model);
  p.currency = "CNY";
  // From the start of that day in the table's zone, as the loader reads a bare date.
  char date[16];
  std::snprintf(date, sizeof date, "%04d-%02d-%02d", y, m, d);
  p.effective_from = *parse_effective_from(date, kShanghai);
  p.input_per_million_micros = input;
  p.cached_input_per_million_micros = cached;
  p.output_per_million_micros = output;
  return p;
}

TEST(MoneyTest, ParsesDecimals) {
  EXPECT_EQ(parse_decimal_micros("2"), 2'000'000);
  EXPECT_EQ(parse_decimal_micros("2.5"), 2'500'000);
  EXPECT_EQ(parse_decimal_micros("0.000001"), 1);
  EXPECT_EQ(parse_decimal_micros("-1.25"), -1'250'000);
  EXPECT_EQ(parse_decimal_micros("+3.1"), 3'100'000);
  EXPECT_EQ(parse_decimal_micros("0"), 0);
  EXPECT_EQ(parse_decimal_micros("16.000000"), 16'000'000);
  EXPECT_EQ(parse_decimal_micros("007.5"), 7'500'000);
}

TEST(MoneyTest, RejectsWhatCannotBeRepresentedExactly) {
  for (const char* text : {"1.0000001", "abc", "", "1.", "-", "+", ".", "1.2.3", "1,5", " 1", "1 ",
                           "1e3", "0x10", "--1", "1.-5", "١"}) {
    EXPECT_EQ(parse_decimal_micros(text), std::nullopt) << "'" << text << "'";
  }
}

TEST(MoneyTest, RejectsOverflowInsteadOfWrapping) {
  // The largest representable amount parses exactly.
  EXPECT_EQ(parse_decimal_micros("9223372036854.775807"), kMax);
  // One micro more, or a larger whole part, does not fit in 64 bits.
  EXPECT_EQ(parse_decimal_micros("9223372036854.775808"), std::nullopt);
  EXPECT_EQ(parse_decimal_micros("9223372036854.999999"), std::nullopt);
  EXPECT_EQ(parse_decimal_micros("9223372036855"), std::nullopt);
  EXPECT_EQ(parse_decimal_micros("9223372036854775807"), std::nullopt);
  EXPECT_EQ(parse_decimal_micros("99999999999999999999999"), std::nullopt);
  EXPECT_EQ(parse_decimal_micros("-9223372036855"), std::nullopt);
}

TEST(MoneyTest, FormatsWithSixDecimals) {
  EXPECT_EQ(format_micros(1'234'567), "1.234567");
  EXPECT_EQ(format_micros(0), "0.000000");
  EXPECT_EQ(format_micros(1), "0.000001");
  EXPECT_EQ(format_micros(2'500'000), "2.500000");
  EXPECT_EQ(format_micros(-1'250'000), "-1.250000");
  EXPECT_EQ(format_micros(-1), "-0.000001");
  EXPECT_EQ(format_micros(kMax), "9223372036854.775807");
  EXPECT_EQ(format_micros(std::numeric_limits<std::int64_t>::min()), "-9223372036854.775808");
}

TEST(ExchangeTest, ConvertsAtTheRateRoundingUpToAMicroUnit) {
  const Exchange exchange("CNY", {{"USD", 7'200'000}, {"EUR", 7'812'345}});
  EXPECT_EQ(exchange.to_target(1'000'000, "CNY"), 1'000'000) << "the budget currency as it is";
  EXPECT_EQ(exchange.to_target(1'000'000, "USD"), 7'200'000);
  EXPECT_EQ(exchange.to_target(1, "USD"), 8) << "7.2 micro-CNY rounds up";
  EXPECT_EQ(exchange.to_target(-1, "USD"), -8) << "away from zero";
  EXPECT_EQ(exchange.to_target(123'456'789, "EUR"), 964'487'029);  // 964487028.26...
  EXPECT_EQ(exchange.to_target(0, "EUR"), 0);
  EXPECT_FALSE(exchange.to_target(5, "JPY").has_value()) << "no rate: no guess";
  EXPECT_TRUE(exchange.converts("CNY"));
  EXPECT_TRUE(exchange.converts("USD"));
  EXPECT_FALSE(exchange.converts("JPY"));
}

TEST(ExchangeTest, SaturatesInsteadOfOverflowing) {
  const Exchange exchange("CNY", {{"USD", 7'200'000}});
  EXPECT_EQ(exchange.to_target(kMax, "USD"), kMax);
  EXPECT_EQ(exchange.to_target(-kMax, "USD"), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(exchange.to_target(kMax / 8, "USD"), 8'301'034'833'169'298'220) << "exact near the top";
}

TEST(MoneyTest, FormatAndParseRoundTrip) {
  for (std::int64_t micros : std::vector<std::int64_t>{
           0, 1, -1, 999'999, 1'000'000, -1'000'001, 123'456'789'012, -987'654'321, kMax, -kMax}) {
    EXPECT_EQ(parse_decimal_micros(format_micros(micros)), micros) << micros;
  }
  for (const char* text : {"0.000001", "2.500000", "-1.250000", "12345.678901"}) {
    auto micros = parse_decimal_micros(text);
    ASSERT_TRUE(micros.has_value()) << text;
    EXPECT_EQ(format_micros(*micros), text);
  }
}

TEST(PriceTableTest, CachedTokensAreChargedOnceAtTheCachedPrice) {
  // 2 CNY per million input, 0.5 cached, 8 output.
  const PriceTable table(kShanghai,
                         {price("deepseek-chat", 2025, 1, 1, 2'000'000, 500'000, 8'000'000)});
  TokenUsage usage;
  usage.input = 1'000'000;       // includes the cached tokens
  usage.cached_input = 600'000;  // 400k fresh
  usage.output = 100'000;
  const Money cost = table.cost("deepseek-chat", usage, utc(2026, 2, 5, 4));
  // 400k * 2 + 600k * 0.5 + 100k * 8, per million = 0.8 + 0.3 + 0.8
  EXPECT_EQ(cost.micros, 1'900'000);
  EXPECT_EQ(cost.currency, "CNY");
  EXPECT_EQ(format_micros(cost.micros), "1.900000");
}

TEST(PriceTableTest, ReasoningTokensInsideOutputAreNotCountedAgain) {
  const PriceTable table(kShanghai, {price("r1", 2025, 1, 1, 4'000'000, 1'000'000, 16'000'000)});
  TokenUsage usage;
  usage.input = 1000;
  usage.output = 2000;
  const Money without_reasoning = table.cost("r1", usage, utc(2026, 2, 5, 4));
  usage.reasoning = 1500;  // part of the 2000 output tokens
  const Money with_reasoning = table.cost("r1", usage, utc(2026, 2, 5, 4));
  EXPECT_EQ(with_reasoning.micros, without_reasoning.micros);
  // 1000 * 4 + 2000 * 16 per million = 0.004 + 0.032
  EXPECT_EQ(with_reasoning.micros, 36'000);
}

TEST(PriceTableTest, CachedBeyondInputIsChargedAsInputOnce) {
  const PriceTable table(kShanghai, {price("m", 2025, 1, 1, 2'000'000, 500'000, 0)});
  TokenUsage usage;
  usage.input = 1'000'000;
  usage.cached_input = 5'000'000;  // a provider bug: more cached than sent
  EXPECT_EQ(table.cost("m", usage, utc(2026, 1, 1)).micros, 500'000);
}

TEST(PriceTableTest, RoundsHalfUpToAMicroUnitOncePerCall) {
  // 0.5 CNY per million input tokens: each token costs half a micro-unit.
  const PriceTable table(kShanghai, {price("m", 2025, 1, 1, 500'000, 0, 400'000)});
  const auto at = utc(2026, 2, 5, 4);
  auto input_cost = [&](std::int64_t input, std::int64_t output = 0) {
    TokenUsage usage;
    usage.input = input;
    usage.output = output;
    return table.cost("m", usage, at).micros;
  };
  EXPECT_EQ(input_cost(0), 0);
  EXPECT_EQ(input_cost(1), 1);     // 0.5 -> 1
  EXPECT_EQ(input_cost(2), 1);     // 1.0
  EXPECT_EQ(input_cost(3), 2);     // 1.5 -> 2, not 3 as per-token rounding would give
  EXPECT_EQ(input_cost(0, 1), 0);  // 0.4 -> 0
  EXPECT_EQ(input_cost(1, 1), 1);  // 0.5 + 0.4 = 0.9 -> 1, rounded once
  EXPECT_EQ(input_cost(0, 4), 2);  // 1.6 -> 2
}

TEST(PriceTableTest, PriceInForceChangesAtLocalMidnightOfTheTableZone) {
  const PriceTable table(kShanghai, {
                                        price("m", 2026, 3, 1, 1'000'000, 0, 0),  // new price
                                        price("m", 2025, 1, 1, 2'000'000, 0, 0),  // old price
                                    });
  TokenUsage usage;
  usage.input = 1'000'000;
  // 2026-02-28 23:59:59 in Shanghai is 15:59:59 UTC.
  EXPECT_EQ(table.cost("m", usage, utc(2026, 2, 28, 15, 59, 59)).micros, 2'000'000);
  // 2026-03-01 00:00:00 in Shanghai is 16:00 UTC on Feb 28 — already the new price.
  EXPECT_EQ(table.cost("m", usage, utc(2026, 2, 28, 16)).micros, 1'000'000);
  EXPECT_EQ(table.cost("m", usage, utc(2026, 6, 1)).micros, 1'000'000);

  const Price* before = table.find("m", utc(2026, 2, 28, 15, 59, 59));
  ASSERT_NE(before, nullptr);
  EXPECT_EQ(before->effective_from, utc(2024, 12, 31, 16));
  const Price* after = table.find("m", utc(2026, 2, 28, 16));
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->effective_from, utc(2026, 2, 28, 16));
}

TEST(PriceTableTest, NothingIsInForceBeforeTheFirstEffectiveDate) {
  const PriceTable table(kShanghai, {price("m", 2026, 1, 1, 1'000'000, 0, 0)});
  EXPECT_EQ(table.find("m", utc(2025, 12, 31, 15, 59, 59)), nullptr);
  EXPECT_NE(table.find("m", utc(2025, 12, 31, 16)), nullptr);
  TokenUsage usage;
  usage.input = 1'000'000;
  EXPECT_EQ(table.cost("m", usage, utc(2025, 12, 1)).micros, 0);
}

Price off_peak_price(int from_minute, int to_minute) {
  Price p = price("deepseek-chat", 2025, 1, 1, 2'000'000, 500'000, 8'000'000);
  p.windows.push_back(PriceWindow{from_minute, to_minute, 500'000});  // half price
  return p;
}

TEST(PriceTableTest, OffPeakWindowAppliesInsideOnly) {
  // 00:30-08:30 Beijing time at half price.
  const PriceTable table(kShanghai, {off_peak_price(30, 8 * 60 + 30)});
  TokenUsage usage;
  usage.input = 1'000'000;
  usage.output = 1'000'000;
  const std::int64_t full = 10'000'000;
  const std::int64_t half = 5'000'000;
  // Local time = UTC + 8h; local day 2026-02-05.
  auto at_local = [](int hh, int mm) { return utc(2026, 2, 4, 16) + hours(hh) + minutes(mm); };
  EXPECT_EQ(table.cost("deepseek-chat", usage, at_local(0, 29)).micros, full);
  EXPECT_EQ(table.cost("deepseek-chat", usage, at_local(0, 30)).micros, half);
  EXPECT_EQ(table.cost("deepseek-chat", usage, at_local(4, 0)).micros, half);
  EXPECT_EQ(table.cost("deepseek-chat", usage, at_local(8, 29)).micros, half);
  EXPECT_EQ(table.cost("deepseek-chat", usage, at_local(8, 30)).micros, full);
  EXPECT_EQ(table.cost("deepseek-chat", usage, at_local(12, 0)).micros, full);
  EXPECT_EQ(table.cost("deepseek-chat", usage, at_local(23, 59)).micros, full);
}

TEST(PriceTableTest, WindowWrappingMidnight) {
  const PriceTable table(kShanghai, {off_peak_price(22 * 60, 6 * 60)});
  TokenUsage usage;
  usage.input = 1'000'000;
  const std::int64_t full = 2'000'000;
  const std::int64_t half = 1'000'000;
  auto at_local = [](int hh, int mm) { return utc(2026, 2, 4, 16) + hours(hh) + minutes(mm); };
  EXPECT_EQ(table.cost("deepseek-chat", usage, at_local(21, 59)).micros, full);
  EXPECT_EQ(table.cost("deepseek-chat", usage, at_local(22, 0)).micros, half);
  EXPECT_EQ(table.cost("deepseek-chat", usage, at_local(23, 59)).micros, half);
  EXPECT_EQ(table.cost("deepseek-chat", usage, at_local(24, 0)).micros, half);  // 00:00 next day
  EXPECT_EQ(table.cost("deepseek-chat", usage, at_local(5, 59)).micros, half);
  EXPECT_EQ(table.cost("deepseek-chat", usage, at_local(6, 0)).micros, full);
  EXPECT_EQ(table.cost("deepseek-chat", usage, at_local(12, 0)).micros, full);
}

TEST(PriceTableTest, WindowIsEvaluatedInTheTableZoneNotUtc) {
  const PriceTable table(kShanghai, {off_peak_price(30, 8 * 60 + 30)});
  TokenUsage usage;
  usage.input = 1'000'000;
  // 01:00 UTC is 09:00 in Shanghai: full price, though 01:00 is inside 00:30-08:30.
  EXPECT_EQ(table.cost("deepseek-chat", usage, utc(2026, 2, 5, 1)).micros, 2'000'000);
  // 20:00 UTC is 04:00 in Shanghai: half price.
  EXPECT_EQ(table.cost("deepseek-chat", usage, utc(2026, 2, 5, 20)).micros, 1'000'000);
}

TEST(PriceTableTest, OffPeakHalfPriceRoundsOnce) {
  Price p = price("m", 2025, 1, 1, 1'000'000, 0, 0);  // one micro per token
  p.windows.push_back(PriceWindow{0, 24 * 60, 500'000});
  const PriceTable table(kShanghai, {p});
  TokenUsage usage;
  usage.input = 3;  // 3 micros at half price = 1.5 -> 2
  EXPECT_EQ(table.cost("m", usage, utc(2026, 2, 5)).micros, 2);
}

TEST(PriceTableTest, UnknownModelCostsZero) {
  const PriceTable table(kShanghai, {price("deepseek-chat", 2025, 1, 1, 2'000'000, 0, 0)});
  TokenUsage usage;
  usage.input = 1'000'000;
  usage.output = 1'000'000;
  EXPECT_EQ(table.find("gpt-unknown", utc(2026, 2, 5)), nullptr);
  const Money cost = table.cost("gpt-unknown", usage, utc(2026, 2, 5));
  EXPECT_EQ(cost.micros, 0);
  EXPECT_EQ(cost.currency, "CNY");

  const PriceTable empty(kShanghai, {});
  EXPECT_EQ(empty.cost("any", usage, utc(2026, 2, 5)).micros, 0);
}

TEST(PriceTableTest, BigTokenCountsDoNotOverflow) {
  // A trillion tokens at 1000 CNY per million: the intermediate product is ~1e21.
  Price p = price("m", 2025, 1, 1, 1'000'000'000, 1'000'000'000, 1'000'000'000);
  p.windows.push_back(PriceWindow{0, 24 * 60, 500'000});
  const PriceTable table(kShanghai, {p});
  TokenUsage usage;
  usage.input = 1'000'000'000'000;
  usage.cached_input = 0;
  usage.output = 1'000'000'000'000;
  // 2e12 tokens * 1000 CNY / 1e6 tokens * 0.5 = 1e9 CNY = 1e15 micros.
  EXPECT_EQ(table.cost("m", usage, utc(2026, 2, 5)).micros, 1'000'000'000'000'000);
}

TEST(PriceTableTest, PricesOfOtherModelsDoNotLeak) {
  const PriceTable table(kShanghai, {price("a", 2025, 1, 1, 1'000'000, 0, 0),
                                     price("b", 2026, 1, 1, 9'000'000, 0, 0)});
  TokenUsage usage;
  usage.input = 1'000'000;
  EXPECT_EQ(table.cost("a", usage, utc(2026, 6, 1)).micros, 1'000'000);
  EXPECT_EQ(table.cost("b", usage, utc(2026, 6, 1)).micros, 9'000'000);
  EXPECT_EQ(table.cost("b", usage, utc(2025, 6, 1)).micros, 0);
}

TEST(PriceTableTest, ParsesClockMinutes) {
  EXPECT_EQ(parse_clock_minutes("00:30"), 30);
  EXPECT_EQ(parse_clock_minutes("08:30"), 8 * 60 + 30);
  EXPECT_EQ(parse_clock_minutes("22:00"), 22 * 60);
  EXPECT_EQ(parse_clock_minutes("24:00"), 24 * 60);
  for (const char* bad : {"", "8:30", "08:60", "25:00", "24:01", "0830", "ab:cd", "08:30:00"}) {
    EXPECT_EQ(parse_clock_minutes(bad), std::nullopt) << bad;
  }
}

}  // namespace
}  // namespace agentfleet::billing
