#pragma once
// The store the dispatcher's API reads and writes through (dispatcher/api.hpp): tasks,
// batches, usage and limits, the tool audit, the fleet's views and readiness. Implemented on
// Postgres by pg::ApiStore (each call one DbPool::run of the statements in
// adapters/pg/submission_store, batch_store, usage_store and directory_store, which say what
// each does); the API's unit tests use a fake (tests/unit/fake_api_store.hpp).
//
// A call that fails answers an Error in its Result: kTransient when the store is away (the
// API answers 503), kInvalid when it refused a value it was given (a time it cannot read).
// Each write is one transaction: none is half-applied.
//
// Thread-safety: the API calls it from its io thread; an implementation may run the work
// elsewhere. Arguments passed by reference must live until the awaited call returns.

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/domain/error.hpp"
#include "core/domain/task.hpp"
#include "core/domain/user_limits.hpp"

namespace agentfleet::ports {

// ---- tasks ----------------------------------------------------------------------------

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

// The parent a submission names, or its session's latest task.
struct ParentRef {
  std::string task_id;
  TaskStatus status = TaskStatus::kQueued;
};

// What a retry copies of a task: its user and status, the canonical form of its request
// (codec::parse_submission reads it back), the parent it followed ("" for none).
struct RetrySource {
  std::string user_id;
  TaskStatus status = TaskStatus::kQueued;
  std::string canonical;
  std::string parent_task_id;
};

// A task's id and user (short ids: the tasks a prefix may stand for).
struct TaskOwner {
  std::string task_id;
  std::string user_id;
};

// GET /v1/tasks: the search, newest first, at most `limit`, created before the task
// `before` (a cursor: the last id of the previous page). Each filter left empty matches
// every task.
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

// How a cancel went: ended at once (it had not started), asked of its worker (running),
// already cancelled or ended, or no such task.
enum class CancelOutcome { kCancelled, kRequested, kAlreadyCancelled, kAlreadyEnded, kUnknown };

// ---- replayed dead letters ------------------------------------------------------------

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

// What the replays of one letter came to: the task, when the first reached the store, how
// many did and how many of those made the task (0 or 1 when all went as keyed).
struct LetterReplays {
  std::string task_id;
  std::string first_at;  // RFC 3339, UTC
  int stored = 0;
  int created = 0;
};
using LetterAt = std::pair<std::int32_t, std::int64_t>;  // partition, offset

// ---- batches ---------------------------------------------------------------------------

struct BatchHeader {
  std::string batch_id;  // the batches row's key (batch_name() of it is what a user sees)
  std::string user_id;
  Priority priority = Priority::kBatch;
};

// GET /v1/batches: batches there to be read, the newest first.
struct BatchListQuery {
  std::vector<std::string> users;  // of these users; empty: of every user
  int limit = 20;
  std::string before;  // an RFC 3339 time: only batches created before it; empty: the newest
  std::string prefix;  // only batches whose id (the name a user sees) begins with it; empty: any
};

// Where a page of a batch's results starts: after the task of this line and id (an upload's
// task stored before schema version 31 has no line: 0). Empty task id: from the start.
struct ResultsCursor {
  std::int64_t line = 0;
  std::string task_id;
};

// One page of a batch's results: JSON lines, and where it ended (an empty task id: none).
struct ResultsPage {
  std::string lines;
  ResultsCursor last;
};

// One slice of a batch cancel: the tasks it took, and the last task id it reached.
struct CancelSlice {
  int taken = 0;
  std::string last;
};

// ---- usage, statistics, the tool audit, the fleet --------------------------------------

using UserOverrides = UserLimitOverrides;

// Usage from the ledger per model and currency (calls, tasks, tokens, cost) and totals per
// currency, as JSON {"models": [...], "totals": [...]}, for a user and/or a batch, or for
// every user when both are empty (GET /v1/usage), over [from, to) (RFC 3339 timestamps;
// empty: unbounded).
struct UsageQuery {
  std::string user_id;
  std::string batch_id;
  std::string from;
  std::string to;
};

// GET /v1/stats: of a user's tasks (or every user's) created in a window.
struct StatsQuery {
  std::string user_id;  // empty: every user
  std::string from;     // created at or after (a date or RFC 3339 time); empty: no bound
  std::string to;       // created before; empty: no bound
};

// A direct tool call as audited (POST /v1/tools/{name}:call).
struct ToolAuditEntry {
  std::string caller;
  std::string user_id;
  std::string tool;
  std::string arguments_json;  // the arguments as given (a JSON object)
  std::string idempotency_key;
  std::string outcome;  // pending, ok, error, refused, invalid_arguments
  std::string error;
};

// Tasks in each live status, queued ones by priority, for the metrics: the queued rows are
// read once (with a backlog of 100,000 that read is most of the cost), the dispatched and
// running ones through their partial index.
struct LiveTaskCounts {
  std::int64_t queued_interactive = 0;
  std::int64_t queued_batch = 0;
  std::int64_t dispatched = 0;
  std::int64_t running = 0;
};

// The live tasks by status and the due outbox rows, for the dispatcher's gauges.
struct FleetCounts {
  LiveTaskCounts live;
  std::int64_t outbox_due = 0;
};

// Whether the store's commits wait for a synchronous standby (adapters/pg/replication.hpp).
struct ReplicationState {
  bool synchronous = false;  // the session's commits wait for a synchronous standby
  std::string detail;        // why, in a sentence, for the log and /readyz
  bool operator==(const ReplicationState&) const = default;
};

// ---- the store -------------------------------------------------------------------------

class ApiStore {
 public:
  template <typename T>
  using Awaitable = boost::asio::awaitable<Result<T>>;

  virtual ~ApiStore() = default;

  // Tasks.
  // Stores a submission (idempotent by its key; refused with nothing stored when the user's
  // queue is full or their tier may not run its model). `with_json`: the task's JSON too.
  virtual Awaitable<InsertResult> insert_task(const NewTask& task, const QueueLimit& limit,
                                              bool with_json, const ModelCheck& models) = 0;
  virtual Awaitable<std::optional<ParentRef>> find_parent(const std::string& user_id,
                                                          const std::string& parent_id,
                                                          const std::string& session_id,
                                                          const std::string& idempotency_key) = 0;
  // The task as the API shows it (JSON text), or nullopt.
  virtual Awaitable<std::optional<std::string>> task_json(const std::string& task_id) = 0;
  virtual Awaitable<std::optional<RetrySource>> retry_source(const std::string& task_id) = 0;
  // The tasks with ids from `first` to `last` (uuids), in id order, at most `limit`.
  virtual Awaitable<std::vector<TaskOwner>> tasks_in_id_range(const std::string& first,
                                                              const std::string& last,
                                                              int limit) = 0;
  // What an event stream replays of a task under way (JSON text), or nullopt.
  virtual Awaitable<std::optional<std::string>> task_history_json(const std::string& task_id) = 0;
  // The user's queue now (queued tasks counted up to the limit + 1, and the limit).
  virtual Awaitable<QueueRoom> queue_room(const std::string& user_id, QueueLimit limit) = 0;
  // Of `task_ids` (uuids), those of `user_id` that have ended.
  virtual Awaitable<std::vector<std::string>> ended_of_user(const std::string& user_id,
                                                            std::vector<std::string> task_ids) = 0;
  // The search; kInvalid for a time the store cannot read.
  virtual Awaitable<TaskListPage> list_tasks(const TaskListQuery& query) = 0;
  virtual Awaitable<CancelOutcome> cancel_task(const std::string& task_id,
                                               const std::string& results_topic) = 0;

  // Replayed dead letters: one record per replayed message; what the replays of letters of
  // `letter_topic` came to.
  virtual Awaitable<bool> record_replay(const ReplayRecord& record) = 0;
  virtual Awaitable<std::map<LetterAt, LetterReplays>> letter_replays(
      const std::string& letter_topic, std::vector<LetterAt> letters) = 0;

  // Usage and limits.
  virtual Awaitable<std::string> usage_json(const UsageQuery& query) = 0;
  virtual Awaitable<std::optional<UserOverrides>> get_user_overrides(
      const std::string& user_id) = 0;
  virtual Awaitable<bool> put_user_overrides(const UserOverrides& overrides) = 0;

  // Batches.
  // GET /v1/batches: the page as a JSON array.
  virtual Awaitable<std::string> list_batches(const BatchListQuery& query) = 0;
  // The batches named `name` there to be read: `user_id`'s (at most one), or when it is
  // empty any user's, at most `limit`, the oldest first.
  virtual Awaitable<std::vector<BatchHeader>> find_batches(const std::string& name,
                                                           const std::string& user_id,
                                                           int limit) = 0;
  // GET /v1/batches/{id} of the batch of key `batch_id` (JSON text), or nullopt.
  virtual Awaitable<std::optional<std::string>> batch_json(const std::string& batch_id) = 0;
  // The page of up to `limit` results after `after` (an empty task id: from the first), in
  // the order of the upload's lines.
  virtual Awaitable<ResultsPage> batch_results_page(const BatchHeader& batch,
                                                    const ResultsCursor& after, int limit) = 0;
  // Up to `limit` of the batch's failed tasks (failed, timed_out, or succeeded with an error
  // result) after task id `after`, in task id order.
  virtual Awaitable<std::vector<std::string>> batch_failed_tasks(const BatchHeader& batch,
                                                                 const std::string& after,
                                                                 int limit) = 0;
  // One cancel slice of up to `limit` tasks after task id `after` (empty: from the first).
  virtual Awaitable<CancelSlice> cancel_batch_slice(const BatchHeader& batch,
                                                    const std::string& after, int limit,
                                                    const std::string& results_topic) = 0;

  // Direct tool calls and the tool catalogue's statistics.
  virtual Awaitable<std::int64_t> insert_tool_audit(const ToolAuditEntry& entry) = 0;
  virtual Awaitable<bool> finish_tool_audit(std::int64_t id, const std::string& outcome,
                                            int http_status, int latency_ms,
                                            const std::string& error) = 0;
  virtual Awaitable<std::string> stats_json(const StatsQuery& query) = 0;

  // GET /v1/fleet: live workers, queued tasks by priority, tasks in flight (JSON text).
  virtual Awaitable<std::string> fleet_json() = 0;
  // The gauges' counts.
  virtual Awaitable<FleetCounts> fleet_counts() = 0;
  // Readiness: reads whether commits wait for a synchronous standby (proving the store
  // answers), and logs it when it changed.
  virtual Awaitable<ReplicationState> check_replication() = 0;
};

}  // namespace agentfleet::ports
