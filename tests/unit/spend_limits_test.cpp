// A task's spending limits before each model call: max_tokens, then max_cost, then the
// user's monthly budget; the output allowance capped at what max_tokens leaves.

#include "core/billing/spend_limits.hpp"

#include <gtest/gtest.h>

#include <limits>

namespace agentfleet::billing {
namespace {

// 1 micro-unit per input token, 4 per output token: cost(1000 in, 1024 out) = 5096.
NextCall call_of(std::int64_t input, std::int64_t max_output = 1024) {
  NextCall call;
  call.input_tokens = input;
  call.max_output_tokens = max_output;
  call.cost_micros = [](std::int64_t in, std::int64_t out) { return in + 4 * out; };
  return call;
}

SpendLimits limits_in_cny() {
  SpendLimits limits;
  limits.currency = "CNY";
  limits.month_zone = "Asia/Shanghai";
  return limits;
}

TEST(SpendLimits, WithoutLimitsEveryCallIsMadeWithTheModelsWholeAllowance) {
  const SpendDecision d = check_spend(limits_in_cny(), SpendSoFar{}, call_of(1000));
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.output_tokens, 1024);
  EXPECT_FALSE(d.capped);
  EXPECT_EQ(d.call_cost_micros, 0) << "nothing needs the call priced";
}

TEST(SpendLimits, MaxTokensCapsTheOutputAtWhatIsLeftAfterTheInput) {
  SpendLimits limits = limits_in_cny();
  limits.max_tokens = 3000;
  SpendSoFar spent;
  spent.task_tokens = 1500;
  const SpendDecision d = check_spend(limits, spent, call_of(1000));
  EXPECT_FALSE(d.stop);
  EXPECT_TRUE(d.capped);
  EXPECT_EQ(d.output_tokens, 500);  // 3000 - 1500 used - 1000 input

  spent.task_tokens = 500;  // 1500 left for output: the model's 1024 fit
  const SpendDecision whole = check_spend(limits, spent, call_of(1000));
  EXPECT_FALSE(whole.stop);
  EXPECT_FALSE(whole.capped);
  EXPECT_EQ(whole.output_tokens, 1024);
}

TEST(SpendLimits, MaxTokensStopsACallThatCouldNotWriteSixtyFourTokens) {
  SpendLimits limits = limits_in_cny();
  limits.max_tokens = 3000;
  SpendSoFar spent;
  spent.task_tokens = 3000 - 1000 - (kMinOutputTokens - 1);
  const SpendDecision d = check_spend(limits, spent, call_of(1000));
  ASSERT_TRUE(d.stop);
  EXPECT_EQ(*d.stop, SpendStop::kMaxTokens);
  EXPECT_NE(d.message.find("used 1937 of its max_tokens of 3000"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("about 1000 input tokens and at least 64 output"), std::string::npos)
      << d.message;

  spent.task_tokens -= 1;  // exactly 64 left for the output
  const SpendDecision just = check_spend(limits, spent, call_of(1000));
  EXPECT_FALSE(just.stop);
  EXPECT_EQ(just.output_tokens, kMinOutputTokens);
}

TEST(SpendLimits, AModelWithASmallAllowanceNeedsOnlyThatMuchRoom) {
  SpendLimits limits = limits_in_cny();
  limits.max_tokens = 1100;
  const SpendDecision d = check_spend(limits, SpendSoFar{}, call_of(1080, 16));
  EXPECT_FALSE(d.stop);
  EXPECT_EQ(d.output_tokens, 16);
  EXPECT_FALSE(d.capped);
  EXPECT_TRUE(check_spend(limits, SpendSoFar{}, call_of(1100, 16)).stop)
      << "no room at all for output";
}

TEST(SpendLimits, MaxCostStopsACallWhoseMostCouldPassIt) {
  SpendLimits limits = limits_in_cny();
  limits.max_cost_micros = 10'000;
  SpendSoFar spent;
  spent.task_cost_micros = 10'000 - 5096;  // exactly the call's most left
  const SpendDecision fits = check_spend(limits, spent, call_of(1000));
  EXPECT_FALSE(fits.stop);
  EXPECT_EQ(fits.call_cost_micros, 5096);

  spent.task_cost_micros += 1;
  const SpendDecision d = check_spend(limits, spent, call_of(1000));
  ASSERT_TRUE(d.stop);
  EXPECT_EQ(*d.stop, SpendStop::kMaxCost);
  EXPECT_EQ(d.message,
            "the next model call could pass the task's max_cost of 0.010000 CNY "
            "(0.004905 CNY spent by the task, up to 0.005096 CNY for the call); the task "
            "stopped before it.");
}

TEST(SpendLimits, TheCostAtMostIsPricedWithTheCappedAllowance) {
  SpendLimits limits = limits_in_cny();
  limits.max_tokens = 1200;
  limits.max_cost_micros = 2000;  // the whole allowance (5096) would not fit; 200 output does
  const SpendDecision d = check_spend(limits, SpendSoFar{}, call_of(1000));
  EXPECT_FALSE(d.stop) << d.message;
  EXPECT_EQ(d.output_tokens, 200);
  EXPECT_EQ(d.call_cost_micros, 1000 + 4 * 200);
}

TEST(SpendLimits, TheBudgetIsHeldAfterTheTasksOwnLimits) {
  SpendLimits limits = limits_in_cny();
  limits.budget_micros = 1'000'000;
  SpendSoFar spent;
  spent.month_micros = 1'000'000 - 5096;
  EXPECT_FALSE(check_spend(limits, spent, call_of(1000)).stop);
  spent.month_micros += 1;
  const SpendDecision d = check_spend(limits, spent, call_of(1000));
  ASSERT_TRUE(d.stop);
  EXPECT_EQ(*d.stop, SpendStop::kBudget);
  EXPECT_EQ(d.message.rfind("quota_exceeded: the next model call could pass the monthly budget "
                            "of 1.000000 CNY (0.994905 CNY used this month, up to 0.005096 CNY "
                            "for the call, Asia/Shanghai)",
                            0),
            0u)
      << d.message;

  // Every limit passed at once: the task's own are named first.
  limits.max_cost_micros = 1;
  EXPECT_EQ(*check_spend(limits, spent, call_of(1000)).stop, SpendStop::kMaxCost);
  limits.max_tokens = 10;
  EXPECT_EQ(*check_spend(limits, spent, call_of(1000)).stop, SpendStop::kMaxTokens);
}

TEST(SpendLimits, ACallThatCannotBePricedInTheBudgetCurrencyIsNotMadeUnderALimit) {
  SpendLimits limits = limits_in_cny();
  limits.max_cost_micros = 1'000'000'000;
  NextCall call = call_of(10);
  call.cost_micros = [](std::int64_t, std::int64_t) {
    return std::numeric_limits<std::int64_t>::max();
  };
  const SpendDecision d = check_spend(limits, SpendSoFar{}, call);
  ASSERT_TRUE(d.stop);
  EXPECT_EQ(*d.stop, SpendStop::kMaxCost);
}

}  // namespace
}  // namespace agentfleet::billing
