#include "dispatcher/routes.hpp"

#include <algorithm>
#include <array>

#include "core/adapters/http/server.hpp"

namespace agentfleet::dispatcher {

namespace bhttp = boost::beast::http;

namespace {

using enum RouteId;
using enum Access;
using enum BodySize;
using bhttp::verb;

constexpr std::array kRoutes{
    Route{kHealthz, verb::get, "/healthz", false, kNone, kAnyone, {}, "liveness"},
    Route{kReadyz, verb::get, "/readyz", false, kNone, kAnyone, {}, "readiness: Postgres answers"},
    Route{kMetrics, verb::get, "/metrics", false, kNone, kAnyone, {}, "Prometheus metrics"},
    Route{kSubmitTask, verb::post, "/v1/tasks", false, kText, kCaller, {}, "submit a task"},
    Route{kListTasks,
          verb::get,
          "/v1/tasks",
          false,
          kNone,
          kCaller,
          {},
          "a user's tasks, newest first (?user_id=&status=&batch_id=&limit=&before=)"},
    Route{kGetTask,
          verb::get,
          "/v1/tasks/{id}",
          false,
          kNone,
          kCaller,
          {},
          "a task (?wait=N: long poll until it ends)"},
    Route{kCancelTask,
          verb::post,
          "/v1/tasks/{id}/cancel",
          false,
          kNone,
          kCaller,
          {},
          "cancel a task"},
    Route{kRetryTask,
          verb::post,
          "/v1/tasks/{id}/retry",
          false,
          kSmall,
          kCaller,
          {},
          "a new task with an ended task's request (retry_of names the first)"},
    Route{kTaskEvents,
          verb::get,
          "/v1/tasks/{id}/events",
          true,
          kNone,
          kCaller,
          {},
          "a task's events (server-sent events)"},
    Route{kResults,
          verb::get,
          "/v1/results",
          true,
          kNone,
          kCaller,
          {},
          "a user's results as their tasks end (server-sent events; ?user_id=)"},
    Route{kSubmitBatch,
          verb::post,
          "/v1/batches",
          true,
          kStreamed,
          kCaller,
          {},
          "upload a batch (JSON Lines, streamed)"},
    Route{kListBatches,
          verb::get,
          "/v1/batches",
          false,
          kNone,
          kCaller,
          {},
          "batches, newest first, with their progress (?user_id=&limit=&before=)"},
    Route{
        kGetBatch, verb::get, "/v1/batches/{id}", false, kNone, kCaller, {}, "a batch's progress"},
    Route{kBatchResults,
          verb::get,
          "/v1/batches/{id}/results",
          true,
          kNone,
          kCaller,
          {},
          "a batch's results (JSON Lines, streamed)"},
    Route{kCancelBatch,
          verb::post,
          "/v1/batches/{id}/cancel",
          false,
          kNone,
          kCaller,
          {},
          "cancel a batch's unfinished tasks"},
    Route{kRetryBatch,
          verb::post,
          "/v1/batches/{id}/retry",
          false,
          kNone,
          kCaller,
          {},
          "retry a batch's failed tasks (?after=&limit=)"},
    Route{kFleetUsage, verb::get, "/v1/usage", false, kNone, kAdmin,
          "the usage of every user needs an admin key", "every user's usage (?from=&to=)"},
    Route{kUserUsage,
          verb::get,
          "/v1/users/{id}/usage",
          false,
          kNone,
          kCaller,
          {},
          "a user's usage (?from=&to=)"},
    Route{kGetLimits,
          verb::get,
          "/v1/users/{id}/limits",
          false,
          kNone,
          kCaller,
          {},
          "a user's limits"},
    Route{kPutLimits, verb::put, "/v1/users/{id}/limits", false, kSmall, kAdmin,
          "changing limits needs an admin key", "change a user's limits"},
    Route{kListTools, verb::get, "/v1/tools", false, kNone, kCaller, {}, "the tool registry"},
    Route{kCallTool,
          verb::post,
          "/v1/tools/{name}:call",
          false,
          kText,
          kCaller,
          {},
          "call a tool directly (audited)"},
    Route{kStats,
          verb::get,
          "/v1/stats",
          false,
          kNone,
          kCaller,
          {},
          "success statistics (?user_id=&from=&to=)"},
    Route{kPlan,
          verb::post,
          "/v1/plan",
          false,
          kText,
          kCaller,
          {},
          "a plan for an instruction, without running it"},
    Route{kOpenApi,
          verb::get,
          "/v1/openapi.json",
          false,
          kNone,
          kAnyone,
          {},
          "this API's contract (OpenAPI 3.1)"},
    Route{kWhoAmI,
          verb::get,
          "/v1/whoami",
          false,
          kNone,
          kCaller,
          {},
          "the key's name, whether it is an admin's, the users it acts for"},
    Route{kFleet, verb::get, "/v1/fleet", false, kNone, kAdmin, "the fleet view needs an admin key",
          "the fleet: live workers, queued tasks by priority, tasks in flight, completions/s"},
    Route{kDeadLetters, verb::get, "/v1/dead-letters", false, kNone, kAdmin,
          "the dead letters need an admin key",
          "the dead-letter topic's letters, the last read (?limit=&source_topic=&reason=&key=)"},
    Route{kReplayDeadLetters, verb::post, "/v1/dead-letters/replay", false, kText, kAdmin,
          "replaying dead letters needs an admin key",
          "send dead letters back to the topics they came from"},
    Route{kConsole,
          verb::get,
          "/ui/{file}",
          false,
          kNone,
          kAnyone,
          {},
          "the web console: its page (/ui/) and assets"},
    Route{kConsoleRoot, verb::get, "/ui", false, kNone, kAnyone, {}, "redirects to /ui/"},
};

// Splits a pattern into its segments (patterns are ASCII and never empty between slashes).
std::vector<std::string_view> pattern_segments(std::string_view pattern) {
  std::vector<std::string_view> out;
  std::size_t start = 1;  // after the leading '/'
  while (start <= pattern.size()) {
    const std::size_t end = std::min(pattern.find('/', start), pattern.size());
    out.push_back(pattern.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Whether decoded `parts` fit `pattern`; the "{...}" segments are appended to `params`.
bool fits(std::string_view pattern, const std::vector<std::string>& parts,
          std::vector<std::string>* params) {
  const auto segments = pattern_segments(pattern);
  if (segments.size() != parts.size())
    return false;
  std::vector<std::string> found;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const std::string_view segment = segments[i];
    if (!segment.starts_with('{')) {
      if (segment != parts[i])
        return false;
      continue;
    }
    // "{name}" or "{name}<suffix>": the part ends with the suffix and has more before it.
    const std::string_view suffix = segment.substr(segment.find('}') + 1);
    const std::string& part = parts[i];
    if (part.size() <= suffix.size() || !std::string_view(part).ends_with(suffix))
      return false;
    found.push_back(part.substr(0, part.size() - suffix.size()));
  }
  if (params)
    *params = std::move(found);
  return true;
}

}  // namespace

std::span<const Route> routes() {
  return kRoutes;
}

std::vector<std::string> path_segments(std::string_view path) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start < path.size()) {
    if (path[start] == '/') {
      ++start;
      continue;
    }
    const std::size_t end = path.find('/', start);
    parts.push_back(http::decode_path_segment(
        path.substr(start, end == std::string_view::npos ? end : end - start)));
    if (end == std::string_view::npos)
      break;
    start = end;
  }
  return parts;
}

Matched match_route(bhttp::verb method, std::string_view path) {
  const auto parts = path_segments(path);
  std::string allowed;
  std::string_view pattern;
  for (const Route& route : kRoutes) {
    std::vector<std::string> params;
    if (!fits(route.pattern, parts, &params))
      continue;
    if (route.method == method)
      return RouteMatch{&route, std::move(params)};
    if (!allowed.empty())
      allowed += ", ";
    allowed += std::string(bhttp::to_string(route.method));
    pattern = route.pattern;
  }
  if (!allowed.empty())
    return WrongMethod{std::move(allowed), pattern};
  return NoRoute{};
}

std::string_view route_template(std::string_view path) {
  const auto parts = path_segments(path);
  for (const Route& route : kRoutes) {
    if (fits(route.pattern, parts, nullptr))
      return route.pattern;
  }
  return "unmatched";
}

std::size_t body_limit_for(BodySize size, int max_text_chars) {
  switch (size) {
    case kNone:
      return 4 * 1024;
    case kSmall:
      return 16 * 1024;
    case kText: {
      // A character escaped as \uXXXX takes 6 bytes; the rest of a submission fits in 16 KiB.
      const std::size_t text = static_cast<std::size_t>(std::max(max_text_chars, 0)) * 6;
      return std::max<std::size_t>(64 * 1024, text + 16 * 1024);
    }
    case kStreamed:
      break;
  }
  return 0;  // a streamed body is not read whole
}

}  // namespace agentfleet::dispatcher
