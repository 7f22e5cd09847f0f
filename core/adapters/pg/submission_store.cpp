#include "core/adapters/pg/submission_store.hpp"

#include "core/adapters/pg/ended_tasks.hpp"
#include "core/adapters/pg/sql.hpp"
#include "core/adapters/pg/task_row.hpp"
#include "core/billing/money.hpp"
#include "core/codec/task_json.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace agentfleet::pg {

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
    key_string(w, "retry_of", t.retry_of);
    w.Key("max_tokens");
    if (s.max_tokens)
      w.Int64(*s.max_tokens);
    else
      w.Null();
    // As decimal text: numeric reads it exactly.
    w.Key("max_cost");
    if (s.max_cost_micros) {
      const std::string cost = billing::format_micros(*s.max_cost_micros);
      w.String(cost.data(), static_cast<rapidjson::SizeType>(cost.size()));
    } else {
      w.Null();
    }
    if (t.staged) {
      w.Key("status");
      w.String("staged");
    }
    w.EndObject();
  }
  w.EndArray();
  return std::string(buffer.GetString(), buffer.GetSize());
}

// The task as the API shows it, read in `tx` (so a task inserted there is seen).
std::string task_json_in(pqxx::transaction_base& tx, const std::string& task_id) {
  auto rows = exec_named(tx, "task_json", task_id);
  if (rows.empty())
    return {};
  codec::TaskRow task;
  const int trace = read_task_row(rows[0], 0, task);
  return codec::task_json(task, rows[0][trace].as<std::string>());
}
}  // namespace

std::vector<std::string> insert_tasks(pqxx::work& tx, const std::vector<NewTask>& tasks) {
  std::vector<std::string> ids;
  if (tasks.empty())
    return ids;
  auto rows = exec_named(tx, "insert_tasks", tasks_json(tasks));
  ids.reserve(rows.size());
  for (const auto& row : rows)
    ids.push_back(row[0].as<std::string>());
  return ids;
}

void lock_user_queue(pqxx::work& tx, const std::string& user_id) {
  exec_named(tx, "queue_lock", user_id);
}

QueueRoom queue_room(pqxx::work& tx, const std::string& user_id, const QueueLimit& limit,
                     const std::string& sealing) {
  QueueRoom room;
  if (!limit)
    return room;
  auto overrides = exec_named(tx, "queue_overrides", user_id);
  std::string tier;
  std::optional<int> max_queued;
  if (!overrides.empty()) {
    tier = overrides[0][0].as<std::string>();
    if (!overrides[0][1].is_null())
      max_queued = overrides[0][1].as<int>();
  }
  room.max_queued = limit(tier, max_queued);
  room.queued =
      (sealing.empty() ? exec_named1(tx, "queue_count", user_id, room.max_queued)
                       : exec_named1(tx, "seal_count", user_id, room.max_queued, sealing))[0]
          .as<std::int64_t>();
  return room;
}

QueueRoom queue_room_now(pqxx::connection& c, const std::string& user_id, const QueueLimit& limit) {
  pqxx::work tx(c);
  QueueRoom room = queue_room(tx, user_id, limit);
  tx.commit();
  return room;
}

InsertResult insert_task(pqxx::connection& c, const NewTask& task, const QueueLimit& limit,
                         bool with_json, const ModelCheck& models) {
  const TaskSpec& s = task.spec;
  pqxx::work tx(c);
  // One submission of a user at a time, their overrides read on the same round trip.
  auto overrides = exec_named1(tx, "submit_lock", s.user_id);
  if (models) {
    std::string refusal = models(overrides[1].as<std::string>(), s.model);
    if (!refusal.empty()) {
      InsertResult refused;
      refused.outcome = InsertOutcome::kModelNotAllowed;
      refused.refusal = std::move(refusal);
      return refused;  // nothing written: the transaction rolls back
    }
  }
  QueueRoom room;
  if (limit) {
    room.max_queued =
        limit(overrides[1].as<std::string>(),
              overrides[2].is_null() ? std::nullopt : std::optional<int>(overrides[2].as<int>()));
  }
  // The common case in one statement, run after the lock (so its snapshot sees every
  // submission before it): the count, the insert, the answer and the scheduler's wake-up.
  auto row = exec_named1(tx, "submit", tasks_json({task}), s.user_id,
                         limit ? std::int64_t{room.max_queued} : std::int64_t{-1});
  room.queued = row[0].as<std::int64_t>();
  InsertResult result;
  if (!row[1].is_null()) {
    result.outcome = InsertOutcome::kCreated;
    result.task_id = row[1].as<std::string>();
    if (with_json)
      result.task_json = codec::task_json(read_task_row(row, 3), "[]");  // no steps yet
    tx.commit();
    return result;
  }
  // Not stored: its key names a task already (the same request, or another: a conflict), or
  // the user's queue is full.
  if (!s.idempotency_key.empty()) {
    auto existing = exec_named(tx, "idempotency", s.user_id, s.idempotency_key);
    if (!existing.empty() && existing[0][2].as<std::string>() == "staged") {
      // Held by a batch upload under way: whether the key names a task is known when the
      // upload ends (sealed, or refused and deleted). Nothing is stored meanwhile.
      result.outcome = InsertOutcome::kPending;
      result.held_by_batch = existing[0][3].as<std::string>();
      return result;
    }
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

std::optional<ParentRef> find_parent(pqxx::connection& c, const std::string& user_id,
                                     const std::string& parent_id, const std::string& session_id,
                                     const std::string& idempotency_key) {
  pqxx::read_transaction tx(c);
  auto rows = exec_text(tx, "find_parent", user_id, parent_id, session_id, idempotency_key);
  if (rows.empty())
    return std::nullopt;
  return ParentRef{rows[0][0].as<std::string>(),
                   parse_task_status(rows[0][1].as<std::string>()).value_or(TaskStatus::kQueued)};
}

std::optional<RetrySource> retry_source(pqxx::connection& c, const std::string& task_id) {
  pqxx::read_transaction tx(c);
  auto rows = exec_text(tx, "retry_source", task_id);
  if (rows.empty())
    return std::nullopt;
  return RetrySource{rows[0][0].as<std::string>(),
                     parse_task_status(rows[0][1].as<std::string>()).value_or(TaskStatus::kQueued),
                     rows[0][2].as<std::string>(), rows[0][3].as<std::string>()};
}

std::vector<TaskOwner> tasks_in_id_range(pqxx::connection& c, const std::string& first,
                                         const std::string& last, int limit) {
  pqxx::read_transaction tx(c);
  std::vector<TaskOwner> out;
  for (const auto& row : exec_text(tx, "tasks_in_id_range", first, last, limit))
    out.push_back({row[0].as<std::string>(), row[1].as<std::string>()});
  return out;
}

std::optional<std::string> task_json(pqxx::connection& c, const std::string& task_id) {
  pqxx::read_transaction tx(c);
  std::string json = task_json_in(tx, task_id);
  if (json.empty())
    return std::nullopt;
  return json;
}

std::vector<std::string> ended_of_user(pqxx::connection& c, const std::string& user_id,
                                       const std::vector<std::string>& task_ids) {
  std::string ids = "[";
  for (const std::string& id : task_ids) {
    if (ids.size() > 1)
      ids += ',';
    ids += '"' + id + '"';  // uuids: nothing to escape
  }
  ids += ']';
  pqxx::read_transaction tx(c);
  std::vector<std::string> out;
  for (const auto& row : exec_named(tx, "ended_of_user", user_id, ids))
    out.push_back(row[0].as<std::string>());
  return out;
}

std::optional<std::string> task_history_json(pqxx::connection& c, const std::string& task_id) {
  pqxx::read_transaction tx(c);
  auto rows = exec_text(tx, "task_history", task_id);
  if (rows.empty())
    return std::nullopt;
  codec::TaskRow task;
  const int steps = read_task_row(rows[0], 0, task);
  return codec::task_history_json(task, rows[0][steps].as<std::string>());
}

std::string list_tasks(pqxx::connection& c, const TaskListQuery& query) {
  pqxx::read_transaction tx(c);
  std::vector<codec::TaskRow> page;
  for (const auto& row :
       exec_text(tx, "list_tasks", query.user_id, query.status, query.limit, query.before))
    page.push_back(read_task_row(row));
  return codec::task_summaries_json(page);
}

CancelOutcome cancel_task(pqxx::connection& c, const std::string& task_id,
                          const std::string& results_topic) {
  pqxx::work tx(c);
  auto rows = exec_text(tx, "cancel_status", task_id);
  if (rows.empty())
    return CancelOutcome::kUnknown;
  const std::string status = rows[0][0].as<std::string>();
  if (status == "cancelled")
    return CancelOutcome::kAlreadyCancelled;
  if (status == "running") {
    exec_text0(tx, "cancel_request", task_id);
    tx.commit();
    return CancelOutcome::kRequested;
  }
  if (status != "queued" && status != "dispatched")
    return CancelOutcome::kAlreadyEnded;
  // Not running anywhere: a dispatch message still on its way finds it terminal and skips it.
  exec_text0(tx, "cancel_request", task_id);
  end_unstarted(tx, {task_id},
                Ending{TaskStatus::kCancelled, "cancelled before it ran", ErrorCode::kCancelled,
                       std::nullopt},
                results_topic);
  tx.commit();
  return CancelOutcome::kCancelled;
}

}  // namespace agentfleet::pg
