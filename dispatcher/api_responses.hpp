#pragma once
// What the API's route files share (api.cpp, api_tasks.cpp, api_batches.cpp,
// api_streams.cpp, api_usage.cpp, api_tools.cpp): error answers and small readers.

#include <rapidjson/document.h>
#include <boost/asio/awaitable.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "core/adapters/http/server.hpp"
#include "core/codec/json_schema.hpp"
#include "core/domain/error.hpp"
#include "dispatcher/auth.hpp"
#include "dispatcher/waiter_limits.hpp"

namespace agentfleet::dispatcher {

// Where an error about the caller's credentials points.
inline constexpr std::string_view kAuthorizationPath = "/header/authorization";

// 503 with Retry-After; the store's detail goes to the log only.
http::Response store_unavailable(const http::Request& request, const Error& error);
// 400 invalid_request at the violation's JSON path ("/" for the body as a whole).
http::Response invalid_request(const http::Request& request,
                               const codec::SchemaViolation& violation);
// 403: this key may not act for `user_id` (the JSON path of the user id in `path`).
http::Response forbidden(const http::Request& request, const std::string& user_id,
                         std::string_view path);

// The 400 or 403 answer when `user_id` of a query (?user_id=) is not an id, or not one of
// the caller's users; nothing when it may be read.
std::optional<http::Response> check_query_user(const http::Request& request, const Caller& caller,
                                               const std::string& user_id);
// A query parameter that must be an integer in [lo, hi]; nullopt when absent, an error
// response's message when malformed.
std::variant<std::nullopt_t, int, std::string> int_param(std::string_view target,
                                                         std::string_view name, int lo, int hi);
// Reads ?limit= (1 to `most`) into `out` when given; the 400 answer when it is not such an
// integer.
std::optional<http::Response> read_limit(const http::Request& request, int most, int& out);
// Reads ?from=&to= (a date or an RFC 3339 time each) into `from` and `to`; the 400 answer
// when one is neither.
std::optional<http::Response> read_time_window(const http::Request& request, std::string* from,
                                               std::string* to);
// 429 (the caller's share) or 503 (the replica's total) with Retry-After, when `what`
// ("event streams", "long polls") are at a cap.
http::Response waiters_refused(const http::Request& request, WaiterLimits::Refusal refusal,
                               std::string_view what);

// 404 not_found for `what` ("task", "batch") `id`, at /path/<what>_id.
http::Response not_found(const http::Request& request, std::string_view what, std::string_view id);

// A whole answer to a streamed request; `answered` keeps its status for the request metrics.
boost::asio::awaitable<bool> respond(http::Exchange& exchange, int& answered,
                                     http::Response response);

// A task id as the API hands them out: a UUID in its 36-character text form.
bool is_uuid(std::string_view text);
// The string member `name` of a JSON object; empty when it is missing or not a string.
std::string string_member(const rapidjson::Value& doc, const char* name);

// The answer to a failed query over such a window: 400 for a time Postgres cannot read (a
// 30th of February), else 503. `what` and `path` name the times the query was given.
http::Response window_query_failed(const http::Request& request, const Error& error,
                                   std::string_view what = "from or to",
                                   std::string_view path = "/query");

}  // namespace agentfleet::dispatcher
