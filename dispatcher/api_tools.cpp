// The API's tool and statistics routes: GET /v1/tools (the registry), POST
// /v1/tools/{name}:call (a tool called directly for one user, checked like a model's call
// and audited in tool_call_audit) and GET /v1/stats.
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <boost/asio/this_coro.hpp>

#include <chrono>

#include "core/adapters/http/tool_client.hpp"
#include "core/adapters/log.hpp"
#include "core/codec/json_text.hpp"
#include "core/codec/plan_codec.hpp"
#include "core/codec/tool_call_check.hpp"
#include "core/domain/tool_keys.hpp"
#include "dispatcher/api.hpp"
#include "dispatcher/api_responses.hpp"

namespace agentfleet::dispatcher {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

namespace {
using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void key_string(Writer& w, const char* key, std::string_view value) {
  w.Key(key);
  w.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
}

// `text` as a JSON value when it is JSON, else as a string.
void raw_or_string(Writer& w, const std::string& text) {
  rapidjson::Document doc;
  if (codec::parse_json(doc, text)) {
    w.RawValue(text.data(), text.size(), doc.GetType());
  } else {
    w.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
  }
}

// The longest Idempotency-Key a caller may give a direct call.
constexpr std::size_t kMaxIdempotencyKeyBytes = 200;
}  // namespace

std::string tool_registry_json(const config::Config& config,
                               std::optional<config::Permission> user_permission) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("tools");
  w.StartArray();
  for (const auto& tool : config.tools) {
    w.StartObject();
    key_string(w, "name", tool.name);
    key_string(w, "description", tool.description);
    key_string(w, "category", tool.category);
    w.Key("parameters");
    raw_or_string(w, tool.parameters_schema);
    key_string(w, "permission", config::to_string(tool.permission));
    w.Key("idempotent");
    w.Bool(tool.idempotent);
    w.Key("timeout_s");
    w.Int(tool.timeout_s);
    if (user_permission) {
      w.Key("permitted");
      w.Bool(tool.permission <= *user_permission);
    }
    w.EndObject();
  }
  w.EndArray();
  w.Key("count");
  w.Int(static_cast<int>(config.tools.size()));
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

asio::awaitable<Result<config::Permission>> Api::permission_of(const std::string& user_id) {
  auto row = co_await store_.get_user_overrides(user_id);
  if (!row.ok())
    co_return row.error();
  // The rule the worker applies to a task's tool calls.
  const ports::UserOverrides overrides = row.value().value_or(ports::UserOverrides{user_id});
  co_return config_.limits_for(overrides).tool_permission;
}

asio::awaitable<http::Response> Api::list_tools(http::Request& request, const Caller& caller) {
  const std::string target(request.target());
  std::optional<config::Permission> permission;
  if (auto user = http::query_param(target, "user_id")) {
    if (auto refused = check_query_user(request, caller, *user))
      co_return std::move(*refused);
    auto level = co_await permission_of(*user);
    if (!level.ok())
      co_return store_unavailable(request, level.error());
    permission = level.value();
  }
  co_return http::make_response(request, http::Status::ok, tool_registry_json(config_, permission));
}

asio::awaitable<http::Response> Api::call_tool(http::Request& request, const Caller& caller,
                                               std::string tool_name) {
  rapidjson::Document body;
  if (auto violation =
          codec::validate_json_text(request.body(), "tool_call_request.schema.json", &body)) {
    co_return invalid_request(request, *violation);
  }
  const std::string user_id = body["user_id"].GetString();
  if (!caller.may_act_for(user_id))
    co_return forbidden(request, user_id, "/user_id");
  const config::ToolConfig* tool = config_.find_tool(tool_name);
  if (tool == nullptr) {
    co_return http::make_error(request, http::Status::not_found, "not_found",
                               "no tool '" + tool_name + "'", "/path/tool");
  }
  std::string arguments = "{}";
  if (body.HasMember("arguments")) {
    rapidjson::StringBuffer b;
    Writer w(b);
    body["arguments"].Accept(w);
    arguments.assign(b.GetString(), b.GetSize());
  }
  const std::string device_id =
      body.HasMember("device_id") ? std::string(body["device_id"].GetString()) : std::string();
  // A caller retrying a call sends the same key, and the tool answers it once. The key the
  // tool sees is in a namespace of direct calls and of the user (direct_call_key), so it can
  // never be a task's "<task_id>:<step>:<call>" nor another user's.
  std::string key(request["idempotency-key"]);
  if (key.empty()) {
    key = new_task_id();
  } else if (key.size() > kMaxIdempotencyKeyBytes || codec::sanitize_text(key) != key ||
             key.find_first_of("\r\n") != std::string::npos) {
    co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                               "Idempotency-Key must be at most 200 bytes of UTF-8 text",
                               "/header/idempotency-key");
  }
  key = direct_call_key(user_id, key);

  // The same checks as a model's call: the user's permission level (an admin key may call
  // any tool for any user) and the tool's JSON Schema.
  std::set<std::string> permitted;
  config::Permission level = config::Permission::kAdmin;
  if (!caller.admin) {
    auto own = co_await permission_of(user_id);
    if (!own.ok())
      co_return store_unavailable(request, own.error());
    level = own.value();
  }
  for (const auto& t : config_.tools) {
    if (t.permission <= level)
      permitted.insert(t.name);
  }
  auto schema = tool_schemas_.find(tool->name);
  const ToolCall call{"direct", tool->name, arguments};
  auto refusal = codec::check_tool_call(
      call, permitted, schema != tool_schemas_.end() ? schema->second.get() : nullptr);

  ports::ToolAuditEntry entry{
      caller.name,
      user_id,
      tool->name,
      arguments,
      key,
      refusal ? (refusal->code == codec::kInvalidArguments ? "invalid_arguments" : "refused")
              : "pending",
      refusal ? refusal->message : std::string()};
  auto audit = co_await store_.insert_tool_audit(entry);
  if (!audit.ok())
    co_return store_unavailable(request, audit.error());  // unaudited: not called
  log::info("api", log::TaskContext{{}, user_id},
            "direct tool call " + tool->name + ": " + entry.outcome,
            {{"caller", caller.name}, {"audit_id", std::to_string(audit.value())}});
  if (refusal) {
    const bool invalid = refusal->code == codec::kInvalidArguments;
    co_return http::make_error(
        request, invalid ? http::Status::bad_request : http::Status::forbidden, refusal->code,
        refusal->message, invalid ? "/arguments" : "/path/tool");
  }

  if (!tool_client_) {
    tool_client_ =
        std::make_unique<http::HttpToolClient>(co_await asio::this_coro::executor, config_.tools);
  }
  ports::ToolInvocation invocation{new_task_id(),
                                   user_id,
                                   device_id,
                                   tool->name,
                                   arguments,
                                   key,
                                   clock_.now() + std::chrono::seconds(tool->timeout_s),
                                   traceparent_for(std::string(request["traceparent"]))};
  const ports::ToolOutcome outcome = co_await tool_client_->call(std::move(invocation));
  const int latency_ms = static_cast<int>(outcome.latency.count());
  const std::string result_outcome = outcome.observation.ok ? "ok" : "error";
  const std::string audit_error =
      outcome.observation.ok ? std::string() : outcome.observation.content;
  auto finished = co_await store_.finish_tool_audit(audit.value(), result_outcome,
                                                    outcome.http_status, latency_ms, audit_error);
  if (!finished.ok()) {
    log::warn("api", log::TaskContext{{}, user_id},
              "could not complete the audit of a direct tool call (it stays pending): " +
                  finished.error().message,
              {{"audit_id", std::to_string(audit.value())}});
  }

  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  key_string(w, "tool", tool->name);
  key_string(w, "user_id", user_id);
  w.Key("ok");
  w.Bool(outcome.observation.ok);
  w.Key("result");
  raw_or_string(w, outcome.observation.content);
  w.Key("http_status");
  w.Int(outcome.http_status);
  w.Key("latency_ms");
  w.Int(latency_ms);
  key_string(w, "idempotency_key", key);
  w.Key("audit_id");
  w.Int64(audit.value());
  w.EndObject();
  co_return http::make_response(request, http::Status::ok,
                                std::string(buffer.GetString(), buffer.GetSize()));
}

asio::awaitable<http::Response> Api::stats(http::Request& request, const Caller& caller) {
  const std::string target(request.target());
  ports::StatsQuery query;
  if (auto user = http::query_param(target, "user_id"); user && !user->empty()) {
    if (auto refused = check_query_user(request, caller, *user))
      co_return std::move(*refused);
    query.user_id = *user;
  } else if (!caller.admin) {
    co_return http::make_error(request, http::Status::forbidden, "forbidden",
                               "the statistics of every user need an admin key (or give user_id)",
                               kAuthorizationPath);
  }
  if (auto bad = read_time_window(request, &query.from, &query.to))
    co_return std::move(*bad);
  auto body = co_await store_.stats_json(query);
  if (!body.ok())
    co_return window_query_failed(request, body.error());
  rapidjson::StringBuffer head;
  Writer w(head);
  w.StartObject();
  w.Key("user_id");
  if (query.user_id.empty()) {
    w.Null();
  } else {
    w.String(query.user_id.c_str(), static_cast<rapidjson::SizeType>(query.user_id.size()));
  }
  for (auto [name, value] : {std::pair<const char*, const std::string*>{"from", &query.from},
                             std::pair<const char*, const std::string*>{"to", &query.to}}) {
    w.Key(name);
    if (value->empty()) {
      w.Null();
    } else {
      w.String(value->c_str(), static_cast<rapidjson::SizeType>(value->size()));
    }
  }
  w.EndObject();
  std::string out(head.GetString(), head.GetSize());
  out.pop_back();  // the closing brace: the statistics' members follow
  out += "," + body.value().substr(1);
  co_return http::make_response(request, http::Status::ok, out);
}

asio::awaitable<http::Response> Api::plan(http::Request& request, const Caller& caller) {
  rapidjson::Document body;
  if (auto violation =
          codec::validate_json_text(request.body(), "plan_request.schema.json", &body)) {
    co_return invalid_request(request, *violation);
  }
  const std::string user_id = body["user_id"].GetString();
  if (!caller.may_act_for(user_id))
    co_return forbidden(request, user_id, "/user_id");

  // A plan is a task: the request's fields as a submission, the planner alone with room
  // for its corrections, queued, limited, billed and traced like any task.
  rapidjson::Document fields(rapidjson::kObjectType);
  auto& allocator = fields.GetAllocator();
  for (const char* name : {"user_id", "text", "model", "tools", "timeout_s", "idempotency_key"}) {
    if (body.HasMember(name)) {
      fields.AddMember(rapidjson::StringRef(name), rapidjson::Value(body[name], allocator),
                       allocator);
    }
  }
  fields.AddMember("max_steps", std::min(50, 1 + config_.plan_execute.max_corrections), allocator);
  rapidjson::StringBuffer text;
  Writer w(text);
  fields.Accept(w);
  auto parsed = rules_.parse(std::string_view(text.GetString(), text.GetSize()));
  if (auto* violation = std::get_if<codec::SchemaViolation>(&parsed)) {
    co_return invalid_request(request, *violation);
  }
  auto& submission = std::get<codec::Submission>(parsed);
  submission.spec.strategy = AgentStrategy::kPlanOnly;
  submission.canonical.insert(submission.canonical.size() - 1, R"(,"strategy":"plan_only")");
  if (auto problem = rules_.check(submission.spec)) {
    co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                               problem->message, problem->path);
  }
  auto stored = co_await store_submission(request, submission);
  if (auto* refused = std::get_if<http::Response>(&stored))
    co_return std::move(*refused);
  const std::string task_id = std::get<ports::InsertResult>(stored).task_id;

  const int wait_s = body.HasMember("wait_s") ? body["wait_s"].GetInt() : 30;
  auto read = co_await read_task(request, caller, task_id, wait_s);
  if (auto* answered = std::get_if<http::Response>(&read))
    co_return std::move(*answered);
  rapidjson::Document task;
  codec::parse_json(task, std::get<std::string>(read));
  const auto status = parse_task_status(task["status"].GetString());
  rapidjson::StringBuffer out;
  Writer o(out);
  o.StartObject();
  key_string(o, "task_id", task_id);
  key_string(o, "status", task["status"].GetString());
  if (!status || !is_terminal(*status)) {
    o.EndObject();
    auto response = http::make_response(request, http::Status::accepted,
                                        std::string(out.GetString(), out.GetSize()));
    response.set(bhttp::field::location, "/v1/tasks/" + task_id);
    co_return response;
  }
  const rapidjson::Value* result =
      task.HasMember("result") && task["result"].IsObject() ? &task["result"] : nullptr;
  auto made = result != nullptr && (*result)["message"].IsString()
                  ? codec::parse_plan((*result)["message"].GetString())
                  : Result<react::Plan>(Error{ErrorKind::kInvalid, "no plan"});
  if (*status != TaskStatus::kSucceeded || !made.ok()) {
    std::string error = task.HasMember("error") && task["error"].IsString()
                            ? std::string(task["error"].GetString())
                            : std::string();
    if (error.empty() && !made.ok())
      error = made.error().message;
    const std::string message = "no plan for task " + task_id + " (" + task["status"].GetString() +
                                (error.empty() ? "" : ": " + error) + ")";
    if (*status == TaskStatus::kCancelled) {
      co_return http::make_error(request, http::Status::conflict, "plan_cancelled", message, "/");
    }
    if (*status == TaskStatus::kTimedOut) {
      co_return http::make_error(request, http::Status::gateway_timeout, "plan_timed_out", message,
                                 "/");
    }
    co_return http::make_error(request, http::Status::bad_gateway, "plan_failed", message, "/");
  }
  const std::string plan = codec::plan_response_json(made.value());
  o.Key("plan");
  o.RawValue(plan.data(), plan.size(), rapidjson::kObjectType);
  for (const char* name : {"usage", "cost", "currency"}) {
    if (task.HasMember(name)) {
      o.Key(name);
      task[name].Accept(o);
    }
  }
  o.EndObject();
  co_return http::make_response(request, http::Status::ok,
                                std::string(out.GetString(), out.GetSize()));
}

}  // namespace agentfleet::dispatcher
