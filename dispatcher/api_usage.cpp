// The API's usage and limits routes: GET /v1/users/{id}/usage, GET /v1/usage (admin) and
// GET|PUT /v1/users/{id}/limits.
#include "dispatcher/api.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "dispatcher/api_responses.hpp"
#include "dispatcher/user_limits.hpp"

namespace agentfleet::dispatcher {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

asio::awaitable<http::Response> Api::usage(http::Request& request, const Caller& caller,
                                           std::string user_id) {
  if (auto problem = id_problem(user_id, kMaxUserIdChars)) {
    co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                               "user_id " + *problem, "/path/user_id");
  }
  if (!caller.may_act_for(user_id))
    co_return forbidden(request, user_id, "/path/user_id");
  co_return co_await usage_of(request, user_id);
}

asio::awaitable<http::Response> Api::usage_of(http::Request& request,
                                              std::optional<std::string> user_id) {
  const std::string target(request.target());
  ports::UsageQuery query;
  query.user_id = user_id.value_or("");
  if (auto bad = read_time_window(request, &query.from, &query.to))
    co_return std::move(*bad);
  auto body = co_await store_.usage_json(query);
  if (!body.ok())
    co_return window_query_failed(request, body.error());
  std::string out = "{\"user_id\":";
  if (user_id) {
    rapidjson::StringBuffer b;
    rapidjson::Writer<rapidjson::StringBuffer> w(b);
    w.String(user_id->data(), static_cast<rapidjson::SizeType>(user_id->size()));
    out += std::string(b.GetString(), b.GetSize());
  } else {
    out += "null";  // every user
  }
  out += ",\"from\":" + (query.from.empty() ? std::string("null") : "\"" + query.from + "\"");
  out += ",\"to\":" + (query.to.empty() ? std::string("null") : "\"" + query.to + "\"");
  out += "," + body.value().substr(1);
  co_return http::make_response(request, http::Status::ok, out);
}

asio::awaitable<http::Response> Api::limits(http::Request& request, const Caller& caller,
                                            std::string user_id) {
  if (auto problem = id_problem(user_id, kMaxUserIdChars)) {
    co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                               "user_id " + *problem, "/path/user_id");
  }
  if (request.method() == bhttp::verb::put) {
    // Only admins get here (the route's access).
    auto parsed = parse_limits_body(config_, user_id, request.body());
    if (auto* violation = std::get_if<codec::SchemaViolation>(&parsed)) {
      co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                                 violation->message, violation->path);
    }
    const ports::UserOverrides overrides = std::get<ports::UserOverrides>(parsed);
    auto put = co_await store_.put_user_overrides(overrides);
    if (!put.ok())
      co_return store_unavailable(request, put.error());
  } else if (!caller.may_act_for(user_id)) {
    co_return forbidden(request, user_id, "/path/user_id");
  }
  auto row = co_await store_.get_user_overrides(user_id);
  if (!row.ok())
    co_return store_unavailable(request, row.error());
  const ports::UserOverrides overrides = row.value().value_or(ports::UserOverrides{user_id});
  co_return http::make_response(
      request, http::Status::ok,
      limits_json(user_id, effective_limits(config_, overrides), row.value()));
}

}  // namespace agentfleet::dispatcher
