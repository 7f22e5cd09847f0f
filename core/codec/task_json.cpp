#include "core/codec/task_json.hpp"

#include <rapidjson/document.h>

#include "core/codec/json_text.hpp"

namespace agentfleet::codec {

namespace {
void key_optional(JsonWriter& w, const char* key, const std::optional<std::string>& value) {
  w.Key(key);
  if (value)
    write_string(w, *value);
  else
    w.Null();
}

// A task's batch as its user names it (the batches row's key up to its separator).
void key_batch(JsonWriter& w, const std::optional<std::string>& key) {
  w.Key("batch_id");
  if (key)
    write_string(w, batch_name(*key));
  else
    w.Null();
}

// A task's line of its batch upload (/line/N), null for a task of no upload or of one stored
// before lines were kept (schema version 31).
void key_batch_line(JsonWriter& w, const std::optional<std::int64_t>& line,
                    const char* key = "batch_line") {
  w.Key(key);
  if (line)
    w.Int64(*line);
  else
    w.Null();
}

// JSON text Postgres wrote (a timestamp literal, an array, an object), as it is.
void key_raw(JsonWriter& w, const char* key, std::string_view json, rapidjson::Type type) {
  w.Key(key);
  w.RawValue(json.data(), json.size(), type);
}

void key_int(JsonWriter& w, const char* key, int value) {
  w.Key(key);
  w.Int(value);
}

void key_time(JsonWriter& w, const char* key, const std::string& literal) {
  key_raw(w, key, literal, literal == "null" ? rapidjson::kNullType : rapidjson::kStringType);
}

void key_result(JsonWriter& w, const TaskRow& row) {
  w.Key("result");
  if (row.result)
    write_result(w, row.result->type, row.result->message, row.result->options);
  else
    w.Null();
}

// How it ended: its result, error and error code (null while it runs).
void key_ending(JsonWriter& w, const TaskRow& row) {
  key_result(w, row);
  key_optional(w, "error", row.error);
  key_optional(w, "error_code", row.error_code);
}

void key_counts(JsonWriter& w, const TaskRow& row) {
  key_int(w, "steps", row.steps);
  key_int(w, "tool_calls", row.tool_calls);
}

void key_bill(JsonWriter& w, const TaskRow& row) {
  key_string(w, "cost", row.cost);
  key_optional(w, "currency", row.currency);
}

void key_usage(JsonWriter& w, const TaskRow& row) {
  w.Key("usage");
  write_usage(w, row.usage);
}

void key_waiting_reason(JsonWriter& w, const TaskRow& row) {
  key_optional(w, "waiting_reason",
               waiting_reason(row.status, row.parent_unfinished, row.stored_waiting_reason));
}

std::string text_of(const rapidjson::StringBuffer& buffer) {
  return std::string(buffer.GetString(), buffer.GetSize());
}
}  // namespace

std::optional<std::string> waiting_reason(std::string_view status, bool parent_unfinished,
                                          const std::optional<std::string>& stored_reason) {
  if (status != "queued")
    return std::nullopt;
  if (parent_unfinished)
    return "parent";
  return stored_reason.value_or("scheduling");
}

std::vector<std::string> parse_result_options(std::string_view json) {
  std::vector<std::string> options;
  rapidjson::Document doc;
  if (!parse_json(doc, json) || !doc.IsArray())
    return options;
  for (const auto& option : doc.GetArray()) {
    if (option.IsString())
      options.emplace_back(option.GetString(), option.GetStringLength());
  }
  return options;
}

void write_result(JsonWriter& w, std::string_view type, std::string_view message,
                  const std::vector<std::string>& options) {
  w.StartObject();
  key_string(w, "type", type);
  key_string(w, "message", message);
  w.Key("options");
  w.StartArray();
  for (const auto& option : options)
    write_string(w, option);
  w.EndArray();
  w.EndObject();
}

void write_usage(JsonWriter& w, const TokenUsage& usage) {
  w.StartObject();
  w.Key("input_tokens");
  w.Int64(usage.input);
  w.Key("cached_input_tokens");
  w.Int64(usage.cached_input);
  w.Key("output_tokens");
  w.Int64(usage.output);
  w.EndObject();
}

std::string task_json(const TaskRow& row, std::string_view trace_json) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  key_string(w, "task_id", row.task_id);
  key_string(w, "user_id", row.user_id);
  key_string(w, "text", row.text);
  key_string(w, "model", row.model);
  key_raw(w, "tools", row.tools_json,
          row.tools_json == "null" ? rapidjson::kNullType : rapidjson::kArrayType);
  key_string(w, "priority", row.priority);
  key_string(w, "status", row.status);
  key_int(w, "timeout_s", row.timeout_s);
  key_int(w, "schedule_timeout_s", row.schedule_timeout_s);
  key_int(w, "max_steps", row.max_steps);
  key_optional(w, "strategy", row.strategy);
  key_optional(w, "idempotency_key", row.idempotency_key);
  key_batch(w, row.batch_id);
  key_batch_line(w, row.batch_line);
  key_optional(w, "parent_task_id", row.parent_task_id);
  key_optional(w, "session_id", row.session_id);
  key_optional(w, "retry_of", row.retry_of);
  key_optional(w, "trace_id", row.trace_id);
  w.Key("max_tokens");
  if (row.max_tokens)
    w.Int64(*row.max_tokens);
  else
    w.Null();
  key_optional(w, "max_cost", row.max_cost);
  key_raw(w, "metadata", row.metadata_json, rapidjson::kObjectType);
  key_ending(w, row);
  w.Key("cancel_requested");
  w.Bool(row.cancel_requested);
  key_waiting_reason(w, row);
  key_int(w, "attempt", row.attempt);
  key_counts(w, row);
  key_usage(w, row);
  key_bill(w, row);
  key_time(w, "created_at", row.created_at);
  key_time(w, "dispatched_at", row.dispatched_at);
  key_time(w, "started_at", row.started_at);
  key_time(w, "finished_at", row.finished_at);
  key_raw(w, "trace", trace_json, rapidjson::kArrayType);
  w.EndObject();
  return text_of(buffer);
}

void write_task_summary(JsonWriter& w, const TaskRow& row) {
  w.StartObject();
  key_string(w, "task_id", row.task_id);
  key_string(w, "user_id", row.user_id);
  key_string(w, "text", row.text);
  key_string(w, "model", row.model);
  key_string(w, "priority", row.priority);
  key_string(w, "status", row.status);
  key_batch(w, row.batch_id);
  key_optional(w, "session_id", row.session_id);
  key_optional(w, "trace_id", row.trace_id);
  key_ending(w, row);
  key_counts(w, row);
  key_waiting_reason(w, row);
  key_bill(w, row);
  key_time(w, "created_at", row.created_at);
  key_time(w, "finished_at", row.finished_at);
  w.EndObject();
}

std::string task_summaries_json(const std::vector<TaskRow>& rows) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartArray();
  for (const TaskRow& row : rows)
    write_task_summary(w, row);
  w.EndArray();
  return text_of(buffer);
}

std::string batch_result_json(const TaskRow& row, const std::optional<RetryRef>& retry) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  key_batch_line(w, row.batch_line, "line");
  key_string(w, "text", row.text);
  key_string(w, "task_id", row.task_id);
  key_optional(w, "idempotency_key", row.idempotency_key);
  key_optional(w, "trace_id", row.trace_id);
  key_string(w, "status", row.status);
  key_ending(w, row);
  key_counts(w, row);
  key_usage(w, row);
  key_bill(w, row);
  key_time(w, "created_at", row.created_at);
  key_time(w, "finished_at", row.finished_at);
  w.Key("retried_as");
  if (retry) {
    w.StartObject();
    key_string(w, "task_id", retry->task_id);
    key_string(w, "status", retry->status);
    key_optional(w, "result_type", retry->result_type);
    w.EndObject();
  } else {
    w.Null();
  }
  w.EndObject();
  return text_of(buffer);
}

std::string task_history_json(const TaskRow& row, std::string_view steps_json) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  key_string(w, "task_id", row.task_id);
  key_string(w, "user_id", row.user_id);
  key_string(w, "status", row.status);
  key_ending(w, row);
  key_usage(w, row);
  key_bill(w, row);
  key_raw(w, "steps", steps_json, rapidjson::kArrayType);
  w.EndObject();
  return text_of(buffer);
}

}  // namespace agentfleet::codec
