#pragma once
// What may be spent on the next model call of a task, before it is made: the task's own
// max_tokens and max_cost, then its user's monthly budget, in that order. The call's
// output allowance is capped at what max_tokens leaves, so a task uses its tokens up
// instead of stopping a whole allowance early; the cost at most is priced with that
// allowance. Pure: the caller prices (in the budget currency) and says what was spent.
// docs/billing.md, "A task's own limits".

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace agentfleet::billing {

// A call is made only when at least this many output tokens (or the model's whole
// allowance, when smaller) fit in what max_tokens leaves after its input.
inline constexpr std::int64_t kMinOutputTokens = 64;

struct SpendLimits {
  std::optional<std::int64_t> max_tokens;       // the task's (input and output, every attempt)
  std::optional<std::int64_t> max_cost_micros;  // the task's, in the budget currency
  std::int64_t budget_micros = 0;               // the user's monthly budget; 0: none
  std::string currency;                         // the budget currency, for the messages
  std::string month_zone;                       // where the budget's month is counted
};

struct SpendSoFar {
  std::int64_t task_tokens = 0;       // input and output of the task's billed calls
  std::int64_t task_cost_micros = 0;  // what they cost, in the budget currency
  std::int64_t month_micros = 0;      // the user's spend this month, in the budget currency
};

struct NextCall {
  std::int64_t input_tokens = 0;       // as estimated from the request
  std::int64_t max_output_tokens = 0;  // the model's allowance
  // The call's cost at its most for an output allowance, in the budget currency
  // (saturating at the int64 maximum when it cannot be converted).
  std::function<std::int64_t(std::int64_t input_tokens, std::int64_t output_tokens)> cost_micros;
};

enum class SpendStop { kMaxTokens, kMaxCost, kBudget };

struct SpendDecision {
  std::optional<SpendStop> stop;  // set: the call is not made
  std::string message;            // why, when stopped
  // The call's output allowance: the model's, or less when max_tokens leaves less (then
  // `capped`); its cost at most with it (0 when nothing priced it: no max_cost, no budget).
  std::int64_t output_tokens = 0;
  bool capped = false;
  std::int64_t call_cost_micros = 0;
};

SpendDecision check_spend(const SpendLimits& limits, const SpendSoFar& spent, const NextCall& call);

}  // namespace agentfleet::billing
