#include "core/adapters/pg/task_row.hpp"

#include <stdexcept>
#include <string>

namespace agentfleet::pg {

int read_task_row(const pqxx::row& row, int first, codec::TaskRow& out) {
  // The fragment's width: a row narrower than it is a statement that does not select it
  // (libpqxx does not check the index).
  constexpr int kColumns = 41;
  if (static_cast<int>(row.size()) < first + kColumns)
    throw std::logic_error("read_task_row: " + std::to_string(row.size()) + " columns, not " +
                           std::to_string(first) + " + " + std::to_string(kColumns));
  int at = first;
  auto next = [&]() -> pqxx::field { return row[static_cast<pqxx::row::size_type>(at++)]; };
  auto text = [&] { return next().as<std::string>(); };
  auto optional_text = [&]() -> std::optional<std::string> {
    const pqxx::field f = next();
    return f.is_null() ? std::nullopt : std::optional<std::string>(f.as<std::string>());
  };
  auto json_or_null = [&] {
    const pqxx::field f = next();
    return f.is_null() ? std::string("null") : f.as<std::string>();
  };
  out.task_id = text();
  out.user_id = text();
  out.text = text();
  out.model = text();
  out.tools_json = json_or_null();
  out.priority = text();
  out.status = text();
  out.timeout_s = next().as<int>();
  out.schedule_timeout_s = next().as<int>();
  out.max_steps = next().as<int>();
  out.strategy = optional_text();
  out.idempotency_key = optional_text();
  out.batch_id = optional_text();
  out.parent_task_id = optional_text();
  out.session_id = optional_text();
  out.retry_of = optional_text();
  const pqxx::field batch_line = next();
  out.batch_line = batch_line.is_null()
                       ? std::nullopt
                       : std::optional<std::int64_t>(batch_line.as<std::int64_t>());
  out.trace_id = optional_text();
  const pqxx::field max_tokens = next();
  out.max_tokens = max_tokens.is_null()
                       ? std::nullopt
                       : std::optional<std::int64_t>(max_tokens.as<std::int64_t>());
  out.max_cost = optional_text();
  out.metadata_json = json_or_null();
  const auto result_type = optional_text();
  const auto result_message = optional_text();
  const std::string result_options = text();
  out.result = std::nullopt;
  if (result_type)
    out.result = codec::StoredResult{*result_type, result_message.value_or(""),
                                     codec::parse_result_options(result_options)};
  out.error = optional_text();
  out.error_code = optional_text();
  out.cancel_requested = next().as<bool>();
  const pqxx::field parent = next();
  out.parent_unfinished = !parent.is_null() && parent.as<bool>();
  out.stored_waiting_reason = optional_text();
  out.attempt = next().as<int>();
  out.steps = next().as<int>();
  out.tool_calls = next().as<int>();
  out.usage = TokenUsage{};
  out.usage.input = next().as<std::int64_t>();
  out.usage.cached_input = next().as<std::int64_t>();
  out.usage.output = next().as<std::int64_t>();
  out.cost = text();
  out.currency = optional_text();
  out.created_at = json_or_null();
  out.dispatched_at = json_or_null();
  out.started_at = json_or_null();
  out.finished_at = json_or_null();
  if (at != first + kColumns)
    throw std::logic_error("read_task_row reads " + std::to_string(at - first) + " columns");
  return at;
}

codec::TaskRow read_task_row(const pqxx::row& row, int first) {
  codec::TaskRow out;
  read_task_row(row, first, out);
  return out;
}

}  // namespace agentfleet::pg
