#include "core/adapters/pg/task_store.hpp"

#include "core/adapters/pg/ended_tasks.hpp"
#include "core/adapters/pg/prepared.hpp"
#include "core/codec/task_codec.hpp"

#include <map>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace agentfleet::pg {

namespace {
// The statement text of the task's public JSON, shared by the API reads.
constexpr const char* kTaskJson = R"SQL(
SELECT jsonb_build_object(
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
    FROM task_steps s WHERE s.task_id = t.task_id))::text
FROM tasks t WHERE t.task_id = $1::uuid
)SQL";
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
  // One statement for any number of rows; the queue deadline is set by a trigger.
  auto rows = exec_prepared(tx, "af_insert_tasks", R"SQL(
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
  parent_task_id text, session_id text)
ON CONFLICT (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING task_id::text)SQL",
                            tasks_json(tasks));
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
  auto rows = exec_prepared(tx, "af_task_json", kTaskJson, task_id);
  return rows.empty() ? std::string() : rows[0][0].as<std::string>();
}
}  // namespace

InsertResult insert_task(pqxx::connection& c, const NewTask& task, const QueueLimit& limit,
                         bool with_json) {
  const TaskSpec& s = task.spec;
  pqxx::work tx(c);
  // One submission of a user at a time: the queue count and the idempotency check hold
  // until the insert commits.
  lock_user_queue(tx, s.user_id);
  InsertResult result;
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
  const QueueRoom room = queue_room(tx, s.user_id, limit);
  if (limit && room.queued >= room.max_queued) {
    result.outcome = InsertOutcome::kQueueFull;
    result.room = room;
    return result;
  }
  const auto inserted = insert_tasks(tx, {task});
  if (inserted.empty()) {
    // A batch upload committed the same key meanwhile (it takes the user lock only at its
    // end): the key names that task now.
    auto existing =
        exec_prepared1(tx, "af_idempotency",
                       "SELECT task_id::text, request_canonical FROM tasks WHERE user_id = $1 AND "
                       "idempotency_key = $2",
                       s.user_id, s.idempotency_key);
    result.task_id = existing[0].as<std::string>();
    if (with_json)
      result.task_json = task_json_in(tx, result.task_id);
    tx.commit();
    result.outcome = existing[1].as<std::string>() == task.canonical ? InsertOutcome::kExisting
                                                                     : InsertOutcome::kConflict;
    return result;
  }
  result.outcome = InsertOutcome::kCreated;
  result.task_id = inserted.front();
  if (with_json)
    result.task_json = task_json_in(tx, result.task_id);
  // Wakes the active scheduler, whichever replica runs it.
  exec_prepared(tx, "af_notify_work", "SELECT pg_notify('agentfleet_work', '')");
  tx.commit();
  return result;
}

std::optional<std::string> task_json(pqxx::connection& c, const std::string& task_id) {
  pqxx::read_transaction tx(c);
  std::string json = task_json_in(tx, task_id);
  if (json.empty())
    return std::nullopt;
  return json;
}

namespace {
// Marks the rows `picked` (a query of task_id and status) dispatched and writes their
// dispatch messages. Returns, per row: the status it was picked in, its priority, user,
// id, seconds since it was submitted, and whether this is its first dispatch. The time is
// the statement's, not the pass transaction's start: a task committed while the pass ran
// is never dispatched "before" it was created.
std::string dispatch_statement(const std::string& picked, const std::string& extra_set) {
  return R"SQL(
WITH picked AS ()SQL" +
         picked + R"SQL(
), marked AS (
  UPDATE tasks t SET status = 'dispatched', dispatched_at = statement_timestamp())SQL" +
         extra_set + R"SQL(
  FROM picked WHERE t.task_id = picked.task_id
  RETURNING t.task_id, t.user_id, t.priority, t.traceparent, t.dispatched_at, t.created_at,
            t.attempt, picked.status AS was
), sent AS (
  INSERT INTO outbox (topic, message_key, payload, traceparent)
  SELECT $2, m.user_id,
         jsonb_build_object('version', 1, 'task_id', m.task_id::text, 'user_id', m.user_id,
                            'priority', m.priority,
                            'dispatched_at', to_char(m.dispatched_at AT TIME ZONE 'UTC',
                                                     'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))::text,
         m.traceparent
  FROM marked m
  RETURNING id
)
SELECT was, priority, user_id, task_id::text,
       extract(epoch FROM dispatched_at - created_at)::float8, attempt = 0,
       coalesce(traceparent, '')
FROM marked)SQL";
}

std::vector<DispatchedTask> read_dispatched(const pqxx::result& rows) {
  std::vector<DispatchedTask> out;
  out.reserve(rows.size());
  for (const auto& row : rows) {
    DispatchedTask d;
    d.was = row[0].as<std::string>();
    d.priority = parse_priority(row[1].as<std::string>()).value_or(Priority::kInteractive);
    d.user_id = row[2].as<std::string>();
    d.task_id = row[3].as<std::string>();
    d.queued_s = row[4].as<double>();
    d.first = row[5].as<bool>();
    d.traceparent = row[6].as<std::string>();
    out.push_back(std::move(d));
  }
  return out;
}

// Ends the tasks recovery has given up on, each with its result event, in `tx`.
int fail_exhausted(pqxx::work& tx, const SchedulerPass& pass) {
  static const std::string kFail = std::string(R"SQL(
UPDATE tasks SET status = 'failed', finished_at = statement_timestamp(), lease_until = NULL,
       error_code = 'attempts_exhausted',
       error = 'gave up after ' || (attempt - releases) || ' attempts: every worker that ran it stopped '
               'before it finished'
WHERE task_id IN (SELECT task_id FROM tasks
                  WHERE status = 'running' AND lease_until < now() AND attempt - releases >= $2
                  ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING )SQL") + kEndedColumns;
  auto rows = exec_prepared(tx, "af_sched_exhausted", kFail.c_str(), pass.limit, pass.max_attempts);
  announce_ended(tx, rows, pass.results_topic);
  return static_cast<int>(rows.size());
}
}  // namespace

RecoveryReport recover_tasks(pqxx::work& tx, const SchedulerPass& pass) {
  // Built once: the statement text does not depend on the arguments.
  static const std::string kRecover = dispatch_statement(R"SQL(
  SELECT task_id, status FROM tasks
  WHERE (status = 'running' AND lease_until < now() AND attempt - releases < $4)
     OR (status = 'dispatched' AND dispatched_at < now() - make_interval(secs => $3))
  ORDER BY created_at
  LIMIT $1
  FOR UPDATE SKIP LOCKED)SQL",
                                                         ", lease_until = NULL");
  RecoveryReport report;
  report.exhausted = fail_exhausted(tx, pass);
  auto recovered = exec_prepared(tx, "af_sched_recover", kRecover.c_str(), pass.limit,
                                 pass.dispatch_topic, pass.redispatch_after_s, pass.max_attempts);
  for (const auto& task : read_dispatched(recovered)) {
    ++(task.was == "running" ? report.lease_expired : report.redispatched);
    report.tasks.push_back({task.task_id, task.user_id, task.traceparent, task.was == "running"});
  }
  return report;
}

int expire_queued(pqxx::work& tx, int limit, const std::string& results_topic) {
  static const std::string kExpire = std::string(R"SQL(
UPDATE tasks SET status = 'timed_out', finished_at = statement_timestamp(),
       error_code = 'schedule_timeout',
       error = 'waited in the queue longer than schedule_timeout_s (' || schedule_timeout_s || ' s)'
WHERE task_id IN (SELECT task_id FROM tasks
                  WHERE status = 'queued' AND started_at IS NULL AND queue_deadline_at < now()
                  ORDER BY queue_deadline_at LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING )SQL") + kEndedColumns;
  auto rows = exec_prepared(tx, "af_sched_expire", kExpire.c_str(), limit);
  announce_ended(tx, rows, results_topic);
  return static_cast<int>(rows.size());
}

Backlog read_backlog(pqxx::work& tx, int count_cap, bool count_fleet) {
  // A skip scan of tasks_queued_user finds each user with queued work in one index probe;
  // each count stops at count_cap (the pass never admits more).
  auto rows = exec_prepared(tx, "af_sched_backlog", R"SQL(
WITH RECURSIVE users AS (
  (SELECT user_id FROM tasks WHERE status = 'queued' ORDER BY user_id LIMIT 1)
  UNION ALL
  SELECT (SELECT t.user_id FROM tasks t WHERE t.status = 'queued' AND t.user_id > u.user_id
          ORDER BY t.user_id LIMIT 1)
  FROM users u WHERE u.user_id IS NOT NULL
)
SELECT u.user_id,
  (SELECT count(*) FROM (SELECT 1 FROM tasks q WHERE q.status = 'queued' AND q.user_id = u.user_id
                         AND q.priority = 'interactive' LIMIT $1) qi),
  (SELECT count(*) FROM (SELECT 1 FROM tasks q WHERE q.status = 'queued' AND q.user_id = u.user_id
                         AND q.priority = 'batch' LIMIT $1) qb),
  (SELECT count(*) FROM tasks a WHERE a.user_id = u.user_id
                                  AND a.status IN ('dispatched', 'running')),
  coalesce(l.tier, ''), l.max_concurrency, l.requests_per_minute, l.tokens_per_minute,
  l.max_queued, l.monthly_budget::text, l.tool_permission
FROM users u LEFT JOIN user_limits l ON l.user_id = u.user_id
WHERE u.user_id IS NOT NULL
ORDER BY u.user_id)SQL",
                            count_cap);
  Backlog backlog;
  backlog.users.reserve(rows.size());
  for (const auto& r : rows) {
    BacklogUser user;
    user.user_id = r[0].as<std::string>();
    user.queued_interactive = r[1].as<std::int64_t>();
    user.queued_batch = r[2].as<std::int64_t>();
    user.active = r[3].as<int>();
    user.overrides = read_overrides(r, 4);
    user.overrides.user_id = user.user_id;
    backlog.users.push_back(std::move(user));
  }
  if (count_fleet && !backlog.users.empty()) {
    backlog.fleet_active =
        exec_prepared1(tx, "af_sched_fleet_active",
                       "SELECT count(*) FROM tasks WHERE status IN ('dispatched', 'running')")[0]
            .as<std::int64_t>();
  }
  return backlog;
}

UserOverrides read_overrides(const pqxx::row& r, int first) {
  UserOverrides o;
  o.tier = r[first].as<std::string>();
  if (!r[first + 1].is_null())
    o.max_concurrency = r[first + 1].as<int>();
  if (!r[first + 2].is_null())
    o.requests_per_minute = r[first + 2].as<int>();
  if (!r[first + 3].is_null())
    o.tokens_per_minute = r[first + 3].as<std::int64_t>();
  if (!r[first + 4].is_null())
    o.max_queued = r[first + 4].as<int>();
  if (!r[first + 5].is_null())
    o.monthly_budget = r[first + 5].as<std::string>();
  if (!r[first + 6].is_null())
    o.tool_permission = r[first + 6].as<std::string>();
  return o;
}

std::map<std::string, std::int64_t> month_spend_micros(pqxx::work& tx,
                                                       const std::vector<std::string>& users,
                                                       const std::string& time_zone,
                                                       const std::string& currency) {
  std::map<std::string, std::int64_t> spent;
  if (users.empty())
    return spent;
  auto rows = exec_prepared(tx, "af_sched_month_spend", R"SQL(
SELECT user_id, (sum(cost) * 1000000)::bigint FROM usage_ledger
WHERE user_id = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)))
  AND called_at >= date_trunc('month', now() AT TIME ZONE $2) AT TIME ZONE $2
  AND currency = $3
GROUP BY user_id)SQL",
                            json_string_array(users), time_zone, currency);
  for (const auto& row : rows)
    spent[row[0].as<std::string>()] = row[1].as<std::int64_t>();
  return spent;
}

std::map<std::string, RecentUsage> recent_usage(pqxx::work& tx,
                                                const std::vector<std::string>& users) {
  std::map<std::string, RecentUsage> usage;
  if (users.empty())
    return usage;
  const std::string ids = json_string_array(users);
  auto tokens = tx.exec_params(R"SQL(
SELECT user_id, sum(input_tokens + output_tokens)::bigint FROM usage_ledger
WHERE user_id = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)))
  AND called_at > now() - interval '1 minute'
GROUP BY user_id)SQL",
                               ids);
  for (const auto& row : tokens)
    usage[row[0].as<std::string>()].tokens = row[1].as<std::int64_t>();
  auto admissions = tx.exec_params(R"SQL(
SELECT user_id, count(*) FROM tasks
WHERE user_id = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)))
  AND dispatched_at > now() - interval '1 minute'
GROUP BY user_id)SQL",
                                   ids);
  for (const auto& row : admissions)
    usage[row[0].as<std::string>()].admissions = row[1].as<std::int64_t>();
  return usage;
}

std::vector<DispatchedTask> dispatch_grants(pqxx::work& tx,
                                            const std::vector<limits::Grant>& grants,
                                            const std::string& dispatch_topic) {
  if (grants.empty())
    return {};
  // Each grant takes the user's oldest queued tasks of its priority; a row another
  // transaction holds (a cancel in progress) is skipped, not waited for.
  static const std::string kAdmit = dispatch_statement(R"SQL(
  SELECT p.task_id, 'queued'::text AS status
  FROM jsonb_to_recordset($1::jsonb) AS g(user_id text, priority text, n integer)
  CROSS JOIN LATERAL (
    SELECT t.task_id FROM tasks t
    WHERE t.status = 'queued' AND t.user_id = g.user_id AND t.priority = g.priority
      AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.cancelled AND b.batch_id = t.batch_id
                                                AND b.user_id = t.user_id)
    ORDER BY t.created_at
    LIMIT g.n
    FOR UPDATE SKIP LOCKED) p)SQL",
                                                       "");
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartArray();
  for (const auto& grant : grants) {
    w.StartObject();
    w.Key("user_id");
    w.String(grant.user_id.data(), static_cast<rapidjson::SizeType>(grant.user_id.size()));
    w.Key("priority");
    const std::string_view priority = to_string(grant.priority);
    w.String(priority.data(), static_cast<rapidjson::SizeType>(priority.size()));
    w.Key("n");
    w.Int(grant.tasks);
    w.EndObject();
  }
  w.EndArray();
  return read_dispatched(exec_prepared(tx, "af_sched_admit", kAdmit.c_str(),
                                       std::string(buffer.GetString(), buffer.GetSize()),
                                       dispatch_topic));
}

std::vector<std::string> oldest_queued(pqxx::work& tx, const std::string& user_id, int limit) {
  auto rows = tx.exec_params(
      "SELECT task_id::text FROM tasks WHERE status = 'queued' AND user_id = $1 "
      "ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED",
      user_id, limit);
  std::vector<std::string> ids;
  for (const auto& row : rows)
    ids.push_back(row[0].as<std::string>());
  return ids;
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

LiveTaskCounts count_live_tasks(pqxx::connection& c) {
  pqxx::read_transaction tx(c);
  LiveTaskCounts counts;
  const auto queued = tx.exec1(
      "SELECT count(*) FILTER (WHERE priority = 'interactive'), "
      "count(*) FILTER (WHERE priority = 'batch') FROM tasks WHERE status = 'queued'");
  counts.queued_interactive = queued[0].as<std::int64_t>();
  counts.queued_batch = queued[1].as<std::int64_t>();
  const auto active = tx.exec1(
      "SELECT count(*) FILTER (WHERE status = 'dispatched'), "
      "count(*) FILTER (WHERE status = 'running') FROM tasks "
      "WHERE status IN ('dispatched', 'running')");
  counts.dispatched = active[0].as<std::int64_t>();
  counts.running = active[1].as<std::int64_t>();
  return counts;
}

std::int64_t count_due_outbox(pqxx::connection& c) {
  pqxx::read_transaction tx(c);
  return tx.exec1("SELECT count(*) FROM outbox WHERE publish_after <= now()")[0].as<std::int64_t>();
}

namespace {
// A task's tool allow-list from array_to_json(tools): nullopt for NULL (every tool).
std::optional<std::vector<std::string>> tool_list(const pqxx::field& field) {
  if (field.is_null())
    return std::nullopt;
  rapidjson::Document tools;
  tools.Parse(field.c_str());
  std::vector<std::string> out;
  if (tools.IsArray()) {
    for (const auto& t : tools.GetArray()) {
      if (t.IsString())
        out.emplace_back(t.GetString());
    }
  }
  return out;
}

// A task's checkpoints in step order.
std::vector<StepRecord> step_records(pqxx::work& tx, const std::string& task_id) {
  auto rows = exec_prepared(
      tx, "af_task_steps",
      "SELECT step, model_reply::text, coalesce(observations::text, '') FROM task_steps "
      "WHERE task_id = $1::uuid ORDER BY step",
      task_id);
  std::vector<StepRecord> steps;
  steps.reserve(rows.size());
  for (const auto& row : rows)
    steps.push_back(
        StepRecord{row[0].as<int>(), row[1].as<std::string>(), row[2].as<std::string>()});
  return steps;
}
}  // namespace

Claim claim_task(pqxx::work& tx, const std::string& task_id, const std::string& worker_id,
                 int lease_s, int max_attempts) {
  auto rows = exec_prepared(tx, "af_claim", R"SQL(
WITH claimed AS (
  UPDATE tasks SET status = 'running', attempt = attempt + 1, worker_id = $2,
         lease_until = now() + make_interval(secs => $3),
         started_at = coalesce(started_at, now()),
         deadline_at = coalesce(deadline_at, now() + make_interval(secs => timeout_s))
  WHERE task_id = $1::uuid
    AND (status = 'dispatched'
         OR (status = 'running' AND lease_until < now() AND attempt - releases < $4))
  RETURNING *
)
SELECT t.user_id, t.text, t.model, array_to_json(t.tools)::text, t.timeout_s,
       t.schedule_timeout_s, t.max_steps, t.priority, coalesce(t.idempotency_key, ''),
       coalesce(t.batch_id, ''), t.metadata->>'device_id', t.metadata->>'time_zone',
       t.metadata->>'locale', t.attempt,
       (extract(epoch FROM t.deadline_at - now()) * 1000)::bigint, t.cancel_requested,
       (t.attempt = 1 AND now() - t.created_at > make_interval(secs => t.schedule_timeout_s)),
       coalesce(u.tier, ''), coalesce(u.tool_permission, ''),
       (extract(epoch FROM now() - t.created_at) * 1000)::bigint, coalesce(t.strategy, ''),
       coalesce(t.parent_task_id::text, ''), coalesce(t.session_id, '')
FROM claimed t LEFT JOIN user_limits u ON u.user_id = t.user_id
)SQL",
                            task_id, worker_id, lease_s, max_attempts);
  if (rows.empty()) {
    auto known = exec_prepared(tx, "af_task_exists", "SELECT 1 FROM tasks WHERE task_id = $1::uuid",
                               task_id);
    return Claim{known.empty() ? ClaimOutcome::kUnknown : ClaimOutcome::kBusyOrDone, {}};
  }
  const auto& r = rows[0];
  ClaimedTask claimed;
  TaskSpec& s = claimed.spec;
  s.task_id = task_id;
  s.user_id = r[0].as<std::string>();
  s.text = r[1].as<std::string>();
  s.model = r[2].as<std::string>();
  s.tools = tool_list(r[3]);
  s.timeout_s = r[4].as<int>();
  s.schedule_timeout_s = r[5].as<int>();
  s.max_steps = r[6].as<int>();
  s.priority = parse_priority(r[7].as<std::string>()).value_or(Priority::kInteractive);
  s.idempotency_key = r[8].as<std::string>();
  s.batch_id = r[9].as<std::string>();
  s.metadata.device_id = r[10].is_null() ? "" : r[10].as<std::string>();
  s.metadata.time_zone = r[11].is_null() ? "" : r[11].as<std::string>();
  s.metadata.locale = r[12].is_null() ? "" : r[12].as<std::string>();
  claimed.attempt = r[13].as<int>();
  claimed.remaining_ms = r[14].as<std::int64_t>();
  claimed.cancel_requested = r[15].as<bool>();
  claimed.schedule_expired = !r[16].is_null() && r[16].as<bool>();
  claimed.user_tier = r[17].as<std::string>();
  claimed.user_tool_permission = r[18].as<std::string>();
  claimed.queued_ms = r[19].as<std::int64_t>();
  s.strategy = parse_agent_strategy(r[20].as<std::string>());
  s.parent_task_id = r[21].as<std::string>();
  s.session_id = r[22].as<std::string>();
  // Checkpoints exist only from an earlier attempt: a first claim has none to read.
  if (claimed.attempt == 1)
    return Claim{ClaimOutcome::kClaimed, std::move(claimed)};
  claimed.steps = step_records(tx, task_id);
  return Claim{ClaimOutcome::kClaimed, std::move(claimed)};
}

namespace {
// The fence every worker write goes through: the row must still be ours.
bool still_ours(pqxx::work& tx, const std::string& task_id, int attempt) {
  auto rows = exec_prepared(
      tx, "af_still_ours",
      "SELECT 1 FROM tasks WHERE task_id = $1::uuid AND attempt = $2 AND status = 'running' "
      "FOR UPDATE",
      task_id, attempt);
  return !rows.empty();
}

Error lease_lost(const std::string& task_id) {
  return Error{ErrorKind::kLeaseLost, "task " + task_id + " is owned by a newer attempt"};
}
}  // namespace

Status save_model_step(pqxx::work& tx, const std::string& task_id, int attempt, int step,
                       const std::string& model_reply_json, int latency_ms,
                       const LedgerRow& ledger) {
  // One statement: the fence (the row still ours, locked), the step row, the ledger row and
  // the task's totals; nothing is written when the fence finds no row.
  auto fenced =
      exec_prepared1(tx, "af_model_step", R"SQL(
WITH ours AS (
  SELECT task_id FROM tasks
  WHERE task_id = $1::uuid AND attempt = $3::integer AND status = 'running'
  FOR UPDATE
), step_row AS (
  INSERT INTO task_steps (task_id, step, attempt, model_reply, model_latency_ms)
  SELECT task_id, $2::integer, $3::integer, $4::jsonb, $5::integer FROM ours
  RETURNING 1
), ledger_row AS (
  INSERT INTO usage_ledger (task_id, step, user_id, batch_id, model, input_tokens,
                            cached_input_tokens, output_tokens, reasoning_tokens, cost, currency)
  SELECT task_id, $2::integer, $6::text, NULLIF($7::text, ''), $8::text, $9::bigint,
         $10::bigint, $11::bigint, $12::bigint, $13::numeric, $14::text
  FROM ours
  RETURNING 1
), totals AS (
  UPDATE tasks t SET steps = $2::integer + 1, input_tokens = t.input_tokens + $9::bigint,
         cached_input_tokens = t.cached_input_tokens + $10::bigint,
         output_tokens = t.output_tokens + $11::bigint, cost = t.cost + $13::numeric,
         currency = $14::text
  FROM ours WHERE t.task_id = ours.task_id
  RETURNING 1
)
SELECT (SELECT count(*) FROM ours), (SELECT count(*) FROM step_row),
       (SELECT count(*) FROM ledger_row), (SELECT count(*) FROM totals))SQL",
                     task_id, step, attempt, model_reply_json, latency_ms, ledger.user_id,
                     ledger.batch_id, ledger.model, ledger.usage.input, ledger.usage.cached_input,
                     ledger.usage.output, ledger.usage.reasoning, ledger.cost, ledger.currency);
  if (fenced[0].as<int>() == 0)
    return lease_lost(task_id);
  return ok_status();
}

Status save_tool_results(pqxx::work& tx, const std::string& task_id, int attempt, int step,
                         const std::string& observations_json, const std::string& trace_json,
                         int executed_calls) {
  // One statement: the fence, the step's observations and trace, and the task's tool-call
  // count (only when the step row was there to update).
  auto fenced =
      exec_prepared1(tx, "af_tool_results", R"SQL(
WITH ours AS (
  SELECT task_id FROM tasks
  WHERE task_id = $1::uuid AND attempt = $5::integer AND status = 'running'
  FOR UPDATE
), updated AS (
  UPDATE task_steps s SET observations = $3::jsonb, trace = $4::jsonb, attempt = $5::integer,
         tools_done_at = now()
  FROM ours WHERE s.task_id = ours.task_id AND s.step = $2::integer
  RETURNING 1
), counted AS (
  UPDATE tasks t SET tool_calls = t.tool_calls + $6::integer
  FROM ours WHERE t.task_id = ours.task_id AND EXISTS (SELECT 1 FROM updated)
  RETURNING 1
)
SELECT (SELECT count(*) FROM ours), (SELECT count(*) FROM counted))SQL",
                     task_id, step, observations_json, trace_json, attempt, executed_calls);
  if (fenced[0].as<int>() == 0)
    return lease_lost(task_id);
  return ok_status();
}

Status save_tool_step(pqxx::work& tx, const std::string& task_id, int attempt, int step,
                      const std::string& tool_step_json) {
  // One statement, fenced like the others: the step row and the task's step count.
  auto fenced = exec_prepared1(tx, "af_tool_step", R"SQL(
WITH ours AS (
  SELECT task_id FROM tasks
  WHERE task_id = $1::uuid AND attempt = $3::integer AND status = 'running'
  FOR UPDATE
), step_row AS (
  INSERT INTO task_steps (task_id, step, attempt, model_reply)
  SELECT task_id, $2::integer, $3::integer, $4::jsonb FROM ours
  RETURNING 1
), counted AS (
  UPDATE tasks t SET steps = $2::integer + 1 FROM ours WHERE t.task_id = ours.task_id
  RETURNING 1
)
SELECT (SELECT count(*) FROM ours), (SELECT count(*) FROM step_row), (SELECT count(*) FROM counted))SQL",
                               task_id, step, attempt, tool_step_json);
  if (fenced[0].as<int>() == 0)
    return lease_lost(task_id);
  return ok_status();
}

std::optional<ParentTask> load_parent(pqxx::work& tx, const std::string& parent_id,
                                      const std::string& user_id) {
  auto rows = exec_prepared(tx, "af_parent", R"SQL(
SELECT text, coalesce(strategy, ''), status, coalesce(result_type, ''),
       coalesce(result_message, ''), coalesce(result_options::text, '[]'), coalesce(error, ''),
       array_to_json(tools)::text
FROM tasks WHERE task_id = $1::uuid AND user_id = $2)SQL",
                            parent_id, user_id);
  if (rows.empty())
    return std::nullopt;
  const auto& r = rows[0];
  ParentTask parent;
  parent.text = r[0].as<std::string>();
  parent.strategy = parse_agent_strategy(r[1].as<std::string>());
  parent.status = parse_task_status(r[2].as<std::string>()).value_or(TaskStatus::kQueued);
  if (const auto type = parse_result_type(r[3].as<std::string>())) {
    TaskResult result;
    result.type = *type;
    result.message = r[4].as<std::string>();
    rapidjson::Document options;
    options.Parse(r[5].c_str());
    if (options.IsArray()) {
      for (const auto& o : options.GetArray()) {
        if (o.IsString())
          result.options.emplace_back(o.GetString());
      }
    }
    parent.result = std::move(result);
  }
  parent.error = r[6].as<std::string>();
  parent.tools = tool_list(r[7]);
  parent.steps = step_records(tx, parent_id);
  return parent;
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

Result<std::int64_t> finish_task(pqxx::work& tx, const FinishRecord& record,
                                 const std::function<std::string(const TaskTotals&)>& event_of) {
  std::optional<std::string> result_type, message, options;
  if (record.result) {
    result_type = std::string(to_string(record.result->type));
    message = record.result->message;
    options = json_string_array(record.result->options);
  }
  // The fence and the end in one statement: the row is updated only while this attempt
  // still runs it, and the update returns the totals the result event reports.
  auto rows = exec_prepared(tx, "af_finish", R"SQL(
UPDATE tasks SET status = $3, result_type = $4, result_message = $5,
       result_options = $6::jsonb, error = NULLIF($7, ''), finished_at = now(),
       lease_until = NULL
WHERE task_id = $1::uuid AND attempt = $2::integer AND status = 'running'
RETURNING input_tokens, cached_input_tokens, output_tokens,
          to_char(cost, 'FM999999999999990.000000'), coalesce(currency, ''))SQL",
                            record.task_id, record.attempt, std::string(to_string(record.status)),
                            result_type, message, options, record.error);
  if (rows.empty())
    return lease_lost(record.task_id);
  TaskTotals totals;
  totals.usage.input = rows[0][0].as<std::int64_t>();
  totals.usage.cached_input = rows[0][1].as<std::int64_t>();
  totals.usage.output = rows[0][2].as<std::int64_t>();
  totals.cost = rows[0][3].as<std::string>();
  totals.currency = rows[0][4].as<std::string>();
  auto id = exec_prepared1(
      tx, "af_finish_outbox",
      "INSERT INTO outbox (topic, message_key, payload, traceparent, publish_after) "
      "VALUES ($1, $2, $3, NULLIF($4, ''), now() + make_interval(secs => $5)) RETURNING id",
      record.results_topic, record.user_id, event_of(totals), record.traceparent,
      record.relay_delay_s);
  return id[0].as<std::int64_t>();
}

void delete_outbox_rows(pqxx::work& tx, const std::vector<std::int64_t>& ids) {
  if (ids.empty())
    return;
  std::string array = "{";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0)
      array += ',';
    array += std::to_string(ids[i]);
  }
  array += '}';
  // A row another transaction holds is the relay's, publishing it: the relay deletes it,
  // and waiting for it here would hold every write batched with this one.
  exec_prepared0(tx, "af_outbox_delete",
                 "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE id = "
                 "ANY($1::bigint[]) FOR UPDATE SKIP LOCKED)",
                 array);
}

namespace {
// Locks the rows of (task_id, attempt) pairs ($2, JSON) still running on worker $1, in
// task_id order, the order the worker's batched writes use too, so a heartbeat, a release
// and a batch never wait on each other in a cycle.
constexpr const char* kLockHeld = R"SQL(
WITH locked AS (
  SELECT t.task_id FROM tasks t
  JOIN jsonb_to_recordset($2::jsonb) AS held(task_id uuid, attempt integer)
    ON t.task_id = held.task_id AND t.attempt = held.attempt
  WHERE t.worker_id = $1 AND t.status = 'running'
  ORDER BY t.task_id
  FOR UPDATE OF t
))SQL";

std::string held_json(const std::vector<std::pair<std::string, int>>& tasks) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartArray();
  for (const auto& [task_id, attempt] : tasks) {
    w.StartObject();
    w.Key("task_id");
    w.String(task_id.c_str());
    w.Key("attempt");
    w.Int(attempt);
    w.EndObject();
  }
  w.EndArray();
  return std::string(buffer.GetString(), buffer.GetSize());
}
}  // namespace

LeaseCheck extend_leases(pqxx::connection& c, const std::string& worker_id,
                         const std::vector<std::pair<std::string, int>>& tasks, int lease_s) {
  LeaseCheck check;
  if (tasks.empty())
    return check;
  pqxx::work tx(c);
  static const std::string kExtend = std::string(kLockHeld) + R"SQL(
UPDATE tasks t SET lease_until = now() + make_interval(secs => $3)
FROM locked WHERE t.task_id = locked.task_id
RETURNING t.task_id::text, t.cancel_requested)SQL";
  auto rows = tx.exec_params(kExtend, worker_id, held_json(tasks), lease_s);
  tx.commit();
  for (const auto& row : rows) {
    check.held.push_back(row[0].as<std::string>());
    if (row[1].as<bool>())
      check.cancelled.push_back(row[0].as<std::string>());
  }
  return check;
}

std::vector<std::string> cancel_requested(pqxx::connection& c,
                                          const std::vector<std::string>& task_ids) {
  std::vector<std::string> cancelled;
  if (task_ids.empty())
    return cancelled;
  pqxx::read_transaction tx(c);
  auto rows = tx.exec_params(
      "SELECT task_id::text FROM tasks WHERE task_id = ANY(ARRAY(SELECT "
      "jsonb_array_elements_text($1::jsonb))::uuid[]) AND cancel_requested AND status = 'running'",
      json_string_array(task_ids));
  for (const auto& row : rows)
    cancelled.push_back(row[0].as<std::string>());
  return cancelled;
}

Status release_task(pqxx::work& tx, const std::string& task_id, int attempt) {
  if (!still_ours(tx, task_id, attempt))
    return lease_lost(task_id);
  tx.exec_params0(
      "UPDATE tasks SET status = 'queued', lease_until = NULL, worker_id = NULL, "
      "releases = releases + 1 WHERE task_id = $1::uuid",
      task_id);
  return ok_status();
}

int release_tasks(pqxx::connection& c, const std::string& worker_id,
                  const std::vector<std::pair<std::string, int>>& tasks) {
  if (tasks.empty())
    return 0;
  pqxx::work tx(c);
  static const std::string kRelease = std::string(kLockHeld) + R"SQL(
UPDATE tasks t SET status = 'queued', lease_until = NULL, worker_id = NULL,
       releases = releases + 1
FROM locked WHERE t.task_id = locked.task_id
RETURNING t.task_id)SQL";
  auto rows = tx.exec_params(kRelease, worker_id, held_json(tasks));
  tx.commit();
  return static_cast<int>(rows.size());
}

// The same operations in a transaction of their own, for callers that do not batch.
namespace {
template <typename F>
auto in_transaction(pqxx::connection& c, F f) {
  pqxx::work tx(c);
  auto result = f(tx);
  tx.commit();
  return result;
}
}  // namespace

Claim claim_task(pqxx::connection& c, const std::string& task_id, const std::string& worker_id,
                 int lease_s, int max_attempts) {
  return in_transaction(
      c, [&](pqxx::work& tx) { return claim_task(tx, task_id, worker_id, lease_s, max_attempts); });
}

Status save_model_step(pqxx::connection& c, const std::string& task_id, int attempt, int step,
                       const std::string& model_reply_json, int latency_ms,
                       const LedgerRow& ledger) {
  return in_transaction(c, [&](pqxx::work& tx) {
    return save_model_step(tx, task_id, attempt, step, model_reply_json, latency_ms, ledger);
  });
}

Status save_tool_results(pqxx::connection& c, const std::string& task_id, int attempt, int step,
                         const std::string& observations_json, const std::string& trace_json,
                         int executed_calls) {
  return in_transaction(c, [&](pqxx::work& tx) {
    return save_tool_results(tx, task_id, attempt, step, observations_json, trace_json,
                             executed_calls);
  });
}

Status release_task(pqxx::connection& c, const std::string& task_id, int attempt) {
  return in_transaction(c, [&](pqxx::work& tx) { return release_task(tx, task_id, attempt); });
}

}  // namespace agentfleet::pg

namespace agentfleet::pg {

std::optional<UserOverrides> get_user_overrides(pqxx::connection& c, const std::string& user_id) {
  pqxx::read_transaction tx(c);
  auto rows = tx.exec_params(
      "SELECT coalesce(tier, ''), max_concurrency, requests_per_minute, tokens_per_minute, "
      "max_queued, monthly_budget::text, tool_permission FROM user_limits WHERE user_id = $1",
      user_id);
  if (rows.empty())
    return std::nullopt;
  UserOverrides o = read_overrides(rows[0], 0);
  o.user_id = user_id;
  return o;
}

void put_user_overrides(pqxx::connection& c, const UserOverrides& o) {
  pqxx::work tx(c);
  tx.exec_params0(R"SQL(
INSERT INTO user_limits (user_id, tier, max_concurrency, requests_per_minute, tokens_per_minute,
                         max_queued, monthly_budget, tool_permission, updated_at)
VALUES ($1, NULLIF($2, ''), $3, $4, $5, $6, $7::numeric, $8, now())
ON CONFLICT (user_id) DO UPDATE SET
  tier = EXCLUDED.tier, max_concurrency = EXCLUDED.max_concurrency,
  requests_per_minute = EXCLUDED.requests_per_minute,
  tokens_per_minute = EXCLUDED.tokens_per_minute, max_queued = EXCLUDED.max_queued,
  monthly_budget = EXCLUDED.monthly_budget, tool_permission = EXCLUDED.tool_permission,
  updated_at = now())SQL",
                  o.user_id, o.tier, o.max_concurrency, o.requests_per_minute, o.tokens_per_minute,
                  o.max_queued, o.monthly_budget, o.tool_permission);
  // The active scheduler reads limits every pass; wake it so a raise applies at once.
  tx.exec("SELECT pg_notify('agentfleet_work', '')");
  tx.commit();
}

std::string usage_json(pqxx::connection& c, const UsageQuery& q) {
  pqxx::read_transaction tx(c);
  auto row = tx.exec_params1(R"SQL(
WITH calls AS (
  SELECT model, currency, count(*) AS calls, count(DISTINCT task_id) AS tasks,
         sum(input_tokens) AS input_tokens, sum(cached_input_tokens) AS cached_input_tokens,
         sum(output_tokens) AS output_tokens, sum(cost) AS cost
  FROM usage_ledger
  WHERE ($1 = '' OR user_id = $1) AND ($2 = '' OR batch_id = $2)
    AND ($3 = '' OR called_at >= $3::timestamptz) AND ($4 = '' OR called_at < $4::timestamptz)
  GROUP BY model, currency
)
SELECT jsonb_build_object(
  'models', coalesce((SELECT jsonb_agg(jsonb_build_object(
      'model', model, 'currency', currency, 'calls', calls, 'tasks', tasks,
      'input_tokens', input_tokens, 'cached_input_tokens', cached_input_tokens,
      'output_tokens', output_tokens,
      'cost', to_char(cost, 'FM999999999999990.000000')) ORDER BY model, currency) FROM calls),
    '[]'::jsonb),
  'totals', coalesce((SELECT jsonb_agg(jsonb_build_object(
      'currency', currency, 'calls', calls, 'input_tokens', input_tokens,
      'cached_input_tokens', cached_input_tokens, 'output_tokens', output_tokens,
      'cost', to_char(cost, 'FM999999999999990.000000')) ORDER BY currency)
    FROM (SELECT currency, sum(calls) AS calls, sum(input_tokens) AS input_tokens,
                 sum(cached_input_tokens) AS cached_input_tokens,
                 sum(output_tokens) AS output_tokens, sum(cost) AS cost
          FROM calls GROUP BY currency) t), '[]'::jsonb))::text)SQL",
                             q.user_id, q.batch_id, q.from, q.to);
  return row[0].as<std::string>();
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
