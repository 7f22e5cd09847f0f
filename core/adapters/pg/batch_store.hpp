#pragma once
// Batches: many tasks of one user submitted as one JSON Lines upload, followed and cancelled
// together. A batch upload (BatchWriter) never holds a transaction open while its client
// sends: each slice of lines is committed as it arrives, its tasks `staged` (no scheduler
// looks at them, no API read of a task shows them; they count against the user's
// max_queued; once the batch is sealed its progress counts them as queued, and a cancel
// of the batch ends them), and the upload ends in one of two ways:
//   - seal(): the commit point, under the user's queue lock with the exact room check;
//     then promote() moves the staged tasks into the queue a slice at a time (a crash
//     part-way is finished by the scheduler, sweep_staged_batches);
//   - discard(): the staged tasks and the batch are deleted (an upload abandoned by a
//     crash is deleted by the scheduler once its upload_deadline passed).
//
// Thread-safety: a BatchWriter is used by one caller at a time (its calls may run on
// different threads, one after another). The functions take their connection like the
// rest of the store.

#include <pqxx/pqxx>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/adapters/pg/submission_store.hpp"

namespace agentfleet::pg {

using ports::BatchHeader;

// How seal() went.
enum class SealOutcome {
  kSealed,     // committed: the batch's tasks go into the queue
  kQueueFull,  // the user's queue has no room for them; nothing changed (discard next)
  kExpired,    // the upload outlived its upload_deadline; the scheduler deletes it
};
struct Seal {
  SealOutcome outcome = SealOutcome::kSealed;
  QueueRoom room;  // the user's queue with this batch's tasks counted in
};

// How add() went.
struct Added {
  int inserted = 0;  // tasks stored; the others' idempotency keys name a task already
  // Not empty: nothing of the slice was stored, because the key `held_key` is held by a
  // task staged by another upload under way (batch `held_by_batch`), which may yet be
  // refused; whether the line is a duplicate is known once that upload ends.
  std::string held_key;
  std::string held_by_batch;
  // Not negative: nothing of the slice was stored, because its task at this index carries an
  // idempotency key that names a task (`conflict_task_id`) stored with a different request:
  // the upload is refused as such a single submission is (409), not counted a duplicate.
  int conflict_at = -1;
  std::string conflict_key;
  std::string conflict_task_id;
  bool conflict_in_batch = false;  // that task is a line of this upload (not stored after all)
  int conflict_with_at = -1;       // that task is the slice's at this index (-1: an earlier one)
};

class BatchWriter {
 public:
  // Opens its own connection (statement and lock timeouts). `renew_s`: how long the upload
  // stays alive after each slice or renew() without another (its client's allowed silence,
  // with a margin); past it, the scheduler takes the upload for abandoned.
  BatchWriter(const std::string& url, int statement_timeout_ms, int connect_timeout_s,
              BatchHeader header, int renew_s);
  ~BatchWriter();
  BatchWriter(const BatchWriter&) = delete;
  BatchWriter& operator=(const BatchWriter&) = delete;

  // Commits the batch row, its upload under way, under the header's batch_id as its name:
  // the row's key is the name, or the name and the user when another user's batch has that
  // key (batch_key_of_user); header() holds it from then on, and every task add() stores
  // carries it. False when the user has a batch of this name already; the writer then acts
  // on nothing.
  bool create();
  const BatchHeader& header() const { return header_; }
  // The batch's user's queue room (queue_room_now), read on this writer's connection: before
  // create(), for an upload whose user its first line named.
  QueueRoom queue_room(const QueueLimit& limit);
  // Keeps the upload alive while its client sends without a slice to add (one long line
  // trickling in). False when it expired (the scheduler deletes it).
  bool renew();
  // One transaction: renews the upload, inserts tasks (their ids set) staged; a task whose
  // (user, idempotency key) exists already is skipped and counted as a duplicate, unless
  // that task is staged by another upload (see Added). Throws when the upload expired.
  // Lines of one session chain in the order they are added, across slices: each follows the
  // session's previous line of the upload (through the task its key names, when that line
  // was a duplicate), the first the session's latest task before the upload.
  Added add(std::vector<NewTask>& tasks);
  // One transaction under the user's queue lock: when their queued tasks, this batch's and
  // those of their sealed batches still moving fit `limit`, marks the batch sealed with
  // `total` tasks and commits. (Their other uploads under way are checked at their own
  // seal: two that fit one after the other do not refuse each other.)
  Seal seal(const QueueLimit& limit, std::int64_t total);
  // One transaction: moves up to `slice` staged tasks into the queue in line order from where
  // the last slice stopped (their created_at and queue deadline from now, a microsecond a
  // line apart, so the scheduler starts them in line order) and wakes the scheduler;
  // the last marks the batch complete. Returns how many moved: call until it returns less
  // than `slice`. Only after a seal.
  int promote(int slice);
  // Deletes the staged tasks a slice at a time, then the batch row. Only for a batch this
  // writer created and did not seal (else it does nothing). Best effort: what a failure
  // leaves, the scheduler deletes later.
  void discard(int slice);

 private:
  BatchHeader header_;
  int renew_s_;
  std::unique_ptr<pqxx::connection> connection_;
  bool created_ = false;
  bool sealed_ = false;
  // Session -> the task its last line added so far is (stored, or the one its duplicate's key
  // names). Bounded: past kMaxSessions a new session's lines chain within each slice and to
  // the session's latest stored task, which is its last line unless that was a duplicate.
  static constexpr std::size_t kMaxSessions = 100000;
  std::unordered_map<std::string, std::string> session_last_;
};

// The batches named `name` that are there to be read (sealed, or made before uploads were
// staged): user `user_id`'s (at most one), or when it is empty any user's, at most `limit`,
// the oldest first.
std::vector<BatchHeader> find_batches(pqxx::connection& c, const std::string& name,
                                      const std::string& user_id, int limit);

// GET /v1/batches: batches there to be read, the newest first, of the query's users, created
// before its time, whose ids begin with its prefix.
using ports::BatchListQuery;
// The page as a JSON array: each batch as GET /v1/batches/{id} shows it but its usage and
// waiting reason (its id, user, priority, total, created and cancelled times, counts per
// status and per result type, ended).
std::string list_batches(pqxx::connection& c, const BatchListQuery& query);

// GET /v1/batches/{id}: the batch of key `batch_id` with counts per status and result type,
// progress, and usage per model, as JSON (its batch_id the name); nullopt when there is no
// such batch.
std::optional<std::string> batch_json(pqxx::connection& c, const std::string& batch_id);

using ports::ResultsCursor;

// One page of GET /v1/batches/{id}/results: each task as one JSON line (with "\n"), in the
// order of the upload's lines (then of task ids: the tasks stored without a line come
// first) after `after`; at most `limit`. Where the page ended is returned in `last` (an
// empty task id when the page is empty).
std::string batch_results_page(pqxx::connection& c, const BatchHeader& batch,
                               const ResultsCursor& after, int limit, ResultsCursor& last);

// POST /v1/batches/{id}/retry, one slice: the ids of up to `limit` of the batch's tasks that
// failed (failed, timed_out, or succeeded with an error result), after task id `after`
// (empty: from the first), in task id order; read from the index tasks_batch alone.
std::vector<std::string> batch_failed_tasks(pqxx::connection& c, const BatchHeader& batch,
                                            const std::string& after, int limit);

// POST /v1/batches/{id}/cancel, one slice: marks the batch cancelled (the scheduler admits
// none of its tasks from then on), then takes up to `limit` of its live tasks after the
// task id `after` (empty: from the first): those not yet running end cancelled with their
// result events, running ones are asked to stop. Advances `after`; returns the tasks
// taken. Call again until it returns less than `limit`; the batch is then marked drained.
int cancel_batch_slice(pqxx::connection& c, const BatchHeader& batch, std::string& after, int limit,
                       const std::string& results_topic);

// For the scheduler: batches whose upload stopped part-way. A sealed batch whose uploader
// did not move all its staged tasks into the queue by its upload_deadline has them moved;
// an unsealed batch past its upload_deadline (its replica died) has its staged tasks and
// then its row deleted. Either goes on from where the last slice stopped
// (batches.settled_through_seq), in line order. At most `limit` tasks; returns how many were
// moved or deleted.
int sweep_staged_batches(pqxx::work& tx, int limit);

// For the scheduler: tasks of cancelled batches not yet drained (a cancel cut short by a
// failure or a crash), ended cancelled, at most `limit`.
int sweep_cancelled_batches(pqxx::work& tx, int limit, const std::string& results_topic);

}  // namespace agentfleet::pg
