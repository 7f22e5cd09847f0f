#pragma once
// plan_execute's model answers as values: the planner's plan and the critic's scores,
// read from the reply text (a bare JSON value, or one inside a ```json fence or other
// text: the outermost [...] or {...}). What JSON cannot check (step counts, dependency
// cycles, known tools) is react::check_plan's. Also the plan as JSON for POST /v1/plan.
// Pure functions, thread-safe.

#include <string>
#include <string_view>

#include "core/domain/error.hpp"
#include "core/react/plan_execute.hpp"

namespace agentfleet::codec {

// A JSON array of steps, or an object holding one under "steps" or "plan". Per step:
// `description` (string, required), `step_number` (integer; the position when absent),
// `tool` (string; null, "" or "none" for a model step), `input` (object; {} when absent),
// `expected_output` (string), `estimated_time` (seconds, number >= 0; 5 when absent),
// `dependencies` (integers). Errors say which step and field, with kind kInvalid.
Result<react::Plan> parse_plan(std::string_view text);

// {"accuracy", "completeness", "relevance", "logic"} (or the same with "_score"), each a
// number 0..1, all four required; "need_replan" (bool), "feedback" (or "assessment"),
// "suggestions" (strings, or one string).
Result<react::Critique> parse_critique(std::string_view text);

// {"steps":[{step_number, description, tool|null, input, expected_output, estimated_time,
// dependencies}], "total_steps": N, "estimated_total_time_s": S}
std::string plan_response_json(const react::Plan& plan);

// The parsers a PlanExecute needs.
react::PlanParsers plan_parsers();

}  // namespace agentfleet::codec
