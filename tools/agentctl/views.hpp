#pragma once
// The API's answers as text for a reader: a task (and its trace), a page of tasks, a result
// event of the results topic, a bill, a user's limits, a batch and one line of its results.
// Also the body of a limits change made from the current overrides. Pure functions of the
// JSON the API gives; an answer that is not JSON of the expected shape shows as little as
// it has, never fails. Thread-safe.

#include <rapidjson/document.h>

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace agentfleet::agentctl {

// GET /v1/tasks/{id}: one "name  value" line per field; `with_trace` adds every step
// (the model's text, each tool call with its arguments, status, latency and result).
std::string format_task(const rapidjson::Value& task, bool with_trace);

// The tasks of GET /v1/tasks (an array of summaries) as a table.
std::string format_task_list(const rapidjson::Value& tasks);

// A result event (the results topic) as one line: finished_at, task id, user, status,
// result type, steps, cost, message. Empty for a value that is not a result event.
std::string format_result_event(std::string_view json);

// A bill: a table per model (calls, tasks when known, input, cached input, output tokens,
// cost) and a total per currency. `models` is the API's array; `totals` its totals, or
// null to add them up here (a batch's usage has none), exactly, in micro-units.
std::string format_usage(const rapidjson::Value& models, const rapidjson::Value& totals);

// GET /v1/users/{id}/limits: tier, then per limit its effective value and override.
std::string format_limits(const rapidjson::Value& limits);

// The body of PUT /v1/users/{id}/limits: the current overrides (from GET's answer) with
// `set` applied (names without "--": max_concurrency, tier, ...) and `unset` removed; with
// `replace`, only `set`. Numbers are sent as numbers. UsageError for an unknown name or a
// value of the wrong form.
std::string limits_put_body(const rapidjson::Value& current,
                            const std::map<std::string, std::string>& set,
                            const std::vector<std::string>& unset, bool replace);

// GET /v1/batches: one row a batch (id, user, created, ended of total, succeeded, failed,
// result types), newest first.
std::string format_batch_list(const rapidjson::Value& batches);
// GET /v1/batches/{id}: counts per status and result type, progress, usage.
std::string format_batch(const rapidjson::Value& batch);

// GET /v1/stats: the tasks and how many ended, per status, result type and strategy, the
// success rate, durations, steps, tool calls, tokens and cost per currency.
std::string format_stats(const rapidjson::Value& stats);
// GET /v1/tools: a table of name, category, permission, idempotent, timeout and (when the
// answer says it, for a user) permitted; `with_descriptions` adds each tool's description.
std::string format_tools(const rapidjson::Value& tools, bool with_descriptions);
// POST /v1/plan's answer: the plan's steps (number, tool, what it does, what it needs),
// the estimate, usage and cost; for a plan not made yet (202) the task to wait for.
std::string format_plan(const rapidjson::Value& plan);
// GET /v1/batches/{id}/results, one JSON line as a row of fixed widths (the header first).
std::string batch_results_header();
std::string format_batch_result(std::string_view json_line);

}  // namespace agentfleet::agentctl
