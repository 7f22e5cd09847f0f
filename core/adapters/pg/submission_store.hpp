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
#include "core/ports/api_store.hpp"

namespace agentfleet::pg {

// ---- a submission ---------------------------------------------------------------

using ports::InsertOutcome;
using ports::InsertResult;
using ports::ModelCheck;
using ports::NewTask;
using ports::QueueLimit;
using ports::QueueRoom;

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
using ports::ParentRef;
std::optional<ParentRef> find_parent(pqxx::connection& c, const std::string& user_id,
                                     const std::string& parent_id, const std::string& session_id,
                                     const std::string& idempotency_key = {});

// ---- replayed dead letters (migration 0024) -----------------------------------------

using ports::ReplayRecord;
// Written once per replayed message (a message read twice does not count twice).
void record_replay(pqxx::connection& c, const ReplayRecord& record);

using ports::LetterAt;
using ports::LetterReplays;
// Of the letters of `letter_topic` at `letters`, those some replay of reached the store.
std::map<LetterAt, LetterReplays> letter_replays(pqxx::connection& c,
                                                 const std::string& letter_topic,
                                                 const std::vector<LetterAt>& letters);

// ---- the API's reads and writes of a task ------------------------------------------

using ports::RetrySource;
std::optional<RetrySource> retry_source(pqxx::connection& c, const std::string& task_id);

using ports::TaskOwner;
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

using ports::TaskListPage;
using ports::TaskListQuery;
// Throws pqxx::data_exception (kInvalid) for a time Postgres cannot read.
TaskListPage list_tasks(pqxx::connection& c, const TaskListQuery& query);

// POST /v1/tasks/{id}/cancel, in one transaction. A task not yet running (queued, or
// dispatched and unclaimed) ends `cancelled` at once, its result event in the outbox; a
// running task gets cancel_requested (its worker stops it within worker.cancel_poll_ms);
// a task already ended is left as it is.
using ports::CancelOutcome;
CancelOutcome cancel_task(pqxx::connection& c, const std::string& task_id,
                          const std::string& results_topic);

}  // namespace agentfleet::pg
