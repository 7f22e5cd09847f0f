#include "core/adapters/pg/submission_store.hpp"

#include "core/adapters/pg/ended_tasks.hpp"
#include "core/adapters/pg/sql.hpp"
#include "core/adapters/pg/task_row.hpp"
#include "core/billing/money.hpp"
#include "core/codec/task_json.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <stdexcept>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace agentfleet::pg {

namespace {
using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void key_string(Writer& w, const char* key, std::string_view value) {
  w.Key(key);
  w.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
}

// The tasks of a slice as a JSON array of objects, the input of jsonb_to_recordset; a task's
// parent is `parents[i]` when that is not empty (chained_parents), else its own.
std::string tasks_json(const std::vector<NewTask>& tasks,
                       const std::vector<std::string>& parents = {}) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartArray();
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const NewTask& t = tasks[i];
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
    key_string(w, "parent_task_id",
               i < parents.size() && !parents[i].empty() ? parents[i] : s.parent_task_id);
    key_string(w, "session_id", s.session_id);
    key_string(w, "retry_of", t.retry_of);
    if (t.batch_line > 0) {
      w.Key("batch_line");
      w.Int64(t.batch_line);
    }
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

std::vector<int> chained_parents(const std::vector<NewTask>& tasks) {
  std::vector<int> parents(tasks.size(), -1);
  std::unordered_map<std::string_view, int> last;  // (user, session) -> the task's index
  std::vector<std::string> keys(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const TaskSpec& s = tasks[i].spec;
    if (s.session_id.empty())
      continue;
    // The user and the session, unambiguous (a user id holds no NUL).
    keys[i] = s.user_id + '\0' + s.session_id;
    auto found = last.find(keys[i]);
    if (found != last.end() && s.parent_task_id.empty())
      parents[i] = found->second;
    last[keys[i]] = static_cast<int>(i);
  }
  return parents;
}

std::vector<std::string> insert_tasks(pqxx::work& tx, const std::vector<NewTask>& tasks) {
  std::vector<std::string> ids;
  if (tasks.empty())
    return ids;
  const std::vector<int> chained = chained_parents(tasks);
  std::vector<std::string> parents(tasks.size());
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (chained[i] >= 0)
      parents[i] = tasks[static_cast<std::size_t>(chained[i])].spec.task_id;
  }
  auto rows = exec_named(tx, "insert_tasks", tasks_json(tasks, parents));
  ids.reserve(rows.size());
  for (const auto& row : rows)
    ids.push_back(row[0].as<std::string>());
  if (ids.size() == tasks.size())
    return ids;
  // A task chained to one the insert skipped (its idempotency key names a task already, a
  // duplicate) follows the task that key names instead.
  std::unordered_set<std::string_view> inserted(ids.begin(), ids.end());
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartArray();
  bool any = false;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (chained[i] < 0 || !inserted.count(tasks[i].spec.task_id))
      continue;
    const NewTask& parent = tasks[static_cast<std::size_t>(chained[i])];
    if (inserted.count(parent.spec.task_id) || parent.spec.idempotency_key.empty())
      continue;
    w.StartObject();
    key_string(w, "child", tasks[i].spec.task_id);
    key_string(w, "key", parent.spec.idempotency_key);
    w.EndObject();
    any = true;
  }
  w.EndArray();
  if (any)
    exec_named(tx, "follow_duplicates", tasks.front().spec.user_id,
               std::string(buffer.GetString(), buffer.GetSize()));
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

KnownOverrides::Overrides KnownOverrides::get(const std::string& user_id) const {
  std::lock_guard lock(mutex_);
  const auto it = known_.find(user_id);
  return it == known_.end() ? Overrides{} : it->second;
}

void KnownOverrides::put(const std::string& user_id, Overrides overrides) {
  std::lock_guard lock(mutex_);
  if (overrides == Overrides{}) {
    known_.erase(user_id);
    return;
  }
  if (known_.size() >= capacity_ && !known_.count(user_id))
    known_.clear();
  known_[user_id] = std::move(overrides);
}

namespace {
KnownOverrides::Overrides overrides_in(const pqxx::row& row, int at) {
  return {row[at].as<std::string>(),
          row[at + 1].is_null() ? std::nullopt : std::optional<int>(row[at + 1].as<int>())};
}

// The user's overrides now, read on their own (a model refused on what was believed).
KnownOverrides::Overrides read_overrides_now(pqxx::connection& c, const std::string& user_id) {
  pqxx::nontransaction tx(c);
  auto rows = exec_named(tx, "queue_overrides", user_id);
  return rows.empty() ? KnownOverrides::Overrides{} : overrides_in(rows[0], 0);
}

// The answer when the key names a task already (`row`: submit's answer, nothing stored).
std::optional<InsertResult> existing_task(pqxx::connection& c, const pqxx::row& row,
                                          const NewTask& task, bool with_json) {
  if (row[4].is_null())
    return std::nullopt;
  InsertResult result;
  if (row[6].as<std::string>() == "staged") {
    // Held by a batch upload under way: whether the key names a task is known when the
    // upload ends (sealed, or refused and deleted). Nothing is stored meanwhile.
    result.outcome = InsertOutcome::kPending;
    result.held_by_batch = std::string(batch_name(row[7].as<std::string>()));
    return result;
  }
  result.task_id = row[4].as<std::string>();
  result.outcome = row[5].as<std::string>() == task.canonical ? InsertOutcome::kExisting
                                                              : InsertOutcome::kConflict;
  if (with_json) {
    pqxx::read_transaction tx(c);
    result.task_json = task_json_in(tx, result.task_id);
  }
  return result;
}
}  // namespace

InsertResult insert_task(pqxx::connection& c, const NewTask& task, const QueueLimit& limit,
                         bool with_json, const ModelCheck& models, KnownOverrides* known) {
  const TaskSpec& s = task.spec;
  KnownOverrides::Overrides believed = known ? known->get(s.user_id) : KnownOverrides::Overrides{};
  bool checked = false;  // `believed` was read from the store, not remembered
  // Three tries at most: a belief is corrected by each answer, so a second try fails only
  // when the overrides changed again in between.
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (models) {
      std::string refusal = models(believed.tier, s.model);
      if (!refusal.empty() && !checked) {
        // Refused on a belief: on the overrides as they are now (a change racing this
        // submission applies from the next one, as it always has).
        const KnownOverrides::Overrides now = read_overrides_now(c, s.user_id);
        checked = true;
        if (known)
          known->put(s.user_id, now);
        if (!(now == believed)) {
          believed = now;
          continue;
        }
      }
      if (!refusal.empty()) {
        InsertResult refused;
        refused.outcome = InsertOutcome::kModelNotAllowed;
        refused.refusal = std::move(refusal);
        return refused;  // nothing written
      }
    }
    const int max_queued = limit ? limit(believed.tier, believed.max_queued) : 0;
    // One autocommitted statement; the row outlives its (non)transaction. max_queued as text
    // ('' for none).
    const pqxx::row row = [&] {
      pqxx::nontransaction tx(c);
      return exec_named1(tx, "submit", tasks_json({task}), s.user_id, believed.tier,
                         believed.max_queued ? std::to_string(*believed.max_queued) : std::string(),
                         limit ? std::int64_t{max_queued} : std::int64_t{-1});
    }();
    const KnownOverrides::Overrides found = overrides_in(row, 0);
    if (!(found == believed)) {
      // Nothing stored: the limit and the model check follow the overrides as they are.
      if (known)
        known->put(s.user_id, found);
      believed = found;
      checked = true;
      continue;
    }
    InsertResult result;
    if (!row[3].is_null()) {
      result.outcome = InsertOutcome::kCreated;
      result.task_id = row[3].as<std::string>();
      if (with_json)
        result.task_json = codec::task_json(read_task_row(row, 8), "[]");  // no steps yet
      return result;
    }
    // Not stored: its key names a task already (the same request, or another: a conflict), or
    // the user's queue is full.
    if (auto existing = existing_task(c, row, task, with_json))
      return std::move(*existing);
    result.outcome = InsertOutcome::kQueueFull;
    result.room = QueueRoom{row[2].as<std::int64_t>(), max_queued};
    return result;
  }
  throw std::runtime_error("user " + s.user_id +
                           "'s limits changed during the submission, three times: try again");
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

void record_replay(pqxx::connection& c, const ReplayRecord& r) {
  pqxx::work tx(c);
  exec_text0(tx, "record_replay", r.letter_topic, r.letter_partition, r.letter_offset,
             r.replay_topic, r.replay_partition, r.replay_offset, r.task_id, r.created);
  tx.commit();
}

std::map<LetterAt, LetterReplays> letter_replays(pqxx::connection& c,
                                                 const std::string& letter_topic,
                                                 const std::vector<LetterAt>& letters) {
  std::map<LetterAt, LetterReplays> out;
  if (letters.empty())
    return out;
  std::string partitions = "{";
  std::string offsets = "{";
  for (const auto& [partition, offset] : letters) {
    if (partitions.size() > 1) {
      partitions += ',';
      offsets += ',';
    }
    partitions += std::to_string(partition);
    offsets += std::to_string(offset);
  }
  partitions += '}';
  offsets += '}';
  pqxx::read_transaction tx(c);
  for (const auto& row : exec_text(tx, "letter_replays", letter_topic, partitions, offsets)) {
    out[{row[0].as<std::int32_t>(), row[1].as<std::int64_t>()}] = LetterReplays{
        row[2].as<std::string>(), row[3].as<std::string>(), row[4].as<int>(), row[5].as<int>()};
  }
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

TaskListPage list_tasks(pqxx::connection& c, const TaskListQuery& query) {
  pqxx::read_transaction tx(c);
  const std::string users = json_string_array(query.users);
  std::vector<codec::TaskRow> page;
  for (const auto& row :
       exec_text(tx, "list_tasks", query.user_id, users, query.status, query.batch_key,
                 query.result_type, query.error_code, query.model, query.session_id, query.text,
                 query.since, query.until, query.before, query.limit))
    page.push_back(read_task_row(row));
  TaskListPage out;
  if (!page.empty() && static_cast<int>(page.size()) == query.limit)
    out.last = page.back().task_id;
  out.tasks = codec::task_summaries_json(page);
  if (query.count_up_to > 0) {
    out.count = exec_text1(tx, "count_tasks", query.user_id, users, query.status, query.batch_key,
                           query.result_type, query.error_code, query.model, query.session_id,
                           query.text, query.since, query.until, query.count_up_to)[0]
                    .as<std::int64_t>();
  }
  return out;
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
