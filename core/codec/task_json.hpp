#pragma once
// The task as the API and the results show it: one stored row (TaskRow, read by
// pg::read_task_row from the select list `task_row` in sql/submission.sql) written in each
// of its shapes: the task (GET /v1/tasks/{id}, a submission's answer), its summary (an item
// of GET /v1/tasks), a line of a batch's results and what an event stream replays. The
// `result` and `usage` objects and `waiting_reason` are written here only; the result event
// (result_event_json) writes them with the same functions. Pure functions.
//
// Values that Postgres formats stay its own: timestamps are JSON literals as to_json()
// writes them ("2026-11-29T04:26:27.123456+00:00"), money is decimal text with six places.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/codec/json_writer.hpp"
#include "core/domain/task.hpp"

namespace agentfleet::codec {

// A task's ending as stored: its type as text, as the row holds it.
struct StoredResult {
  std::string type;  // action_completed | need_clarification | error
  std::string message;
  std::vector<std::string> options;
};

struct TaskRow {
  std::string task_id;
  std::string user_id;
  std::string text;
  std::string model;
  std::string tools_json = "null";  // a JSON array of names, or null (every tool)
  std::string priority;
  std::string status;
  int timeout_s = 0;
  int schedule_timeout_s = 0;
  int max_steps = 0;
  std::optional<std::string> strategy;
  std::optional<std::string> idempotency_key;
  std::optional<std::string> batch_id;
  std::optional<std::string> parent_task_id;
  std::optional<std::string> session_id;
  std::optional<std::string> retry_of;
  std::optional<std::int64_t> batch_line;  // its line of its batch upload (/line/N)
  std::optional<std::string> trace_id;     // 32 hex digits: the trace its spans are in
  std::optional<std::int64_t> max_tokens;
  std::optional<std::string> max_cost;  // "0.500000"
  std::string metadata_json = "{}";     // a JSON object
  std::optional<StoredResult> result;
  std::optional<std::string> error;
  std::optional<std::string> error_code;
  bool cancel_requested = false;
  // What waiting_reason() reads: the task is queued behind its parent (a follow-up whose
  // parent has not ended), and the reason the scheduler stored for its user and priority.
  bool parent_unfinished = false;
  std::optional<std::string> stored_waiting_reason;
  int attempt = 0;
  int steps = 0;
  int tool_calls = 0;
  TokenUsage usage;
  std::string cost = "0.000000";
  std::optional<std::string> currency;
  // JSON literals: a quoted timestamp, or null.
  std::string created_at = "null";
  std::string dispatched_at = "null";
  std::string started_at = "null";
  std::string finished_at = "null";
};

// Why a task of `status` waits: nothing unless it is queued; then its parent first (a
// follow-up waits for the task it continues), the limit the scheduler stored for its user
// and priority (concurrency, rpm, tpm, budget, capacity, batch_share), or "scheduling".
std::optional<std::string> waiting_reason(std::string_view status, bool parent_unfinished,
                                          const std::optional<std::string>& stored_reason);

// A need_clarification's choices as stored (result_options: a JSON array of strings); what
// is not a string, or not an array, is left out.
std::vector<std::string> parse_result_options(std::string_view json);

void write_result(JsonWriter& w, std::string_view type, std::string_view message,
                  const std::vector<std::string>& options);
void write_usage(JsonWriter& w, const TokenUsage& usage);

// GET /v1/tasks/{id}: every field, and `trace_json` (a JSON array of the task's steps).
std::string task_json(const TaskRow& row, std::string_view trace_json);
// An item of GET /v1/tasks (no trace, no request details), and a page of them as a JSON
// array in their order.
void write_task_summary(JsonWriter& w, const TaskRow& row);
std::string task_summaries_json(const std::vector<TaskRow>& rows);
// The retry POST /v1/batches/{id}/retry made of a batch's task.
struct RetryRef {
  std::string task_id;
  std::string status;
  std::optional<std::string> result_type;
};
// A line of GET /v1/batches/{id}/results; `retry` the task's batch retry, if any.
std::string batch_result_json(const TaskRow& row, const std::optional<RetryRef>& retry = {});
// What an event stream replays of a task under way: its ending so far, and `steps_json`
// (a JSON array: per step its model text, tool calls and their trace).
std::string task_history_json(const TaskRow& row, std::string_view steps_json);

}  // namespace agentfleet::codec
