#pragma once
// A task's submission and the API's reads and writes of it: the statements of
// sql/submission.sql as functions of a pqxx::connection (run them through DbPool; ApiStore
// does for the dispatcher), each in a transaction of its own; those a batch upload runs in
// its own transaction (BatchWriter) take a pqxx::work.
//
// Thread-safety: as the connection or transaction given (one caller at a time).

#include <pqxx/pqxx>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/domain/task.hpp"

namespace agentfleet::pg {

// ---- a submission ---------------------------------------------------------------

struct NewTask {
  TaskSpec spec;  // task_id set by the caller
  std::string canonical;
  std::string traceparent;
  bool staged = false;   // a batch upload's task, held out of the queue until it is sealed
  std::string retry_of;  // the task this one retries (POST /v1/tasks/{id}/retry); "" for none
  std::int64_t batch_line = 0;  // its line of a batch upload (/line/N, from 1); 0 for none
};

// A user's queue limit from their overrides in user_limits: `tier` (empty when none) and
// `max_queued` (nullopt when none). Empty function: no limit.
using QueueLimit = std::function<int(const std::string& tier, std::optional<int> max_queued)>;
// Why a user of `tier` (empty when they have no override) may not run `model`; empty when
// they may. Empty function: every model.
using ModelCheck = std::function<std::string(const std::string& tier, const std::string& model)>;
struct QueueRoom {
  std::int64_t queued = 0;  // counted up to max_queued + 1
  int max_queued = 0;
};

// kPending: the idempotency key is held by a task of a batch upload under way (staged);
// nothing is stored, and the same submission later gets kExisting, kConflict or kCreated.
enum class InsertOutcome { kCreated, kExisting, kConflict, kQueueFull, kModelNotAllowed, kPending };
struct InsertResult {
  InsertOutcome outcome = InsertOutcome::kCreated;
  std::string task_id;        // the new task, or the one the idempotency key already names
  QueueRoom room;             // set for kQueueFull
  std::string task_json;      // with_json: the task as the API shows it (not for kQueueFull)
  std::string refusal;        // kModelNotAllowed: why
  std::string held_by_batch;  // kPending: the batch whose upload holds the key
};
// What submissions believe of users' overrides (tier, max_queued) before they ask: a
// submission derives its queue limit and model check from the belief, and the statement
// that stores it checks the belief under the user's lock, storing nothing when it is wrong
// (insert_task then learns the truth here and asks again). Users without overrides are not
// kept (none is the belief for anyone unknown). At most `capacity` users: full, it starts
// over. Thread-safety: any thread.
class KnownOverrides {
 public:
  struct Overrides {
    std::string tier;               // empty: none
    std::optional<int> max_queued;  // nullopt: none
    bool operator==(const Overrides&) const = default;
  };
  explicit KnownOverrides(std::size_t capacity = 10000) : capacity_(capacity) {}
  Overrides get(const std::string& user_id) const;
  void put(const std::string& user_id, Overrides overrides);

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Overrides> known_;  // guarded by mutex_
  std::size_t capacity_;
};

// Stores a submission in one autocommitted statement (two, rarely: when `known` believed the
// user's overrides wrong): the same idempotency key returns the existing task (kExisting,
// or kConflict when its request differs; kPending while it is a staged task of a batch
// upload under way); a user with max_queued tasks queued gets kQueueFull and nothing is
// stored. Notifies the scheduler (channel agentfleet_work).
// `with_json`: the task's JSON (the API's answer).
// A model the user's tier may not run (`models`) gets kModelNotAllowed and nothing is stored.
// `known`: what is believed of the user's overrides (nullptr: none, for anyone), learnt from.
InsertResult insert_task(pqxx::connection& c, const NewTask& task, const QueueLimit& limit = {},
                         bool with_json = false, const ModelCheck& models = {},
                         KnownOverrides* known = nullptr);

// Inserts tasks (their ids set) in one statement; a task whose (user, idempotency key) is
// taken is skipped. Returns the ids inserted. Used by batch uploads.
// Sessions chain in the order of `tasks`: a task that names its session and no parent follows
// the session's previous task of the same call (chained_parents; a row of the statement
// cannot see another), or, when it is the session's first here, the session's latest task
// inserted before (the statement's own lookup). One chained to a task the insert skipped as
// a duplicate follows the task that duplicate's key names.
std::vector<std::string> insert_tasks(pqxx::work& tx, const std::vector<NewTask>& tasks);
// For each task, the index of the task of `tasks` it follows in its session (a task naming
// its session and no parent, after another of the same user and session), else -1.
std::vector<int> chained_parents(const std::vector<NewTask>& tasks);

// Serializes one user's submissions until the transaction ends (advisory lock).
void lock_user_queue(pqxx::work& tx, const std::string& user_id);
// The user's queued tasks with the staged tasks of their uploads under way (counted up to
// the limit + 1), and their limit. `sealing`: the batch being sealed; only its staged tasks
// and those of the user's sealed batches still moving into the queue are counted.
QueueRoom queue_room(pqxx::work& tx, const std::string& user_id, const QueueLimit& limit,
                     const std::string& sealing = {});

// The parent a submission names (`parent_id`), or its session's latest task (`session_id`,
// when `parent_id` is empty), among `user_id`'s tasks; nullopt when there is none. A task
// with `idempotency_key` (the submission itself, sent again) is not its own parent.
struct ParentRef {
  std::string task_id;
  TaskStatus status = TaskStatus::kQueued;
};
std::optional<ParentRef> find_parent(pqxx::connection& c, const std::string& user_id,
                                     const std::string& parent_id, const std::string& session_id,
                                     const std::string& idempotency_key = {});

// ---- replayed dead letters (migration 0024) -----------------------------------------

// A replayed dead letter that reached the store: the letter (on the dead-letter topic),
// the replayed message that carried it back, and the task it made or found.
struct ReplayRecord {
  std::string letter_topic;
  std::int32_t letter_partition = 0;
  std::int64_t letter_offset = 0;
  std::string replay_topic;
  std::int32_t replay_partition = 0;
  std::int64_t replay_offset = 0;
  std::string task_id;
  bool created = false;  // false: it found the task an earlier replay (or submission) made
};
// Written once per replayed message (a message read twice does not count twice).
void record_replay(pqxx::connection& c, const ReplayRecord& record);

// What the replays of one letter came to: the task, when the first reached the store, how
// many did and how many of those made the task (0 or 1 when all went as keyed).
struct LetterReplays {
  std::string task_id;
  std::string first_at;  // RFC 3339, UTC
  int stored = 0;
  int created = 0;
};
using LetterAt = std::pair<std::int32_t, std::int64_t>;  // partition, offset
// Of the letters of `letter_topic` at `letters`, those some replay of reached the store.
std::map<LetterAt, LetterReplays> letter_replays(pqxx::connection& c,
                                                 const std::string& letter_topic,
                                                 const std::vector<LetterAt>& letters);

// ---- the API's reads and writes of a task ------------------------------------------

// What a retry copies of a task: its user and status, the canonical form of its request
// (codec::parse_submission reads it back), the parent it followed ("" for none).
struct RetrySource {
  std::string user_id;
  TaskStatus status = TaskStatus::kQueued;
  std::string canonical;
  std::string parent_task_id;
};
std::optional<RetrySource> retry_source(pqxx::connection& c, const std::string& task_id);

// A task's id and user (short ids: the tasks a prefix may stand for).
struct TaskOwner {
  std::string task_id;
  std::string user_id;
};
// The tasks with ids from `first` to `last` (uuids), in id order, at most `limit`.
std::vector<TaskOwner> tasks_in_id_range(pqxx::connection& c, const std::string& first,
                                         const std::string& last, int limit);

// The task as the API shows it (JSON text), or nullopt.
std::optional<std::string> task_json(pqxx::connection& c, const std::string& task_id);
// The user's queue now, in a transaction of its own (without the user's submission lock:
// a batch upload looks before it starts and checks again, under the lock, at its end).
QueueRoom queue_room_now(pqxx::connection& c, const std::string& user_id, const QueueLimit& limit);
// Of `task_ids` (uuids), those of `user_id` that have ended.
std::vector<std::string> ended_of_user(pqxx::connection& c, const std::string& user_id,
                                       const std::vector<std::string>& task_ids);

// What an event stream replays for a task that is already under way: user, status, the
// result and error when it ended, and per step the model's text, its tool calls and (once
// they ran) their trace. JSON text, or nullopt.
std::optional<std::string> task_history_json(pqxx::connection& c, const std::string& task_id);

// GET /v1/tasks: a user's tasks, newest first, optionally of one status, at most `limit`,
// created before the task `before` (a cursor: the last id of the previous page). Each item
// is the task's summary JSON (no trace); returns the JSON array text.
// GET /v1/tasks: the search. Each filter left empty matches every task.
struct TaskListQuery {
  std::string user_id;             // one user's tasks; empty: see users
  std::vector<std::string> users;  // when user_id is empty: these users' (empty: every user's)
  std::string status;
  std::string batch_key;  // the tasks of this batch (its key: BatchHeader::batch_id)
  std::string result_type;
  std::string error_code;
  std::string model;
  std::string session_id;
  std::string text;   // held in the task's text, ignoring case
  std::string since;  // created at or after (a timestamp Postgres reads)
  std::string until;  // created before
  int limit = 50;
  std::string before;   // task id; empty: from the newest
  int count_up_to = 0;  // > 0: count the matches, up to this many
};
struct TaskListPage {
  std::string tasks;        // a JSON array of summaries, newest first
  std::string last;         // the last task id of a full page (the next page's `before`)
  std::int64_t count = -1;  // the matches counted (up to count_up_to); -1: not counted
};
// Throws pqxx::data_exception (kInvalid) for a time Postgres cannot read.
TaskListPage list_tasks(pqxx::connection& c, const TaskListQuery& query);

// POST /v1/tasks/{id}/cancel, in one transaction. A task not yet running (queued, or
// dispatched and unclaimed) ends `cancelled` at once, its result event in the outbox; a
// running task gets cancel_requested (its worker stops it within worker.cancel_poll_ms);
// a task already ended is left as it is.
enum class CancelOutcome { kCancelled, kRequested, kAlreadyCancelled, kAlreadyEnded, kUnknown };
CancelOutcome cancel_task(pqxx::connection& c, const std::string& task_id,
                          const std::string& results_topic);

}  // namespace agentfleet::pg
