#include "dispatcher/task_search.hpp"

#include <algorithm>
#include <charconv>
#include <utility>
#include <vector>

#include "core/adapters/http/server.hpp"
#include "core/codec/task_codec.hpp"
#include "core/domain/task.hpp"
#include "dispatcher/api_responses.hpp"

namespace agentfleet::dispatcher {
namespace {

// What a free-text filter may be: at most `max_bytes`, no control characters.
std::optional<std::string> text_problem(std::string_view text, std::size_t max_bytes) {
  if (text.size() > max_bytes)
    return "must be at most " + std::to_string(max_bytes) + " bytes";
  for (const char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return std::string("must not hold control characters");
  }
  return std::nullopt;
}

}  // namespace

bool scope_task_search(const Caller& caller, const std::string& requested,
                       ports::TaskListQuery& query) {
  query.user_id.clear();
  query.users.clear();
  if (!requested.empty()) {
    query.user_id = requested;
    return true;
  }
  if (caller.admin || caller.any_user)
    return true;
  // A key acting for one user reads that user's tasks through the index of one user's.
  if (caller.users.size() == 1)
    query.user_id = caller.users.front();
  else
    query.users = caller.users;
  return !caller.users.empty();
}

std::optional<SearchProblem> read_task_search(std::string_view target,
                                              ports::TaskListQuery& query) {
  auto param = [&](std::string_view name) { return http::query_param(target, name).value_or(""); };
  query.status = param("status");
  if (!query.status.empty() && !parse_task_status(query.status))
    return SearchProblem{"/query/status", "unknown status '" + query.status + "'"};
  query.result_type = param("result_type");
  if (!query.result_type.empty() && query.result_type != "action_completed" &&
      query.result_type != "need_clarification" && query.result_type != "error") {
    return SearchProblem{"/query/result_type",
                         "result_type must be action_completed, need_clarification or error"};
  }
  // Exact matches: bounded as the ids they match are.
  struct Exact {
    const char* name;
    std::string* into;
    std::size_t max_bytes;
  };
  for (const Exact& exact : std::vector<Exact>{{"error_code", &query.error_code, 64},
                                               {"model", &query.model, 200},
                                               {"session_id", &query.session_id, 256},
                                               {"q", &query.text, 200}}) {
    *exact.into = param(exact.name);
    if (auto problem = text_problem(*exact.into, exact.max_bytes))
      return SearchProblem{std::string("/query/") + exact.name,
                           std::string(exact.name) + " " + *problem};
  }
  for (auto [name, into] : {std::pair{"since", &query.since}, std::pair{"until", &query.until}}) {
    *into = param(name);
    if (!into->empty() && !codec::looks_like_timestamp(*into)) {
      return SearchProblem{std::string("/query/") + name,
                           std::string(name) + " must be a date (2026-11-01) or an RFC 3339 time"};
    }
  }
  query.before = param("before");
  if (!query.before.empty() && !is_uuid(query.before))
    return SearchProblem{"/query/before", "before must be a task id"};
  if (const std::string limit = param("limit"); !limit.empty()) {
    int value = 0;
    auto [end, ec] = std::from_chars(limit.data(), limit.data() + limit.size(), value);
    if (ec != std::errc() || end != limit.data() + limit.size() || value < 1 || value > 500)
      return SearchProblem{"/query/limit", "limit must be an integer from 1 to 500"};
    query.limit = value;
  }
  const std::string count = param("count");
  if (count == "true" || count == "1")
    query.count_up_to = kCountUpTo + 1;  // one more: to tell a count capped
  else if (!count.empty() && count != "false" && count != "0")
    return SearchProblem{"/query/count", "count must be true or false"};
  return std::nullopt;
}

std::string task_page_json(const ports::TaskListPage& page) {
  std::string out = "{\"tasks\":" + page.tasks + ",\"next_before\":";
  out += page.last.empty() ? "null" : "\"" + page.last + "\"";
  if (page.count >= 0) {
    out += ",\"total\":" + std::to_string(std::min<std::int64_t>(page.count, kCountUpTo));
    out += std::string(",\"total_capped\":") + (page.count > kCountUpTo ? "true" : "false");
  }
  return out + "}";
}

}  // namespace agentfleet::dispatcher
