#include "core/billing/spend_limits.hpp"

#include <algorithm>

#include "core/billing/money.hpp"

namespace agentfleet::billing {

SpendDecision check_spend(const SpendLimits& limits, const SpendSoFar& spent,
                          const NextCall& call) {
  SpendDecision d;
  d.output_tokens = std::max<std::int64_t>(call.max_output_tokens, 0);
  if (limits.max_tokens) {
    const std::int64_t left = *limits.max_tokens - spent.task_tokens;
    const std::int64_t for_output = left - call.input_tokens;
    const std::int64_t least = std::min(d.output_tokens, kMinOutputTokens);
    if (for_output < least || for_output <= 0) {
      d.stop = SpendStop::kMaxTokens;
      d.message = "the task has used " + std::to_string(spent.task_tokens) +
                  " of its max_tokens of " + std::to_string(*limits.max_tokens) +
                  " tokens, and the next model call needs about " +
                  std::to_string(call.input_tokens) + " input tokens and at least " +
                  std::to_string(std::max<std::int64_t>(least, 1)) +
                  " output tokens; the task stopped before it.";
      return d;
    }
    if (for_output < d.output_tokens) {
      d.output_tokens = for_output;
      d.capped = true;
    }
  }
  if (!limits.max_cost_micros && limits.budget_micros <= 0)
    return d;
  d.call_cost_micros = call.cost_micros ? call.cost_micros(call.input_tokens, d.output_tokens) : 0;
  const std::string& cur = limits.currency;
  if (limits.max_cost_micros &&
      spent.task_cost_micros > *limits.max_cost_micros - d.call_cost_micros) {
    d.stop = SpendStop::kMaxCost;
    d.message = "the next model call could pass the task's max_cost of " +
                format_micros(*limits.max_cost_micros) + " " + cur + " (" +
                format_micros(spent.task_cost_micros) + " " + cur + " spent by the task, up to " +
                format_micros(d.call_cost_micros) + " " + cur +
                " for the call); the task stopped before it.";
    return d;
  }
  if (limits.budget_micros > 0 && spent.month_micros > limits.budget_micros - d.call_cost_micros) {
    d.stop = SpendStop::kBudget;
    d.message = "quota_exceeded: the next model call could pass the monthly budget of " +
                format_micros(limits.budget_micros) + " " + cur + " (" +
                format_micros(spent.month_micros) + " " + cur + " used this month, up to " +
                format_micros(d.call_cost_micros) + " " + cur + " for the call, " +
                limits.month_zone +
                "); the task stopped before it. Raise the budget (PUT /v1/users/{id}/limits) "
                "or wait for next month.";
    return d;
  }
  return d;
}

}  // namespace agentfleet::billing
