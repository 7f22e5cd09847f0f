#pragma once
// The dispatcher's routes, declared once: method, path pattern, whether the answer is
// streamed, the most body bytes a request may carry, and who may call. The API routes by
// this table, labels its request metrics with the pattern, and decides on a request's head
// alone (before any body byte is read) whether to refuse it: no caller (401), no route
// (404), the wrong method (405), not an admin (403), a declared body over the route's
// limit (413). schemas/openapi.yaml describes the same routes; a unit test keeps the two
// equal.
//
// Pure: no I/O; the table is immutable.

#include <boost/beast/http/verb.hpp>

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace agentfleet::dispatcher {

enum class RouteId {
  kHealthz,
  kReadyz,
  kMetrics,
  kSubmitTask,
  kListTasks,
  kGetTask,
  kCancelTask,
  kRetryTask,
  kTaskEvents,
  kSubmitBatch,
  kListBatches,
  kGetBatch,
  kBatchResults,
  kCancelBatch,
  kRetryBatch,
  kFleetUsage,
  kUserUsage,
  kGetLimits,
  kPutLimits,
  kListTools,
  kCallTool,
  kStats,
  kPlan,
  kResults,
  kOpenApi,
  kWhoAmI,
  kFleet,
  kDeadLetters,
  kReplayDeadLetters,
  kConsole,
  kConsoleRoot,
};

// Who may call a route.
enum class Access {
  kAnyone,  // the operations routes: no key
  kCaller,  // an authenticated caller (the handler checks which users it may act for)
  kAdmin,   // an admin key only
};

// How big a body a route reads whole. A task submission, a plan request or a tool call
// carries at most `max_text_chars` of text: the limit grows with it (see body_limit_for).
enum class BodySize {
  kNone,      // no body is expected; a small one is ignored (4 KiB at most)
  kSmall,     // a limits document (16 KiB)
  kText,      // a submission, a plan, a tool call: 64 KiB, or more for longer texts
  kStreamed,  // read in pieces by the handler, with its own limits (a batch upload)
};

struct Route {
  RouteId id;
  boost::beast::http::verb method;
  // Segments joined by '/'; "{name}" matches one whole segment, "{name}:call" a segment
  // ending in ":call".
  std::string_view pattern;
  bool streamed;  // the handler reads the body and writes the answer itself
  BodySize body;
  Access access;
  // The 403 message when `access` is kAdmin and the caller is not an admin.
  std::string_view admin_reason;
  // One line: what the route is for.
  std::string_view summary;
};

// Every route.
std::span<const Route> routes();

struct RouteMatch {
  const Route* route;
  std::vector<std::string> params;  // the "{...}" segments, percent-decoded, in order
};
// The path is served, but not with this method; `allowed` is the Allow header's value.
struct WrongMethod {
  std::string allowed;
  std::string_view pattern;
};
struct NoRoute {};
using Matched = std::variant<RouteMatch, WrongMethod, NoRoute>;

// The segments of a request path, each percent-decoded, empty ones dropped:
// "/v1/users/a%20b/usage" -> {"v1", "users", "a b", "usage"}; what routes match.
std::vector<std::string> path_segments(std::string_view path);

// The route a request goes to, by method and path (the target without its query). HEAD is
// not served. Empty segments are ignored, as they always were ("/v1//tasks" is /v1/tasks).
Matched match_route(boost::beast::http::verb method, std::string_view path);

// The pattern of the route that serves `path` with any method ("/v1/tasks/{id}"), or
// "unmatched": what the request metrics are labelled with, so raw paths never become
// label values.
std::string_view route_template(std::string_view path);

// The most body bytes of a route read whole, for a configured `max_text_chars`: the text
// routes take 64 KiB, or enough for that many characters each escaped as \uXXXX plus 16 KiB.
std::size_t body_limit_for(BodySize size, int max_text_chars);

}  // namespace agentfleet::dispatcher
