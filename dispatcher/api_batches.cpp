// The API's batch routes: POST /v1/batches (JSON Lines, streamed in), GET /v1/batches/{id},
// GET /v1/batches/{id}/results (JSON Lines, streamed out) and POST /v1/batches/{id}/cancel.
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
#include <optional>
#include <vector>

#include "core/adapters/log.hpp"
#include "core/adapters/pg/batch_store.hpp"
#include "core/codec/json_text.hpp"
#include "core/codec/otlp_trace.hpp"
#include "core/codec/task_codec.hpp"
#include "dispatcher/api_responses.hpp"
#include "dispatcher/batch_lines.hpp"
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

// 429 queue_full for a batch of `tasks` tasks (0: refused before any was read; `so_far`:
// the upload was stopped when it had that many) of `user`, whose queue is `room`.
http::Response queue_full(const http::Request& head, const std::string& user, std::int64_t tasks,
                          const pg::QueueRoom& room, bool so_far = false) {
  const std::string limit =
      "user '" + user + "''s max_queued of " + std::to_string(room.max_queued) + " queued tasks";
  std::string message;
  if (tasks == 0)
    message = "the queue is full: " + limit + " are all queued; nothing was stored";
  else if (so_far)
    message = "the batch's first " + std::to_string(tasks) + " tasks would already exceed " +
              limit + "; the upload was stopped and nothing was stored";
  else
    message = "the batch's " + std::to_string(tasks) + " tasks would exceed " + limit +
              "; nothing was stored";
  auto response = http::make_error(head, http::Status::too_many_requests, "queue_full", message);
  response.set(bhttp::field::retry_after, "60");
  return response;
}

// 429 too_many_uploads with Retry-After: `why` (the replica's or the caller's uploads under
// way are at their cap), and what the client does about it.
http::Response too_many_uploads(const http::Request& head, const std::string& why,
                                bool so_far = false) {
  auto response = http::make_error(
      head, http::Status::too_many_requests, "too_many_uploads",
      why + (so_far ? "; the upload was stopped and nothing was stored" : "; nothing was read") +
          "; retry when an upload ends");
  response.set(bhttp::field::retry_after, "5");
  return response;
}

// 409 idempotency_conflict for batch line `line`, whose key names the request of `added`'s
// conflicting task: a stored task, or a line of this upload (`with_line` when known), which
// is not stored after all and so is named by its line.
http::Response key_conflict(const http::Request& head, std::int64_t line, std::int64_t with_line,
                            const pg::Added& added) {
  std::string other = "task " + added.conflict_task_id;
  if (with_line > 0)
    other = "line " + std::to_string(with_line) + " of this batch";
  else if (added.conflict_in_batch)
    other = "an earlier line of this batch";
  const std::string at = "line/" + std::to_string(line) + "/idempotency_key";
  return http::make_error(head, http::Status::conflict, "idempotency_conflict",
                          "nothing was stored: " + at + ": '" + added.conflict_key +
                              "' was used with a different request by " + other,
                          "/" + at);
}
}  // namespace

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
    if (wake_relay_)
      wake_relay_();  // the result events of the tasks the slice ended
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
  // A place of the replica's, and one of the caller's once the caller is known (for a key
  // that acts for any user and names none in the query, from the first line).
  auto replica_place = waiters_.acquire(Waiter::kUpload, {});
  if (std::holds_alternative<WaiterLimits::Refusal>(replica_place)) {
    co_await respond(exchange, answered,
                     too_many_uploads(head, "this replica is taking " +
                                                std::to_string(waiters_.held(Waiter::kUpload)) +
                                                " batch uploads already"));
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
    co_await respond(exchange, answered, too_many_uploads(head, caller_busy));
    co_return;
  }
  if (batch_id.empty())
    batch_id = new_task_id();
  // The user's queue is looked at before the body is read (when the query names the user;
  // else once the first line does) and as the upload grows: an upload that cannot fit is
  // refused early, not inserted and then rolled back. The end checks again, exactly.
  std::optional<pg::QueueRoom> room_at_start;
  if (!user_id.empty()) {
    auto room = co_await store_.queue_room(user_id, rules_.queue_limit());
    if (!room.ok()) {
      co_await respond(exchange, answered, store_unavailable(head, room.error()));
      co_return;
    }
    room_at_start = room.value();
    if (room_at_start->max_queued > 0 && room_at_start->queued >= room_at_start->max_queued) {
      metrics_.throttled(metrics::ThrottleReason::kQueueFull, 1);
      co_await respond(exchange, answered, queue_full(head, user_id, 0, *room_at_start));
      co_return;
    }
  }

  codec::SubmissionDefaults defaults = rules_.defaults();
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

  BatchLineOptions line_options;
  line_options.batch_id = batch_id;
  line_options.user_id = user_id;
  line_options.defaults = defaults;
  line_options.max_lines = config_.dispatcher.max_batch_lines;
  line_options.max_line_bytes = kMaxLineBytes;
  line_options.max_reported = kMaxReportedErrors;
  BatchLines checker(rules_, std::move(line_options),
                     [&caller](const std::string& user) { return caller.may_act_for(user); });
  std::string store_error;
  bool batch_exists = false;
  std::int64_t accepted = 0, duplicates = 0;
  std::vector<pg::NewTask> slice;
  std::vector<std::int64_t> slice_lines;  // the line number of each task of `slice`
  bool over_queue = false;
  pg::Added held;  // a line's key held by another upload under way: refused for now
  // A line whose key names a task stored with another request: refused (409). Its line
  // number, and the line of the conflicting task when that is one of the same slice (0: not).
  struct KeyConflict {
    std::int64_t line = 0, with_line = 0;
    pg::Added added;
  };
  std::optional<KeyConflict> conflict;
  auto flush = [&]() -> asio::awaitable<void> {
    if (slice.empty() || checker.failed() || batch_exists || over_queue || !store_error.empty() ||
        !held.held_key.empty() || conflict)
      co_return;
    if (!room_at_start) {
      auto room = co_await store_.queue_room(checker.user_id(), rules_.queue_limit());
      if (!room.ok()) {
        store_error = room.error().message;
        co_return;
      }
      room_at_start = room.value();
    }
    if (room_at_start->max_queued > 0 &&
        room_at_start->queued + accepted + static_cast<std::int64_t>(slice.size()) >
            room_at_start->max_queued) {
      over_queue = true;
      co_return;
    }
    if (!writer) {
      pg::BatchHeader header{batch_id, checker.user_id(), priority};
      // Between two slices a live upload is silent at most for its rate window (else it is
      // cut as too slow); past that and a margin, the scheduler takes it for abandoned.
      const int renew_s = config_.dispatcher.batch_upload_rate_window_s + 60;
      auto created = co_await on_pool([&] {
        writer = std::make_unique<pg::BatchWriter>(
            config_.postgres.url, config_.postgres.statement_timeout_ms,
            config_.postgres.connect_timeout_s, header, renew_s);
        return writer->create();
      });
      if (!created.ok()) {
        store_error = created.error().message;
        co_return;
      }
      if (!created.value()) {
        batch_exists = true;
        co_return;
      }
    }
    std::vector<pg::NewTask> rows;
    rows.swap(slice);
    std::vector<std::int64_t> lines;
    lines.swap(slice_lines);
    auto added = co_await on_pool([&] { return writer->add(rows); });
    if (!added.ok()) {
      store_error = added.error().message;
      co_return;
    }
    if (!added.value().held_key.empty()) {
      held = added.value();
      co_return;
    }
    if (const pg::Added& a = added.value(); a.conflict_at >= 0) {
      const auto line_of = [&](int at) { return lines.at(static_cast<std::size_t>(at)); };
      conflict = KeyConflict{line_of(a.conflict_at),
                             a.conflict_with_at >= 0 ? line_of(a.conflict_with_at) : 0, a};
      co_return;
    }
    accepted += added.value().inserted;
    duplicates += static_cast<std::int64_t>(rows.size()) - added.value().inserted;
  };
  // While no slice goes in (one long line trickling in within the pace rules), the upload
  // is renewed, so the scheduler does not take it for abandoned.
  auto keep_alive = [&]() -> asio::awaitable<void> {
    if (!writer || batch_exists || !store_error.empty())
      co_return;
    auto alive = co_await on_pool([&] { return writer->renew(); });
    if (!alive.ok())
      store_error = alive.error().message;
    else if (!alive.value())
      store_error = "the upload of batch '" + batch_id + "' went past its deadline";
  };
  std::string buffer;
  bool body_failed = false;
  std::optional<std::string> too_slow;
  auto last_flush = std::chrono::steady_clock::now();
  UploadPace pace(last_flush, std::chrono::seconds(config_.dispatcher.batch_upload_timeout_s),
                  std::chrono::seconds(config_.dispatcher.batch_upload_rate_window_s),
                  config_.dispatcher.batch_upload_min_bytes_per_s);
  const std::string traceparent =
      SubmissionRules::batch_traceparent(std::string(head["traceparent"]), batch_id);
  auto take_line = [&](std::string_view line) {
    if (line.find_first_not_of(" \t\r") == std::string_view::npos)
      pace.blank(line.size() + 1);  // not a task: its bytes earn the upload no time
    auto task = checker.take(line);
    if (!task)
      return;
    take_caller_place(checker.user_id());
    if (!caller_busy.empty())
      return;
    slice.push_back(rules_.batch_task(std::move(*task), traceparent));
    slice_lines.push_back(checker.lines());
  };

  for (;;) {
    boost::system::error_code ec;
    const std::size_t before = buffer.size();
    auto asked = std::chrono::steady_clock::now();
    const std::size_t got = co_await exchange.read_body(buffer, kReadChunk, ec);
    if (ec) {
      body_failed = true;
      break;
    }
    auto now = std::chrono::steady_clock::now();
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
        asked = std::chrono::steady_clock::now();
        const std::size_t n = co_await exchange.read_body(skip, kReadChunk, ec);
        now = std::chrono::steady_clock::now();
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
    if (slice.size() >= kBatchSlice ||
        (!slice.empty() && std::chrono::steady_clock::now() - last_flush >= kSliceEvery)) {
      co_await flush();
      last_flush = std::chrono::steady_clock::now();
    } else if (std::chrono::steady_clock::now() - last_flush >= kRenewEvery) {
      co_await keep_alive();
      last_flush = std::chrono::steady_clock::now();
    }
    if (too_slow || over_queue || !held.held_key.empty() || conflict || !caller_busy.empty() ||
        got == 0 || exchange.body_done())
      break;
  }
  // The answer when the upload is refused; what it staged is then deleted before it goes.
  std::optional<http::Response> refusal;
  auto refuse_with = [&](http::Status status, std::string_view code, const std::string& message,
                         std::string_view path = {}) {
    refusal = http::make_error(head, status, code, message, path);
  };
  if (!too_slow && !body_failed && !over_queue && held.held_key.empty() && !conflict &&
      caller_busy.empty() && !buffer.empty())
    take_line(buffer);
  if (!caller_busy.empty()) {
    // The first line named a user whose uploads through this key are at their share.
    refusal = too_many_uploads(head, caller_busy, true);
  } else if (too_slow) {
    refuse_with(http::Status::request_timeout, "upload_too_slow",
                *too_slow + "; nothing was stored", "/");
  } else if (body_failed) {
    refuse_with(http::Status::bad_request, "invalid_request",
                "the request body could not be read to its end; nothing was stored", "/");
  } else if (checker.too_many()) {
    refuse_with(http::Status::payload_too_large, "payload_too_large",
                "a batch has at most " + std::to_string(config_.dispatcher.max_batch_lines) +
                    " lines; nothing was stored",
                "/line/" + std::to_string(config_.dispatcher.max_batch_lines + 1));
  } else if (!checker.failed() && checker.lines() == 0) {
    refuse_with(http::Status::bad_request, "invalid_request",
                "the batch has no lines: send one JSON task submission per line", "/line/1");
  } else {
    co_await flush();
    if (over_queue) {
      // Refused as soon as the lines outgrew the room (the rest of the body is not read).
      const std::int64_t tasks = accepted + static_cast<std::int64_t>(slice.size());
      metrics_.throttled(metrics::ThrottleReason::kQueueFull, tasks);
      refusal = queue_full(head, checker.user_id(), tasks, *room_at_start, true);
    } else if (!held.held_key.empty()) {
      refusal = http::make_error(
          head, http::Status::service_unavailable, "idempotency_key_pending",
          "idempotency_key '" + held.held_key + "' is held by batch '" + held.held_by_batch +
              "', whose upload is under way; nothing was stored: send this batch again once "
              "that upload has ended (its tasks are then duplicates, or the key is free)",
          "/");
      refusal->set(bhttp::field::retry_after, "5");
    } else if (conflict) {
      refusal = key_conflict(head, conflict->line, conflict->with_line, conflict->added);
    } else if (!store_error.empty()) {
      refusal = store_unavailable(head, Error{ErrorKind::kTransient, store_error});
    } else if (batch_exists) {
      refuse_with(http::Status::conflict, "batch_exists",
                  "nothing was stored: query/batch_id: a batch '" + batch_id + "' exists already",
                  "/query/batch_id");
    } else if (checker.failed()) {
      const auto& errors = checker.errors();
      std::string message = "nothing was stored: ";
      for (std::size_t i = 0; i < errors.size(); ++i) {
        if (i)
          message += "; ";
        message += errors[i].path.substr(1) + ": " + errors[i].message;
      }
      const bool forbidden = checker.not_permitted();
      refuse_with(forbidden ? http::Status::forbidden : http::Status::bad_request,
                  forbidden ? "forbidden" : "invalid_request", message, errors.front().path);
    }
  }
  if (!refusal && !writer)
    refusal = store_unavailable(head, Error{ErrorKind::kTransient, "the batch was not created"});
  // The commit point: under the user's queue lock, with the exact room check.
  if (!refusal) {
    auto sealed = co_await on_pool([&] { return writer->seal(rules_.queue_limit(), accepted); });
    if (!sealed.ok()) {
      refusal = store_unavailable(head, sealed.error());
    } else if (sealed.value().outcome == pg::SealOutcome::kQueueFull) {
      metrics_.throttled(metrics::ThrottleReason::kQueueFull, accepted);
      refusal = queue_full(head, checker.user_id(), accepted, sealed.value().room);
    } else if (sealed.value().outcome == pg::SealOutcome::kExpired) {
      refuse_with(http::Status::request_timeout, "upload_too_slow",
                  "the upload outlived its deadline; nothing was stored", "/");
    }
  }
  if (refusal) {
    if (writer && !batch_exists) {
      auto discarded = co_await on_pool([&] {
        writer->discard(kMoveSlice);
        return true;
      });
      if (!discarded.ok()) {
        log::warn("api", "batch '" + batch_id + "': its staged tasks were not deleted (" +
                             discarded.error().message +
                             "); the scheduler deletes them once the upload's deadline passes");
      }
    }
    co_await respond(exchange, answered, std::move(*refusal));
    co_return;
  }
  // Sealed: the batch is stored. Its tasks go into the queue a slice at a time; a failure
  // here leaves the rest to the scheduler, which finishes the move.
  // A slice that fails (a statement timeout on a busy database, say) is tried again a
  // second later, a few times.
  for (int failures = 0;;) {
    auto moved = co_await on_pool([&] { return writer->promote(kMoveSlice); });
    if (!moved.ok()) {
      if (++failures < kMoveTries) {
        asio::steady_timer pause(co_await asio::this_coro::executor, std::chrono::seconds(1));
        co_await pause.async_wait(asio::use_awaitable);
        continue;
      }
      log::warn("api", "batch '" + batch_id + "': its tasks are moved into the queue by the " +
                           "scheduler (" + moved.error().message + ")");
      break;
    }
    failures = 0;
    if (moved.value() < kMoveSlice)
      break;
  }
  for (std::int64_t i = 0; i < accepted; ++i)
    metrics_.task_submitted(metrics::SubmitSource::kHttp, metrics::SubmitOutcome::kAccepted);
  const std::string& batch_user = checker.user_id();
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> w(out);
  w.StartObject();
  w.Key("batch_id");
  w.String(batch_id.c_str());
  w.Key("user_id");
  w.String(batch_user.c_str());
  w.Key("priority");
  w.String(std::string(to_string(priority)).c_str());
  w.Key("lines");
  w.Int64(checker.lines());
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

}  // namespace agentfleet::dispatcher
