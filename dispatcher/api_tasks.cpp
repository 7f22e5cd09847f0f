// The API's task routes: POST /v1/tasks, GET /v1/tasks, GET /v1/tasks/{id} (with ?wait=N
// long polls), POST /v1/tasks/{id}/cancel and POST /v1/tasks/{id}/retry.
#include "dispatcher/api.hpp"

#include <charconv>
#include <chrono>
#include <variant>

#include "core/adapters/log.hpp"
#include "core/codec/json_text.hpp"
#include "core/codec/otlp_trace.hpp"
#include "core/codec/task_codec.hpp"
#include "core/domain/task.hpp"
#include "dispatcher/api_responses.hpp"
#include "dispatcher/feed_watch.hpp"
#include "dispatcher/task_search.hpp"
#include "dispatcher/user_limits.hpp"

namespace agentfleet::dispatcher {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

namespace {
// The owner and status of a task's JSON (as task_json gives it).
struct TaskView {
  std::string user_id;
  bool terminal = false;
};
// The answer to a submission stored or found by its key: 201 (or 200) with the task and
// where it lives.
http::Response stored_answer(const http::Request& request, const ports::InsertResult& result) {
  if (result.task_json.empty())
    return store_unavailable(request, Error{ErrorKind::kTransient, "task vanished"});
  auto response = http::make_response(
      request,
      result.outcome == ports::InsertOutcome::kCreated ? http::Status::created : http::Status::ok,
      result.task_json);
  response.set(bhttp::field::location, "/v1/tasks/" + result.task_id);
  return response;
}

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
}  // namespace

asio::awaitable<std::variant<http::Response, ports::InsertResult>> Api::store_submission(
    http::Request& request, const codec::Submission& submission, const std::string& retry_of) {
  ports::NewTask task = rules_.new_task(submission, std::string(request["traceparent"]));
  task.retry_of = retry_of;
  const ports::QueueLimit limit = rules_.queue_limit();
  const ports::ModelCheck models = rules_.model_check();
  auto inserted = co_await store_.insert_task(task, limit, true, models);
  if (!inserted.ok())
    co_return store_unavailable(request, inserted.error());
  const ports::InsertResult result = inserted.value();
  metrics_.task_submitted(
      metrics::SubmitSource::kHttp,
      result.outcome == ports::InsertOutcome::kCreated    ? metrics::SubmitOutcome::kAccepted
      : result.outcome == ports::InsertOutcome::kExisting ? metrics::SubmitOutcome::kDuplicate
                                                          : metrics::SubmitOutcome::kRejected);
  log::TaskContext logged;  // the task's (or the refused submission's) ids in the log
  logged.task_id = result.task_id;
  logged.user_id = task.spec.user_id;
  logged.batch_id = task.spec.batch_id;
  logged.trace_id = log::trace_id_of(task.traceparent);
  if (result.outcome == ports::InsertOutcome::kQueueFull) {
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
  if (result.outcome == ports::InsertOutcome::kModelNotAllowed) {
    logged.task_id = {};
    log::info("api", logged, "submission refused: model_not_allowed");
    co_return http::make_error(request, http::Status::forbidden, "model_not_allowed",
                               result.refusal, "/model");
  }
  if (result.outcome == ports::InsertOutcome::kPending) {
    auto response = http::make_error(
        request, http::Status::service_unavailable, "idempotency_key_pending",
        "idempotency_key is held by a task of batch '" + result.held_by_batch +
            "', whose upload is under way; nothing was stored: retry once it has ended (the "
            "key then names that task, or is free)",
        "/idempotency_key");
    response.set(bhttp::field::retry_after, "5");
    co_return response;
  }
  if (result.outcome == ports::InsertOutcome::kConflict) {
    co_return http::make_error(
        request, http::Status::conflict, "idempotency_conflict",
        "idempotency_key was used with a different request for task " + result.task_id,
        "/idempotency_key");
  }
  if (result.outcome == ports::InsertOutcome::kCreated)
    log::info("api", logged, "accepted");
  co_return result;
}

asio::awaitable<http::Response> Api::submit(http::Request& request, const Caller& caller) {
  auto parsed = rules_.parse(request.body());
  if (auto* violation = std::get_if<codec::SchemaViolation>(&parsed)) {
    metrics_.task_submitted(metrics::SubmitSource::kHttp, metrics::SubmitOutcome::kRejected);
    co_return invalid_request(request, *violation);
  }
  auto& submission = std::get<codec::Submission>(parsed);
  if (!caller.may_act_for(submission.spec.user_id)) {
    metrics_.task_submitted(metrics::SubmitSource::kHttp, metrics::SubmitOutcome::kRejected);
    co_return forbidden(request, submission.spec.user_id, "/user_id");
  }
  if (auto problem = rules_.check(submission.spec)) {
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
  co_return stored_answer(request, std::get<ports::InsertResult>(stored));
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
  // seconds with it as it is. The row is the truth: it is read first, when the result
  // arrives, when the feed may have missed something, and on a slow safety timer
  // (feed_watch.hpp); a task's progress events do not make it read the row.
  const auto until = clock_.now() + std::chrono::seconds(wait_s);
  std::unique_ptr<TaskFeed::Subscription> subscription;
  std::optional<WaiterLimits::Ticket> place;
  if (wait_s > 0) {
    auto acquired = waiters_.acquire(Waiter::kLongPoll, caller.name);
    if (auto* refused = std::get_if<WaiterLimits::Refusal>(&acquired))
      co_return waiters_refused(request, *refused, "long polls");
    place.emplace(std::move(std::get<WaiterLimits::Ticket>(acquired)));
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
  std::optional<RereadSchedule> rereads;
  for (;;) {
    auto body = co_await store_.task_json(task_id);
    if (!body.ok())
      co_return store_unavailable(request, body.error());
    if (!body.value())
      co_return not_found(request, "task", task_id);
    const TaskView view = view_of(*body.value());
    if (!caller.may_act_for(view.user_id))
      co_return not_found(request, "task", task_id);
    auto now = clock_.now();
    if (view.terminal || !subscription || now >= until || feed_.stopped())
      co_return std::move(*body.value());
    if (rereads)
      rereads->read(now, false);
    else
      rereads.emplace(now);
    // Wait for the result, a gap, the safety timer or the end of the wait.
    for (;;) {
      now = clock_.now();
      if (subscription->take_gap())
        rereads->gap(now);
      if (now >= until || rereads->is_due(now) || feed_.stopped())
        break;
      auto item = co_await subscription->next(std::min(until, rereads->due()));
      if (item && item->result)
        break;
    }
    metrics_.waiter_reread(metrics::WaitKind::kLongPoll);
  }
}

asio::awaitable<http::Response> Api::list_tasks(http::Request& request, const Caller& caller) {
  const std::string target(request.target());
  ports::TaskListQuery query;
  // Whose: the user named, else every user the caller acts for (all, for an operator's key).
  const std::string requested = http::query_param(target, "user_id").value_or("");
  if (!requested.empty()) {
    if (auto refused = check_query_user(request, caller, requested))
      co_return std::move(*refused);
  }
  if (!scope_task_search(caller, requested, query))
    co_return http::make_response(request, http::Status::ok, R"({"tasks":[],"next_before":null})");
  if (auto problem = read_task_search(target, query)) {
    co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                               problem->message, problem->path);
  }
  if (auto batch = http::query_param(target, "batch_id"); batch && !batch->empty()) {
    // The batch of that name the caller may read (ids are each user's): its tasks carry its
    // key. A batch there is none of is a search that finds nothing.
    auto found = co_await find_caller_batch(request, caller, *batch);
    if (auto* answer = std::get_if<http::Response>(&found)) {
      if (answer->result() != bhttp::status::not_found)
        co_return std::move(*answer);
      co_return http::make_response(request, http::Status::ok,
                                    R"({"tasks":[],"next_before":null})");
    }
    query.batch_key = std::get<ports::BatchHeader>(found).batch_id;
  }
  auto page = co_await store_.list_tasks(query);
  if (!page.ok())
    co_return window_query_failed(request, page.error(), "since or until", "/query/since");
  co_return http::make_response(request, http::Status::ok, task_page_json(page.value()));
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
  if (outcome.value() == ports::CancelOutcome::kUnknown)
    co_return not_found(request, "task", task_id);
  // Ended here (it had not started): its result event is in the outbox.
  if (outcome.value() == ports::CancelOutcome::kCancelled && wake_relay_)
    wake_relay_();
  auto body = co_await store_.task_json(task_id);
  if (!body.ok() || !body.value()) {
    co_return store_unavailable(
        request, body.ok() ? Error{ErrorKind::kTransient, "task vanished"} : body.error());
  }
  switch (outcome.value()) {
    case ports::CancelOutcome::kAlreadyEnded:
      co_return http::make_error(request, http::Status::conflict, "already_ended",
                                 "the task already ended; it cannot be cancelled", "/path/task_id");
    case ports::CancelOutcome::kRequested:
      // Running: its worker stops it within worker.cancel_poll_ms.
      co_return http::make_response(request, http::Status::accepted, *body.value());
    default:
      co_return http::make_response(request, http::Status::ok, *body.value());
  }
}

asio::awaitable<http::Response> Api::retry_task(http::Request& request, const Caller& caller,
                                                std::string task_id) {
  if (!is_uuid(task_id))
    co_return not_found(request, "task", task_id);
  // The body is optional: {"idempotency_key": K} makes the retry safe to send again.
  std::string key;
  if (!request.body().empty()) {
    rapidjson::Document doc;
    if (!codec::parse_json(doc, request.body()) || !doc.IsObject()) {
      co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                                 "the body must be a JSON object (or empty)", "/");
    }
    for (const auto& member : doc.GetObject()) {
      const std::string_view name(member.name.GetString(), member.name.GetStringLength());
      if (name != "idempotency_key") {
        co_return http::make_error(
            request, http::Status::bad_request, "invalid_request",
            "unknown member '" + std::string(name) + "' (a retry takes only idempotency_key)",
            "/" + std::string(name));
      }
      // Checked as a submission's key is: a key dropped would make a retry sent again a
      // second task.
      if (!member.value.IsString() || member.value.GetStringLength() == 0) {
        co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                                   "idempotency_key must be a non-empty string",
                                   "/idempotency_key");
      }
    }
    key = string_member(doc, "idempotency_key");
  }
  co_return co_await retry_one(request, caller, task_id, key);
}

asio::awaitable<http::Response> Api::retry_one(http::Request& request, const Caller& caller,
                                               const std::string& task_id, const std::string& key) {
  auto source = co_await store_.retry_source(task_id);
  if (!source.ok())
    co_return store_unavailable(request, source.error());
  if (!source.value() || !caller.may_act_for(source.value()->user_id))
    co_return not_found(request, "task", task_id);
  const ports::RetrySource& first = *source.value();
  if (!is_terminal(first.status)) {
    co_return http::make_error(request, http::Status::conflict, "task_not_ended",
                               "task " + task_id + " is " + std::string(to_string(first.status)) +
                                   "; retry it once it has ended (or cancel it first)",
                               "/path/task_id");
  }
  const auto body = codec::submission_from_canonical(first.canonical, key);
  auto parsed = body ? rules_.parse(*body)
                     : std::variant<codec::Submission, codec::SchemaViolation>(
                           codec::SchemaViolation{"", "the stored request cannot be read"});
  if (auto* violation = std::get_if<codec::SchemaViolation>(&parsed)) {
    // A request stored by an older version that this one no longer accepts, or a key that
    // is not one: said as the request's problem.
    co_return http::make_error(
        request, http::Status::unprocessable_entity, "cannot_retry",
        "task " + task_id + "'s request cannot be submitted again: " + violation->message,
        violation->path);
  }
  auto& submission = std::get<codec::Submission>(parsed);
  // A retry of another task is another request: a key used for one retry (or for a
  // submission) is a conflict when used to retry something else.
  submission.canonical = codec::canonical_with_retry_of(submission.canonical, task_id);
  // It follows the task the first one followed; a first task of a session leaves the session
  // (as a follow-up of the session's latest task it would continue the conversation it
  // retries).
  submission.spec.parent_task_id = first.parent_task_id;
  if (first.parent_task_id.empty())
    submission.spec.session_id.clear();
  if (auto problem = rules_.check(submission.spec)) {
    co_return http::make_error(
        request, http::Status::unprocessable_entity, "cannot_retry",
        "task " + task_id + "'s request cannot be submitted again: " + problem->message,
        problem->path);
  }
  auto stored = co_await store_submission(request, submission, task_id);
  if (auto* refused = std::get_if<http::Response>(&stored))
    co_return std::move(*refused);
  co_return stored_answer(request, std::get<ports::InsertResult>(stored));
}

}  // namespace agentfleet::dispatcher
