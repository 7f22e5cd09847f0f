#include "dispatcher/api.hpp"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <charconv>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <variant>
#include <vector>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>

#include "core/adapters/log.hpp"
#include "core/adapters/pg/batch_store.hpp"
#include "core/adapters/pg/submission_store.hpp"
#include "core/adapters/pg/usage_store.hpp"
#include "core/codec/json_text.hpp"
#include "core/codec/task_codec.hpp"
#include "core/domain/conversation.hpp"
#include "dispatcher/api_responses.hpp"
#include "dispatcher/user_limits.hpp"

namespace agentfleet::dispatcher {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

namespace {
std::string random_hex(std::size_t bytes) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < bytes; ++i) {
    const auto byte = static_cast<unsigned>(rng() & 0xff);
    out.push_back(kHex[byte >> 4]);
    out.push_back(kHex[byte & 0xf]);
  }
  return out;
}

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

}  // namespace

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

http::Response window_query_failed(const http::Request& request, const Error& error) {
  // A timestamp Postgres cannot read (a 30th of February) is the caller's mistake.
  if (error.kind == ErrorKind::kInvalid ||
      error.message.find("out of range") != std::string::npos) {
    return http::make_error(request, http::Status::bad_request, "invalid_request",
                            "from or to is not a valid time", "/query");
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

std::string new_task_id() {
  std::string hex = random_hex(16);
  hex[12] = '4';                                              // version 4
  hex[16] = "89ab"[static_cast<unsigned char>(hex[16]) % 4];  // RFC 4122 variant
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20);
}

std::string traceparent_for(std::string_view incoming) {
  // A valid W3C traceparent (version, 32 hex trace id, 16 hex parent id, 2 hex flags)
  // continues the caller's trace: rebuilt as version 00 from its validated parts, so a later
  // version's extra fields are dropped, not stored and forwarded. Anything else starts a new
  // trace.
  if (const std::string_view trace = log::trace_id_of(incoming); !trace.empty()) {
    return "00-" + std::string(trace) + "-" + std::string(incoming.substr(36, 16)) + "-" +
           std::string(incoming.substr(53, 2));
  }
  return "00-" + random_hex(16) + "-" + random_hex(8) + "-01";
}

codec::SubmissionDefaults submission_defaults(const config::Config& config) {
  codec::SubmissionDefaults defaults;
  defaults.model = config.task_defaults.model;
  defaults.timeout_s = config.task_defaults.timeout_s;
  defaults.schedule_timeout_s = config.task_defaults.schedule_timeout_s;
  defaults.max_steps = config.task_defaults.max_steps;
  defaults.priority =
      parse_priority(config.task_defaults.priority).value_or(Priority::kInteractive);
  defaults.time_zone = config.task_defaults.time_zone;
  defaults.locale = config.task_defaults.locale;
  defaults.max_text_chars = static_cast<std::size_t>(config.dispatcher.max_text_chars);
  return defaults;
}

std::optional<codec::SchemaViolation> check_references(const config::Config& config,
                                                       const TaskSpec& spec) {
  if (!config.find_model(spec.model))
    return codec::SchemaViolation{"/model", "unknown model '" + spec.model + "'"};
  if (spec.tools) {
    for (std::size_t i = 0; i < spec.tools->size(); ++i) {
      if (!config.find_tool((*spec.tools)[i])) {
        return codec::SchemaViolation{"/tools/" + std::to_string(i),
                                      "unknown tool '" + (*spec.tools)[i] + "'"};
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> id_problem(std::string_view id, std::size_t max_chars) {
  if (id.empty())
    return "must not be empty";
  if (codec::sanitize_text(id) != id)
    return "must be valid UTF-8 without NUL characters";
  for (const char c : id) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      return "must not contain control characters";
  }
  if (codec::count_code_points(id) > max_chars)
    return "must be at most " + std::to_string(max_chars) + " characters";
  return std::nullopt;
}

namespace {
// A query parameter that must be an integer in [lo, hi]; nullopt when absent, an error
// response's message when malformed.
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

std::string string_member(const rapidjson::Value& doc, const char* name) {
  if (!doc.IsObject())
    return {};
  auto it = doc.FindMember(name);
  return it != doc.MemberEnd() && it->value.IsString()
             ? std::string(it->value.GetString(), it->value.GetStringLength())
             : std::string();
}

// The owner and status of a task's JSON (as task_json gives it).
struct TaskView {
  std::string user_id;
  bool terminal = false;
};
TaskView view_of(const std::string& task_json) {
  rapidjson::Document doc;
  TaskView view;
  if (!codec::parse_json(doc, task_json))
    return view;
  view.user_id = string_member(doc, "user_id");
  const auto status = parse_task_status(string_member(doc, "status"));
  view.terminal = status && is_terminal(*status);
  return view;
}

http::Response not_found(const http::Request& request, std::string_view what, std::string_view id) {
  return http::make_error(request, http::Status::not_found, "not_found",
                          "no " + std::string(what) + " " + std::string(id),
                          "/path/" + std::string(what) + "_id");
}

// One server-sent event.
std::string sse(std::string_view event, std::string_view data, int id) {
  std::string out = "id: " + std::to_string(id) + "\nevent: " + std::string(event) + "\ndata: ";
  // Data lines may not contain a newline; JSON from the codecs has none, but be safe.
  for (char c : data)
    out += c == '\n' ? ' ' : c;
  out += "\n\n";
  return out;
}

std::string json_of(const rapidjson::Value& value) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  value.Accept(w);
  return std::string(buffer.GetString(), buffer.GetSize());
}

// The data of an event rebuilt from the history: what a live event of the step says,
// marked replayed.
std::string replayed_json(const std::string& task_id, int step, const std::string& tool,
                          const std::string& data) {
  std::string out = "{\"task_id\":\"" + task_id + "\",\"step\":" + std::to_string(step);
  if (!tool.empty()) {
    rapidjson::StringBuffer b;
    rapidjson::Writer<rapidjson::StringBuffer> w(b);
    w.String(tool.data(), static_cast<rapidjson::SizeType>(tool.size()));
    out += ",\"tool\":" + std::string(b.GetString(), b.GetSize());
  }
  return out + ",\"replayed\":true,\"data\":" + data + "}";
}

// Events are told apart by step and kind (error and done: step -1); a stream counts the
// ones it sent by this key, so the history can fill in what the feed did not deliver.
using EventKey = std::pair<int, std::string>;
EventKey key_of(std::string_view event, int step) {
  return {event == "error" || event == "done" ? -1 : step, std::string(event)};
}

struct ReplayEvent {
  std::string event;
  int step = -1;  // -1: error and done
  std::string data;
};

// The events a client missed, rebuilt from the task's history (task_history_json), the
// same a live client got: per step its start (step), the model's text (delta), a call per
// tool call the worker sent (action) and, once they ran, an outcome per call it checked
// (execution; a refused call has no action); when the task ended, error (unless it
// succeeded) and done. `finish` is the result, not a tool call.
struct Replay {
  std::vector<ReplayEvent> events;
  int steps = 0;                // steps in the history
  bool last_tools_done = true;  // the last step's tool outcomes are in the history
  bool terminal = false;
};

Replay replay_of(const rapidjson::Document& h, const std::string& task_id) {
  Replay replay;
  const auto& steps = h["steps"];
  for (const auto& s : steps.GetArray()) {
    const int step = s["step"].GetInt();
    replay.steps = step + 1;
    replay.events.push_back({"step", step, replayed_json(task_id, step, {}, "{}")});
    const std::string content = string_member(s, "content");
    if (!content.empty()) {
      rapidjson::StringBuffer b;
      rapidjson::Writer<rapidjson::StringBuffer> w(b);
      w.StartObject();
      w.Key("text");
      w.String(content.data(), static_cast<rapidjson::SizeType>(content.size()));
      w.EndObject();
      replay.events.push_back(
          {"delta", step,
           replayed_json(task_id, step, {}, std::string(b.GetString(), b.GetSize()))});
    }
    auto action = [&](const std::string& tool, const std::string& arguments) {
      rapidjson::Document parsed;
      const bool object = codec::parse_json(parsed, arguments) && parsed.IsObject();
      replay.events.push_back(
          {"action", step, replayed_json(task_id, step, tool, object ? arguments : "{}")});
    };
    replay.last_tools_done = s["trace"].IsArray();
    if (!replay.last_tools_done) {
      for (const auto& call : s["tool_calls"].GetArray()) {
        if (string_member(call, "name") != kFinishTool)
          action(string_member(call, "name"), string_member(call, "arguments"));
      }
      continue;
    }
    // The trace has an entry per call the worker checked (with its http_status), then the
    // loop's own refusals (a finish beside other calls, a tool not allowed), which it
    // never announced.
    const auto& trace = s["trace"];
    for (const auto& t : trace.GetArray()) {
      if (t.IsObject() && t.HasMember("http_status") && string_member(t, "status") != "refused")
        action(string_member(t, "tool"), string_member(t, "arguments"));
    }
    for (const auto& t : trace.GetArray()) {
      if (!t.IsObject() || !t.HasMember("http_status"))
        continue;
      const std::string status = string_member(t, "status");
      replay.events.push_back(
          {"execution", step,
           replayed_json(task_id, step, string_member(t, "tool"),
                         std::string("{\"ok\":") + (status == "ok" ? "true" : "false") +
                             ",\"status\":\"" + (status.empty() ? "unknown" : status) + "\"}")});
    }
  }
  const auto status = parse_task_status(string_member(h, "status"));
  replay.terminal = status && is_terminal(*status);
  if (replay.terminal) {
    if (*status != TaskStatus::kSucceeded) {
      rapidjson::StringBuffer b;
      rapidjson::Writer<rapidjson::StringBuffer> w(b);
      w.StartObject();
      const std::string code = string_member(h, "error_code");
      const std::string message = string_member(h, "error");
      w.Key("code");
      const std::string code_text = code.empty() ? std::string(to_string(*status)) : code;
      w.String(code_text.c_str());
      w.Key("message");
      w.String(message.c_str());
      // As a live error event says it (docs/errors.md); code and message stay for the
      // clients that read them.
      w.Key("text");
      w.String(message.c_str());
      w.Key("error_code");
      if (code.empty())
        w.Null();
      else
        w.String(code.c_str());
      w.EndObject();
      replay.events.push_back({"error", -1, std::string(b.GetString(), b.GetSize())});
    }
    replay.events.push_back({"done", -1, json_of(h)});
  }
  return replay;
}
}  // namespace

Api::Api(const config::Config& config, pg::DbPool& db, std::function<void()> wake_scheduler,
         metrics::DispatcherMetrics& metrics, TaskFeed& feed)
    : config_(config),
      store_(db),
      wake_scheduler_(std::move(wake_scheduler)),
      metrics_(metrics),
      feed_(feed),
      auth_(config.auth),
      defaults_(submission_defaults(config)),
      batch_pool_(std::make_unique<asio::thread_pool>(
          static_cast<std::size_t>(config.dispatcher.max_batch_uploads))) {
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
  if (found && found->route->access == Access::kAnyone)
    return Routed{std::move(*found), Caller{}};
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
  const auto started = std::chrono::steady_clock::now();
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
  metrics_.http_request(
      route_template(path), response.result_int(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
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

asio::awaitable<std::optional<http::Response>> Api::ops(http::Request& request,
                                                        const std::string& path) {
  if (path == "/healthz") {
    co_return http::make_response(request, http::Status::ok, R"({"status":"ok"})");
  }
  if (path == "/readyz")
    co_return co_await ready(request);
  if (path == "/metrics") {
    co_return http::make_response(request, http::Status::ok, metrics_.registry().render(),
                                  std::string(metrics::kContentType));
  }
  co_return std::nullopt;
}

asio::awaitable<http::Response> Api::route(http::Request& request, const Routed& routed) {
  const Caller& caller = routed.caller;
  const auto& params = routed.match.params;
  switch (routed.match.route->id) {
    case RouteId::kHealthz:
    case RouteId::kReadyz:
    case RouteId::kMetrics: {
      const std::string target(request.target());
      co_return std::move(*co_await ops(request, std::string(http::target_path(target))));
    }
    case RouteId::kSubmitTask:
      co_return co_await submit(request, caller);
    case RouteId::kListTasks:
      co_return co_await list_tasks(request, caller);
    case RouteId::kGetTask:
      co_return co_await get_task(request, caller, params[0]);
    case RouteId::kCancelTask:
      co_return co_await cancel_task(request, caller, params[0]);
    case RouteId::kGetBatch:
      co_return co_await get_batch(request, caller, params[0]);
    case RouteId::kCancelBatch:
      co_return co_await cancel_batch(request, caller, params[0]);
    case RouteId::kFleetUsage:
      co_return co_await usage_of(request, std::nullopt);
    case RouteId::kUserUsage:
      co_return co_await usage(request, caller, params[0]);
    case RouteId::kGetLimits:
    case RouteId::kPutLimits:
      co_return co_await limits(request, caller, params[0]);
    case RouteId::kListTools:
      co_return co_await list_tools(request, caller);
    case RouteId::kCallTool:
      co_return co_await call_tool(request, caller, params[0]);
    case RouteId::kStats:
      co_return co_await stats(request, caller);
    case RouteId::kPlan:
      co_return co_await plan(request, caller);
    case RouteId::kTaskEvents:
    case RouteId::kSubmitBatch:
    case RouteId::kBatchResults:
      break;  // streamed: handle() never routes them here
  }
  co_return http::make_error(request, http::Status::internal_server_error, "internal",
                             "no handler for the route");
}

asio::awaitable<std::variant<http::Response, pg::InsertResult>> Api::store_submission(
    http::Request& request, const codec::Submission& submission) {
  pg::NewTask task{submission.spec, submission.canonical,
                   traceparent_for(std::string(request["traceparent"]))};
  task.spec.task_id = new_task_id();
  const pg::QueueLimit limit = queue_limit(config_);
  const pg::ModelCheck models = model_check(config_);
  auto inserted = co_await store_.insert_task(task, limit, true, models);
  if (!inserted.ok())
    co_return store_unavailable(request, inserted.error());
  const pg::InsertResult result = inserted.value();
  metrics_.task_submitted(
      metrics::SubmitSource::kHttp,
      result.outcome == pg::InsertOutcome::kCreated    ? metrics::SubmitOutcome::kAccepted
      : result.outcome == pg::InsertOutcome::kExisting ? metrics::SubmitOutcome::kDuplicate
                                                       : metrics::SubmitOutcome::kRejected);
  log::TaskContext logged;  // the task's (or the refused submission's) ids in the log
  logged.task_id = result.task_id;
  logged.user_id = task.spec.user_id;
  logged.batch_id = task.spec.batch_id;
  logged.trace_id = log::trace_id_of(task.traceparent);
  if (result.outcome == pg::InsertOutcome::kQueueFull) {
    metrics_.throttled(metrics::ThrottleReason::kQueueFull, 1);
    logged.task_id = {};
    log::info("api", logged, "submission refused: queue_full");
    auto response = http::make_error(
        request, http::Status::too_many_requests, "queue_full",
        "user '" + task.spec.user_id + "' has " + std::to_string(result.room.queued) +
            " tasks queued, the most allowed (max_queued " +
            std::to_string(result.room.max_queued) + "); retry once some have run");
    response.set(bhttp::field::retry_after, "5");
    co_return response;
  }
  if (result.outcome == pg::InsertOutcome::kModelNotAllowed) {
    logged.task_id = {};
    log::info("api", logged, "submission refused: model_not_allowed");
    co_return http::make_error(request, http::Status::forbidden, "model_not_allowed",
                               result.refusal, "/model");
  }
  if (result.outcome == pg::InsertOutcome::kConflict) {
    co_return http::make_error(
        request, http::Status::conflict, "idempotency_conflict",
        "idempotency_key was used with a different request for task " + result.task_id,
        "/idempotency_key");
  }
  if (result.outcome == pg::InsertOutcome::kCreated) {
    log::info("api", logged, "accepted");
    wake_scheduler_();
  }
  co_return result;
}

asio::awaitable<http::Response> Api::submit(http::Request& request, const Caller& caller) {
  auto parsed = codec::parse_submission(request.body(), defaults_);
  if (auto* violation = std::get_if<codec::SchemaViolation>(&parsed)) {
    metrics_.task_submitted(metrics::SubmitSource::kHttp, metrics::SubmitOutcome::kRejected);
    co_return invalid_request(request, *violation);
  }
  auto& submission = std::get<codec::Submission>(parsed);
  if (!caller.may_act_for(submission.spec.user_id)) {
    metrics_.task_submitted(metrics::SubmitSource::kHttp, metrics::SubmitOutcome::kRejected);
    co_return forbidden(request, submission.spec.user_id, "/user_id");
  }
  if (auto problem = check_references(config_, submission.spec)) {
    metrics_.task_submitted(metrics::SubmitSource::kHttp, metrics::SubmitOutcome::kRejected);
    co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                               problem->message, problem->path);
  }
  if (const TaskSpec& spec = submission.spec;
      !spec.parent_task_id.empty() || !spec.session_id.empty()) {
    // A follow-up continues an ended task of the same user (the one named, or its session's
    // latest); another user's task is as unknown as a task that does not exist.
    auto parent = co_await store_.find_parent(spec.user_id, spec.parent_task_id, spec.session_id,
                                              spec.idempotency_key);
    if (!parent.ok())
      co_return store_unavailable(request, parent.error());
    const std::string path = spec.parent_task_id.empty() ? "/session_id" : "/parent_task_id";
    if (!parent.value() && !spec.parent_task_id.empty()) {
      metrics_.task_submitted(metrics::SubmitSource::kHttp, metrics::SubmitOutcome::kRejected);
      co_return http::make_error(
          request, http::Status::bad_request, "invalid_request",
          "no task " + spec.parent_task_id + " of user '" + spec.user_id + "'", path);
    }
    if (parent.value() && !is_terminal(parent.value()->status)) {
      metrics_.task_submitted(metrics::SubmitSource::kHttp, metrics::SubmitOutcome::kRejected);
      co_return http::make_error(
          request, http::Status::conflict, "parent_not_ended",
          "task " + parent.value()->task_id + " has not ended; submit its follow-up once it has",
          path);
    }
  }
  auto stored = co_await store_submission(request, submission);
  if (auto* refused = std::get_if<http::Response>(&stored))
    co_return std::move(*refused);
  const pg::InsertResult& result = std::get<pg::InsertResult>(stored);
  if (result.task_json.empty()) {
    co_return store_unavailable(request, Error{ErrorKind::kTransient, "task vanished"});
  }
  auto response = http::make_response(
      request,
      result.outcome == pg::InsertOutcome::kCreated ? http::Status::created : http::Status::ok,
      result.task_json);
  response.set(bhttp::field::location, "/v1/tasks/" + result.task_id);
  co_return response;
}

asio::awaitable<http::Response> Api::get_task(http::Request& request, const Caller& caller,
                                              std::string task_id) {
  if (!is_uuid(task_id))
    co_return not_found(request, "task", task_id);
  const std::string target(request.target());
  auto wait = int_param(target, "wait", 0, 30);
  if (auto* problem = std::get_if<std::string>(&wait)) {
    co_return http::make_error(request, http::Status::bad_request, "invalid_request", *problem,
                               "/query/wait");
  }
  const int wait_s = std::holds_alternative<int>(wait) ? std::get<int>(wait) : 0;
  auto read = co_await read_task(request, caller, task_id, wait_s);
  if (auto* answered = std::get_if<http::Response>(&read))
    co_return std::move(*answered);
  co_return http::make_response(request, http::Status::ok, std::get<std::string>(read));
}

asio::awaitable<std::variant<http::Response, std::string>> Api::read_task(
    http::Request& request, const Caller& caller, const std::string& task_id, int wait_s) {
  // Answer as soon as the task ends (its result event, from the feed), or after wait_s
  // seconds with it as it is. The row is the truth: it is re-read on every wake-up, and
  // every second in case the event went past this replica.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(wait_s);
  std::unique_ptr<TaskFeed::Subscription> subscription;
  if (wait_s > 0) {
    subscription = feed_.subscribe(task_id);
    metrics_.wait_opened(metrics::WaitKind::kLongPoll);
  }
  struct Closed {
    metrics::DispatcherMetrics& metrics;
    bool open;
    ~Closed() {
      if (open)
        metrics.wait_closed(metrics::WaitKind::kLongPoll);
    }
  } closed{metrics_, wait_s > 0};
  for (;;) {
    auto body = co_await store_.task_json(task_id);
    if (!body.ok())
      co_return store_unavailable(request, body.error());
    if (!body.value())
      co_return not_found(request, "task", task_id);
    const TaskView view = view_of(*body.value());
    if (!caller.may_act_for(view.user_id))
      co_return not_found(request, "task", task_id);
    const auto now = std::chrono::steady_clock::now();
    if (view.terminal || !subscription || now >= until || feed_.stopped())
      co_return std::move(*body.value());
    co_await subscription->next(std::min(until, now + std::chrono::seconds(1)));
  }
}

asio::awaitable<http::Response> Api::list_tasks(http::Request& request, const Caller& caller) {
  const std::string target(request.target());
  pg::TaskListQuery query;
  auto user = http::query_param(target, "user_id");
  if (!user || user->empty()) {
    co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                               "user_id is required", "/query/user_id");
  }
  if (auto refused = check_query_user(request, caller, *user))
    co_return std::move(*refused);
  query.user_id = *user;
  if (auto status = http::query_param(target, "status")) {
    if (!parse_task_status(*status)) {
      co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                                 "unknown status '" + *status + "'", "/query/status");
    }
    query.status = *status;
  }
  auto limit = int_param(target, "limit", 1, 500);
  if (auto* problem = std::get_if<std::string>(&limit)) {
    co_return http::make_error(request, http::Status::bad_request, "invalid_request", *problem,
                               "/query/limit");
  }
  if (auto* value = std::get_if<int>(&limit))
    query.limit = *value;
  if (auto before = http::query_param(target, "before")) {
    if (!is_uuid(*before)) {
      co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                                 "before must be a task id", "/query/before");
    }
    query.before = *before;
  }
  auto page = co_await store_.list_tasks(query);
  if (!page.ok())
    co_return store_unavailable(request, page.error());
  co_return http::make_response(request, http::Status::ok, "{\"tasks\":" + page.value() + "}");
}

asio::awaitable<http::Response> Api::cancel_task(http::Request& request, const Caller& caller,
                                                 std::string task_id) {
  if (!is_uuid(task_id))
    co_return not_found(request, "task", task_id);
  auto before = co_await store_.task_json(task_id);
  if (!before.ok())
    co_return store_unavailable(request, before.error());
  if (!before.value() || !caller.may_act_for(view_of(*before.value()).user_id))
    co_return not_found(request, "task", task_id);
  auto outcome = co_await store_.cancel_task(task_id, config_.kafka.topics.results);
  if (!outcome.ok())
    co_return store_unavailable(request, outcome.error());
  if (outcome.value() == pg::CancelOutcome::kUnknown)
    co_return not_found(request, "task", task_id);
  auto body = co_await store_.task_json(task_id);
  if (!body.ok() || !body.value()) {
    co_return store_unavailable(
        request, body.ok() ? Error{ErrorKind::kTransient, "task vanished"} : body.error());
  }
  switch (outcome.value()) {
    case pg::CancelOutcome::kAlreadyEnded:
      co_return http::make_error(request, http::Status::conflict, "already_ended",
                                 "the task already ended; it cannot be cancelled", "/path/task_id");
    case pg::CancelOutcome::kRequested:
      // Running: its worker stops it within worker.cancel_poll_ms.
      co_return http::make_response(request, http::Status::accepted, *body.value());
    default:
      co_return http::make_response(request, http::Status::ok, *body.value());
  }
}

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
  pg::UsageQuery query;
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
    const pg::UserOverrides overrides = std::get<pg::UserOverrides>(parsed);
    auto put = co_await store_.put_user_overrides(overrides);
    if (!put.ok())
      co_return store_unavailable(request, put.error());
    wake_scheduler_();
  } else if (!caller.may_act_for(user_id)) {
    co_return forbidden(request, user_id, "/path/user_id");
  }
  auto row = co_await store_.get_user_overrides(user_id);
  if (!row.ok())
    co_return store_unavailable(request, row.error());
  const pg::UserOverrides overrides = row.value().value_or(pg::UserOverrides{user_id});
  co_return http::make_response(
      request, http::Status::ok,
      limits_json(user_id, effective_limits(config_, overrides), row.value()));
}

asio::awaitable<http::Response> Api::get_batch(http::Request& request, const Caller& caller,
                                               std::string batch_id) {
  if (id_problem(batch_id, kMaxBatchIdBytes))
    co_return not_found(request, "batch", batch_id);
  auto batch = co_await store_.find_batch(batch_id);
  if (!batch.ok())
    co_return store_unavailable(request, batch.error());
  if (!batch.value() || !caller.may_act_for(batch.value()->user_id))
    co_return not_found(request, "batch", batch_id);
  auto body = co_await store_.batch_json(batch_id);
  if (!body.ok())
    co_return store_unavailable(request, body.error());
  if (!body.value())
    co_return not_found(request, "batch", batch_id);
  co_return http::make_response(request, http::Status::ok, *body.value());
}

asio::awaitable<http::Response> Api::cancel_batch(http::Request& request, const Caller& caller,
                                                  std::string batch_id) {
  if (id_problem(batch_id, kMaxBatchIdBytes))
    co_return not_found(request, "batch", batch_id);
  auto batch = co_await store_.find_batch(batch_id);
  if (!batch.ok())
    co_return store_unavailable(request, batch.error());
  if (!batch.value() || !caller.may_act_for(batch.value()->user_id))
    co_return not_found(request, "batch", batch_id);
  const pg::BatchHeader header = *batch.value();
  // Slices of a few thousand tasks, each one transaction, until none is left; the batch is
  // marked cancelled by the first, so the scheduler admits none of the rest meanwhile.
  constexpr int kSlice = 5000;
  std::string after;  // the last task id of the slices committed so far
  for (;;) {
    auto ended =
        co_await store_.cancel_batch_slice(header, after, kSlice, config_.kafka.topics.results);
    if (!ended.ok())
      co_return store_unavailable(request, ended.error());
    after = ended.value().last;
    if (ended.value().taken < kSlice)
      break;
  }
  auto body = co_await store_.batch_json(batch_id);
  if (!body.ok() || !body.value()) {
    co_return store_unavailable(
        request, body.ok() ? Error{ErrorKind::kTransient, "batch vanished"} : body.error());
  }
  co_return http::make_response(request, http::Status::ok, *body.value());
}

asio::awaitable<http::Response> Api::ready(http::Request& request) {
  const Status ping = co_await store_.ping();
  if (!ping.ok())
    co_return store_unavailable(request, ping.error());
  co_return http::make_response(request, http::Status::ok, R"({"status":"ready"})");
}

}  // namespace agentfleet::dispatcher

namespace agentfleet::dispatcher {

namespace {
constexpr std::size_t kReadChunk = 1 << 20;        // body bytes per read
constexpr std::size_t kMaxLineBytes = 256 * 1024;  // one JSON line of a batch
constexpr std::size_t kBatchSlice = 1000;          // tasks per INSERT
constexpr int kResultsPage = 1000;                 // tasks per results page
constexpr int kMaxReportedErrors = 10;
// An event stream closes after this long; the client reconnects and gets the history again.
constexpr auto kMaxStream = std::chrono::hours(1);

// A whole answer to a streamed request; `answered` keeps its status for the request metrics.
asio::awaitable<bool> respond(http::Exchange& exchange, int& answered, http::Response response) {
  answered = response.result_int();
  co_return co_await exchange.respond(std::move(response));
}
}  // namespace

asio::awaitable<void> Api::stream(http::Exchange& exchange) {
  const auto started = std::chrono::steady_clock::now();
  const http::Request& head = exchange.head();
  const std::string target(head.target());
  const std::string path(http::target_path(target));
  int code = 200;
  auto resolved = resolve(head);
  if (auto* refusal = std::get_if<http::Response>(&resolved)) {
    co_await respond(exchange, code, std::move(*refusal));
  } else {
    const Routed& routed = std::get<Routed>(resolved);
    switch (routed.match.route->id) {
      case RouteId::kSubmitBatch:
        co_await submit_batch(exchange, routed.caller, code);
        break;
      case RouteId::kBatchResults:
        co_await batch_results(exchange, routed.caller, code, routed.match.params[0]);
        break;
      case RouteId::kTaskEvents:
        co_await task_events(exchange, routed.caller, code, routed.match.params[0]);
        break;
      default:
        co_await respond(exchange, code,
                         http::make_error(head, http::Status::internal_server_error, "internal",
                                          "a whole-request route reached the stream handler"));
        break;
    }
  }
  metrics_.http_request(
      route_template(path), code,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
}

asio::awaitable<void> Api::submit_batch(http::Exchange& exchange, const Caller& caller,
                                        int& answered) {
  const http::Request& head = exchange.head();
  const std::string target(head.target());
  auto refuse = [&](http::Status status, std::string_view code, const std::string& message,
                    std::string_view path = {}) {
    return respond(exchange, answered, http::make_error(head, status, code, message, path));
  };
  std::string user_id = http::query_param(target, "user_id").value_or("");
  std::string batch_id = http::query_param(target, "batch_id").value_or("");
  Priority priority = Priority::kBatch;
  if (auto text = http::query_param(target, "priority")) {
    auto parsed = parse_priority(*text);
    if (!parsed) {
      co_await refuse(http::Status::bad_request, "invalid_request",
                      "priority must be interactive or batch", "/query/priority");
      co_return;
    }
    priority = *parsed;
  }
  // The batch id goes into the Location header: a CR or LF in it would write headers of
  // its own.
  if (!batch_id.empty() &&
      (batch_id.size() > kMaxBatchIdBytes || id_problem(batch_id, kMaxBatchIdBytes))) {
    co_await refuse(http::Status::bad_request, "invalid_request",
                    "batch_id must be valid UTF-8 of at most " + std::to_string(kMaxBatchIdBytes) +
                        " bytes without control characters",
                    "/query/batch_id");
    co_return;
  }
  if (!user_id.empty()) {
    if (auto problem = id_problem(user_id, kMaxUserIdChars)) {
      co_await refuse(http::Status::bad_request, "invalid_request", "user_id " + *problem,
                      "/query/user_id");
      co_return;
    }
  }
  if (!user_id.empty() && !caller.may_act_for(user_id)) {
    co_await respond(exchange, answered, forbidden(head, user_id, "/query/user_id"));
    co_return;
  }
  if (batch_uploads_ >= config_.dispatcher.max_batch_uploads) {
    auto response = http::make_error(head, http::Status::too_many_requests, "too_many_uploads",
                                     "this replica is taking " + std::to_string(batch_uploads_) +
                                         " batch uploads already; retry shortly");
    response.set(bhttp::field::retry_after, "5");
    co_await respond(exchange, answered, std::move(response));
    co_return;
  }
  ++batch_uploads_;
  struct Release {
    int& uploads;
    ~Release() { --uploads; }
  } release{batch_uploads_};
  if (batch_id.empty())
    batch_id = new_task_id();

  codec::SubmissionDefaults defaults = defaults_;
  defaults.priority = priority;
  std::unique_ptr<pg::BatchWriter> writer;
  // Blocking store work runs on the batch pool, one call at a time for this upload.
  auto on_pool = [this](auto fn) {
    return asio::co_spawn(
        *batch_pool_,
        [fn = std::move(fn)]() mutable -> asio::awaitable<Result<decltype(fn())>> {
          try {
            co_return Result<decltype(fn())>(fn());
          } catch (const std::exception& e) {
            co_return pg::map_pg_error(e);
          }
        },
        asio::use_awaitable);
  };

  std::vector<std::pair<std::string, std::string>> errors;  // (path, message)
  std::string store_error;
  bool too_many = false;
  bool not_permitted = false;  // the lines name a user the key may not act for: 403
  std::int64_t lines = 0, accepted = 0, duplicates = 0;
  std::vector<pg::NewTask> slice;
  auto flush = [&]() -> asio::awaitable<void> {
    if (slice.empty() || !errors.empty() || !store_error.empty())
      co_return;
    if (!writer) {
      pg::BatchHeader header{batch_id, user_id, priority};
      auto created = co_await on_pool([&] {
        writer = std::make_unique<pg::BatchWriter>(config_.postgres.url,
                                                   config_.postgres.statement_timeout_ms,
                                                   config_.postgres.connect_timeout_s, header);
        return writer->create();
      });
      if (!created.ok()) {
        store_error = created.error().message;
        co_return;
      }
      if (!created.value()) {
        errors.emplace_back("/query/batch_id", "a batch '" + batch_id + "' exists already");
        co_return;
      }
    }
    std::vector<pg::NewTask> rows;
    rows.swap(slice);
    auto added = co_await on_pool([&] { return writer->add(rows); });
    if (!added.ok()) {
      store_error = added.error().message;
      co_return;
    }
    accepted += added.value();
    duplicates += static_cast<std::int64_t>(rows.size()) - added.value();
  };
  auto take_line = [&](std::string_view line) {
    ++lines;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
      --lines;  // blank lines (a trailing newline) are not tasks
      return;
    }
    const std::string where = "/line/" + std::to_string(lines);
    auto fail = [&](const std::string& at, const std::string& message) {
      if (errors.size() < kMaxReportedErrors)
        errors.emplace_back(where + (at == "/" ? "" : at), message);
      else
        errors.back().second += "";  // keep the count below; the rest are not listed
    };
    if (lines > config_.dispatcher.max_batch_lines) {
      too_many = true;
      return;
    }
    if (line.size() > kMaxLineBytes) {
      fail("/", "the line is longer than " + std::to_string(kMaxLineBytes) + " bytes");
      return;
    }
    auto parsed = codec::parse_submission(line, defaults);
    if (auto* violation = std::get_if<codec::SchemaViolation>(&parsed)) {
      fail(violation->path.empty() ? "/" : violation->path, violation->message);
      return;
    }
    auto& submission = std::get<codec::Submission>(parsed);
    TaskSpec& spec = submission.spec;
    if (user_id.empty()) {
      user_id = spec.user_id;
      if (!caller.may_act_for(user_id)) {
        not_permitted = true;
        fail("/user_id", "this key may not act for user '" + user_id + "'");
        return;
      }
    }
    if (spec.user_id != user_id) {
      fail("/user_id", "every task of a batch belongs to its user '" + user_id + "'");
      return;
    }
    if (!spec.batch_id.empty() && spec.batch_id != batch_id) {
      fail("/batch_id",
           "the line names batch '" + spec.batch_id + "', the upload is batch '" + batch_id + "'");
      return;
    }
    if (auto problem = check_references(config_, spec)) {
      fail(problem->path, problem->message);
      return;
    }
    if (!errors.empty())
      return;  // nothing will be stored; only validate the rest
    spec.batch_id = batch_id;
    spec.task_id = new_task_id();
    slice.push_back(pg::NewTask{std::move(spec), std::move(submission.canonical),
                                traceparent_for(std::string(head["traceparent"]))});
  };

  std::string buffer;
  bool body_failed = false;
  for (;;) {
    boost::system::error_code ec;
    const std::size_t before = buffer.size();
    const std::size_t got = co_await exchange.read_body(buffer, kReadChunk, ec);
    if (ec) {
      body_failed = true;
      break;
    }
    std::size_t start = 0;
    for (std::size_t nl = buffer.find('\n', before); nl != std::string::npos;
         nl = buffer.find('\n', start)) {
      take_line(std::string_view(buffer).substr(start, nl - start));
      start = nl + 1;
    }
    buffer.erase(0, start);
    if (buffer.size() > kMaxLineBytes + 1) {
      take_line(buffer);  // reports the overlong line
      buffer.clear();
      while (!exchange.body_done() && !ec) {
        std::string skip;
        const std::size_t n = co_await exchange.read_body(skip, kReadChunk, ec);
        const auto nl = skip.find('\n');
        if (nl != std::string::npos) {
          buffer = skip.substr(nl + 1);
          break;
        }
        if (n == 0)
          break;
      }
    }
    if (slice.size() >= kBatchSlice)
      co_await flush();
    if (got == 0 || exchange.body_done())
      break;
  }
  if (!body_failed && !buffer.empty())
    take_line(buffer);
  if (body_failed) {
    co_await refuse(http::Status::bad_request, "invalid_request",
                    "the request body could not be read to its end; nothing was stored", "/");
    co_return;
  }
  if (too_many) {
    co_await refuse(http::Status::payload_too_large, "payload_too_large",
                    "a batch has at most " + std::to_string(config_.dispatcher.max_batch_lines) +
                        " lines; nothing was stored",
                    "/line/" + std::to_string(config_.dispatcher.max_batch_lines + 1));
    co_return;
  }
  if (errors.empty() && lines == 0) {
    co_await refuse(http::Status::bad_request, "invalid_request",
                    "the batch has no lines: send one JSON task submission per line", "/line/1");
    co_return;
  }
  co_await flush();
  if (!store_error.empty()) {
    auto response = store_unavailable(head, Error{ErrorKind::kTransient, store_error});
    co_await respond(exchange, answered, std::move(response));
    co_return;
  }
  if (!errors.empty()) {
    std::string message = "nothing was stored: ";
    for (std::size_t i = 0; i < errors.size(); ++i) {
      if (i)
        message += "; ";
      message += errors[i].first.substr(1) + ": " + errors[i].second;
    }
    http::Status status = http::Status::bad_request;
    std::string_view code = "invalid_request";
    if (not_permitted) {
      status = http::Status::forbidden;
      code = "forbidden";
    } else if (errors.front().first == "/query/batch_id") {
      status = http::Status::conflict;
      code = "batch_exists";
    }
    auto response = http::make_error(head, status, code, message, errors.front().first);
    co_await respond(exchange, answered, std::move(response));
    co_return;
  }
  auto room = co_await on_pool([&] { return writer->room(queue_limit(config_)); });
  if (!room.ok()) {
    co_await respond(exchange, answered, store_unavailable(head, room.error()));
    co_return;
  }
  if (room.value().queued > room.value().max_queued) {
    metrics_.throttled(metrics::ThrottleReason::kQueueFull, accepted);
    auto response = http::make_error(
        head, http::Status::too_many_requests, "queue_full",
        "the batch's " + std::to_string(accepted) + " tasks would exceed user '" + user_id +
            "''s max_queued of " + std::to_string(room.value().max_queued) +
            " queued tasks; nothing was stored");
    response.set(bhttp::field::retry_after, "60");
    co_await respond(exchange, answered, std::move(response));
    co_return;
  }
  auto committed = co_await on_pool([&] {
    writer->commit(accepted);
    return true;
  });
  if (!committed.ok()) {
    co_await respond(exchange, answered, store_unavailable(head, committed.error()));
    co_return;
  }
  for (std::int64_t i = 0; i < accepted; ++i)
    metrics_.task_submitted(metrics::SubmitSource::kHttp, metrics::SubmitOutcome::kAccepted);
  wake_scheduler_();
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> w(out);
  w.StartObject();
  w.Key("batch_id");
  w.String(batch_id.c_str());
  w.Key("user_id");
  w.String(user_id.c_str());
  w.Key("priority");
  w.String(std::string(to_string(priority)).c_str());
  w.Key("lines");
  w.Int64(lines);
  w.Key("accepted");
  w.Int64(accepted);
  w.Key("duplicates");
  w.Int64(duplicates);
  w.EndObject();
  auto response =
      http::make_response(head, http::Status::created, std::string(out.GetString(), out.GetSize()));
  response.set(bhttp::field::location, "/v1/batches/" + batch_id);
  co_await respond(exchange, answered, std::move(response));
}

asio::awaitable<void> Api::batch_results(http::Exchange& exchange, const Caller& caller,
                                         int& answered, std::string batch_id) {
  const http::Request& head = exchange.head();
  if (id_problem(batch_id, kMaxBatchIdBytes)) {
    co_await respond(exchange, answered, not_found(head, "batch", batch_id));
    co_return;
  }
  auto batch = co_await store_.find_batch(batch_id);
  if (!batch.ok()) {
    co_await respond(exchange, answered, store_unavailable(head, batch.error()));
    co_return;
  }
  if (!batch.value() || !caller.may_act_for(batch.value()->user_id)) {
    co_await respond(exchange, answered, not_found(head, "batch", batch_id));
    co_return;
  }
  const pg::BatchHeader header = *batch.value();
  http::Response start{http::Status::ok, head.version()};
  start.set(bhttp::field::content_type, "application/x-ndjson");
  if (!co_await exchange.begin(std::move(start)))
    co_return;
  std::string after;
  for (;;) {
    auto page = co_await store_.batch_results_page(header, after, kResultsPage);
    if (!page.ok())
      co_return;  // the client sees the stream cut short, without the last chunk
    if (!page.value().lines.empty() && !co_await exchange.send(page.value().lines))
      co_return;
    if (page.value().last.empty())
      break;
    after = page.value().last;
  }
  co_await exchange.end();
}

asio::awaitable<void> Api::task_events(http::Exchange& exchange, const Caller& caller,
                                       int& answered, std::string task_id) {
  const http::Request& head = exchange.head();
  if (!is_uuid(task_id)) {
    co_await respond(exchange, answered, not_found(head, "task", task_id));
    co_return;
  }
  // Subscribe first, then read the history: nothing falls between the two.
  auto subscription = feed_.subscribe(task_id);
  auto history = co_await store_.task_history_json(task_id);
  if (!history.ok()) {
    co_await respond(exchange, answered, store_unavailable(head, history.error()));
    co_return;
  }
  rapidjson::Document doc;
  if (!history.value() || !codec::parse_json(doc, *history.value()) ||
      !caller.may_act_for(string_member(doc, "user_id"))) {
    co_await respond(exchange, answered, not_found(head, "task", task_id));
    co_return;
  }
  metrics_.wait_opened(metrics::WaitKind::kEventStream);
  struct Closed {
    metrics::DispatcherMetrics& metrics;
    ~Closed() { metrics.wait_closed(metrics::WaitKind::kEventStream); }
  } closed{metrics_};
  http::Response start{http::Status::ok, head.version()};
  start.set(bhttp::field::content_type, "text/event-stream");
  start.set(bhttp::field::cache_control, "no-cache");
  if (!co_await exchange.begin(std::move(start)))
    co_return;
  int id = 0;
  std::map<EventKey, int> sent;  // events the client has
  Replay replay = replay_of(doc, task_id);
  for (const auto& e : replay.events) {
    ++sent[key_of(e.event, e.step)];
    if (!co_await exchange.send(sse(e.event, e.data, id++)))
      co_return;
  }
  if (replay.terminal) {
    co_await exchange.end();
    co_return;
  }
  // Live events. Those the history already covered are skipped: every event of an earlier
  // step; of the last step, its start, text and tool calls, and its outcomes when they are
  // in the history too.
  const auto stream_until = std::chrono::steady_clock::now() + kMaxStream;
  const auto heartbeat = std::chrono::seconds(config_.dispatcher.stream_heartbeat_s);
  const int last = replay.steps - 1;
  auto recheck = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < stream_until) {
    const auto now = std::chrono::steady_clock::now();
    // Not std::min({...}): GCC 12 cannot keep an initializer_list across a co_await.
    const auto wake_at = std::min(std::min(now + heartbeat, recheck), stream_until);
    auto item = co_await subscription->next(wake_at);
    if (item && !item->result) {
      const bool covered =
          item->step < last ||
          (item->step == last &&
           (item->event == "step" || item->event == "delta" || item->event == "action" ||
            (item->event == "execution" && replay.last_tools_done)));
      if (covered)
        continue;
      if (item->event == "error" || item->event == "done") {
        // Only the row says a task ended: an ending event while the row is not terminal (a
        // forged or garbled message on the events topic) is not passed on, nor does it end
        // the stream.
        auto ended = co_await store_.task_history_json(task_id);
        rapidjson::Document row;
        if (!ended.ok() || !ended.value() || !codec::parse_json(row, *ended.value()) ||
            !replay_of(row, task_id).terminal)
          continue;
      }
      if (key_of(item->event, item->step).first >= 0 && item->event != "step" &&
          sent[key_of("step", item->step)] == 0) {
        // The step started after the history was read but before the subscription.
        ++sent[key_of("step", item->step)];
        if (!co_await exchange.send(
                sse("step", replayed_json(task_id, item->step, {}, "{}"), id++)))
          co_return;
      }
      if (item->event == "done") {
        // The worker's done carries the result event; the stream ends with it.
        if (co_await exchange.send(sse("done", item->json, id++)))
          co_await exchange.end();
        co_return;
      }
      ++sent[key_of(item->event, item->step)];
      if (!co_await exchange.send(sse(item->event, item->json, id++)))
        co_return;
      continue;
    }
    if (!item && std::chrono::steady_clock::now() < recheck) {
      if (!co_await exchange.send(": keep-alive\n\n"))
        co_return;
      continue;
    }
    // A result event, or time to look at the row: the task may have ended without its done
    // event reaching this replica (ended by the scheduler, or the event was missed).
    recheck = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    auto now_history = co_await store_.task_history_json(task_id);
    rapidjson::Document fresh;
    if (!now_history.ok() || !now_history.value() ||
        !codec::parse_json(fresh, *now_history.value()))
      continue;
    const Replay ended = replay_of(fresh, task_id);
    if (!ended.terminal)
      continue;
    if (item && item->result) {
      // Give the worker's own done event a moment to arrive; it comes just before.
      auto more = co_await subscription->next(std::chrono::steady_clock::now() +
                                              std::chrono::milliseconds(200));
      if (more && !more->result && more->event == "done") {
        if (co_await exchange.send(sse("done", more->json, id++)))
          co_await exchange.end();
        co_return;
      }
    }
    // The result can come before the progress events the feed has yet to deliver (they
    // travel on another topic): the history gives what the client has not had.
    std::map<EventKey, int> seen;
    for (const auto& e : ended.events) {
      const EventKey key = key_of(e.event, e.step);
      if (seen[key]++ < sent[key])
        continue;
      if (!co_await exchange.send(sse(e.event, e.data, id++)))
        co_return;
    }
    co_await exchange.end();
    co_return;
  }
  co_await exchange.end();
}

}  // namespace agentfleet::dispatcher
