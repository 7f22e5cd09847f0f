#include "dispatcher/batch_upload.hpp"

#include <exception>
#include <utility>

#include "core/adapters/log.hpp"
#include "core/adapters/pg/db_pool.hpp"

namespace agentfleet::dispatcher {

namespace {
UploadRefusal refused(http::Status status, std::string code, std::string message,
                      std::string path = {}) {
  UploadRefusal r;
  r.status = status;
  r.code = std::move(code);
  r.message = std::move(message);
  r.path = std::move(path);
  return r;
}

UploadRefusal store_failed(Error error) {
  UploadRefusal r;
  r.status = http::Status::service_unavailable;
  r.store = std::move(error);
  return r;
}

// 409 idempotency_conflict for batch line `line`, whose key names the request of `added`'s
// conflicting task: a stored task, or a line of this upload (`with_line` when known), which
// is not stored after all and so is named by its line.
UploadRefusal key_conflict(std::int64_t line, std::int64_t with_line, const pg::Added& added) {
  std::string other = "task " + added.conflict_task_id;
  if (with_line > 0)
    other = "line " + std::to_string(with_line) + " of this batch";
  else if (added.conflict_in_batch)
    other = "an earlier line of this batch";
  const std::string at = "line/" + std::to_string(line) + "/idempotency_key";
  return refused(http::Status::conflict, "idempotency_conflict",
                 "nothing was stored: " + at + ": '" + added.conflict_key +
                     "' was used with a different request by " + other,
                 "/" + at);
}
}  // namespace

UploadRefusal queue_full_refusal(const std::string& user, std::int64_t tasks,
                                 const pg::QueueRoom& room, bool so_far) {
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
  UploadRefusal r = refused(http::Status::too_many_requests, "queue_full", message);
  r.retry_after = "60";
  r.queue_full = tasks == 0 ? 1 : tasks;
  return r;
}

UploadRefusal too_many_uploads_refusal(const std::string& why, bool so_far) {
  UploadRefusal r = refused(
      http::Status::too_many_requests, "too_many_uploads",
      why + (so_far ? "; the upload was stopped and nothing was stored" : "; nothing was read") +
          "; retry when an upload ends");
  r.retry_after = "5";
  return r;
}

BatchUpload::BatchUpload(const SubmissionRules& rules, BatchUploadOptions options,
                         BatchUploadStore& store,
                         std::function<bool(const std::string&)> may_act_for,
                         std::function<std::optional<std::string>(const std::string&)> claim_user)
    : rules_(rules),
      options_(std::move(options)),
      store_(store),
      lines_(rules, options_.lines, std::move(may_act_for)),
      claim_user_(std::move(claim_user)) {}

template <typename F>
bool BatchUpload::stored(F&& call) {
  try {
    call();
    return true;
  } catch (const std::exception& e) {
    store_error_ = pg::map_pg_error(e);
    return false;
  }
}

void BatchUpload::take(std::string_view line) {
  auto task = lines_.take(line);
  if (!task)
    return;
  if (!user_claimed_ && !lines_.user_id().empty()) {
    user_claimed_ = true;
    if (auto why = claim_user_(lines_.user_id()))
      caller_busy_ = std::move(*why);
  }
  if (!caller_busy_.empty())
    return;
  slice_.push_back(rules_.batch_task(std::move(*task), options_.traceparent));
  slice_.back().batch_line = lines_.lines();
  slice_lines_.push_back(lines_.lines());
}

bool BatchUpload::stopped() const {
  return over_queue_ || !held_.held_key.empty() || conflict_ || !caller_busy_.empty();
}

void BatchUpload::flush() {
  if (slice_.empty() || lines_.failed() || batch_exists_ || over_queue_ || store_error_ ||
      !held_.held_key.empty() || conflict_)
    return;
  if (!options_.room && !stored([&] { options_.room = store_.queue_room(lines_.user_id()); }))
    return;
  const pg::QueueRoom& room = *options_.room;
  if (room.max_queued > 0 &&
      room.queued + accepted_ + static_cast<std::int64_t>(slice_.size()) > room.max_queued) {
    over_queue_ = true;
    return;
  }
  if (!created_) {
    bool made = false;
    if (!stored([&] { made = store_.create(lines_.user_id()); }))
      return;
    if (!made) {
      batch_exists_ = true;
      return;
    }
    created_ = true;
  }
  std::vector<pg::NewTask> rows;
  rows.swap(slice_);
  std::vector<std::int64_t> lines;
  lines.swap(slice_lines_);
  pg::Added added;
  if (!stored([&] { added = store_.add(rows); }))
    return;
  if (!added.held_key.empty()) {
    held_ = std::move(added);
    return;
  }
  if (added.conflict_at >= 0) {
    const auto line_of = [&](int at) { return lines.at(static_cast<std::size_t>(at)); };
    conflict_ =
        KeyConflict{line_of(added.conflict_at),
                    added.conflict_with_at >= 0 ? line_of(added.conflict_with_at) : 0, added};
    return;
  }
  accepted_ += added.inserted;
  duplicates_ += static_cast<std::int64_t>(rows.size()) - added.inserted;
}

void BatchUpload::keep_alive() {
  if (!created_ || batch_exists_ || store_error_)
    return;
  bool alive = true;
  if (stored([&] { alive = store_.renew(); }) && !alive) {
    store_error_ = Error{ErrorKind::kTransient,
                         "the upload of batch '" + options_.batch_id + "' went past its deadline"};
  }
}

std::optional<UploadRefusal> BatchUpload::refusal_of(BodyEnd how, const std::string& why) {
  if (!caller_busy_.empty())
    return too_many_uploads_refusal(caller_busy_, true);  // the lines named a user at its share
  if (how == BodyEnd::kTooSlow) {
    return refused(http::Status::request_timeout, "upload_too_slow", why + "; nothing was stored",
                   "/");
  }
  if (how == BodyEnd::kUnreadable) {
    return refused(http::Status::bad_request, "invalid_request",
                   "the request body could not be read to its end; nothing was stored", "/");
  }
  if (lines_.too_many()) {
    const std::int64_t most = options_.lines.max_lines;
    return refused(http::Status::payload_too_large, "payload_too_large",
                   "a batch has at most " + std::to_string(most) + " lines; nothing was stored",
                   "/line/" + std::to_string(most + 1));
  }
  if (!lines_.failed() && lines_.lines() == 0) {
    return refused(http::Status::bad_request, "invalid_request",
                   "the batch has no lines: send one JSON task submission per line", "/line/1");
  }
  flush();
  return after_storing();
}

std::optional<UploadRefusal> BatchUpload::after_storing() {
  if (over_queue_) {
    // Refused as soon as the lines outgrew the room (the rest of the body is not read).
    const std::int64_t tasks = accepted_ + static_cast<std::int64_t>(slice_.size());
    return queue_full_refusal(lines_.user_id(), tasks, *options_.room, true);
  }
  if (!held_.held_key.empty()) {
    UploadRefusal r = refused(
        http::Status::service_unavailable, "idempotency_key_pending",
        "idempotency_key '" + held_.held_key + "' is held by batch '" + held_.held_by_batch +
            "', whose upload is under way; nothing was stored: send this batch again once "
            "that upload has ended (its tasks are then duplicates, or the key is free)",
        "/");
    r.retry_after = "5";
    return r;
  }
  if (conflict_)
    return key_conflict(conflict_->line, conflict_->with_line, conflict_->added);
  if (store_error_)
    return store_failed(Error{ErrorKind::kTransient, store_error_->message});
  if (batch_exists_) {
    return refused(
        http::Status::conflict, "batch_exists",
        "nothing was stored: query/batch_id: a batch '" + options_.batch_id + "' exists already",
        "/query/batch_id");
  }
  if (lines_.failed()) {
    const auto& errors = lines_.errors();
    std::string message = "nothing was stored: ";
    for (std::size_t i = 0; i < errors.size(); ++i) {
      if (i)
        message += "; ";
      message += errors[i].path.substr(1) + ": " + errors[i].message;
    }
    const bool forbidden = lines_.not_permitted();
    return refused(forbidden ? http::Status::forbidden : http::Status::bad_request,
                   forbidden ? "forbidden" : "invalid_request", message, errors.front().path);
  }
  if (!created_)
    return store_failed(Error{ErrorKind::kTransient, "the batch was not created"});
  return std::nullopt;
}

void BatchUpload::end(BodyEnd how, const std::string& why) {
  if (state_ != State::kReceiving)
    return;
  refusal_ = refusal_of(how, why);
  // The commit point: under the user's queue lock, with the exact room check.
  if (!refusal_) {
    pg::Seal seal;
    if (!stored([&] { seal = store_.seal(accepted_); })) {
      refusal_ = store_failed(*store_error_);
    } else if (seal.outcome == pg::SealOutcome::kQueueFull) {
      refusal_ = queue_full_refusal(lines_.user_id(), accepted_, seal.room);
    } else if (seal.outcome == pg::SealOutcome::kExpired) {
      refusal_ = refused(http::Status::request_timeout, "upload_too_slow",
                         "the upload outlived its deadline; nothing was stored", "/");
    }
  }
  if (!refusal_) {
    state_ = State::kSealed;
    return;
  }
  state_ = State::kRefused;
  if (created_ && !batch_exists_) {
    try {
      store_.discard(options_.move_slice);
    } catch (const std::exception& e) {
      log::warn("api", "batch '" + options_.batch_id + "': its staged tasks were not deleted (" +
                           pg::map_pg_error(e).message +
                           "); the scheduler deletes them once the upload's deadline passes");
    }
  }
}

BatchUpload::Move BatchUpload::move_slice() {
  if (state_ != State::kSealed && state_ != State::kMoving)
    return Move::kDone;
  state_ = State::kMoving;
  int moved = 0;
  try {
    moved = store_.promote(options_.move_slice);
  } catch (const std::exception& e) {
    // A slice that fails (a statement timeout on a busy database, say) is tried again a
    // second later, a few times; then the scheduler finishes the move.
    if (++move_failures_ < options_.move_tries)
      return Move::kPause;
    log::warn("api", "batch '" + options_.batch_id +
                         "': its tasks are moved into the queue by the scheduler (" +
                         pg::map_pg_error(e).message + ")");
    state_ = State::kDone;
    return Move::kDone;
  }
  move_failures_ = 0;
  if (moved < options_.move_slice) {
    state_ = State::kDone;
    return Move::kDone;
  }
  return Move::kMore;
}

}  // namespace agentfleet::dispatcher
