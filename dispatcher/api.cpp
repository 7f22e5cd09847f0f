#include "dispatcher/api.hpp"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <charconv>
#include <chrono>
#include <random>
#include <variant>

#include "core/adapters/pg/task_store.hpp"
#include "core/codec/json_text.hpp"

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

http::Response store_unavailable(const http::Request& request, const Error& error) {
  auto response = http::make_error(request, http::Status::service_unavailable, "unavailable",
                                   "the task store is unavailable: " + error.message);
  response.set(bhttp::field::retry_after, "1");
  return response;
}
}  // namespace

std::string new_task_id() {
  std::string hex = random_hex(16);
  hex[12] = '4';                                              // version 4
  hex[16] = "89ab"[static_cast<unsigned char>(hex[16]) % 4];  // RFC 4122 variant
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20);
}

std::string traceparent_for(std::string_view incoming) {
  // version "00", 32 hex trace id, 16 hex parent id, 2 hex flags.
  if (incoming.size() == 55 && incoming.substr(0, 3) == "00-" && incoming[35] == '-' &&
      incoming[52] == '-') {
    return std::string(incoming);
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

Api::Api(const config::Config& config, pg::DbPool& db, std::function<void()> wake_scheduler,
         metrics::DispatcherMetrics& metrics)
    : config_(config),
      db_(db),
      wake_scheduler_(std::move(wake_scheduler)),
      metrics_(metrics),
      defaults_(submission_defaults(config)) {}

std::string_view route_template(std::string_view path) {
  constexpr std::string_view kTaskPrefix = "/v1/tasks/";
  for (std::string_view fixed : {"/healthz", "/readyz", "/metrics", "/v1/tasks"}) {
    if (path == fixed)
      return fixed;
  }
  if (path.rfind(kTaskPrefix, 0) == 0 && path.size() > kTaskPrefix.size()) {
    const std::string_view rest = path.substr(kTaskPrefix.size());
    const auto slash = rest.find('/');
    if (slash == std::string_view::npos)
      return "/v1/tasks/{id}";
    if (slash > 0 && rest.substr(slash) == "/cancel")
      return "/v1/tasks/{id}/cancel";
  }
  return "unmatched";
}

asio::awaitable<http::Response> Api::handle(http::Request& request) {
  const auto started = std::chrono::steady_clock::now();
  const std::string target(request.target());
  http::Response response = co_await route(request);
  metrics_.http_request(
      route_template(http::target_path(target)), response.result_int(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  co_return response;
}

asio::awaitable<http::Response> Api::handle_ops(http::Request& request) {
  const std::string target(request.target());
  const std::string path(http::target_path(target));
  if (auto response = co_await ops(request, path))
    co_return std::move(*response);
  co_return http::make_error(request, http::Status::not_found, "not_found",
                             "this port serves /metrics, /healthz and /readyz");
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

asio::awaitable<http::Response> Api::route(http::Request& request) {
  const std::string target(request.target());
  const std::string path(http::target_path(target));
  if (auto response = co_await ops(request, path))
    co_return std::move(*response);
  if (path == "/v1/tasks") {
    if (request.method() == bhttp::verb::post)
      co_return co_await submit(request);
    if (request.method() == bhttp::verb::get)
      co_return co_await list_tasks(request);
    co_return http::make_error(request, http::Status::method_not_allowed, "method_not_allowed",
                               "use POST to submit a task, GET to list a user's tasks");
  }
  constexpr std::string_view kTaskPrefix = "/v1/tasks/";
  constexpr std::string_view kCancelSuffix = "/cancel";
  if (path.rfind(kTaskPrefix, 0) == 0 && path.size() > kTaskPrefix.size() + kCancelSuffix.size() &&
      path.compare(path.size() - kCancelSuffix.size(), kCancelSuffix.size(), kCancelSuffix) == 0 &&
      path.find('/', kTaskPrefix.size()) == path.size() - kCancelSuffix.size()) {
    if (request.method() != bhttp::verb::post) {
      co_return http::make_error(request, http::Status::method_not_allowed, "method_not_allowed",
                                 "use POST to cancel a task");
    }
    co_return co_await cancel_task(
        request,
        path.substr(kTaskPrefix.size(), path.size() - kTaskPrefix.size() - kCancelSuffix.size()));
  }
  if (path.rfind(kTaskPrefix, 0) == 0 && path.find('/', kTaskPrefix.size()) == std::string::npos) {
    if (request.method() != bhttp::verb::get) {
      co_return http::make_error(request, http::Status::method_not_allowed, "method_not_allowed",
                                 "use GET to read a task");
    }
    co_return co_await get_task(request, path.substr(kTaskPrefix.size()));
  }
  co_return http::make_error(request, http::Status::not_found, "not_found",
                             "no route for " + std::string(request.method_string()) + " " + path);
}

asio::awaitable<http::Response> Api::submit(http::Request& request) {
  auto parsed = codec::parse_submission(request.body(), defaults_);
  if (auto* violation = std::get_if<codec::SchemaViolation>(&parsed)) {
    metrics_.task_submitted(metrics::SubmitSource::kHttp, metrics::SubmitOutcome::kRejected);
    co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                               violation->message, violation->path.empty() ? "/" : violation->path);
  }
  auto& submission = std::get<codec::Submission>(parsed);
  if (auto problem = check_references(config_, submission.spec)) {
    metrics_.task_submitted(metrics::SubmitSource::kHttp, metrics::SubmitOutcome::kRejected);
    co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                               problem->message, problem->path);
  }
  pg::NewTask task{submission.spec, submission.canonical,
                   traceparent_for(std::string(request["traceparent"]))};
  task.spec.task_id = new_task_id();
  auto inserted = co_await db_.run([&](pqxx::connection& c) { return pg::insert_task(c, task); });
  if (!inserted.ok())
    co_return store_unavailable(request, inserted.error());
  const pg::InsertResult& result = inserted.value();
  metrics_.task_submitted(
      metrics::SubmitSource::kHttp,
      result.outcome == pg::InsertOutcome::kCreated    ? metrics::SubmitOutcome::kAccepted
      : result.outcome == pg::InsertOutcome::kExisting ? metrics::SubmitOutcome::kDuplicate
                                                       : metrics::SubmitOutcome::kRejected);
  if (result.outcome == pg::InsertOutcome::kConflict) {
    co_return http::make_error(
        request, http::Status::conflict, "idempotency_conflict",
        "idempotency_key was used with a different request for task " + result.task_id,
        "/idempotency_key");
  }
  if (result.outcome == pg::InsertOutcome::kCreated)
    wake_scheduler_();
  auto body =
      co_await db_.run([&](pqxx::connection& c) { return pg::task_json(c, result.task_id); });
  if (!body.ok() || !body.value()) {
    co_return store_unavailable(
        request, body.ok() ? Error{ErrorKind::kTransient, "task vanished"} : body.error());
  }
  auto response = http::make_response(
      request,
      result.outcome == pg::InsertOutcome::kCreated ? http::Status::created : http::Status::ok,
      *body.value());
  response.set(bhttp::field::location, "/v1/tasks/" + result.task_id);
  co_return response;
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

bool terminal_json(const std::string& task_json) {
  rapidjson::Document doc;
  if (!codec::parse_json(doc, task_json) || !doc.IsObject() || !doc.HasMember("status") ||
      !doc["status"].IsString()) {
    return false;
  }
  const auto status = parse_task_status(doc["status"].GetString());
  return status && is_terminal(*status);
}
}  // namespace

asio::awaitable<http::Response> Api::get_task(http::Request& request, std::string task_id) {
  if (!is_uuid(task_id)) {
    co_return http::make_error(request, http::Status::not_found, "not_found", "no task " + task_id);
  }
  const std::string target(request.target());
  auto wait = int_param(target, "wait", 0, 30);
  if (auto* problem = std::get_if<std::string>(&wait)) {
    co_return http::make_error(request, http::Status::bad_request, "invalid_request", *problem,
                               "/query/wait");
  }
  // ?wait=N: answer as soon as the task ends, or after N seconds with it as it is. The
  // row is re-read with a growing interval (50 ms to 500 ms).
  const int wait_s = std::holds_alternative<int>(wait) ? std::get<int>(wait) : 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(wait_s);
  auto executor = co_await asio::this_coro::executor;
  auto interval = std::chrono::milliseconds(50);
  for (;;) {
    auto body = co_await db_.run([&](pqxx::connection& c) { return pg::task_json(c, task_id); });
    if (!body.ok())
      co_return store_unavailable(request, body.error());
    if (!body.value()) {
      co_return http::make_error(request, http::Status::not_found, "not_found",
                                 "no task " + task_id);
    }
    if (terminal_json(*body.value()) || std::chrono::steady_clock::now() + interval > until)
      co_return http::make_response(request, http::Status::ok, *body.value());
    asio::steady_timer timer(executor, interval);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    interval = std::min(interval * 2, std::chrono::milliseconds(500));
  }
}

asio::awaitable<http::Response> Api::list_tasks(http::Request& request) {
  const std::string target(request.target());
  pg::TaskListQuery query;
  auto user = http::query_param(target, "user_id");
  if (!user || user->empty()) {
    co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                               "user_id is required", "/query/user_id");
  }
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
  auto page = co_await db_.run([&](pqxx::connection& c) { return pg::list_tasks(c, query); });
  if (!page.ok())
    co_return store_unavailable(request, page.error());
  co_return http::make_response(request, http::Status::ok, "{\"tasks\":" + page.value() + "}");
}

asio::awaitable<http::Response> Api::cancel_task(http::Request& request, std::string task_id) {
  if (!is_uuid(task_id)) {
    co_return http::make_error(request, http::Status::not_found, "not_found", "no task " + task_id);
  }
  auto outcome = co_await db_.run([&](pqxx::connection& c) {
    return pg::cancel_task(c, task_id, config_.kafka.topics.results);
  });
  if (!outcome.ok())
    co_return store_unavailable(request, outcome.error());
  if (outcome.value() == pg::CancelOutcome::kUnknown) {
    co_return http::make_error(request, http::Status::not_found, "not_found", "no task " + task_id);
  }
  auto body = co_await db_.run([&](pqxx::connection& c) { return pg::task_json(c, task_id); });
  if (!body.ok() || !body.value()) {
    co_return store_unavailable(
        request, body.ok() ? Error{ErrorKind::kTransient, "task vanished"} : body.error());
  }
  switch (outcome.value()) {
    case pg::CancelOutcome::kAlreadyEnded:
      co_return http::make_error(request, http::Status::conflict, "already_ended",
                                 "the task already ended; it cannot be cancelled");
    case pg::CancelOutcome::kRequested:
      // Running: its worker stops it within worker.cancel_poll_ms.
      co_return http::make_response(request, http::Status::accepted, *body.value());
    default:
      co_return http::make_response(request, http::Status::ok, *body.value());
  }
}

asio::awaitable<http::Response> Api::ready(http::Request& request) {
  auto ping = co_await db_.run([](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    tx.exec1("SELECT 1");
    return true;
  });
  if (!ping.ok())
    co_return store_unavailable(request, ping.error());
  co_return http::make_response(request, http::Status::ok, R"({"status":"ready"})");
}

}  // namespace agentfleet::dispatcher
