#include "core/adapters/pg/task_store.hpp"

#include "core/adapters/pg/ended_tasks.hpp"
#include "core/adapters/pg/prepared.hpp"
#include "core/codec/task_codec.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace agentfleet::pg {

namespace {
// The task's public JSON as an expression over a tasks row `t` (and its steps), shared by the
// API reads and the answer to a submission.
constexpr const char* kTaskObject = R"SQL(
jsonb_build_object(
  'task_id', t.task_id, 'user_id', t.user_id, 'text', t.text, 'model', t.model,
  'tools', to_jsonb(t.tools), 'priority', t.priority, 'status', t.status,
  'timeout_s', t.timeout_s, 'schedule_timeout_s', t.schedule_timeout_s,
  'max_steps', t.max_steps, 'strategy', t.strategy, 'idempotency_key', t.idempotency_key,
  'batch_id', t.batch_id, 'parent_task_id', t.parent_task_id, 'session_id', t.session_id,
  'metadata', t.metadata,
  'result', CASE WHEN t.result_type IS NULL THEN NULL ELSE jsonb_build_object(
      'type', t.result_type, 'message', t.result_message,
      'options', coalesce(t.result_options, '[]'::jsonb)) END,
  'error', t.error, 'cancel_requested', t.cancel_requested, 'attempt', t.attempt,
  'steps', t.steps, 'tool_calls', t.tool_calls,
  'usage', jsonb_build_object('input_tokens', t.input_tokens,
      'cached_input_tokens', t.cached_input_tokens, 'output_tokens', t.output_tokens),
  'cost', to_char(t.cost, 'FM999999999999990.000000'), 'currency', t.currency,
  'created_at', t.created_at, 'dispatched_at', t.dispatched_at, 'started_at', t.started_at,
  'finished_at', t.finished_at,
  'trace', (SELECT coalesce(jsonb_agg(jsonb_build_object(
      'step', s.step, 'attempt', s.attempt,
      'role', CASE WHEN s.model_reply->>'kind' = 'tool_step' THEN '"tool"'::jsonb
                   ELSE s.model_reply->'role' END,
      'content', s.model_reply->'content', 'reasoning', s.model_reply->'reasoning',
      'tool_calls', coalesce(s.trace, '[]'::jsonb), 'usage', s.model_reply->'usage',
      'model_latency_ms', s.model_latency_ms, 'at', s.created_at) ORDER BY s.step), '[]'::jsonb)
    FROM task_steps s WHERE s.task_id = t.task_id))::text)SQL";

// The statement text of the task's public JSON, read by id ($1).
const std::string& task_json_statement() {
  static const std::string statement =
      std::string("SELECT ") + kTaskObject + " FROM tasks t WHERE t.task_id = $1::uuid";
  return statement;
}

// The insert of tasks from a JSON array ($1, tasks_json), in two parts around an optional
// WHERE: the queue deadline is set by a trigger; a (user, idempotency key) taken is skipped.
constexpr const char* kInsertTasksHead = R"SQL(
INSERT INTO tasks (task_id, user_id, text, model, tools, timeout_s, schedule_timeout_s,
                   max_steps, priority, idempotency_key, request_canonical, batch_id,
                   metadata, traceparent, strategy, parent_task_id, session_id)
SELECT r.task_id, r.user_id, r.text, r.model,
       CASE WHEN r.tools IS NULL OR jsonb_typeof(r.tools) = 'null' THEN NULL
            ELSE ARRAY(SELECT jsonb_array_elements_text(r.tools)) END,
       r.timeout_s, r.schedule_timeout_s, r.max_steps, r.priority, NULLIF(r.idempotency_key, ''),
       r.request_canonical, NULLIF(r.batch_id, ''), r.metadata, NULLIF(r.traceparent, ''),
       NULLIF(r.strategy, ''),
       coalesce(NULLIF(r.parent_task_id, '')::uuid,
                (SELECT p.task_id FROM tasks p
                 WHERE r.session_id <> '' AND p.user_id = r.user_id AND p.session_id = r.session_id
                 ORDER BY p.created_at DESC LIMIT 1)),
       NULLIF(r.session_id, '')
FROM jsonb_to_recordset($1::jsonb) AS r(
  task_id uuid, user_id text, text text, model text, tools jsonb, timeout_s integer,
  schedule_timeout_s integer, max_steps integer, priority text, idempotency_key text,
  request_canonical text, batch_id text, metadata jsonb, traceparent text, strategy text,
  parent_task_id text, session_id text))SQL";
constexpr const char* kInsertTasksTail =
    " ON CONFLICT (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING";
}  // namespace

namespace {
using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void key_string(Writer& w, const char* key, std::string_view value) {
  w.Key(key);
  w.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
}

// The tasks of a slice as a JSON array of objects, the input of jsonb_to_recordset.
std::string tasks_json(const std::vector<NewTask>& tasks) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartArray();
  for (const NewTask& t : tasks) {
    const TaskSpec& s = t.spec;
    w.StartObject();
    key_string(w, "task_id", s.task_id);
    key_string(w, "user_id", s.user_id);
    key_string(w, "text", s.text);
    key_string(w, "model", s.model);
    w.Key("tools");
    if (s.tools) {
      w.StartArray();
      for (const auto& tool : *s.tools)
        w.String(tool.data(), static_cast<rapidjson::SizeType>(tool.size()));
      w.EndArray();
    } else {
      w.Null();
    }
    w.Key("timeout_s");
    w.Int(s.timeout_s);
    w.Key("schedule_timeout_s");
    w.Int(s.schedule_timeout_s);
    w.Key("max_steps");
    w.Int(s.max_steps);
    key_string(w, "priority", to_string(s.priority));
    key_string(w, "idempotency_key", s.idempotency_key);
    key_string(w, "request_canonical", t.canonical);
    key_string(w, "batch_id", s.batch_id);
    w.Key("metadata");
    w.StartObject();
    key_string(w, "device_id", s.metadata.device_id);
    key_string(w, "time_zone", s.metadata.time_zone);
    key_string(w, "locale", s.metadata.locale);
    w.EndObject();
    key_string(w, "traceparent", t.traceparent);
    key_string(w, "strategy", s.strategy ? to_string(*s.strategy) : std::string_view());
    key_string(w, "parent_task_id", s.parent_task_id);
    key_string(w, "session_id", s.session_id);
    w.EndObject();
  }
  w.EndArray();
  return std::string(buffer.GetString(), buffer.GetSize());
}
}  // namespace

std::vector<std::string> insert_tasks(pqxx::work& tx, const std::vector<NewTask>& tasks) {
  std::vector<std::string> ids;
  if (tasks.empty())
    return ids;
  // One statement for any number of rows.
  static const std::string kInsert =
      std::string(kInsertTasksHead) + kInsertTasksTail + " RETURNING task_id::text";
  auto rows = exec_prepared(tx, "af_insert_tasks", kInsert.c_str(), tasks_json(tasks));
  ids.reserve(rows.size());
  for (const auto& row : rows)
    ids.push_back(row[0].as<std::string>());
  return ids;
}

void lock_user_queue(pqxx::work& tx, const std::string& user_id) {
  exec_prepared(tx, "af_queue_lock", "SELECT pg_advisory_xact_lock(7311002, hashtext($1))",
                user_id);
}

QueueRoom queue_room(pqxx::work& tx, const std::string& user_id, const QueueLimit& limit) {
  QueueRoom room;
  if (!limit)
    return room;
  auto overrides = exec_prepared(
      tx, "af_queue_overrides",
      "SELECT coalesce(tier, ''), max_queued FROM user_limits WHERE user_id = $1", user_id);
  std::string tier;
  std::optional<int> max_queued;
  if (!overrides.empty()) {
    tier = overrides[0][0].as<std::string>();
    if (!overrides[0][1].is_null())
      max_queued = overrides[0][1].as<int>();
  }
  room.max_queued = limit(tier, max_queued);
  // Counting stops just past the limit: a deep queue costs no more than a full one.
  room.queued = exec_prepared1(tx, "af_queue_count",
                               "SELECT count(*) FROM (SELECT 1 FROM tasks WHERE user_id = $1 AND "
                               "status = 'queued' LIMIT $2::bigint + 1) q",
                               user_id, room.max_queued)[0]
                    .as<std::int64_t>();
  return room;
}

namespace {
// The task as the API shows it, read in `tx` (so a task inserted there is seen).
std::string task_json_in(pqxx::transaction_base& tx, const std::string& task_id) {
  auto rows = exec_prepared(tx, "af_task_json", task_json_statement().c_str(), task_id);
  return rows.empty() ? std::string() : rows[0][0].as<std::string>();
}
}  // namespace

InsertResult insert_task(pqxx::connection& c, const NewTask& task, const QueueLimit& limit,
                         bool with_json) {
  const TaskSpec& s = task.spec;
  pqxx::work tx(c);
  // One submission of a user at a time: the queue count and the idempotency check hold
  // until the insert commits. The user's overrides are read by the same statement (they
  // change rarely; a change racing a submission applies from the next one).
  auto overrides =
      exec_prepared1(tx, "af_submit_lock",
                     "SELECT pg_advisory_xact_lock(7311002, hashtext($1)), coalesce(l.tier, ''), "
                     "l.max_queued FROM (SELECT 1) one LEFT JOIN user_limits l ON l.user_id = $1",
                     s.user_id);
  QueueRoom room;
  if (limit) {
    room.max_queued =
        limit(overrides[1].as<std::string>(),
              overrides[2].is_null() ? std::nullopt : std::optional<int>(overrides[2].as<int>()));
  }
  // The common case in one statement, run after the lock (so its snapshot sees every
  // submission before it): the user's queued tasks counted up to the limit (a deep queue
  // costs no more than a full one), the insert when there is room and its key is not taken
  // (ON CONFLICT), the answer, and the scheduler's wake-up (whichever replica runs it).
  static const std::string kSubmit =
      std::string(
          "WITH room AS (SELECT CASE WHEN $3::bigint < 0 THEN 0 ELSE (SELECT count(*) FROM ("
          "SELECT 1 FROM tasks WHERE user_id = $2 AND status = 'queued' "
          "LIMIT $3::bigint + 1) q) END AS queued), ins AS (") +
      kInsertTasksHead + " WHERE $3::bigint < 0 OR (SELECT queued FROM room) < $3::bigint" +
      kInsertTasksTail +
      " RETURNING *), woken AS (SELECT pg_notify('agentfleet_work', '') FROM ins) "
      "SELECT (SELECT queued FROM room), t.task_id::text, "
      "CASE WHEN $4::boolean AND t.task_id IS NOT NULL THEN " +
      kTaskObject +
      " END, (SELECT count(*) FROM woken) FROM (SELECT 1) one LEFT JOIN ins t ON true";
  auto row = exec_prepared1(tx, "af_submit", kSubmit.c_str(), tasks_json({task}), s.user_id,
                            limit ? std::int64_t{room.max_queued} : std::int64_t{-1}, with_json);
  room.queued = row[0].as<std::int64_t>();
  InsertResult result;
  if (!row[1].is_null()) {
    result.outcome = InsertOutcome::kCreated;
    result.task_id = row[1].as<std::string>();
    if (with_json)
      result.task_json = row[2].as<std::string>();
    tx.commit();
    return result;
  }
  // Not stored: its key names a task already (the same request, or another: a conflict), or
  // the user's queue is full.
  if (!s.idempotency_key.empty()) {
    auto existing =
        exec_prepared(tx, "af_idempotency",
                      "SELECT task_id::text, request_canonical FROM tasks WHERE user_id = $1 AND "
                      "idempotency_key = $2",
                      s.user_id, s.idempotency_key);
    if (!existing.empty()) {
      result.task_id = existing[0][0].as<std::string>();
      if (with_json)
        result.task_json = task_json_in(tx, result.task_id);
      tx.commit();
      result.outcome = existing[0][1].as<std::string>() == task.canonical
                           ? InsertOutcome::kExisting
                           : InsertOutcome::kConflict;
      return result;
    }
  }
  result.outcome = InsertOutcome::kQueueFull;
  result.room = room;
  return result;
}

std::optional<std::string> task_json(pqxx::connection& c, const std::string& task_id) {
  pqxx::read_transaction tx(c);
  std::string json = task_json_in(tx, task_id);
  if (json.empty())
    return std::nullopt;
  return json;
}

std::string list_tasks(pqxx::connection& c, const TaskListQuery& query) {
  pqxx::read_transaction tx(c);
  auto row = tx.exec_params1(R"SQL(
SELECT coalesce(jsonb_agg(item ORDER BY created_at DESC, task_id DESC), '[]'::jsonb)::text
FROM (
  SELECT t.created_at, t.task_id, jsonb_build_object(
      'task_id', t.task_id, 'user_id', t.user_id, 'text', t.text, 'model', t.model,
      'priority', t.priority, 'status', t.status, 'batch_id', t.batch_id,
      'result', CASE WHEN t.result_type IS NULL THEN NULL ELSE jsonb_build_object(
          'type', t.result_type, 'message', t.result_message,
          'options', coalesce(t.result_options, '[]'::jsonb)) END,
      'error', t.error, 'steps', t.steps, 'tool_calls', t.tool_calls,
      'cost', to_char(t.cost, 'FM999999999999990.000000'), 'currency', t.currency,
      'created_at', t.created_at, 'finished_at', t.finished_at) AS item
  FROM tasks t
  WHERE t.user_id = $1
    AND ($2 = '' OR t.status = $2)
    AND ($4 = '' OR (t.created_at, t.task_id) <
         (SELECT b.created_at, b.task_id FROM tasks b WHERE b.task_id = NULLIF($4, '')::uuid))
  ORDER BY t.created_at DESC, t.task_id DESC
  LIMIT $3
) page)SQL",
                             query.user_id, query.status, query.limit, query.before);
  return row[0].as<std::string>();
}

CancelOutcome cancel_task(pqxx::connection& c, const std::string& task_id,
                          const std::string& results_topic) {
  pqxx::work tx(c);
  auto rows =
      tx.exec_params("SELECT status FROM tasks WHERE task_id = $1::uuid FOR UPDATE", task_id);
  if (rows.empty())
    return CancelOutcome::kUnknown;
  const std::string status = rows[0][0].as<std::string>();
  if (status == "cancelled")
    return CancelOutcome::kAlreadyCancelled;
  if (status == "running") {
    tx.exec_params0("UPDATE tasks SET cancel_requested = true WHERE task_id = $1::uuid", task_id);
    tx.commit();
    return CancelOutcome::kRequested;
  }
  if (status != "queued" && status != "dispatched")
    return CancelOutcome::kAlreadyEnded;
  // Not running anywhere: a dispatch message still on its way finds it terminal and skips it.
  tx.exec_params0("UPDATE tasks SET cancel_requested = true WHERE task_id = $1::uuid", task_id);
  end_unstarted(
      tx, {task_id},
      Ending{TaskStatus::kCancelled, "cancelled before it ran", "cancelled", std::nullopt},
      results_topic);
  tx.commit();
  return CancelOutcome::kCancelled;
}

std::optional<ParentRef> find_parent(pqxx::connection& c, const std::string& user_id,
                                     const std::string& parent_id, const std::string& session_id,
                                     const std::string& idempotency_key) {
  pqxx::read_transaction tx(c);
  auto rows = tx.exec_params(R"SQL(
SELECT task_id::text, status FROM tasks
WHERE user_id = $1 AND (($2 <> '' AND task_id = NULLIF($2, '')::uuid)
                        OR ($2 = '' AND session_id = $3))
  AND ($4 = '' OR idempotency_key IS DISTINCT FROM $4)
ORDER BY created_at DESC LIMIT 1)SQL",
                             user_id, parent_id, session_id, idempotency_key);
  if (rows.empty())
    return std::nullopt;
  return ParentRef{rows[0][0].as<std::string>(),
                   parse_task_status(rows[0][1].as<std::string>()).value_or(TaskStatus::kQueued)};
}

}  // namespace agentfleet::pg

namespace agentfleet::pg {

std::optional<std::string> task_history_json(pqxx::connection& c, const std::string& task_id) {
  pqxx::read_transaction tx(c);
  auto rows = tx.exec_params(R"SQL(
SELECT jsonb_build_object(
  'task_id', t.task_id, 'user_id', t.user_id, 'status', t.status, 'error', t.error,
  'error_code', t.error_code,
  'result', CASE WHEN t.result_type IS NULL THEN NULL ELSE jsonb_build_object(
      'type', t.result_type, 'message', t.result_message,
      'options', coalesce(t.result_options, '[]'::jsonb)) END,
  'usage', jsonb_build_object('input_tokens', t.input_tokens,
      'cached_input_tokens', t.cached_input_tokens, 'output_tokens', t.output_tokens),
  'cost', to_char(t.cost, 'FM999999999999990.000000'), 'currency', t.currency,
  'steps', (SELECT coalesce(jsonb_agg(jsonb_build_object(
      'step', s.step, 'content', coalesce(s.model_reply->>'content', ''),
      'tool_calls', coalesce(s.model_reply->'tool_calls', '[]'::jsonb),
      'trace', s.trace) ORDER BY s.step), '[]'::jsonb)
    FROM task_steps s WHERE s.task_id = t.task_id))::text
FROM tasks t WHERE t.task_id = $1::uuid)SQL",
                             task_id);
  if (rows.empty())
    return std::nullopt;
  return rows[0][0].as<std::string>();
}

}  // namespace agentfleet::pg
