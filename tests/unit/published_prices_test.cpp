// Prices as providers publish them, loaded from configuration as an operator writes them:
// DeepSeek's deepseek-chat with its off-peak half price in Beijing time and the change of
// price at 00:00 Beijing time on 6 September 2025 that ended it, OpenAI's gpt-4o-mini and
// Anthropic's Claude Sonnet 4 with their cached-input prices, and windows by weekday with a
// holiday calendar. Figures per million tokens, from the providers' price pages.

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "core/billing/price_table.hpp"
#include "core/config/config.hpp"

namespace agentfleet::config {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;
using std::chrono::sys_days;
using std::chrono::system_clock;
using std::chrono::year;

system_clock::time_point utc(int y, int m, int d, int hh = 0, int mm = 0, int ss = 0) {
  return sys_days{year{y} / m / d} + hours(hh) + minutes(mm) + seconds(ss);
}
// Beijing time is UTC+8 all year.
system_clock::time_point beijing(int y, int m, int d, int hh = 0, int mm = 0, int ss = 0) {
  return utc(y, m, d, hh, mm, ss) - hours(8);
}

// The operator bills in UTC; each provider's price names the zone it publishes in.
const char* kPublished = R"(
postgres: {url: x}
kafka: {bootstrap_servers: b}
models:
  - {name: deepseek-chat, endpoints: [{url: "http://h/a"}]}
  - {name: gpt-4o-mini, endpoints: [{url: "http://h/b"}]}
  - {name: claude-sonnet-4, endpoints: [{url: "http://h/c"}]}
billing:
  time_zone: UTC
  budget_currency: CNY
  exchange_rates: {USD: "7.2"}
  prices:
    # DeepSeek: cache miss 2, cache hit 0.5, output 8 CNY; 00:30-08:30 Beijing time at half.
    - model: deepseek-chat
      currency: CNY
      time_zone: Asia/Shanghai
      effective_from: "2025-02-27"
      input_per_million: "2"
      cached_input_per_million: "0.5"
      output_per_million: "8"
      windows: [{from: "00:30", to: "08:30", multiplier: "0.5"}]
    # From 00:00 Beijing time on 6 September 2025: 4, 0.5, 12 CNY, no off-peak discount.
    - model: deepseek-chat
      currency: CNY
      effective_from: "2025-09-06T00:00+08:00"
      input_per_million: "4"
      cached_input_per_million: "0.5"
      output_per_million: "12"
    # OpenAI: input 0.15, cached input 0.075, output 0.60 USD.
    - model: gpt-4o-mini
      currency: USD
      effective_from: "2024-07-18T00:00:00Z"
      input_per_million: "0.15"
      cached_input_per_million: "0.075"
      output_per_million: "0.60"
    # Anthropic: input 3, cache read 0.30, output 15 USD.
    - model: claude-sonnet-4
      currency: USD
      effective_from: "2025-05-22T00:00:00Z"
      input_per_million: "3"
      cached_input_per_million: "0.30"
      output_per_million: "15"
)";

TokenUsage usage(std::int64_t input, std::int64_t cached, std::int64_t output) {
  TokenUsage u;
  u.input = input;
  u.cached_input = cached;
  u.output = output;
  return u;
}

TEST(PublishedPrices, DeepSeekOffPeakIsReadInBeijingTimeWhateverTheBillingZone) {
  const billing::PriceTable table = price_table(load_config_text(kPublished, "p.yaml").billing);
  const TokenUsage million_each = usage(1'000'000, 0, 1'000'000);
  // 10:00 Beijing: 2 + 8.
  EXPECT_EQ(table.cost("deepseek-chat", million_each, beijing(2025, 6, 1, 10)).micros, 10'000'000);
  // 03:00 Beijing is 19:00 UTC the day before: half price, though the operator bills in UTC.
  EXPECT_EQ(table.cost("deepseek-chat", million_each, beijing(2025, 6, 1, 3)).micros, 5'000'000);
  EXPECT_EQ(table.cost("deepseek-chat", million_each, beijing(2025, 6, 1, 0, 29, 59)).micros,
            10'000'000);
  EXPECT_EQ(table.cost("deepseek-chat", million_each, beijing(2025, 6, 1, 0, 30)).micros,
            5'000'000);
  EXPECT_EQ(table.cost("deepseek-chat", million_each, beijing(2025, 6, 1, 8, 30)).micros,
            10'000'000);
  // A cache hit is billed at 0.5, a miss at 2: 600k hit, 400k miss, no output.
  EXPECT_EQ(
      table.cost("deepseek-chat", usage(1'000'000, 600'000, 0), beijing(2025, 6, 1, 10)).micros,
      300'000 + 800'000);
  // Before its first price, the model has none.
  EXPECT_EQ(table.find("deepseek-chat", beijing(2025, 2, 26, 23, 59, 59)), nullptr);
}

TEST(PublishedPrices, DeepSeeksPriceChangesAtTheHourItWasAnnouncedFor) {
  const billing::PriceTable table = price_table(load_config_text(kPublished, "p.yaml").billing);
  const TokenUsage million_each = usage(1'000'000, 0, 1'000'000);
  // The last second of 5 September in Beijing: the old price (not off-peak at 23:59).
  EXPECT_EQ(table.cost("deepseek-chat", million_each, beijing(2025, 9, 5, 23, 59, 59)).micros,
            10'000'000);
  // Its last off-peak night: half the old price.
  EXPECT_EQ(table.cost("deepseek-chat", million_each, beijing(2025, 9, 5, 4)).micros, 5'000'000);
  // 00:00 Beijing on 6 September, 16:00 UTC on the 5th: 4 + 12, and the night is no longer
  // discounted.
  EXPECT_EQ(table.cost("deepseek-chat", million_each, utc(2025, 9, 5, 16)).micros, 16'000'000);
  EXPECT_EQ(table.cost("deepseek-chat", million_each, beijing(2025, 9, 6, 3)).micros, 16'000'000);
  EXPECT_EQ(
      table.cost("deepseek-chat", usage(1'000'000, 1'000'000, 0), beijing(2025, 9, 6, 3)).micros,
      500'000)
      << "the cache hit price stayed 0.5";
}

TEST(PublishedPrices, OpenAiAndAnthropicBillCachedInputAtItsOwnPriceInDollars) {
  const billing::PriceTable table = price_table(load_config_text(kPublished, "p.yaml").billing);
  const auto at = utc(2026, 3, 1, 12);
  // gpt-4o-mini: 600k fresh at 0.15, 400k cached at 0.075, 200k output at 0.60.
  const billing::Money mini = table.cost("gpt-4o-mini", usage(1'000'000, 400'000, 200'000), at);
  EXPECT_EQ(mini.micros, 90'000 + 30'000 + 120'000);
  EXPECT_EQ(mini.currency, "USD");
  // Claude Sonnet 4: 2k fresh at 3, 8k cache reads at 0.30, 1k output at 15.
  const billing::Money sonnet = table.cost("claude-sonnet-4", usage(10'000, 8'000, 1'000), at);
  EXPECT_EQ(sonnet.micros, 6'000 + 2'400 + 15'000);
  EXPECT_EQ(sonnet.currency, "USD");
  // In the budget currency at 7.2 CNY a dollar.
  EXPECT_EQ(budget_exchange(load_config_text(kPublished, "p.yaml").billing)
                .to_target(sonnet.micros, sonnet.currency),
            168'480);
}

TEST(PublishedPrices, TheSameInstantWrittenWithItsOffsetOrInUtcIsOnePrice) {
  const auto at_utc =
      billing::parse_effective_from("2025-09-05T16:00:00Z", TimeZone::fixed("UTC", {}));
  const auto at_beijing =
      billing::parse_effective_from("2025-09-06T00:00+08:00", TimeZone::fixed("UTC", {}));
  const auto beijing_date = billing::parse_effective_from(
      "2025-09-06", TimeZone::fixed("Asia/Shanghai", std::chrono::hours(8)));
  ASSERT_TRUE(at_utc && at_beijing && beijing_date);
  EXPECT_EQ(*at_utc, *at_beijing);
  EXPECT_EQ(*at_utc, *beijing_date) << "a bare date is the start of that day in the zone";
  EXPECT_EQ(*at_utc, utc(2025, 9, 5, 16));
  for (const char* bad :
       {"2025-09-06T00:00", "2025-09-06 00:00Z", "2025-09-31", "2025-09-06T24:00Z",
        "2025-09-06T00:00+8:00", "2025-09-06T00:00:60Z", "06/09/2025", "1013-01-01",
        "1969-12-31T23:00Z", "2201-01-01", "9999-12-31T00:00Z"}) {
    EXPECT_FALSE(billing::parse_effective_from(bad, TimeZone::fixed("UTC", {}))) << bad;
  }
}

// A configuration of one model `m` whose billing, in Beijing time, goes on with `rest`.
Config one_model_billed(const std::string& rest) {
  return load_config_text(R"(
postgres: {url: x}
kafka: {bootstrap_servers: b}
models:
  - {name: m, endpoints: [{url: "http://h/a"}]}
billing:
  time_zone: Asia/Shanghai
)" + rest,
                          "p.yaml");
}

TEST(PublishedPrices, WindowsByWeekdayAndAHolidayCalendar) {
  // A configured discount (not a provider's figure): half price all weekend and on holidays,
  // and on Friday nights from 22:00 to 06:00; 1 October 2026 (a Thursday) is a holiday.
  const Config c = one_model_billed(R"(
  holidays: ["2026-10-01"]
  prices:
    - model: m
      effective_from: "2026-01-01"
      input_per_million: "2"
      windows:
        - {from: "00:00", to: "24:00", multiplier: "0.5", days: [sat, sun, holiday]}
        - {from: "22:00", to: "06:00", multiplier: "0.8", days: [fri]}
)");
  const billing::PriceTable table = price_table(c.billing);
  const TokenUsage million = usage(1'000'000, 0, 0);
  auto cost = [&](system_clock::time_point at) { return table.cost("m", million, at).micros; };
  EXPECT_EQ(cost(beijing(2026, 9, 30, 12)), 2'000'000) << "a Wednesday";
  EXPECT_EQ(cost(beijing(2026, 10, 1, 12)), 1'000'000) << "the holiday, a Thursday";
  EXPECT_EQ(cost(beijing(2026, 10, 2, 12)), 2'000'000) << "a Friday afternoon";
  EXPECT_EQ(cost(beijing(2026, 10, 2, 23)), 1'600'000) << "Friday night";
  // 03:00 on Saturday is in both the weekend and Friday's night: the first listed applies.
  EXPECT_EQ(cost(beijing(2026, 10, 3, 3)), 1'000'000);
  EXPECT_EQ(cost(beijing(2026, 10, 2, 3)), 2'000'000)
      << "the small hours of Friday belong to Thursday's night, which has no window";
  EXPECT_EQ(cost(beijing(2026, 10, 4, 12)), 1'000'000) << "a Sunday";
  EXPECT_EQ(cost(beijing(2026, 10, 5, 12)), 2'000'000) << "a Monday";
}

TEST(PublishedPrices, AHolidayIsNotItsWeekday) {
  const Config c = one_model_billed(R"(
  holidays: ["2026-10-05"]
  prices:
    - model: m
      effective_from: "2026-01-01"
      input_per_million: "2"
      # Peak hours on working days: twice the price.
      windows: [{from: "09:00", to: "18:00", multiplier: "2", days: [mon, tue, wed, thu, fri]}]
)");
  const billing::PriceTable table = price_table(c.billing);
  const TokenUsage million = usage(1'000'000, 0, 0);
  EXPECT_EQ(table.cost("m", million, beijing(2026, 9, 28, 10)).micros, 4'000'000) << "a Monday";
  EXPECT_EQ(table.cost("m", million, beijing(2026, 10, 5, 10)).micros, 2'000'000)
      << "a Monday that is a holiday";
}

}  // namespace
}  // namespace agentfleet::config
