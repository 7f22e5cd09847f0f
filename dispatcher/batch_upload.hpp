#pragma once
// A batch upload as a unit (POST /v1/batches): the lines its client sends, checked one by one
// (BatchLines), staged a slice at a time through its store, sealed at the end under the
// user's queue lock (the commit point: the client is told 201), then moved into the queue;
// or refused, with nothing stored (what it staged is deleted). The HTTP side
// (Api::submit_batch) reads the query and the body, paces the client (UploadPace) and holds
// the upload places; this decides what is stored and what the client is told.
//
// States: receiving (take(), flush(), keep_alive(); end()) -> sealed -> moving
// (move_slice()) -> done; or refused, by end() (refusal() says why). A refusal is decided
// at the end, in this order: the caller's upload places, the body (too slow, unreadable),
// the lines (too many, none), then what storing them met (the user's queue, a key held by
// another upload, a key used with another request, the store, a batch id taken, a bad line),
// then the seal's own checks. take() stops handing lines to the store once one of those is
// met (stopped()): the HTTP side then stops reading.
//
// The store's calls block: run flush(), keep_alive(), end() and move_slice() where blocking
// is allowed (the API's batch pool); take() does no I/O. Not thread-safe: one upload, one
// caller at a time.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/adapters/http/server.hpp"
#include "core/adapters/pg/batch_store.hpp"
#include "core/adapters/pg/submission_store.hpp"
#include "core/domain/error.hpp"
#include "dispatcher/batch_lines.hpp"
#include "dispatcher/submission_rules.hpp"

namespace agentfleet::dispatcher {

// What an upload stores through: pg::BatchWriter's calls (for the upload's batch and the
// user its lines name) and the user's queue room. Each may throw when the store fails.
class BatchUploadStore {
 public:
  virtual ~BatchUploadStore() = default;
  // The user's queued tasks (counted up to their max_queued + 1) and max_queued.
  virtual pg::QueueRoom queue_room(const std::string& user_id) = 0;
  // The batch row, its upload under way; false when the batch id is taken.
  virtual bool create(const std::string& user_id) = 0;
  virtual bool renew() = 0;
  virtual pg::Added add(std::vector<pg::NewTask>& tasks) = 0;
  virtual pg::Seal seal(std::int64_t total) = 0;
  virtual int promote(int slice) = 0;
  virtual void discard(int slice) = 0;
};

// Why an upload was refused: the HTTP answer (nothing was stored).
struct UploadRefusal {
  http::Status status = http::Status::bad_request;
  std::string code;
  std::string message;
  std::string path;
  std::string retry_after;      // seconds; empty: no Retry-After
  std::optional<Error> store;   // the store failed: the API's store_unavailable answer instead
  std::int64_t queue_full = 0;  // tasks refused because the user's queue is full (a metric)
};

// 429 queue_full for `tasks` tasks of `user` (0: refused before any line was read; `so_far`:
// the upload was stopped when it had that many), whose queue is `room`.
UploadRefusal queue_full_refusal(const std::string& user, std::int64_t tasks,
                                 const pg::QueueRoom& room, bool so_far = false);
// 429 too_many_uploads: `why` (the replica's or the caller's uploads under way are at their
// cap; `so_far`: found once the lines named the user, the upload was stopped).
UploadRefusal too_many_uploads_refusal(const std::string& why, bool so_far = false);

struct BatchUploadOptions {
  std::string batch_id;
  Priority priority = Priority::kBatch;
  std::string traceparent;  // the batch's (SubmissionRules::batch_traceparent)
  BatchLineOptions lines;
  // The user's queue room read before the body (the query named the user); else it is read
  // before the first slice is stored.
  std::optional<pg::QueueRoom> room;
  std::size_t slice = 1000;  // tasks per add() (one commit each)
  int move_slice = 1000;     // tasks moved or deleted per transaction
  int move_tries = 4;        // a slice's move, tried this often before the scheduler takes over
};

class BatchUpload {
 public:
  enum class State { kReceiving, kSealed, kMoving, kDone, kRefused };
  enum class BodyEnd { kComplete, kUnreadable, kTooSlow };

  // `may_act_for(user)`: whether the caller may submit for that user. `claim_user(user)`,
  // called once when the lines name the batch's user: why the caller may not upload for them
  // now (their share of upload places is taken), or nullopt. `rules` and `store` outlive it.
  BatchUpload(const SubmissionRules& rules, BatchUploadOptions options, BatchUploadStore& store,
              std::function<bool(const std::string&)> may_act_for,
              std::function<std::optional<std::string>(const std::string&)> claim_user);

  // Receiving: one line of the body, without its newline.
  void take(std::string_view line);
  // Tasks taken and not yet stored.
  std::size_t pending() const { return slice_.size(); }
  // Stores the tasks taken (one add()), unless the upload has stopped.
  void flush();
  // Keeps the upload alive while no slice goes in (one long line trickling in).
  void keep_alive();
  // Whether what the lines met stops the upload (the rest of the body is not read).
  bool stopped() const;

  // The body ended (`how`; `why` the pace's words when too slow): refuses, deleting what was
  // staged, or seals.
  void end(BodyEnd how, const std::string& why = {});

  // Sealed or moving: moves one slice into the queue. kMore: call again; kPause: a slice
  // failed, call again a second later; kDone: all moved, or left to the scheduler (its
  // failures were too many: logged).
  enum class Move { kMore, kPause, kDone };
  Move move_slice();

  State state() const { return state_; }
  const std::optional<UploadRefusal>& refusal() const { return refusal_; }
  const std::string& batch_id() const { return options_.batch_id; }
  const std::string& user_id() const { return lines_.user_id(); }
  Priority priority() const { return options_.priority; }
  std::int64_t lines() const { return lines_.lines(); }
  std::int64_t accepted() const { return accepted_; }
  std::int64_t duplicates() const { return duplicates_; }

 private:
  // Runs a store call; false (the error kept) when it threw.
  template <typename F>
  bool stored(F&& call);
  std::optional<UploadRefusal> refusal_of(BodyEnd how, const std::string& why);
  std::optional<UploadRefusal> after_storing();

  const SubmissionRules& rules_;
  BatchUploadOptions options_;
  BatchUploadStore& store_;
  BatchLines lines_;
  std::function<std::optional<std::string>(const std::string&)> claim_user_;
  State state_ = State::kReceiving;
  std::optional<UploadRefusal> refusal_;

  bool user_claimed_ = false;
  std::string caller_busy_;  // why claim_user refused
  bool created_ = false;
  bool batch_exists_ = false;
  bool over_queue_ = false;
  std::optional<Error> store_error_;
  pg::Added held_;  // a line's key held by another upload under way
  // A line whose key names a task stored with another request: its line number, and the
  // line of the conflicting task when that is one of the same slice (0: not).
  struct KeyConflict {
    std::int64_t line = 0, with_line = 0;
    pg::Added added;
  };
  std::optional<KeyConflict> conflict_;
  std::int64_t accepted_ = 0, duplicates_ = 0;
  std::vector<pg::NewTask> slice_;
  std::vector<std::int64_t> slice_lines_;  // the line number of each task of slice_
  int move_failures_ = 0;
};

}  // namespace agentfleet::dispatcher
