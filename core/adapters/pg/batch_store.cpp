#include "core/adapters/pg/batch_store.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <string_view>
#include <unordered_set>

#include "core/adapters/pg/prepared.hpp"

#include "core/adapters/pg/db_pool.hpp"
#include "core/adapters/pg/ended_tasks.hpp"
#include "core/adapters/pg/sql.hpp"
#include "core/adapters/pg/task_row.hpp"
#include "core/codec/task_json.hpp"

namespace agentfleet::pg {

namespace {
// How long a sealed batch's uploader has to move its staged tasks into the queue before the
// scheduler takes over, renewed by each slice it moves.
constexpr int kPromoteWithinS = 60;

// What one slice of a move or a delete did: how many tasks, and the last task's seq (0: none).
struct Slice {
  int done = 0;
  std::int64_t last = 0;
};

// Moves up to `limit` staged tasks of the batch into the queue, in line order (seq, through
// tasks_staged_batch_seq) after the seq `after` (0: from the first): they are submitted now,
// each a microsecond after the line before it (created_at, and the queue deadline from it),
// so the scheduler, which admits a user's tasks oldest first, starts them in line order too.
// Rows another mover holds are skipped (it moves them).
Slice move_staged(pqxx::work& tx, const std::string& batch_id, const std::string& user_id,
                  std::int64_t after, int limit) {
  auto moved = tx.exec_params(R"SQL(
WITH picked AS MATERIALIZED (
  SELECT s.task_id, s.seq FROM tasks s
  WHERE s.batch_id = $1 AND s.status = 'staged' AND s.user_id = $2 AND s.seq > $4
  ORDER BY s.seq LIMIT $3 FOR UPDATE SKIP LOCKED
), numbered AS (
  SELECT p.task_id, row_number() OVER (ORDER BY p.seq) - 1 AS line FROM picked p
), moved AS (
  UPDATE tasks t SET status = 'queued',
         created_at = statement_timestamp() + make_interval(secs => n.line / 1000000.0),
         queue_deadline_at = statement_timestamp()
                             + make_interval(secs => n.line / 1000000.0 + t.schedule_timeout_s)
  FROM numbered n
  WHERE t.task_id = n.task_id AND t.status = 'staged'
  RETURNING t.task_id
), woken AS (SELECT pg_notify('agentfleet_work', '') WHERE EXISTS (SELECT 1 FROM moved))
SELECT (SELECT count(*) FROM moved), (SELECT max(seq) FROM picked),
       (SELECT count(*) FROM woken))SQL",
                              batch_id, user_id, limit, after);
  Slice slice;
  slice.done = moved[0][0].as<int>();
  if (!moved[0][1].is_null())
    slice.last = moved[0][1].as<std::int64_t>();
  return slice;
}

// Deletes up to `limit` staged tasks of the batch, in line order after the seq `after`.
Slice delete_staged(pqxx::work& tx, const std::string& batch_id, const std::string& user_id,
                    std::int64_t after, int limit) {
  auto deleted = tx.exec_params(R"SQL(
WITH picked AS MATERIALIZED (
  SELECT s.task_id, s.seq FROM tasks s
  WHERE s.batch_id = $1 AND s.status = 'staged' AND s.user_id = $2 AND s.seq > $4
  ORDER BY s.seq LIMIT $3 FOR UPDATE SKIP LOCKED
), gone AS (
  DELETE FROM tasks t USING picked p
  WHERE t.task_id = p.task_id AND t.status = 'staged'
  RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT max(seq) FROM picked))SQL",
                                batch_id, user_id, limit, after);
  Slice slice;
  slice.done = deleted[0][0].as<int>();
  if (!deleted[0][1].is_null())
    slice.last = deleted[0][1].as<std::int64_t>();
  return slice;
}

// Whether the batch has a staged task after the cursor `after`: one probe of
// tasks_staged_batch_seq (batch_id, seq) from there.
bool any_staged_after(pqxx::work& tx, const std::string& batch_id, std::int64_t after) {
  return !tx.exec_params(
                "SELECT 1 FROM tasks WHERE batch_id = $1 AND status = 'staged' AND seq > $2 "
                "LIMIT 1",
                batch_id, after)
              .empty();
}

// Whether the batch has any staged task left, asked once, at the end of a move or a delete.
// By the user's staged tasks (tasks_staged_user holds only those), not by tasks_batch, whose
// entries for the batch include every row moved since the last vacuum: a million-task
// batch would be two million entries read under the statement timeout.
bool any_staged_left(pqxx::work& tx, const std::string& batch_id, const std::string& user_id) {
  return !tx.exec_params(
                "SELECT 1 FROM tasks WHERE user_id = $2 AND status = 'staged' AND batch_id = $1 "
                "LIMIT 1",
                batch_id, user_id)
              .empty();
}

// After a slice of a move (`sealed`) or a delete that asked for `limit` tasks. One that
// took them all with more after it records where the next one starts. At the end, a
// sealed batch with no staged task left is complete (its upload_deadline cleared: the API
// shows it), and an unsealed one is deleted; one with tasks left behind the cursor (rows
// another mover held, and let go without moving them) starts again from the first.
void settle(pqxx::work& tx, const std::string& batch_id, const std::string& user_id, bool sealed,
            const Slice& slice, int limit) {
  if (slice.done >= limit && any_staged_after(tx, batch_id, slice.last)) {
    tx.exec_params0("UPDATE batches SET settled_through_seq = $2 WHERE batch_id = $1", batch_id,
                    slice.last);
    return;
  }
  if (any_staged_left(tx, batch_id, user_id)) {
    tx.exec_params0("UPDATE batches SET settled_through_seq = NULL WHERE batch_id = $1", batch_id);
    return;
  }
  if (sealed) {
    tx.exec_params0(
        "UPDATE batches SET upload_deadline = NULL, settled_through_seq = NULL "
        "WHERE batch_id = $1 AND sealed",
        batch_id);
  } else {
    tx.exec_params0("DELETE FROM batches WHERE batch_id = $1 AND NOT sealed", batch_id);
  }
}
}  // namespace

BatchWriter::BatchWriter(const std::string& url, int statement_timeout_ms, int connect_timeout_s,
                         BatchHeader header, int renew_s)
    : header_(std::move(header)),
      renew_s_(renew_s),
      connection_(open_connection(url, statement_timeout_ms, connect_timeout_s)) {}

BatchWriter::~BatchWriter() = default;

bool BatchWriter::create() {
  // Under the name itself when no batch has that key, else under the user's key (migration
  // 0030); either conflicts with a batch of this user and name (batches_name_user). Another
  // user taking the name itself in between conflicts too: then it is tried again, once more
  // than such races can follow one another (each needs a new batch of that name).
  const std::string name = header_.batch_id;
  for (int attempt = 0; attempt < 3; ++attempt) {
    pqxx::work tx(*connection_);
    auto rows = tx.exec_params(
        R"SQL(
INSERT INTO batches (batch_id, user_id, priority, upload_deadline)
SELECT CASE WHEN EXISTS (SELECT 1 FROM batches WHERE batch_id = $1) THEN $5 ELSE $1 END,
       $2, $3, clock_timestamp() + make_interval(secs => $4)
ON CONFLICT DO NOTHING RETURNING batch_id)SQL",
        name, header_.user_id, std::string(to_string(header_.priority)), renew_s_,
        batch_key_of_user(name, header_.user_id));
    if (!rows.empty()) {
      tx.commit();
      header_.batch_id = rows[0][0].as<std::string>();
      created_ = true;
      return true;
    }
    auto own = tx.exec_params(
        R"SQL(SELECT 1 FROM batches WHERE split_part(batch_id, E'\x1f', 1) = $1 AND user_id = $2)SQL",
        name, header_.user_id);
    tx.commit();
    if (!own.empty())
      return false;
  }
  return false;
}

namespace {
// Renews an upload under way (the batch row stays locked until the commit: the scheduler's
// sweep cannot take an upload a slice is being added to, and one it took is refused).
bool renew_upload(pqxx::work& tx, const std::string& batch_id, int renew_s) {
  return !tx.exec_params(
                "UPDATE batches SET upload_deadline = clock_timestamp() + make_interval(secs => "
                "$2) "
                "WHERE batch_id = $1 AND NOT sealed AND upload_deadline > clock_timestamp() "
                "RETURNING 1",
                batch_id, renew_s)
              .empty();
}
}  // namespace

QueueRoom BatchWriter::queue_room(const QueueLimit& limit) {
  return queue_room_now(*connection_, header_.user_id, limit);
}

bool BatchWriter::renew() {
  if (!created_ || sealed_)
    return false;
  pqxx::work tx(*connection_);
  const bool alive = renew_upload(tx, header_.batch_id, renew_s_);
  tx.commit();
  return alive;
}

Added BatchWriter::add(std::vector<NewTask>& tasks) {
  if (!created_ || sealed_)
    throw std::logic_error("BatchWriter::add: the batch was not created here, or is sealed");
  pqxx::work tx(*connection_);
  if (!renew_upload(tx, header_.batch_id, renew_s_))
    throw std::runtime_error("the upload of batch '" + header_.batch_id +
                             "' went longer than its deadline without a slice");
  for (NewTask& task : tasks) {
    task.staged = true;
    task.spec.batch_id = header_.batch_id;  // the batch's key (its name when no other's)
  }
  // A session's first line of this slice follows its previous line of the upload; the
  // others are chained by insert_tasks.
  std::unordered_map<std::string_view, std::size_t> last_here;  // session -> last index
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    TaskSpec& spec = tasks[i].spec;
    if (spec.session_id.empty())
      continue;
    auto [at, first] = last_here.try_emplace(spec.session_id, i);
    if (!first) {
      at->second = i;
      continue;
    }
    if (auto before = session_last_.find(spec.session_id);
        before != session_last_.end() && spec.parent_task_id.empty())
      spec.parent_task_id = before->second;
  }
  const std::vector<std::string> ids = insert_tasks(tx, tasks);
  Added added;
  added.inserted = static_cast<int>(ids.size());
  if (added.inserted < static_cast<int>(tasks.size())) {
    // Skipped: their idempotency keys name tasks already. One staged by another upload under
    // way is not a duplicate yet (that upload may be refused and its tasks deleted): the
    // slice is not stored, and the caller refuses this upload for now.
    std::vector<std::string> keys;
    for (const NewTask& task : tasks) {
      if (!task.spec.idempotency_key.empty())
        keys.push_back(task.spec.idempotency_key);
    }
    auto held = tx.exec_params(
        "SELECT idempotency_key, coalesce(batch_id, '') FROM tasks "
        "WHERE user_id = $1 AND idempotency_key = ANY(ARRAY(SELECT "
        "jsonb_array_elements_text($2::jsonb))) AND status = 'staged' "
        "AND batch_id IS DISTINCT FROM $3 LIMIT 1",
        header_.user_id, json_string_array(keys), header_.batch_id);
    if (!held.empty()) {
      added.inserted = 0;
      added.held_key = held[0][0].as<std::string>();
      added.held_by_batch = std::string(batch_name(held[0][1].as<std::string>()));
      return added;  // rolls back
    }
    // A skipped line is a duplicate only when its key names the same request: the canonical
    // forms agree, as a single submission's check compares them, but for the batch and the
    // priority, which are the upload's (the same lines sent again under another batch id, or
    // a line that repeats a single submission, are duplicates). The first line that does not
    // agree refuses the slice. A line repeating an earlier line's key with another
    // request is found the same way: the earlier one is stored by now.
    rapidjson::StringBuffer lines;
    rapidjson::Writer<rapidjson::StringBuffer> w(lines);
    w.StartArray();
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      if (tasks[i].spec.idempotency_key.empty())
        continue;
      w.StartObject();
      w.Key("at");
      w.Int(static_cast<int>(i));
      w.Key("key");
      const std::string& key = tasks[i].spec.idempotency_key;
      w.String(key.data(), static_cast<rapidjson::SizeType>(key.size()));
      w.Key("canonical");
      w.String(tasks[i].canonical.data(),
               static_cast<rapidjson::SizeType>(tasks[i].canonical.size()));
      w.EndObject();
    }
    w.EndArray();
    auto conflict = tx.exec_params(
        R"SQL(
SELECT r.at, t.task_id::text, t.batch_id IS NOT DISTINCT FROM $3
FROM jsonb_to_recordset($2::jsonb) AS r(at integer, key text, canonical text)
JOIN tasks t ON t.user_id = $1 AND t.idempotency_key = r.key
WHERE regexp_replace(t.request_canonical, ',"(?:batch_id|priority)":"(?:[^"\\]|\\.)*"', '', 'g')
      <> regexp_replace(r.canonical, ',"(?:batch_id|priority)":"(?:[^"\\]|\\.)*"', '', 'g')
ORDER BY r.at LIMIT 1)SQL",
        header_.user_id, std::string(lines.GetString(), lines.GetSize()), header_.batch_id);
    if (!conflict.empty()) {
      added.inserted = 0;
      added.conflict_at = conflict[0][0].as<int>();
      added.conflict_key =
          tasks.at(static_cast<std::size_t>(added.conflict_at)).spec.idempotency_key;
      added.conflict_task_id = conflict[0][1].as<std::string>();
      added.conflict_in_batch = conflict[0][2].as<bool>();
      for (std::size_t i = 0; i < tasks.size(); ++i) {
        if (tasks[i].spec.task_id == added.conflict_task_id)
          added.conflict_with_at = static_cast<int>(i);
      }
      return added;  // rolls back
    }
  }
  // Where each session of the slice stands now: its last line's task, or for a duplicate
  // the task its key names.
  std::unordered_set<std::string_view> inserted(ids.begin(), ids.end());
  std::vector<std::pair<std::string, std::string>> last;
  for (const auto& [session, i] : last_here) {
    if (session_last_.size() >= kMaxSessions && !session_last_.count(std::string(session)))
      continue;
    const TaskSpec& spec = tasks[i].spec;
    std::string task_id = spec.task_id;
    if (!inserted.count(spec.task_id)) {
      auto named = tx.exec_params(
          "SELECT task_id::text FROM tasks WHERE user_id = $1 AND idempotency_key = $2",
          spec.user_id, spec.idempotency_key);
      if (named.empty())
        continue;
      task_id = named[0][0].as<std::string>();
    }
    last.emplace_back(std::string(session), std::move(task_id));
  }
  tx.commit();
  for (auto& [session, task_id] : last)
    session_last_[session] = std::move(task_id);
  return added;
}

Seal BatchWriter::seal(const QueueLimit& limit, std::int64_t total) {
  if (!created_ || sealed_)
    throw std::logic_error("BatchWriter::seal: the batch was not created here, or is sealed");
  pqxx::work tx(*connection_);
  // The user's other submissions wait only for this count and the seal.
  lock_user_queue(tx, header_.user_id);
  Seal seal;
  seal.room = pg::queue_room(tx, header_.user_id, limit, header_.batch_id);
  if (seal.room.max_queued > 0 && seal.room.queued > seal.room.max_queued) {
    seal.outcome = SealOutcome::kQueueFull;
    return seal;  // rolls back
  }
  // clock_timestamp(): re-evaluated after a wait for the sweep's lock, so a batch the
  // sweep took is never sealed.
  auto sealed = tx.exec_params(
      "UPDATE batches SET sealed = true, total = $2, settled_through_seq = NULL, "
      "upload_deadline = clock_timestamp() + make_interval(secs => $3) "
      "WHERE batch_id = $1 AND NOT sealed AND upload_deadline > clock_timestamp() RETURNING 1",
      header_.batch_id, total, kPromoteWithinS);
  if (sealed.empty()) {
    seal.outcome = SealOutcome::kExpired;
    return seal;
  }
  tx.commit();
  sealed_ = true;
  return seal;
}

int BatchWriter::promote(int slice) {
  if (!sealed_)
    throw std::logic_error("BatchWriter::promote: the batch is not sealed");
  pqxx::work tx(*connection_);
  // The batch row first, renewed and locked (the sweep passes it by): where the last slice
  // stopped. None: the move is complete (the scheduler's sweep finished it).
  auto row = tx.exec_params(
      "UPDATE batches SET upload_deadline = clock_timestamp() + make_interval(secs => $2) "
      "WHERE batch_id = $1 AND sealed AND upload_deadline IS NOT NULL "
      "RETURNING coalesce(settled_through_seq, 0)",
      header_.batch_id, kPromoteWithinS);
  if (row.empty())
    return 0;
  const Slice moved =
      move_staged(tx, header_.batch_id, header_.user_id, row[0][0].as<std::int64_t>(), slice);
  settle(tx, header_.batch_id, header_.user_id, /*sealed=*/true, moved, slice);
  tx.commit();
  return moved.done;
}

void BatchWriter::discard(int slice) {
  if (!created_ || sealed_)
    return;  // only an upload this writer created and did not seal
  for (;;) {
    pqxx::work tx(*connection_);
    auto row = tx.exec_params(
        "SELECT coalesce(settled_through_seq, 0) FROM batches "
        "WHERE batch_id = $1 AND NOT sealed FOR UPDATE",
        header_.batch_id);
    if (row.empty())
      return;  // deleted (by the scheduler's sweep)
    const Slice deleted =
        delete_staged(tx, header_.batch_id, header_.user_id, row[0][0].as<std::int64_t>(), slice);
    settle(tx, header_.batch_id, header_.user_id, /*sealed=*/false, deleted, slice);
    tx.commit();
    if (deleted.done < slice)
      return;
  }
}

std::vector<BatchHeader> find_batches(pqxx::connection& c, const std::string& name,
                                      const std::string& user_id, int limit) {
  pqxx::read_transaction tx(c);
  // A batch whose upload is under way is not there yet: nothing of it is committed until the
  // seal. A sealed one is, also while its tasks are still moving into the queue (its
  // uploader may have answered and left the rest of the move to the scheduler's sweep).
  // Batches made before uploads were staged (migration 0017) are unsealed with no deadline.
  // By batches_name_user: a user has one batch of a name.
  auto rows = tx.exec_params(R"SQL(
SELECT batch_id, user_id, priority FROM batches
WHERE split_part(batch_id, E'\x1f', 1) = $1 AND ($2 = '' OR user_id = $2)
  AND (sealed OR upload_deadline IS NULL)
ORDER BY created_at, user_id
LIMIT $3)SQL",
                             name, user_id, limit);
  std::vector<BatchHeader> found;
  for (const auto& row : rows) {
    found.push_back(
        BatchHeader{row[0].as<std::string>(), row[1].as<std::string>(),
                    parse_priority(row[2].as<std::string>()).value_or(Priority::kBatch)});
  }
  return found;
}

std::optional<std::string> batch_json(pqxx::connection& c, const std::string& batch_id) {
  pqxx::read_transaction tx(c);
  auto rows = tx.exec_params(R"SQL(
WITH b AS (SELECT * FROM batches WHERE batch_id = $1 AND (sealed OR upload_deadline IS NULL)),
-- A task still moving into the queue (staged, of a sealed batch) waits as a queued one does.
t AS (SELECT CASE WHEN status = 'staged' THEN 'queued' ELSE status END AS status, result_type
      FROM tasks WHERE batch_id = $1 AND user_id = (SELECT user_id FROM b)),
by_status AS (SELECT status, count(*) AS n FROM t GROUP BY status),
by_type AS (SELECT result_type, count(*) AS n FROM t WHERE result_type IS NOT NULL
            GROUP BY result_type),
calls AS (
  SELECT model, currency, count(*) AS calls, sum(input_tokens) AS input_tokens,
         sum(cached_input_tokens) AS cached_input_tokens, sum(output_tokens) AS output_tokens,
         sum(cost) AS cost, count(*) FILTER (WHERE usage_estimated) AS estimated_calls
  FROM usage_ledger WHERE batch_id = $1 AND user_id = (SELECT user_id FROM b)
  GROUP BY model, currency)
SELECT jsonb_build_object(
  'batch_id', split_part(b.batch_id, E'\x1f', 1), 'user_id', b.user_id, 'priority', b.priority, 'total', b.total,
  'cancelled', b.cancelled, 'created_at', b.created_at, 'cancelled_at', b.cancelled_at,
  'counts', (SELECT jsonb_build_object(
      'queued', coalesce(sum(n) FILTER (WHERE status = 'queued'), 0),
      'dispatched', coalesce(sum(n) FILTER (WHERE status = 'dispatched'), 0),
      'running', coalesce(sum(n) FILTER (WHERE status = 'running'), 0),
      'succeeded', coalesce(sum(n) FILTER (WHERE status = 'succeeded'), 0),
      'failed', coalesce(sum(n) FILTER (WHERE status = 'failed'), 0),
      'timed_out', coalesce(sum(n) FILTER (WHERE status = 'timed_out'), 0),
      'cancelled', coalesce(sum(n) FILTER (WHERE status = 'cancelled'), 0)) FROM by_status),
  'result_types', (SELECT jsonb_build_object(
      'action_completed', coalesce(sum(n) FILTER (WHERE result_type = 'action_completed'), 0),
      'need_clarification', coalesce(sum(n) FILTER (WHERE result_type = 'need_clarification'), 0),
      'error', coalesce(sum(n) FILTER (WHERE result_type = 'error'), 0)) FROM by_type),
  'ended', (SELECT coalesce(sum(n), 0) FROM by_status
            WHERE status IN ('succeeded', 'failed', 'timed_out', 'cancelled')),
  -- Why its queued tasks wait: those of one user and priority wait for the same limit
  -- (a follow-up waiting for its parent aside, which GET /v1/tasks/{id} names).
  'waiting_reason', CASE WHEN EXISTS (SELECT 1 FROM by_status WHERE status = 'queued')
      THEN coalesce((SELECT w.reason FROM waiting_reasons w
                     WHERE w.user_id = b.user_id AND w.priority = b.priority), 'scheduling') END,
  'usage', coalesce((SELECT jsonb_agg(jsonb_build_object(
      'model', model, 'currency', currency, 'calls', calls, 'input_tokens', input_tokens,
      'cached_input_tokens', cached_input_tokens, 'output_tokens', output_tokens,
      'cost', to_char(cost, 'FM999999999999990.000000'),
      'estimated_calls', estimated_calls) ORDER BY model) FROM calls),
    '[]'::jsonb))::text
FROM b)SQL",
                             batch_id);
  if (rows.empty())
    return std::nullopt;
  return rows[0][0].as<std::string>();
}

std::string list_batches(pqxx::connection& c, const BatchListQuery& query) {
  pqxx::read_transaction tx(c);
  // Each batch's counts from the tasks_batch index (batch_id, task_id) INCLUDE (user_id,
  // status, result_type): an index-only scan of its tasks, so a page costs the tasks of its
  // batches (batches_user serves one user's, newest first). A prefix is a filter on the
  // batches read newest first (no index serves it: batches is a row per upload).
  auto rows =
      tx.exec_params(R"SQL(
SELECT coalesce(jsonb_agg(jsonb_build_object(
  'batch_id', split_part(b.batch_id, E'\x1f', 1), 'user_id', b.user_id, 'priority', b.priority,
  'total', b.total, 'cancelled', b.cancelled, 'created_at', b.created_at,
  'cancelled_at', b.cancelled_at,
  'counts', jsonb_build_object(
      'queued', n.queued, 'dispatched', n.dispatched, 'running', n.running,
      'succeeded', n.succeeded, 'failed', n.failed, 'timed_out', n.timed_out,
      'cancelled', n.cancelled),
  'result_types', jsonb_build_object(
      'action_completed', n.action_completed, 'need_clarification', n.need_clarification,
      'error', n.error),
  'ended', n.succeeded + n.failed + n.timed_out + n.cancelled) ORDER BY b.created_at DESC,
                                                                        b.batch_id DESC),
  '[]'::jsonb)::text
FROM (SELECT * FROM batches
      WHERE (sealed OR upload_deadline IS NULL)
        AND ($1::jsonb = '[]'::jsonb
             OR user_id = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb))))
        AND ($2 = '' OR created_at < NULLIF($2, '')::timestamptz)
        AND ($4 = '' OR starts_with(split_part(batch_id, E'\x1f', 1), $4))
      ORDER BY created_at DESC, batch_id DESC
      LIMIT $3) b
CROSS JOIN LATERAL (
  SELECT count(*) FILTER (WHERE status IN ('queued', 'staged')) AS queued,
         count(*) FILTER (WHERE status = 'dispatched') AS dispatched,
         count(*) FILTER (WHERE status = 'running') AS running,
         count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
         count(*) FILTER (WHERE status = 'failed') AS failed,
         count(*) FILTER (WHERE status = 'timed_out') AS timed_out,
         count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
         count(*) FILTER (WHERE result_type = 'action_completed') AS action_completed,
         count(*) FILTER (WHERE result_type = 'need_clarification') AS need_clarification,
         count(*) FILTER (WHERE result_type = 'error') AS error
  FROM tasks t WHERE t.batch_id = b.batch_id AND t.user_id = b.user_id) n)SQL",
                     json_string_array(query.users), query.before, query.limit, query.prefix);
  return rows[0][0].as<std::string>();
}

std::string batch_results_page(pqxx::connection& c, const BatchHeader& batch,
                               const ResultsCursor& after, int limit, ResultsCursor& last) {
  pqxx::read_transaction tx(c);
  // The tasks' rows as every read of a task selects them (the fragment task_row), then the
  // retry POST /v1/batches/{id}/retry made of each (found by its key, on the unique index of
  // keys); the codec writes each line. In line order from the index tasks_batch_line
  // (migration 0032).
  static const std::string kPage = std::string("SELECT ") + sql::fragment("task_row") +
                                   R"SQL(,
       r.task_id::text, r.status, r.result_type
FROM tasks t
LEFT JOIN tasks r ON r.user_id = t.user_id AND r.idempotency_key = 'batch-retry:' || t.task_id
                 AND r.status <> 'staged'
WHERE t.batch_id = $1 AND t.user_id = $2
  AND ($3 = '' OR (coalesce(t.batch_line, 0), t.task_id) > ($4::bigint, NULLIF($3, '')::uuid))
  AND t.status <> 'staged'  -- still moving into the queue: no task read shows it yet
ORDER BY coalesce(t.batch_line, 0), t.task_id
LIMIT $5)SQL";
  auto rows =
      tx.exec_params(kPage, batch.batch_id, batch.user_id, after.task_id, after.line, limit);
  std::string out;
  last = ResultsCursor{};
  for (const auto& row : rows) {
    codec::TaskRow task;
    const int at = read_task_row(row, 0, task);
    std::optional<codec::RetryRef> retry;
    if (!row[at].is_null()) {
      retry = codec::RetryRef{
          row[at].as<std::string>(), row[at + 1].as<std::string>(),
          row[at + 2].is_null() ? std::optional<std::string>() : row[at + 2].as<std::string>()};
    }
    out += codec::batch_result_json(task, retry);
    out += '\n';
    last = ResultsCursor{task.batch_line.value_or(0), task.task_id};
  }
  return out;
}

std::vector<std::string> batch_failed_tasks(pqxx::connection& c, const BatchHeader& batch,
                                            const std::string& after, int limit) {
  pqxx::read_transaction tx(c);
  auto rows = tx.exec_params(R"SQL(
SELECT task_id::text FROM tasks
WHERE batch_id = $1 AND user_id = $2 AND ($3 = '' OR task_id > NULLIF($3, '')::uuid)
  AND (status IN ('failed', 'timed_out') OR (status = 'succeeded' AND result_type = 'error'))
ORDER BY task_id LIMIT $4)SQL",
                             batch.batch_id, batch.user_id, after, limit);
  std::vector<std::string> ids;
  ids.reserve(rows.size());
  for (const auto& row : rows)
    ids.push_back(row[0].as<std::string>());
  return ids;
}

namespace {
// Marks a cancelled batch drained once none of its tasks waits to run any more, so the
// scheduler's sweep stops looking at it.
void mark_drained_if_empty(pqxx::work& tx, const std::string& batch_id,
                           const std::string& user_id) {
  tx.exec_params0(R"SQL(
UPDATE batches SET drained_at = statement_timestamp()
WHERE batch_id = $1 AND drained_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM tasks WHERE batch_id = $1 AND user_id = $2
                                        AND status IN ('staged', 'queued', 'dispatched')))SQL",
                  batch_id, user_id);
}
}  // namespace

int cancel_batch_slice(pqxx::connection& c, const BatchHeader& batch, std::string& after, int limit,
                       const std::string& results_topic) {
  pqxx::work tx(c);
  tx.exec_params0(
      "UPDATE batches SET cancelled = true, cancelled_at = coalesce(cancelled_at, now()) "
      "WHERE batch_id = $1",
      batch.batch_id);
  // Every live row of the slice is locked in one statement, in task_id order (the order the
  // workers' batched writes and heartbeats lock in), so the cancel never waits in a cycle
  // with them. Not SKIP LOCKED: a row a scheduler pass is dispatching right now would escape
  // and run; the short wait re-reads it instead. Staged rows (a sealed batch whose tasks are
  // still moving into the queue) end here too. A move, the sweep and this cancel all take
  // the batch row first, so they run one after another, never over the same rows at once.
  auto picked = tx.exec_params(
      R"SQL(
SELECT task_id::text, status FROM tasks
WHERE batch_id = $1 AND user_id = $2 AND task_id > $3::uuid
  AND (status IN ('staged', 'queued', 'dispatched')
       OR (status = 'running' AND NOT cancel_requested))
ORDER BY task_id
LIMIT $4
FOR UPDATE)SQL",
      batch.batch_id, batch.user_id,
      after.empty() ? std::string("00000000-0000-0000-0000-000000000000") : after, limit);
  std::vector<std::string> unstarted, running;
  for (const auto& row : picked) {
    (row[1].as<std::string>() == "running" ? running : unstarted)
        .push_back(row[0].as<std::string>());
    after = row[0].as<std::string>();
  }
  end_unstarted(tx, unstarted,
                Ending{TaskStatus::kCancelled, "its batch was cancelled", ErrorCode::kCancelled,
                       std::nullopt},
                results_topic);
  // Running ones are asked to stop; their workers end them cancelled.
  tx.exec_params0(
      "UPDATE tasks SET cancel_requested = true "
      "WHERE task_id = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb))::uuid[])",
      json_string_array(running));
  if (static_cast<int>(picked.size()) < limit)
    mark_drained_if_empty(tx, batch.batch_id, batch.user_id);
  tx.commit();
  return static_cast<int>(picked.size());
}

int sweep_staged_batches(pqxx::work& tx, int limit) {
  // Only uploads past their deadline, which the partial index batches_uploading holds.
  auto batches = exec_prepared(tx, "af_sched_staged_batches",
                               "SELECT batch_id, user_id, sealed, "
                               "coalesce(settled_through_seq, 0) FROM batches "
                               "WHERE upload_deadline < now() ORDER BY upload_deadline LIMIT 5 "
                               "FOR UPDATE SKIP LOCKED");
  int done = 0;
  for (const auto& b : batches) {
    const std::string batch_id = b[0].as<std::string>();
    const std::string user_id = b[1].as<std::string>();
    const bool sealed = b[2].as<bool>();
    const std::int64_t after = b[3].as<std::int64_t>();
    const int room = limit - done;
    if (room <= 0)
      break;
    const Slice slice = sealed ? move_staged(tx, batch_id, user_id, after, room)
                               : delete_staged(tx, batch_id, user_id, after, room);
    done += slice.done;
    settle(tx, batch_id, user_id, sealed, slice, room);
  }
  return done;
}

int sweep_cancelled_batches(pqxx::work& tx, int limit, const std::string& results_topic) {
  // Only batches whose cancel was cut short (its request failed, or its replica died)
  // are looked at; a drained batch never again. A batch whose row is locked is being
  // cancelled right now (each of the API's slices holds the row from its first statement
  // to its commit) and is skipped: the sweep, taking the unlocked tasks just ahead of the
  // slice's ordered scan 200 at a time, made that scan wait behind each of its passes in
  // turn, until the slice ran out of its statement timeout and the cancel answered 503.
  auto batches =
      exec_prepared(tx, "af_sched_cancelled_batches",
                    "SELECT batch_id, user_id FROM batches WHERE cancelled AND drained_at IS NULL "
                    "ORDER BY cancelled_at LIMIT 5 FOR UPDATE SKIP LOCKED");
  int ended = 0;
  for (const auto& b : batches) {
    const std::string batch_id = b[0].as<std::string>();
    const std::string user_id = b[1].as<std::string>();
    auto picked = tx.exec_params(
        "SELECT task_id::text FROM tasks WHERE batch_id = $1 AND user_id = $2 AND "
        "status IN ('staged', 'queued', 'dispatched') ORDER BY task_id LIMIT $3 "
        "FOR UPDATE SKIP LOCKED",
        batch_id, user_id, limit - ended);
    std::vector<std::string> ids;
    for (const auto& row : picked)
      ids.push_back(row[0].as<std::string>());
    if (ids.empty()) {
      mark_drained_if_empty(tx, batch_id, user_id);
      continue;
    }
    ended +=
        static_cast<int>(end_unstarted(tx, ids,
                                       Ending{TaskStatus::kCancelled, "its batch was cancelled",
                                              ErrorCode::kCancelled, std::nullopt},
                                       results_topic)
                             .size());
    if (ended >= limit)
      break;
  }
  return ended;
}

}  // namespace agentfleet::pg
