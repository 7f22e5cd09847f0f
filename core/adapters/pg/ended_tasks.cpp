#include "core/adapters/pg/ended_tasks.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <chrono>

#include "core/adapters/pg/sql.hpp"
#include "core/codec/task_codec.hpp"
#include "core/codec/task_json.hpp"

namespace agentfleet::pg {

const char* const kEndedColumns = R"SQL(
  task_id::text, user_id, coalesce(batch_id, ''), coalesce(error, ''), coalesce(error_code, ''),
  status, attempt, steps, tool_calls, input_tokens, cached_input_tokens, output_tokens,
  to_char(cost, 'FM999999999999990.000000'), coalesce(currency, 'CNY'),
  coalesce(traceparent, ''), coalesce(result_type, ''), coalesce(result_message, ''),
  coalesce(result_options, '[]'::jsonb)::text)SQL";

std::string json_string_array(const std::vector<std::string>& items) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartArray();
  for (const auto& item : items)
    w.String(item.data(), static_cast<rapidjson::SizeType>(item.size()));
  w.EndArray();
  return std::string(buffer.GetString(), buffer.GetSize());
}

void announce_ended(pqxx::work& tx, const pqxx::result& rows, const std::string& results_topic) {
  if (rows.empty())
    return;
  const std::string finished_at = codec::format_rfc3339(std::chrono::system_clock::now());
  // One INSERT for all of them: a batch cancel ends thousands of tasks at a time.
  rapidjson::StringBuffer messages;
  rapidjson::Writer<rapidjson::StringBuffer> m(messages);
  m.StartArray();
  for (const auto& r : rows) {
    codec::ResultEvent event;
    event.task_id = r[0].as<std::string>();
    event.user_id = r[1].as<std::string>();
    event.batch_id = r[2].as<std::string>();
    event.error = r[3].as<std::string>();
    event.error_code = r[4].as<std::string>();
    event.status = parse_task_status(r[5].as<std::string>()).value_or(TaskStatus::kFailed);
    event.attempt = r[6].as<int>();
    event.steps = r[7].as<int>();
    event.tool_calls = r[8].as<int>();
    event.usage.input = r[9].as<std::int64_t>();
    event.usage.cached_input = r[10].as<std::int64_t>();
    event.usage.output = r[11].as<std::int64_t>();
    event.cost = r[12].as<std::string>();
    event.currency = r[13].as<std::string>();
    if (auto type = parse_result_type(r[15].as<std::string>())) {
      TaskResult result;
      result.type = *type;
      result.message = r[16].as<std::string>();
      result.options = codec::parse_result_options(r[17].as<std::string>());
      event.result = std::move(result);
    }
    event.finished_at = finished_at;
    const std::string payload = codec::result_event_json(event);
    const std::string traceparent = r[14].as<std::string>();
    m.StartObject();
    m.Key("key");
    m.String(event.user_id.data(), static_cast<rapidjson::SizeType>(event.user_id.size()));
    m.Key("payload");
    m.String(payload.data(), static_cast<rapidjson::SizeType>(payload.size()));
    m.Key("traceparent");
    m.String(traceparent.data(), static_cast<rapidjson::SizeType>(traceparent.size()));
    m.EndObject();
  }
  m.EndArray();
  tx.exec_params0(
      "INSERT INTO outbox (topic, message_key, payload, traceparent) "
      "SELECT $1, e.key, e.payload, NULLIF(e.traceparent, '') "
      "FROM jsonb_to_recordset($2::jsonb) AS e(key text, payload text, traceparent text)",
      results_topic, std::string(messages.GetString(), messages.GetSize()));
}

std::vector<std::string> end_unstarted(pqxx::work& tx, const std::vector<std::string>& task_ids,
                                       const Ending& ending, const std::string& results_topic) {
  std::vector<std::string> ended;
  if (task_ids.empty())
    return ended;
  std::optional<std::string> result_type, result_message;
  if (ending.result) {
    result_type = std::string(to_string(ending.result->type));
    result_message = ending.result->message;
  }
  // A task handed back to the queue ran before: its running totals are folded in
  // (fold_totals, which skips a task never claimed).
  static const std::string kEnd = std::string(R"SQL(
UPDATE tasks t SET status = $2, finished_at = statement_timestamp(), lease_until = NULL,
       error = NULLIF($3, ''), error_code = NULLIF($4, ''), result_type = $5,
       result_message = $6, result_options = CASE WHEN $5::text IS NULL THEN NULL ELSE '[]'::jsonb END,
       )SQL") + sql::fragment("fold_totals") +
                                  R"SQL(
WHERE t.task_id = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb))::uuid[])
  AND t.status IN ('staged', 'queued', 'dispatched')
RETURNING )SQL" + kEndedColumns;
  auto rows = tx.exec_params(
      kEnd, json_string_array(task_ids), std::string(to_string(ending.status)), ending.error,
      std::string(to_string(ending.error_code)), result_type, result_message);
  announce_ended(tx, rows, results_topic);
  for (const auto& row : rows)
    ended.push_back(row[0].as<std::string>());
  return ended;
}

}  // namespace agentfleet::pg
