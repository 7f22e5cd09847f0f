#pragma once
// A task's server-sent events (GET /v1/tasks/{id}/events) for a reader: the SSE framing
// split into events, and each event in one shape whether it came live from the events
// topic or was rebuilt from the task's trace (a late client, a task that already ended).
//
// The two shapes the dispatcher sends (dispatcher/api_streams.cpp):
//   live      the progress event: {"task_id","user_id","seq","attempt","event","step",
//             "tool"?,"data":{...},"at"}; `done` carries the result event in `data`
//             (status, result, error, error_code, steps as a count, usage, cost, currency);
//             `error` carries {"text": reason} in `data`.
//   replayed  step, delta, action, execution: {"task_id","step","tool"?,"replayed":true,
//             "data":{...}}; error: {"code","message"}; done: the task's history
//             (status, result, error, error_code, usage, cost, currency, "steps": [...]).
// Pure, thread-safe (SseParser: one instance per stream).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentfleet::agentctl {

struct SseEvent {
  std::string event = "message";
  std::string data;
  std::string id;
};

// Splits a byte stream into events (LF or CRLF line ends; comment lines, such as the
// keep-alive heartbeats, are skipped; several data lines are joined with "\n").
class SseParser {
 public:
  std::vector<SseEvent> feed(std::string_view bytes);

 private:
  void line(std::string_view text, std::vector<SseEvent>& out);
  std::string pending_;
  SseEvent current_;
  bool any_field_ = false;
};

// One event of a task, whichever shape it came in.
struct TaskEvent {
  std::string kind;  // step, delta, action, execution, error, done
  int step = -1;     // step, delta, action, execution
  std::string tool;  // action, execution
  // delta: the model's text; action: the call's arguments as compact JSON; execution:
  // "ok" or "failed"; error: the reason.
  std::string text;
  // done: the task's end.
  std::string status;
  std::string result_type;
  std::string message;
  std::vector<std::string> options;
  std::string error;
  std::string error_code;
  std::int64_t steps = -1;
  std::int64_t input_tokens = 0;
  std::int64_t cached_input_tokens = 0;
  std::int64_t output_tokens = 0;
  std::string cost;
  std::string currency;
};

// nullopt for an event that is not one of the six or whose data is not a JSON object.
std::optional<TaskEvent> normalise_task_event(const SseEvent& event);

// One readable line (no newline): "step 0", "  delta: text", "  search_items {...}",
// "  search_items: ok", "error: reason", "done: succeeded action_completed: message ...".
std::string format_task_event(const TaskEvent& event);

}  // namespace agentfleet::agentctl
