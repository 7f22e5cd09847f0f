// The API's batch routes: POST /v1/batches (JSON Lines, streamed in), GET /v1/batches (the
// list), GET /v1/batches/{id}, GET /v1/batches/{id}/results (JSON Lines, streamed out) and
// POST /v1/batches/{id}/cancel.
#include "dispatcher/api.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/adapters/log.hpp"
#include "core/adapters/pg/batch_store.hpp"
#include "core/adapters/pg/db_pool.hpp"
#include "core/codec/json_text.hpp"
#include "core/codec/otlp_trace.hpp"
#include "core/codec/task_codec.hpp"
#include "dispatcher/api_responses.hpp"
#include "dispatcher/batch_lines.hpp"
#include "dispatcher/batch_names.hpp"
#include "dispatcher/batch_retry.hpp"
#include "dispatcher/batch_upload.hpp"
#include "dispatcher/user_limits.hpp"

namespace agentfleet::dispatcher {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

namespace {
constexpr std::size_t kReadChunk = 1 << 20;        // body bytes per read
constexpr std::size_t kMaxLineBytes = 256 * 1024;  // one JSON line of a batch
constexpr std::size_t kBatchSlice = 1000;          // tasks per INSERT (one commit each)
constexpr int kMoveSlice = 1000;                   // tasks moved or deleted per transaction
constexpr int kMoveTries = 4;                      // per slice, a second apart
constexpr int kResultsPage = 1000;                 // tasks per results page
constexpr int kMaxReportedErrors = 10;
constexpr auto kSliceEvery = std::chrono::seconds(1);   // a partial slice goes in this often
constexpr auto kRenewEvery = std::chrono::seconds(10);  // an upload without a slice is renewed

// The answer to a stored upload (201): the batch, its user and what its lines came to, and
// its Location, with its user unless the caller acts for one user only (a caller acting for
// several may find that more than one of them has a batch of this name).
http::Response accepted_response(const http::Request& head, const Caller& caller,
                                 const BatchUpload& upload) {
  const std::string& batch_id = upload.batch_id();
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> w(out);
  w.StartObject();
  w.Key("batch_id");
  w.String(batch_id.c_str());
  w.Key("user_id");
  w.String(upload.user_id().c_str());
  w.Key("priority");
  w.String(std::string(to_string(upload.priority())).c_str());
  w.Key("lines");
  w.Int64(upload.lines());
  w.Key("accepted");
  w.Int64(upload.accepted());
  w.Key("duplicates");
  w.Int64(upload.duplicates());
  w.EndObject();
  auto response =
      http::make_response(head, http::Status::created, std::string(out.GetString(), out.GetSize()));
  std::string location = "/v1/batches/" + http::percent_encode(batch_id);
  if (batch_owner_to_find(caller, {}).empty())
    location += "?user_id=" + http::percent_encode(upload.user_id());
  response.set(bhttp::field::location, location);
  return response;
}

// The answer to a refused upload.
http::Response refusal_response(const http::Request& head, const UploadRefusal& refusal) {
  if (refusal.store)
    return store_unavailable(head, *refusal.store);
  auto response =
      http::make_error(head, refusal.status, refusal.code, refusal.message, refusal.path);
  if (!refusal.retry_after.empty())
    response.set(bhttp::field::retry_after, refusal.retry_after);
  return response;
}

// What an upload's query asks for.
struct UploadQuery {
  std::string user_id;   // empty: the first line's
  std::string batch_id;  // empty: a new one
  Priority priority = Priority::kBatch;
};

// The query of POST /v1/batches, or why it is refused (400).
std::variant<UploadQuery, UploadRefusal> read_upload_query(const std::string& target) {
  const auto bad = [](std::string message, std::string path) {
    UploadRefusal r;
    r.status = http::Status::bad_request;
    r.code = "invalid_request";
    r.message = std::move(message);
    r.path = std::move(path);
    return r;
  };
  UploadQuery q;
  q.user_id = http::query_param(target, "user_id").value_or("");
  q.batch_id = http::query_param(target, "batch_id").value_or("");
  if (auto text = http::query_param(target, "priority")) {
    auto parsed = parse_priority(*text);
    if (!parsed)
      return bad("priority must be interactive or batch", "/query/priority");
    q.priority = *parsed;
  }
  // The batch id goes into the Location header: a CR or LF in it would write headers of
  // its own.
  if (!q.batch_id.empty() &&
      (q.batch_id.size() > kMaxBatchIdBytes || id_problem(q.batch_id, kMaxBatchIdBytes))) {
    return bad("batch_id must be valid UTF-8 of at most " + std::to_string(kMaxBatchIdBytes) +
                   " bytes without control characters",
               "/query/batch_id");
  }
  if (!q.user_id.empty()) {
    if (auto problem = id_problem(q.user_id, kMaxUserIdChars))
      return bad("user_id " + *problem, "/query/user_id");
  }
  return q;
}

// Runs a call where blocking is allowed (the API's batch pool).
using Blocking = std::function<asio::awaitable<void>(std::function<void()>)>;

// How an upload's body ended, and the pace's words when it was too slow.
struct BodyRead {
  BatchUpload::BodyEnd how = BatchUpload::BodyEnd::kComplete;
  std::string why;
};

// Reads an upload's body a line at a time into `upload` until it ends, the client is too
// slow for `pace`, or what the lines met stops the upload; stores a slice when it is full or
// a second old, and renews the upload while none goes in. Time is `clock`'s.
asio::awaitable<BodyRead> read_upload_body(http::Exchange& exchange, BatchUpload& upload,
                                           UploadPace& pace, const Blocking& blocking,
                                           const limits::Clock& clock) {
  std::string buffer;
  bool body_failed = false;
  std::optional<std::string> too_slow;
  auto last_flush = clock.now();
  auto take_line = [&](std::string_view line) {
    if (line.find_first_not_of(" \t\r") == std::string_view::npos)
      pace.blank(line.size() + 1);  // not a task: its bytes earn the upload no time
    upload.take(line);
  };
  for (;;) {
    boost::system::error_code ec;
    const std::size_t before = buffer.size();
    auto asked = clock.now();
    const std::size_t got = co_await exchange.read_body(buffer, kReadChunk, ec);
    if (ec) {
      body_failed = true;
      break;
    }
    auto now = clock.now();
    std::size_t start = 0;
    for (std::size_t nl = buffer.find('\n', before); nl != std::string::npos;
         nl = buffer.find('\n', start)) {
      take_line(std::string_view(buffer).substr(start, nl - start));
      start = nl + 1;
    }
    buffer.erase(0, start);
    // After the lines: the blank ones among them earn the upload no time.
    too_slow = pace.read(got, now - asked, now);
    if (too_slow)
      break;
    if (buffer.size() > kMaxLineBytes + 1) {
      take_line(buffer);  // reports the overlong line
      buffer.clear();
      while (!exchange.body_done() && !ec) {
        std::string skip;
        asked = clock.now();
        const std::size_t n = co_await exchange.read_body(skip, kReadChunk, ec);
        now = clock.now();
        too_slow = pace.read(n, now - asked, now);
        if (too_slow)
          break;
        const auto nl = skip.find('\n');
        if (nl != std::string::npos) {
          buffer = skip.substr(nl + 1);
          break;
        }
        if (n == 0)
          break;
      }
    }
    // A slice goes in when it is full, or a second after the last one: while lines come
    // in, the upload's transaction is never idle long (idle_in_transaction_session_timeout).
    if (upload.pending() >= kBatchSlice ||
        (upload.pending() > 0 && clock.now() - last_flush >= kSliceEvery)) {
      co_await blocking([&] { upload.flush(); });
      last_flush = clock.now();
    } else if (clock.now() - last_flush >= kRenewEvery) {
      co_await blocking([&] { upload.keep_alive(); });
      last_flush = clock.now();
    }
    if (too_slow || upload.stopped() || got == 0 || exchange.body_done())
      break;
  }
  if (!too_slow && !body_failed && !upload.stopped() && !buffer.empty())
    take_line(buffer);
  if (too_slow)
    co_return BodyRead{BatchUpload::BodyEnd::kTooSlow, *too_slow};
  co_return BodyRead{
      body_failed ? BatchUpload::BodyEnd::kUnreadable : BatchUpload::BodyEnd::kComplete, {}};
}

// An upload's store on Postgres: a pg::BatchWriter of its own (its own connection), opened
// once the upload's user is known (for its queue room, or the batch row).
class UploadWriter final : public BatchUploadStore {
 public:
  UploadWriter(const config::Config& config, std::string batch_id, Priority priority,
               ports::QueueLimit limit)
      : config_(config),
        batch_id_(std::move(batch_id)),
        priority_(priority),
        limit_(std::move(limit)) {}

  ports::QueueRoom queue_room(const std::string& user_id) override {
    return open(user_id).queue_room(limit_);
  }
  bool create(const std::string& user_id) override { return open(user_id).create(); }
  bool renew() override { return opened().renew(); }
  pg::Added add(std::vector<ports::NewTask>& tasks) override { return opened().add(tasks); }
  pg::Seal seal(std::int64_t total) override { return opened().seal(limit_, total); }
  int promote(int slice) override { return opened().promote(slice); }
  void discard(int slice) override { opened().discard(slice); }

 private:
  pg::BatchWriter& open(const std::string& user_id) {
    if (!writer_) {
      // Between two slices a live upload is silent at most for its rate window (else it is
      // cut as too slow); past that and a margin, the scheduler takes it for abandoned.
      const int renew_s = config_.dispatcher.batch_upload_rate_window_s + 60;
      writer_ = std::make_unique<pg::BatchWriter>(
          config_.postgres.url, config_.postgres.statement_timeout_ms,
          config_.postgres.connect_timeout_s, ports::BatchHeader{batch_id_, user_id, priority_},
          renew_s);
    }
    return *writer_;
  }
  pg::BatchWriter& opened() {
    if (!writer_)
      throw std::logic_error("batch '" + batch_id_ + "': no writer before the batch's user");
    return *writer_;
  }

  const config::Config& config_;
  std::string batch_id_;
  Priority priority_;
  ports::QueueLimit limit_;
  std::unique_ptr<pg::BatchWriter> writer_;
};
}  // namespace

asio::awaitable<std::variant<http::Response, ports::BatchHeader>> Api::find_caller_batch(
    const http::Request& request, const Caller& caller, const std::string& name) {
  if (id_problem(name, kMaxBatchIdBytes))
    co_return not_found(request, "batch", name);
  const std::string requested =
      http::query_param(std::string(request.target()), "user_id").value_or("");
  if (!requested.empty()) {
    if (auto refused = check_query_user(request, caller, requested))
      co_return std::move(*refused);
  }
  const std::string owner = batch_owner_to_find(caller, requested);
  // A few more than one: enough to tell one of the caller's from several among users'
  // batches of one name.
  constexpr int kCandidates = 64;
  auto found = co_await store_.find_batches(name, owner, kCandidates);
  if (!found.ok())
    co_return store_unavailable(request, found.error());
  const auto choice =
      choose_batch(found.value(), found.value().size() < static_cast<std::size_t>(kCandidates),
                   [&](const std::string& user_id) { return caller.may_act_for(user_id); });
  if (choice.batch)
    co_return *choice.batch;
  if (choice.users.empty() && !choice.more)
    co_return not_found(request, "batch", name);
  std::string users;
  for (const auto& user : choice.users)
    users += (users.empty() ? "" : ", ") + user;
  co_return http::make_error(
      request, http::Status::conflict, "ambiguous_id",
      choice.users.empty()
          ? "too many users have a batch '" + name + "' to tell; name its user with ?user_id="
          : "users you act for have each a batch '" + name + "' (" + users +
                (choice.more ? ", ..." : "") + "); name its user with ?user_id=",
      "/query/user_id");
}

asio::awaitable<http::Response> Api::list_batches(http::Request& request, const Caller& caller) {
  const std::string target(request.target());
  ports::BatchListQuery query;
  if (auto user = http::query_param(target, "user_id"); user && !user->empty()) {
    if (auto refused = check_query_user(request, caller, *user))
      co_return std::move(*refused);
    query.users = {*user};
  } else if (!caller.admin && !caller.any_user) {
    query.users = caller.users;
    if (query.users.empty())
      co_return http::make_response(request, http::Status::ok, R"({"batches":[]})");
  }
  if (auto refused = read_limit(request, 100, query.limit))
    co_return std::move(*refused);
  if (auto before = http::query_param(target, "before")) {
    if (!codec::looks_like_timestamp(*before)) {
      co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                                 "before must be a date (2026-11-01) or an RFC 3339 time",
                                 "/query/before");
    }
    query.before = *before;
  }
  if (auto prefix = http::query_param(target, "prefix"); prefix && !prefix->empty()) {
    if (prefix->size() > kMaxBatchIdBytes || id_problem(*prefix, kMaxBatchIdBytes)) {
      co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                                 "prefix must be valid UTF-8 of at most " +
                                     std::to_string(kMaxBatchIdBytes) +
                                     " bytes without control characters",
                                 "/query/prefix");
    }
    query.prefix = *prefix;
  }
  auto page = co_await store_.list_batches(query);
  if (!page.ok())
    co_return window_query_failed(request, page.error(), "before", "/query/before");
  co_return http::make_response(request, http::Status::ok, "{\"batches\":" + page.value() + "}");
}

asio::awaitable<http::Response> Api::get_batch(http::Request& request, const Caller& caller,
                                               std::string batch_id) {
  auto batch = co_await find_caller_batch(request, caller, batch_id);
  if (auto* answer = std::get_if<http::Response>(&batch))
    co_return std::move(*answer);
  auto body = co_await store_.batch_json(std::get<ports::BatchHeader>(batch).batch_id);
  if (!body.ok())
    co_return store_unavailable(request, body.error());
  if (!body.value())
    co_return not_found(request, "batch", batch_id);
  co_return http::make_response(request, http::Status::ok, *body.value());
}

asio::awaitable<http::Response> Api::cancel_batch(http::Request& request, const Caller& caller,
                                                  std::string batch_id) {
  auto batch = co_await find_caller_batch(request, caller, batch_id);
  if (auto* answer = std::get_if<http::Response>(&batch))
    co_return std::move(*answer);
  const ports::BatchHeader header = std::get<ports::BatchHeader>(batch);
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
    if (wake_relay_)
      wake_relay_();  // the result events of the tasks the slice ended
    if (ended.value().taken < kSlice)
      break;
  }
  auto body = co_await store_.batch_json(header.batch_id);
  if (!body.ok() || !body.value()) {
    co_return store_unavailable(
        request, body.ok() ? Error{ErrorKind::kTransient, "batch vanished"} : body.error());
  }
  co_return http::make_response(request, http::Status::ok, *body.value());
}

asio::awaitable<http::Response> Api::retry_batch(http::Request& request, const Caller& caller,
                                                 std::string batch_id) {
  auto batch = co_await find_caller_batch(request, caller, batch_id);
  if (auto* answer = std::get_if<http::Response>(&batch))
    co_return std::move(*answer);
  const ports::BatchHeader header = std::get<ports::BatchHeader>(batch);
  const std::string target(request.target());
  // Each retry is a commit of its own: a slice of a few hundred ends well within the
  // request's deadline (dispatcher.http.request_timeout_s) even with Postgres slow.
  int limit = 200;
  if (auto refused = read_limit(request, 1000, limit))
    co_return std::move(*refused);
  const std::string after = http::query_param(target, "after").value_or("");
  if (!after.empty() && !is_uuid(after)) {
    co_return http::make_error(request, http::Status::bad_request, "invalid_request",
                               "after must be a task id (the last answer's next_after)",
                               "/query/after");
  }
  auto failed = co_await store_.batch_failed_tasks(header, after, limit);
  if (!failed.ok())
    co_return store_unavailable(request, failed.error());
  BatchRetryTally tally;
  for (const std::string& task_id : failed.value()) {
    const http::Response answer =
        co_await retry_one(request, caller, task_id, std::string(kBatchRetryKeyPrefix) + task_id);
    if (!tally.add(task_id, static_cast<int>(answer.result_int()), answer.body()))
      break;
  }
  if (static_cast<int>(failed.value().size()) < limit)
    tally.reached_end();
  co_return http::make_response(request, http::Status::ok, tally.json());
}

asio::awaitable<void> Api::submit_batch(http::Exchange& exchange, const Caller& caller,
                                        int& answered) {
  const http::Request& head = exchange.head();
  const std::string target(head.target());
  auto query = read_upload_query(target);
  if (auto* bad = std::get_if<UploadRefusal>(&query)) {
    co_await respond(exchange, answered, refusal_response(head, *bad));
    co_return;
  }
  const std::string& user_id = std::get<UploadQuery>(query).user_id;
  std::string batch_id = std::get<UploadQuery>(query).batch_id;
  const Priority priority = std::get<UploadQuery>(query).priority;
  if (!user_id.empty() && !caller.may_act_for(user_id)) {
    co_await respond(exchange, answered, forbidden(head, user_id, "/query/user_id"));
    co_return;
  }
  // A place of the replica's, and one of the caller's once the caller is known (for a key
  // that acts for any user and names none in the query, from the first line).
  auto replica_place = waiters_.acquire(Waiter::kUpload, {});
  if (std::holds_alternative<WaiterLimits::Refusal>(replica_place)) {
    co_await respond(exchange, answered,
                     refusal_response(head, too_many_uploads_refusal(
                                                "this replica is taking " +
                                                std::to_string(waiters_.held(Waiter::kUpload)) +
                                                " batch uploads already")));
    co_return;
  }
  std::optional<WaiterLimits::Ticket> caller_place;
  std::string caller_busy;  // why the caller's place was refused
  auto take_caller_place = [&](const std::string& user) {
    const std::string who = upload_caller(caller.name, caller.any_user || caller.admin, user);
    if (caller_place || who.empty())
      return;
    auto place = waiters_.acquire(Waiter::kCallerUpload, who);
    if (auto* ticket = std::get_if<WaiterLimits::Ticket>(&place)) {
      caller_place.emplace(std::move(*ticket));
      return;
    }
    const std::size_t held = waiters_.held(Waiter::kCallerUpload, who);
    caller_busy = "key '" + caller.name + "' has " + std::to_string(held) + " batch upload" +
                  (held == 1 ? "" : "s") +
                  (caller.any_user || caller.admin ? " for user '" + user + "'" : "") +
                  " under way on this replica, as many as one caller may "
                  "(dispatcher.max_batch_uploads_per_caller)";
  };
  take_caller_place(user_id);
  if (!caller_busy.empty()) {
    co_await respond(exchange, answered,
                     refusal_response(head, too_many_uploads_refusal(caller_busy)));
    co_return;
  }
  if (batch_id.empty())
    batch_id = new_task_id();
  // The user's queue is looked at before the body is read (when the query names the user;
  // else once the first line does) and as the upload grows: an upload that cannot fit is
  // refused early, not inserted and then rolled back. The end checks again, exactly.
  std::optional<ports::QueueRoom> room_at_start;
  if (!user_id.empty()) {
    auto room = co_await store_.queue_room(user_id, rules_.queue_limit());
    if (!room.ok()) {
      co_await respond(exchange, answered, store_unavailable(head, room.error()));
      co_return;
    }
    room_at_start = room.value();
    if (room_at_start->max_queued > 0 && room_at_start->queued >= room_at_start->max_queued) {
      metrics_.throttled(metrics::ThrottleReason::kQueueFull, 1);
      co_await respond(exchange, answered,
                       refusal_response(head, queue_full_refusal(user_id, 0, *room_at_start)));
      co_return;
    }
  }

  BatchUploadOptions options;
  options.batch_id = batch_id;
  options.priority = priority;
  options.traceparent =
      SubmissionRules::batch_traceparent(std::string(head["traceparent"]), batch_id);
  options.lines.batch_id = batch_id;
  options.lines.user_id = user_id;
  options.lines.defaults = rules_.defaults();
  options.lines.defaults.priority = priority;
  options.lines.max_lines = config_.dispatcher.max_batch_lines;
  options.lines.max_line_bytes = kMaxLineBytes;
  options.lines.max_reported = kMaxReportedErrors;
  options.room = room_at_start;
  options.slice = kBatchSlice;
  options.move_slice = kMoveSlice;
  options.move_tries = kMoveTries;
  UploadWriter writer(config_, batch_id, priority, rules_.queue_limit());
  BatchUpload upload(
      rules_, std::move(options), writer,
      [&caller](const std::string& user) { return caller.may_act_for(user); },
      [&](const std::string& user) -> std::optional<std::string> {
        take_caller_place(user);
        if (caller_busy.empty())
          return std::nullopt;
        return caller_busy;
      });
  // The upload's store calls block: they run on the batch pool, one at a time for this
  // upload (the upload catches what its store throws).
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
  const Blocking blocking = [&](std::function<void()> fn) -> asio::awaitable<void> {
    co_await on_pool([&] {
      fn();
      return true;
    });
  };

  UploadPace pace(clock_.now(), std::chrono::seconds(config_.dispatcher.batch_upload_timeout_s),
                  std::chrono::seconds(config_.dispatcher.batch_upload_rate_window_s),
                  config_.dispatcher.batch_upload_min_bytes_per_s);
  const BodyRead read = co_await read_upload_body(exchange, upload, pace, blocking, clock_);
  co_await blocking([&] { upload.end(read.how, read.why); });
  if (upload.state() != BatchUpload::State::kSealed) {
    if (!upload.refusal()) {  // the end did not run to its end (its pool call failed)
      co_await respond(
          exchange, answered,
          store_unavailable(head, Error{ErrorKind::kTransient, "the upload could not be ended"}));
      co_return;
    }
    const UploadRefusal& refusal = *upload.refusal();
    if (refusal.code == "queue_full")
      metrics_.throttled(metrics::ThrottleReason::kQueueFull, refusal.queue_full);
    co_await respond(exchange, answered, refusal_response(head, refusal));
    co_return;
  }
  // Sealed: the batch is stored. Its tasks go into the queue a slice at a time; what a
  // failure leaves, the scheduler moves.
  for (;;) {
    auto step = co_await on_pool([&] { return upload.move_slice(); });
    if (!step.ok() || step.value() == BatchUpload::Move::kDone)
      break;
    if (step.value() == BatchUpload::Move::kPause) {
      asio::steady_timer pause(co_await asio::this_coro::executor, std::chrono::seconds(1));
      co_await pause.async_wait(asio::use_awaitable);
    }
  }
  for (std::int64_t i = 0; i < upload.accepted(); ++i)
    metrics_.task_submitted(metrics::SubmitSource::kHttp, metrics::SubmitOutcome::kAccepted);
  co_await respond(exchange, answered, accepted_response(head, caller, upload));
}

asio::awaitable<void> Api::batch_results(http::Exchange& exchange, const Caller& caller,
                                         int& answered, std::string batch_id) {
  const http::Request& head = exchange.head();
  auto batch = co_await find_caller_batch(head, caller, batch_id);
  if (auto* answer = std::get_if<http::Response>(&batch)) {
    co_await respond(exchange, answered, std::move(*answer));
    co_return;
  }
  const ports::BatchHeader header = std::get<ports::BatchHeader>(batch);
  http::Response start{http::Status::ok, head.version()};
  start.set(bhttp::field::content_type, "application/x-ndjson");
  if (!co_await exchange.begin(std::move(start)))
    co_return;
  ports::ResultsCursor after;
  for (;;) {
    auto page = co_await store_.batch_results_page(header, after, kResultsPage);
    if (!page.ok())
      co_return;  // the client sees the stream cut short, without the last chunk
    if (!page.value().lines.empty() && !co_await exchange.send(page.value().lines))
      co_return;
    if (page.value().last.task_id.empty())
      break;
    after = page.value().last;
  }
  co_await exchange.end();
}

}  // namespace agentfleet::dispatcher
