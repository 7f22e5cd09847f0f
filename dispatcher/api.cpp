#include "dispatcher/api.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <variant>

#include "core/adapters/log.hpp"
#include "core/adapters/pg/replication.hpp"
#include "core/codec/json_text.hpp"
#include "core/codec/task_codec.hpp"
#include "dispatcher/api_responses.hpp"
#include "dispatcher/openapi.hpp"
#include "dispatcher/task_id_prefix.hpp"

namespace agentfleet::dispatcher {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

namespace {
// The most a dead-letter request reads the topic (joining a group of its own included),
// and then the most its replays wait to be delivered.
constexpr std::chrono::milliseconds kDeadLetterTimeout{15000};

}  // namespace

bool is_uuid(std::string_view text) {
  if (text.size() != 36)
    return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-')
        return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
      return false;
    }
  }
  return true;
}

std::string string_member(const rapidjson::Value& doc, const char* name) {
  if (!doc.IsObject())
    return {};
  auto it = doc.FindMember(name);
  return it != doc.MemberEnd() && it->value.IsString()
             ? std::string(it->value.GetString(), it->value.GetStringLength())
             : std::string();
}

http::Response not_found(const http::Request& request, std::string_view what, std::string_view id) {
  return http::make_error(request, http::Status::not_found, "not_found",
                          "no " + std::string(what) + " " + std::string(id),
                          "/path/" + std::string(what) + "_id");
}

asio::awaitable<bool> respond(http::Exchange& exchange, int& answered, http::Response response) {
  answered = response.result_int();
  co_return co_await exchange.respond(std::move(response));
}

http::Response waiters_refused(const http::Request& request, WaiterLimits::Refusal refusal,
                               std::string_view what) {
  const bool mine = refusal == WaiterLimits::Refusal::kCaller;
  auto response = http::make_error(
      request, mine ? http::Status::too_many_requests : http::Status::service_unavailable,
      mine ? "too_many_waiting" : "server_busy",
      mine ? "this key holds as many open " + std::string(what) + " as it may; close one first"
           : "this replica holds as many open " + std::string(what) + " as it serves; retry",
      kAuthorizationPath);
  response.set(bhttp::field::retry_after, "1");
  return response;
}

http::Response store_unavailable(const http::Request& request, const Error& error) {
  // The detail (libpq's text names hosts and database users) goes to the log only.
  const std::string target(request.target());
  log::write("warn", "api",
             "store unavailable for " + std::string(request.method_string()) + " " +
                 std::string(http::target_path(target)) + ": " + error.message);
  auto response = http::make_error(request, http::Status::service_unavailable, "unavailable",
                                   "the task store is unavailable; retry shortly");
  response.set(bhttp::field::retry_after, "1");
  return response;
}

std::optional<http::Response> check_query_user(const http::Request& request, const Caller& caller,
                                               const std::string& user_id) {
  if (auto problem = id_problem(user_id, kMaxUserIdChars)) {
    return http::make_error(request, http::Status::bad_request, "invalid_request",
                            "user_id " + *problem, "/query/user_id");
  }
  if (!caller.may_act_for(user_id))
    return forbidden(request, user_id, "/query/user_id");
  return std::nullopt;
}

std::variant<std::nullopt_t, int, std::string> int_param(std::string_view target,
                                                         std::string_view name, int lo, int hi) {
  auto text = http::query_param(target, name);
  if (!text)
    return std::nullopt;
  int value = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size() || value < lo || value > hi) {
    return std::string(name) + " must be an integer from " + std::to_string(lo) + " to " +
           std::to_string(hi);
  }
  return value;
}

std::optional<http::Response> read_limit(const http::Request& request, int most, int& out) {
  auto limit = int_param(std::string(request.target()), "limit", 1, most);
  if (auto* problem = std::get_if<std::string>(&limit)) {
    return http::make_error(request, http::Status::bad_request, "invalid_request", *problem,
                            "/query/limit");
  }
  if (auto* value = std::get_if<int>(&limit))
    out = *value;
  return std::nullopt;
}

std::optional<http::Response> read_time_window(const http::Request& request, std::string* from,
                                               std::string* to) {
  const std::string target(request.target());
  for (auto [name, field] : {std::pair<const char*, std::string*>{"from", from},
                             std::pair<const char*, std::string*>{"to", to}}) {
    if (auto value = http::query_param(target, name)) {
      if (!codec::looks_like_timestamp(*value)) {
        return http::make_error(
            request, http::Status::bad_request, "invalid_request",
            std::string(name) + " must be a date (2026-11-01) or an RFC 3339 time",
            std::string("/query/") + name);
      }
      *field = *value;
    }
  }
  return std::nullopt;
}

http::Response window_query_failed(const http::Request& request, const Error& error,
                                   std::string_view what, std::string_view path) {
  // A timestamp Postgres cannot read (a 30th of February) is the caller's mistake.
  if (error.kind == ErrorKind::kInvalid ||
      error.message.find("out of range") != std::string::npos) {
    return http::make_error(request, http::Status::bad_request, "invalid_request",
                            std::string(what) + " is not a valid time", path);
  }
  return store_unavailable(request, error);
}

http::Response invalid_request(const http::Request& request,
                               const codec::SchemaViolation& violation) {
  return http::make_error(request, http::Status::bad_request, "invalid_request", violation.message,
                          violation.path.empty() ? "/" : violation.path);
}

http::Response forbidden(const http::Request& request, const std::string& user_id,
                         std::string_view path) {
  return http::make_error(request, http::Status::forbidden, "forbidden",
                          "this key may not act for user '" + user_id + "'", path);
}

std::string whoami_json(const Caller& caller, const std::string& trace_link) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("key_name");
  w.String(caller.name.c_str(), static_cast<rapidjson::SizeType>(caller.name.size()));
  w.Key("admin");
  w.Bool(caller.admin);
  w.Key("any_user");
  w.Bool(caller.any_user || caller.admin);
  w.Key("user_ids");
  w.StartArray();
  for (const auto& user : caller.users)
    w.String(user.c_str(), static_cast<rapidjson::SizeType>(user.size()));
  w.EndArray();
  // Where a trace id links to (telemetry.trace_link): the same for every caller.
  w.Key("trace_link");
  if (trace_link.empty())
    w.Null();
  else
    w.String(trace_link.c_str(), static_cast<rapidjson::SizeType>(trace_link.size()));
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

Api::Api(const config::Config& config, ports::ApiStore& store, metrics::DispatcherMetrics& metrics,
         TaskFeed& feed, ConsoleFiles console, const CompletionRate* completions,
         std::function<void()> wake_relay, const limits::Clock& clock)
    : config_(config),
      clock_(clock),
      store_(store),
      wake_relay_(std::move(wake_relay)),
      metrics_(metrics),
      gauges_(clock, std::chrono::seconds(config.metrics.refresh_interval_s)),
      console_(console),
      completions_(completions),
      feed_(feed),
      auth_(config.auth),
      rules_(config),
      waiters_(WaiterCaps{static_cast<std::size_t>(config.dispatcher.max_streams_per_caller),
                          static_cast<std::size_t>(config.dispatcher.max_streams)},
               WaiterCaps{static_cast<std::size_t>(config.dispatcher.max_long_polls_per_caller),
                          static_cast<std::size_t>(config.dispatcher.max_long_polls)},
               WaiterCaps{static_cast<std::size_t>(config.dispatcher.max_batch_uploads_per_caller),
                          static_cast<std::size_t>(config.dispatcher.max_batch_uploads)}),
      batch_pool_(std::make_unique<asio::thread_pool>(
          static_cast<std::size_t>(config.dispatcher.max_batch_uploads))),
      dead_letters_(config.kafka, kDeadLetterTimeout) {
  for (const auto& tool : config.tools) {
    rapidjson::Document schema;
    schema.Parse(tool.parameters_schema.c_str());
    tool_schemas_.emplace(tool.name, std::make_shared<codec::CompiledSchema>(schema));
  }
}

Api::~Api() {
  batch_pool_->join();
}

std::variant<http::Response, Api::Routed> Api::resolve(const http::Request& head) const {
  const std::string target(head.target());
  const std::string path(http::target_path(target));
  Matched matched = match_route(head.method(), path);
  auto* found = std::get_if<RouteMatch>(&matched);
  if (found && found->route->access == Access::kAnyone) {
    // With an operations port (metrics.port), readiness and metrics are served there only:
    // nobody on the API's network reads the fleet's metrics or makes it ping Postgres.
    // Liveness stays on both (a load balancer's health check).
    // The contract is the API's own.
    const RouteId id = found->route->id;
    if (config_.metrics.port != 0 && id != RouteId::kHealthz && id != RouteId::kOpenApi &&
        id != RouteId::kConsole && id != RouteId::kConsoleRoot) {
      return http::make_error(head, http::Status::not_found, "not_found",
                              path + " is served on the operations port (metrics.port)", "/path");
    }
    return Routed{std::move(*found), Caller{}};
  }
  auto caller = auth_.authenticate(head);
  if (auto* failure = std::get_if<AuthFailure>(&caller)) {
    auto response = http::make_error(head, http::Status::unauthorized, "unauthorized",
                                     failure->message, kAuthorizationPath);
    response.set(bhttp::field::www_authenticate, "Bearer");
    return response;
  }
  if (auto* wrong = std::get_if<WrongMethod>(&matched)) {
    auto response =
        http::make_error(head, http::Status::method_not_allowed, "method_not_allowed",
                         "use " + wrong->allowed + " on " + std::string(wrong->pattern), "/method");
    response.set(bhttp::field::allow, wrong->allowed);
    return response;
  }
  if (!found) {
    return http::make_error(head, http::Status::not_found, "not_found",
                            "no route for " + std::string(head.method_string()) + " " + path,
                            "/path");
  }
  Caller& who = std::get<Caller>(caller);
  if (found->route->access == Access::kAdmin && !who.admin) {
    return http::make_error(head, http::Status::forbidden, "forbidden",
                            std::string(found->route->admin_reason), kAuthorizationPath);
  }
  return Routed{std::move(*found), std::move(who)};
}

http::Admission Api::admit(const http::Request& head) {
  http::Admission admission;
  auto resolved = resolve(head);
  if (auto* refusal = std::get_if<http::Response>(&resolved)) {
    const std::string target(head.target());
    metrics_.http_request(route_template(http::target_path(target)), refusal->result_int(), 0);
    admission.refusal = std::move(*refusal);
    return admission;
  }
  const Route& route = *std::get<Routed>(resolved).match.route;
  admission.streamed = route.streamed;
  if (route.streamed)
    return admission;
  const std::size_t limit = body_limit_for(route.body, config_.dispatcher.max_text_chars);
  admission.body_limit = limit;
  // A declared length over the limit is refused here, to be counted; the server also stops
  // a chunked body at the limit while reading it.
  const auto declared = head[bhttp::field::content_length];
  std::uint64_t length = 0;
  const auto [end, ec] =
      std::from_chars(declared.data(), declared.data() + declared.size(), length);
  if (!declared.empty() && ec == std::errc() && end == declared.data() + declared.size() &&
      length > limit) {
    auto refusal =
        http::make_error(head, http::Status::payload_too_large, "payload_too_large",
                         "request body exceeds " + std::to_string(limit) + " bytes", "/");
    refusal.keep_alive(false);
    const std::string target(head.target());
    metrics_.http_request(route_template(http::target_path(target)), refusal.result_int(), 0);
    admission.refusal = std::move(refusal);
  }
  return admission;
}

asio::awaitable<http::Response> Api::handle(http::Request& request) {
  const auto started = clock_.now();
  const std::string target(request.target());
  const std::string path(http::target_path(target));
  // admit() refused the head already when the server asked it; asked again here, it finds
  // the route and the caller (without a head route, it refuses here instead).
  auto resolved = resolve(request);
  http::Response response;
  if (auto* refusal = std::get_if<http::Response>(&resolved)) {
    response = std::move(*refusal);
  } else if (std::get<Routed>(resolved).match.route->streamed) {
    // Only a server without the head route sends a streamed route here.
    response = http::make_error(request, http::Status::internal_server_error, "internal",
                                "a streamed route reached the whole-request handler");
  } else {
    response = co_await route(request, std::get<Routed>(resolved));
  }
  metrics_.http_request(route_template(path), response.result_int(),
                        std::chrono::duration<double>(clock_.now() - started).count());
  co_return response;
}

asio::awaitable<http::Response> Api::handle_ops(http::Request& request) {
  const std::string target(request.target());
  const std::string path(http::target_path(target));
  if (auto response = co_await ops(request, path))
    co_return std::move(*response);
  co_return http::make_error(request, http::Status::not_found, "not_found",
                             "this port serves /metrics, /healthz and /readyz", "/path");
}

asio::awaitable<void> Api::count_gauges(metrics::ScrapeRefresh::Claim claim) {
  auto counts = co_await store_.fleet_counts();
  if (!counts.ok())
    co_return;  // the next scrape counts again
  const auto& [live, outbox] = counts.value();
  metrics_.set_tasks(TaskStatus::kQueued, live.queued_interactive + live.queued_batch);
  metrics_.set_tasks(TaskStatus::kDispatched, live.dispatched);
  metrics_.set_tasks(TaskStatus::kRunning, live.running);
  metrics_.set_outbox_backlog(outbox);
  metrics_.set_queue_depth(Priority::kInteractive, live.queued_interactive);
  metrics_.set_queue_depth(Priority::kBatch, live.queued_batch);
  claim.succeeded();
}

asio::awaitable<void> Api::count_gauges_now() {
  if (auto claim = gauges_.claim())
    co_await count_gauges(std::move(claim));
}

asio::awaitable<std::optional<http::Response>> Api::ops(http::Request& request,
                                                        const std::string& path) {
  if (path == "/healthz") {
    co_return http::make_response(request, http::Status::ok, R"({"status":"ok"})");
  }
  if (path == "/readyz")
    co_return co_await ready(request);
  if (path == "/metrics") {
    // The counts are taken beside the answer, never in its way: a scrape while Postgres is
    // slow or away answers at once with the last counts.
    if (auto claim = gauges_.claim())
      asio::co_spawn(co_await asio::this_coro::executor, count_gauges(std::move(claim)),
                     asio::detached);
    co_return http::make_response(request, http::Status::ok, metrics_.registry().render(),
                                  std::string(metrics::kContentType));
  }
  co_return std::nullopt;
}

const std::vector<Api::Binding>& Api::bindings() {
  // The three routes of one task's id take a prefix of it: the whole id first.
  using TaskHandler =
      asio::awaitable<http::Response> (Api::*)(http::Request&, const Caller&, std::string);
  static const auto of_task = [](Api& api, http::Request& request, const Routed& routed,
                                 TaskHandler handler) -> asio::awaitable<http::Response> {
    auto id = co_await api.full_task_id(request, routed.caller, routed.match.params[0]);
    if (auto* refused = std::get_if<http::Response>(&id))
      co_return std::move(*refused);
    co_return co_await (api.*handler)(request, routed.caller, std::move(std::get<std::string>(id)));
  };
  static const auto ops = [](Api& api, http::Request& request,
                             const Routed&) -> asio::awaitable<http::Response> {
    const std::string target(request.target());
    co_return std::move(*co_await api.ops(request, std::string(http::target_path(target))));
  };
  using R = http::Request;
  using E = http::Exchange;
  using A = asio::awaitable<http::Response>;
  using V = asio::awaitable<void>;
  static const std::vector<Binding> table = {
      {RouteId::kHealthz, Whole(ops)},
      {RouteId::kReadyz, Whole(ops)},
      {RouteId::kMetrics, Whole(ops)},
      {RouteId::kSubmitTask, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return co_await api.submit(r, to.caller);
       })},
      {RouteId::kListTasks, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return co_await api.list_tasks(r, to.caller);
       })},
      {RouteId::kGetTask, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return co_await of_task(api, r, to, &Api::get_task);
       })},
      {RouteId::kCancelTask, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return co_await of_task(api, r, to, &Api::cancel_task);
       })},
      {RouteId::kRetryTask, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return co_await of_task(api, r, to, &Api::retry_task);
       })},
      {RouteId::kTaskEvents, Streamed([](Api& api, E& e, const Routed& to, int& code) -> V {
         auto id = co_await api.full_task_id(e.head(), to.caller, to.match.params[0]);
         if (auto* refused = std::get_if<http::Response>(&id))
           co_await respond(e, code, std::move(*refused));
         else
           co_await api.task_events(e, to.caller, code, std::get<std::string>(id));
       })},
      {RouteId::kSubmitBatch, Streamed([](Api& api, E& e, const Routed& to, int& code) -> V {
         co_await api.submit_batch(e, to.caller, code);
       })},
      {RouteId::kListBatches, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return co_await api.list_batches(r, to.caller);
       })},
      {RouteId::kGetBatch, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return co_await api.get_batch(r, to.caller, to.match.params[0]);
       })},
      {RouteId::kBatchResults, Streamed([](Api& api, E& e, const Routed& to, int& code) -> V {
         co_await api.batch_results(e, to.caller, code, to.match.params[0]);
       })},
      {RouteId::kCancelBatch, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return co_await api.cancel_batch(r, to.caller, to.match.params[0]);
       })},
      {RouteId::kRetryBatch, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return co_await api.retry_batch(r, to.caller, to.match.params[0]);
       })},
      {RouteId::kFleetUsage, Whole([](Api& api, R& r, const Routed&) -> A {
         co_return co_await api.usage_of(r, std::nullopt);
       })},
      {RouteId::kUserUsage, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return co_await api.usage(r, to.caller, to.match.params[0]);
       })},
      {RouteId::kGetLimits, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return co_await api.limits(r, to.caller, to.match.params[0]);
       })},
      {RouteId::kPutLimits, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return co_await api.limits(r, to.caller, to.match.params[0]);
       })},
      {RouteId::kListTools, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return co_await api.list_tools(r, to.caller);
       })},
      {RouteId::kCallTool, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return co_await api.call_tool(r, to.caller, to.match.params[0]);
       })},
      {RouteId::kStats, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return co_await api.stats(r, to.caller);
       })},
      {RouteId::kPlan, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return co_await api.plan(r, to.caller);
       })},
      {RouteId::kResults, Streamed([](Api& api, E& e, const Routed& to, int& code) -> V {
         co_await api.results(e, to.caller, code);
       })},
      {RouteId::kOpenApi, Whole([](Api&, R& r, const Routed&) -> A {
         co_return http::make_response(r, http::Status::ok, openapi_json());
       })},
      {RouteId::kWhoAmI, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return http::make_response(r, http::Status::ok,
                                       whoami_json(to.caller, api.config_.telemetry.trace_link));
       })},
      {RouteId::kFleet,
       Whole([](Api& api, R& r, const Routed&) -> A { co_return co_await api.fleet(r); })},
      {RouteId::kDeadLetters,
       Whole([](Api& api, R& r, const Routed&) -> A { co_return co_await api.dead_letters(r); })},
      {RouteId::kReplayDeadLetters, Whole([](Api& api, R& r, const Routed&) -> A {
         co_return co_await api.replay_dead_letters(r);
       })},
      {RouteId::kConsole, Whole([](Api& api, R& r, const Routed& to) -> A {
         co_return console_response(r, to.match.params[0], api.console_);
       })},
      {RouteId::kConsoleRoot, Whole([](Api& api, R& r, const Routed&) -> A {
         // The router takes /ui/ for /ui: the slash is the page, its absence a redirect to it.
         const std::string target(r.target());
         if (http::target_path(target) != "/ui")
           co_return console_response(r, "", api.console_);
         auto response =
             http::make_response(r, http::Status::permanent_redirect, R"({"location":"/ui/"})");
         response.set(bhttp::field::location, "/ui/");
         co_return response;
       })},
  };
  return table;
}

asio::awaitable<http::Response> Api::route(http::Request& request, const Routed& routed) {
  const Binding& bound = bindings()[static_cast<std::size_t>(routed.match.route->id)];
  if (const auto* whole = std::get_if<Whole>(&bound.handler);
      whole && bound.id == routed.match.route->id)
    co_return co_await (*whole)(*this, request, routed);
  // A streamed route: handle() never routes it here.
  co_return http::make_error(request, http::Status::internal_server_error, "internal",
                             "no handler of the whole request for the route");
}

asio::awaitable<http::Response> Api::fleet(const http::Request& request) {
  auto view = co_await store_.fleet_json();
  if (!view.ok())
    co_return store_unavailable(request, view.error());
  // The store's object, with this replica's count of ends added before its closing brace.
  std::string body = std::move(view.value());
  const auto now = CompletionRate::Clock::now();
  const double rate = completions_ ? completions_->per_second(now) : 0;
  const int window = completions_ ? completions_->window_s() : 60;
  char tail[96];
  std::snprintf(tail, sizeof tail, ",\"completions_per_s\":%.2f,\"window_s\":%d", rate, window);
  if (!body.empty() && body.back() == '}')
    body.pop_back();
  body += tail;
  // The ends per bucket this replica's feed saw, oldest first; the last bucket ends now.
  const auto unix_now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  body += ",\"history\":{\"bucket_s\":" +
          std::to_string(completions_ ? completions_->history_bucket_s() : 10) +
          ",\"until_unix_s\":" + std::to_string(unix_now) + ",\"ends\":[";
  if (completions_) {
    bool first = true;
    for (const std::uint64_t n : completions_->history(now)) {
      body += (first ? "" : ",") + std::to_string(n);
      first = false;
    }
  }
  body += "]}}";
  co_return http::make_response(request, http::Status::ok, std::move(body));
}

namespace {
// 429 when the replica's dead-letter desk serves another request; 503 when Kafka did not
// answer in time.
http::Response dead_letters_busy(const http::Request& request) {
  auto response = http::make_error(
      request, http::Status::too_many_requests, "busy",
      "this dispatcher is reading the dead-letter topic for another request; try again shortly");
  response.set(bhttp::field::retry_after, "2");
  return response;
}
http::Response dead_letters_unavailable(const http::Request& request, const Error& error) {
  const std::string target(request.target());
  log::write("warn", "api",
             std::string(request.method_string()) + " " + std::string(http::target_path(target)) +
                 ": " + error.message);
  if (error.kind == ErrorKind::kFatal) {  // a Kafka property librdkafka refused
    return http::make_error(request, http::Status::internal_server_error, "internal",
                            error.message);
  }
  auto response = http::make_error(request, http::Status::service_unavailable, "kafka_unavailable",
                                   error.message);
  response.set(bhttp::field::retry_after, "5");
  return response;
}
}  // namespace

asio::awaitable<http::Response> Api::dead_letters(const http::Request& request) {
  const std::string target(request.target());
  auto query = parse_dead_letter_query(target);
  if (auto* violation = std::get_if<codec::SchemaViolation>(&query)) {
    co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                               violation->message, violation->path);
  }
  auto listed = co_await dead_letters_.list(std::get<DeadLetterQuery>(std::move(query)));
  if (!listed)
    co_return dead_letters_busy(request);
  if (!listed->ok())
    co_return dead_letters_unavailable(request, listed->error());
  NewestLetters& newest = listed->value();
  // What became of their replays that reached the store (those that failed again are
  // letters of the topic: the listing found them).
  auto replays = co_await store_.letter_replays(dead_letters_.topic(), newest.kept_at());
  if (!replays.ok())
    co_return store_unavailable(request, replays.error());
  for (const auto& [at, r] : replays.value())
    newest.add_stored(at, NewestLetters::Stored{r.task_id, r.first_at, r.stored});
  co_return http::make_response(request, http::Status::ok, newest.json(dead_letters_.topic()));
}

asio::awaitable<http::Response> Api::replay_dead_letters(const http::Request& request) {
  auto parsed = parse_replay_request(request.body());
  if (auto* violation = std::get_if<codec::SchemaViolation>(&parsed)) {
    co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                               violation->message, violation->path);
  }
  const bool dry_run = std::get<ReplayRequest>(parsed).dry_run;
  auto outcome = co_await dead_letters_.replay(std::get<ReplayRequest>(std::move(parsed)));
  if (!outcome)
    co_return dead_letters_busy(request);
  if (!outcome->ok())
    co_return dead_letters_unavailable(request, outcome->error());
  if (auto* refusal = std::get_if<ReplayRefusal>(&outcome->value())) {
    co_return http::make_error(request, static_cast<http::Status>(refusal->status), refusal->code,
                               refusal->message, refusal->path);
  }
  const auto& sent = std::get<std::vector<DeadLetterReplay>>(outcome->value());
  if (!dry_run) {
    std::string which;
    for (const auto& r : sent) {
      which += (which.empty() ? "" : ", ") + std::to_string(r.letter.partition) + ":" +
               std::to_string(r.letter.offset) + " -> " + r.message.topic;
    }
    log::write("info", "api",
               "replayed " + std::to_string(sent.size()) + " dead letters: " + which);
  }
  co_return http::make_response(request, http::Status::ok, replay_json(sent, dry_run));
}

asio::awaitable<std::variant<http::Response, std::string>> Api::full_task_id(
    const http::Request& request, const Caller& caller, const std::string& id) {
  if (is_uuid(id))
    co_return id;
  if (too_short_task_id_prefix(id)) {
    co_return http::make_error(
        request, http::Status::not_found, "not_found",
        "no task " + id + ": give a task id, or at least " + std::to_string(kMinTaskIdPrefix) +
            " characters of one (this has " + std::to_string(id.size()) + ")",
        "/path/task_id");
  }
  const auto range = task_id_range(id);
  if (!range)
    co_return not_found(request, "task", id);
  // A few more than one: enough to tell one from several among the caller's, even when some
  // are other users' (an 8-digit prefix is shared by few tasks of millions).
  constexpr int kCandidates = 64;
  auto found = co_await store_.tasks_in_id_range(range->first, range->last, kCandidates);
  if (!found.ok())
    co_return store_unavailable(request, found.error());
  const TaskIdChoice choice = choose_task_id(
      found.value(), [&](const std::string& user_id) { return caller.may_act_for(user_id); });
  if (!choice.ambiguous.empty()) {
    std::string names;
    for (const auto& task_id : choice.ambiguous)
      names += (names.empty() ? "" : ", ") + task_id;
    co_return http::make_error(
        request, http::Status::conflict, "ambiguous_id",
        "the task id prefix '" + id + "' stands for several tasks (" + names +
            (choice.matches > choice.ambiguous.size() ? ", ..." : "") + "); give more of it",
        "/path/task_id");
  }
  // Every candidate read: more may lie beyond them, so one of the caller's (or none) among
  // them does not tell.
  if (found.value().size() == static_cast<std::size_t>(kCandidates)) {
    co_return http::make_error(
        request, http::Status::conflict, "ambiguous_id",
        "the task id prefix '" + id + "' begins too many ids to tell; give more of it",
        "/path/task_id");
  }
  if (choice.task_id)
    co_return *choice.task_id;
  co_return not_found(request, "task", id);
}

asio::awaitable<http::Response> Api::ready(http::Request& request) {
  // Reading the replication settings is the ping: Postgres answers.
  auto replication = co_await store_.check_replication();
  if (!replication.ok())
    co_return store_unavailable(request, replication.error());
  const ports::ReplicationState& state = replication.value();
  if (auto refusal =
          pg::replication_refusal(state, config_.postgres.require_synchronous_replication)) {
    auto response =
        http::make_error(request, http::Status::service_unavailable, "not_ready", *refusal);
    response.set(bhttp::field::retry_after, "5");
    co_return response;
  }
  co_return http::make_response(request, http::Status::ok, pg::ready_json(state));
}

asio::awaitable<void> Api::stream(http::Exchange& exchange) {
  const auto started = clock_.now();
  const http::Request& head = exchange.head();
  const std::string target(head.target());
  const std::string path(http::target_path(target));
  int code = 200;
  auto resolved = resolve(head);
  if (auto* refusal = std::get_if<http::Response>(&resolved)) {
    co_await respond(exchange, code, std::move(*refusal));
  } else {
    const Routed& routed = std::get<Routed>(resolved);
    const Binding& bound = bindings()[static_cast<std::size_t>(routed.match.route->id)];
    if (const auto* streamed = std::get_if<Streamed>(&bound.handler);
        streamed && bound.id == routed.match.route->id) {
      co_await (*streamed)(*this, exchange, routed, code);
    } else {
      co_await respond(exchange, code,
                       http::make_error(head, http::Status::internal_server_error, "internal",
                                        "a whole-request route reached the stream handler"));
    }
  }
  metrics_.http_request(route_template(path), code,
                        std::chrono::duration<double>(clock_.now() - started).count());
}

}  // namespace agentfleet::dispatcher
