#pragma once
// The search of GET /v1/tasks, read from its query string: which tasks (status, result_type,
// error_code, model, session_id, q: text the task's text holds, since and until: a time
// range), how many (limit, 1 to 500; count=true counts the matches up to kCountUpTo), and
// from where (before: the last task id of the previous page). Whose tasks and which batch
// the API decides itself (they need the caller and the store). Pure: no I/O.

#include <optional>
#include <string>
#include <string_view>

#include "core/ports/api_store.hpp"
#include "dispatcher/auth.hpp"

namespace agentfleet::dispatcher {

// A search counts its matches up to this many; past it the answer says the count is capped.
inline constexpr int kCountUpTo = 10000;

struct SearchProblem {
  std::string path;  // "/query/<name>"
  std::string message;
};

// Whose tasks a search reads, set in `query`: the user `requested` names (the API checks
// first that the caller acts for them), else every user the caller acts for: every user's for
// an admin key or one acting for any user. False: nobody's (a key acting for no user).
bool scope_task_search(const Caller& caller, const std::string& requested,
                       ports::TaskListQuery& query);

// Reads the filters of `target` into `query`; the first problem found, or nullopt.
std::optional<SearchProblem> read_task_search(std::string_view target, ports::TaskListQuery& query);

// The answer: {"tasks": [...], "next_before": the id to ask `before` for the next page, or
// null on the last page, and with count=true "total" (the matches, up to kCountUpTo) and
// "total_capped" (more than that match)}.
std::string task_page_json(const ports::TaskListPage& page);

}  // namespace agentfleet::dispatcher
