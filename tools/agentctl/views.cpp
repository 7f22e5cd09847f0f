#include "tools/agentctl/views.hpp"

#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>

#include "core/billing/money.hpp"
#include "core/codec/json_text.hpp"
#include "tools/agentctl/json_fields.hpp"
#include "tools/agentctl/options.hpp"
#include "tools/agentctl/outcomes.hpp"
#include "tools/agentctl/table.hpp"

namespace agentfleet::agentctl {

namespace {
std::string number_text(const rapidjson::Value& v, const char* name) {
  const auto& m = json::at(v, name);
  if (m.IsInt64())
    return std::to_string(m.GetInt64());
  if (m.IsString())
    return std::string(m.GetString(), m.GetStringLength());
  return "-";
}

// A number member (integer or not) with `decimals` places, or "-".
std::string real_text(const rapidjson::Value& v, const char* name, int decimals) {
  const auto& m = json::at(v, name);
  if (!m.IsNumber())
    return "-";
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, m.GetDouble());
  return text;
}

// "a 3, b 1" from an object of counts, in the object's order; "-" when empty.
std::string counts_text(const rapidjson::Value& counts) {
  std::string out;
  if (counts.IsObject()) {
    for (const auto& m : counts.GetObject()) {
      out += (out.empty() ? "" : ", ") + std::string(m.name.GetString()) + " " +
             (m.value.IsInt64() ? std::to_string(m.value.GetInt64()) : std::string("-"));
    }
  }
  return out.empty() ? "-" : out;
}

// "name       value\n", the value on one line; nothing for an empty value.
void field(std::string& out, std::string_view name, const std::string& value) {
  if (value.empty())
    return;
  out += pad_to_width(name, 10) + " " + single_line(value) + "\n";
}

std::string options_text(const rapidjson::Value& result) {
  std::string out;
  const auto& options = json::at(result, "options");
  if (!options.IsArray())
    return out;
  for (const auto& o : options.GetArray()) {
    if (!o.IsString())
      continue;
    if (!out.empty())
      out += " | ";
    out += o.GetString();
  }
  return out;
}

std::string result_text(const rapidjson::Value& task) {
  const auto& result = json::at(task, "result");
  const std::string type = json::str(result, "type");
  const std::string message = json::str(result, "message");
  if (type.empty())
    return {};
  return message.empty() ? type : type + ": " + message;
}

std::string tokens_text(const rapidjson::Value& usage) {
  if (!usage.IsObject())
    return {};
  return number_text(usage, "input_tokens") + " in (" + number_text(usage, "cached_input_tokens") +
         " cached), " + number_text(usage, "output_tokens") + " out";
}

// A queued task's waiting reason with what it means; "" for none.
std::string waiting_text(const std::string& reason) {
  static const std::map<std::string, std::string, std::less<>> kMeaning = {
      {"concurrency", "the user's max_concurrency tasks are running"},
      {"requests_per_minute", "the user's requests_per_minute limit"},
      {"tokens_per_minute", "the user's tokens_per_minute limit"},
      {"budget", "the monthly budget is spent; it ends quota_exceeded"},
      {"fleet_capacity", "every worker slot of the fleet is in use"},
      {"batch_share", "batch work waits behind interactive work"},
      {"pass_limit", "the scheduler's next pass admits it"},
      {"parent", "the task it follows has not ended"},
      {"scheduling", "the scheduler's next pass admits it"},
  };
  const auto it = kMeaning.find(reason);
  return it == kMeaning.end() || reason.empty() ? reason : reason + " (" + it->second + ")";
}

// A task's result message, or its error when it has none.
std::string message_or_error(const rapidjson::Value& task) {
  std::string message = json::str(json::at(task, "result"), "message");
  return message.empty() ? json::str(task, "error") : message;
}
}  // namespace

std::string format_task(const rapidjson::Value& task, bool with_trace) {
  std::string out;
  field(out, "task", json::str(task, "task_id"));
  field(out, "user", json::str(task, "user_id"));
  field(out, "status",
        json::str(task, "status") +
            (json::flag(task, "cancel_requested") && json::str(task, "status") == "running"
                 ? " (cancel requested)"
                 : ""));
  field(out, "waiting", waiting_text(json::str(task, "waiting_reason")));
  field(out, "result", result_text(task));
  field(out, "options", options_text(json::at(task, "result")));
  const std::string code = json::str(task, "error_code");
  const std::string error = json::str(task, "error");
  field(out, "error", code.empty() || error.empty() ? code + error : code + ": " + error);
  field(out, "text", json::str(task, "text"));
  std::string model = json::str(task, "model");
  if (!model.empty() && !json::str(task, "priority").empty())
    model += " (" + json::str(task, "priority") + ")";
  field(out, "model", model);
  std::string batch = json::str(task, "batch_id");
  if (!batch.empty() && json::at(task, "batch_line").IsInt64())
    batch += " (line " + number_text(task, "batch_line") + ")";
  field(out, "batch", batch);
  field(out, "retry of", json::str(task, "retry_of"));
  field(out, "trace id", json::str(task, "trace_id"));
  if (json::at(task, "steps").IsInt64()) {
    field(out, "steps",
          number_text(task, "steps") + ", tool calls " + number_text(task, "tool_calls") +
              (json::at(task, "attempt").IsInt64() ? ", attempt " + number_text(task, "attempt")
                                                   : std::string()));
  }
  // The task's own spending limits, when it has them.
  std::string limits;
  if (json::at(task, "max_tokens").IsInt64())
    limits = "max_tokens " + number_text(task, "max_tokens");
  if (const std::string max_cost = json::str(task, "max_cost"); !max_cost.empty())
    limits += (limits.empty() ? "" : ", ") + std::string("max_cost ") + max_cost;
  field(out, "limits", limits);
  field(out, "tokens", tokens_text(json::at(task, "usage")));
  const std::string cost = json::str(task, "cost");
  field(out, "cost", cost.empty() ? cost : cost + " " + json::str(task, "currency"));
  field(out, "created", json::str(task, "created_at"));
  field(out, "started", json::str(task, "started_at"));
  field(out, "finished", json::str(task, "finished_at"));
  if (!with_trace)
    return out;
  const auto& trace = json::at(task, "trace");
  if (!trace.IsArray() || trace.Empty()) {
    out += "trace: no steps\n";
    return out;
  }
  out += "trace:\n";
  for (const auto& step : trace.GetArray()) {
    std::string head = "  step " + number_text(step, "step");
    if (json::at(step, "model_latency_ms").IsInt64())
      head += "  model " + number_text(step, "model_latency_ms") + " ms";
    const auto& usage = json::at(step, "usage");
    if (usage.IsObject()) {
      head += ", tokens " + number_text(usage, "input_tokens") + " in (" +
              number_text(usage, "cached_input_tokens") + " cached), " +
              number_text(usage, "output_tokens") + " out";
    }
    out += head + "\n";
    const std::string reasoning = json::str(step, "reasoning");
    if (!reasoning.empty())
      out += "    reasoning: " + single_line(reasoning) + "\n";
    const std::string content = json::str(step, "content");
    if (!content.empty())
      out += "    text: " + single_line(content) + "\n";
    const auto& calls = json::at(step, "tool_calls");
    if (!calls.IsArray())
      continue;
    for (const auto& call : calls.GetArray()) {
      std::string line = "    " + json::str(call, "tool") + " " +
                         single_line(json::str(call, "arguments")) + " -> " +
                         json::str(call, "status");
      if (json::at(call, "http_status").IsInt64())
        line += " " + number_text(call, "http_status");
      if (json::at(call, "latency_ms").IsInt64())
        line += ", " + number_text(call, "latency_ms") + " ms";
      out += line + "\n";
      const std::string result = json::str(call, "result");
      if (!result.empty())
        out += "      " + truncate_to_width(single_line(result), 160) + "\n";
    }
  }
  return out;
}

std::string format_task_list(const rapidjson::Value& tasks) {
  Table table({{"TASK"},
               {"USER"},
               {"STATUS"},
               {"RESULT"},
               {"ERROR"},
               {"COST", true},
               {"CREATED"},
               {"TEXT", false, 50}});
  if (tasks.IsArray()) {
    for (const auto& t : tasks.GetArray()) {
      const std::string waiting = json::str(t, "waiting_reason");
      const std::string currency = json::str(t, "currency");
      table.add_row({json::str(t, "task_id"), json::str(t, "user_id"),
                     json::str(t, "status") + (waiting.empty() ? "" : " (" + waiting + ")"),
                     json::str(json::at(t, "result"), "type"), json::str(t, "error_code"),
                     currency.empty() ? std::string("-") : json::str(t, "cost") + " " + currency,
                     json::str(t, "created_at"), json::str(t, "text")});
    }
  }
  return table.render();
}

std::string format_batch_list(const rapidjson::Value& batches) {
  Table table({{"BATCH", false, 40},
               {"USER"},
               {"CREATED"},
               {"ENDED", true},
               {"TOTAL", true},
               {"SUCCEEDED", true},
               {"NOT SUCCEEDED", true},
               {"RESULTS"}});
  if (batches.IsArray()) {
    for (const auto& b : batches.GetArray()) {
      const auto& counts = json::at(b, "counts");
      const auto& types = json::at(b, "result_types");
      const std::int64_t not_succeeded = json::num(counts, "failed", 0) +
                                         json::num(counts, "timed_out", 0) +
                                         json::num(counts, "cancelled", 0);
      // A task that succeeded may have answered with an error or a question: the result
      // types say so beside the counts.
      table.add_row(
          {json::str(b, "batch_id") + (json::at(b, "cancelled").IsTrue() ? " (cancelled)" : ""),
           json::str(b, "user_id"), json::str(b, "created_at"), number_text(b, "ended"),
           number_text(b, "total"), number_text(counts, "succeeded"), std::to_string(not_succeeded),
           "action_completed " + number_text(types, "action_completed") + ", need_clarification " +
               number_text(types, "need_clarification") + ", error " +
               number_text(types, "error")});
    }
  }
  return table.render();
}

std::string format_result_event(std::string_view text) {
  rapidjson::Document doc;
  if (!codec::parse_json(doc, text) || !doc.IsObject() || !doc.HasMember("task_id") ||
      !doc.HasMember("status")) {
    return {};
  }
  const auto& result = json::at(doc, "result");
  const std::string message = message_or_error(doc);
  const std::string cost = json::str(doc, "cost");
  // Columns line up while the values are as wide as usual; nothing is cut but the message.
  const std::string cells[] = {json::str(doc, "finished_at"),
                               json::str(doc, "task_id"),
                               json::str(doc, "user_id"),
                               json::str(doc, "status"),
                               json::str(result, "type").empty() ? "-" : json::str(result, "type"),
                               "steps " + number_text(doc, "steps"),
                               cost.empty() ? "-" : cost + " " + json::str(doc, "currency")};
  const std::size_t widths[] = {24, 36, 12, 9, 18, 8, 12};
  std::string line;
  for (std::size_t i = 0; i < std::size(cells); ++i)
    line += pad_at_least(single_line(cells[i]), widths[i]) + "  ";
  return line + single_line(message) + "\n";
}

std::string format_usage(const rapidjson::Value& models, const rapidjson::Value& totals) {
  bool with_tasks = false;
  if (models.IsArray()) {
    for (const auto& m : models.GetArray())
      with_tasks = with_tasks || json::at(m, "tasks").IsInt64();
  }
  std::vector<Column> columns = {{"MODEL"}, {"CURRENCY"}, {"CALLS", true}};
  if (with_tasks)
    columns.push_back({"TASKS", true});
  for (const char* title : {"INPUT", "CACHED INPUT", "OUTPUT", "COST"})
    columns.push_back({title, true});
  Table table(columns);
  struct Sum {
    std::int64_t calls = 0, input = 0, cached = 0, output = 0, micros = 0;
  };
  std::map<std::string, Sum> sums;  // by currency, when the API gave no totals
  if (models.IsArray()) {
    for (const auto& m : models.GetArray()) {
      std::vector<std::string> row = {json::str(m, "model"), json::str(m, "currency"),
                                      number_text(m, "calls")};
      if (with_tasks)
        row.push_back(number_text(m, "tasks"));
      for (const char* name : {"input_tokens", "cached_input_tokens", "output_tokens", "cost"})
        row.push_back(number_text(m, name));
      table.add_row(std::move(row));
      Sum& s = sums[json::str(m, "currency")];
      s.calls += json::num(m, "calls", 0);
      s.input += json::num(m, "input_tokens", 0);
      s.cached += json::num(m, "cached_input_tokens", 0);
      s.output += json::num(m, "output_tokens", 0);
      s.micros += billing::parse_decimal_micros(json::str(m, "cost")).value_or(0);
    }
  }
  auto total_row = [&](const std::string& currency, const std::string& calls,
                       const std::string& input, const std::string& cached,
                       const std::string& output, const std::string& cost) {
    std::vector<std::string> row = {"TOTAL", currency, calls};
    if (with_tasks)
      row.push_back("");
    for (const auto& cell : {input, cached, output, cost})
      row.push_back(cell);
    table.add_row(std::move(row));
  };
  if (totals.IsArray()) {
    for (const auto& t : totals.GetArray()) {
      total_row(json::str(t, "currency"), number_text(t, "calls"), number_text(t, "input_tokens"),
                number_text(t, "cached_input_tokens"), number_text(t, "output_tokens"),
                number_text(t, "cost"));
    }
  } else {
    for (const auto& [currency, s] : sums) {
      total_row(currency, std::to_string(s.calls), std::to_string(s.input),
                std::to_string(s.cached), std::to_string(s.output),
                billing::format_micros(s.micros));
    }
  }
  if (table.rows() == 0)
    return "no usage\n";
  // What the figures above hold that no task step bills (docs/billing.md), when there is any.
  std::string notes;
  if (totals.IsArray()) {
    for (const auto& t : totals.GetArray()) {
      const std::int64_t lost = json::num(t, "unreconciled_calls", 0);
      const std::int64_t estimated = json::num(t, "estimated_calls", 0);
      if (lost > 0) {
        notes += "of which unreconciled (answers lost to their tasks): " + std::to_string(lost) +
                 " calls, " + json::str(t, "unreconciled_cost") + " " + json::str(t, "currency") +
                 "\n";
      }
      if (estimated > 0) {
        notes += "of which billed from an estimate (no usage from the provider): " +
                 std::to_string(estimated) + " calls (" + json::str(t, "currency") + ")\n";
      }
    }
  }
  return table.render() + notes;
}

namespace {
constexpr const char* kLimitNames[] = {"max_concurrency",   "requests_per_minute",
                                       "tokens_per_minute", "max_queued",
                                       "monthly_budget",    "tool_permission"};
}

std::string format_limits(const rapidjson::Value& limits) {
  std::string out =
      "user " + json::str(limits, "user_id") + ", tier " + json::str(limits, "tier") +
      (json::str(json::at(limits, "overrides"), "tier").empty() ? "\n" : " (override)\n");
  Table table({{"LIMIT"}, {"EFFECTIVE", true}, {"OVERRIDE", true}});
  const auto& effective = json::at(limits, "effective");
  const auto& overrides = json::at(limits, "overrides");
  for (const char* name : kLimitNames) {
    table.add_row({name, number_text(effective, name),
                   json::at(overrides, name).IsNull() ? "-" : number_text(overrides, name)});
  }
  if (json::at(effective, "weight").IsInt64())
    table.add_row({"weight", number_text(effective, "weight"), "-"});
  return out + table.render();
}

std::string limits_put_body(const rapidjson::Value& current,
                            const std::map<std::string, std::string>& set,
                            const std::vector<std::string>& unset, bool replace) {
  auto known = [](const std::string& name) {
    if (name == "tier")
      return true;
    for (const char* n : kLimitNames) {
      if (name == n)
        return true;
    }
    return false;
  };
  // name -> JSON text of the value
  std::map<std::string, std::string> body;
  const auto& overrides = json::at(current, "overrides");
  if (!replace && overrides.IsObject()) {
    for (const auto& m : overrides.GetObject()) {
      const std::string name(m.name.GetString(), m.name.GetStringLength());
      if (known(name))
        body[name] = json::text_of(m.value);
    }
  }
  for (const auto& name : unset) {
    if (!known(name)) {
      throw UsageError("--unset " + name +
                       ": not a limit (tier, max_concurrency, requests_per_minute, "
                       "tokens_per_minute, max_queued, monthly_budget, tool_permission)");
    }
    body.erase(name);
  }
  for (const auto& [name, value] : set) {
    if (name == "tier" || name == "tool_permission") {
      body[name] = json::quoted(value);
    } else if (name == "monthly_budget") {
      if (!billing::parse_decimal_micros(value))
        throw UsageError("--monthly-budget needs a decimal amount such as 100.50, not '" + value +
                         "'");
      body[name] = json::quoted(value);
    } else if (name == "tokens_per_minute") {
      body[name] = std::to_string(parse_integer(value, 1, INT64_MAX, "--tokens-per-minute"));
    } else if (known(name)) {
      std::string flag = "--" + name;
      for (char& c : flag) {
        if (c == '_')
          c = '-';
      }
      body[name] = std::to_string(parse_integer(value, 1, 2147483647, flag));
    } else {
      throw UsageError("not a limit: " + name);
    }
  }
  std::string out = "{";
  for (const auto& [name, value] : body) {
    if (out.size() > 1)
      out += ",";
    out += json::quoted(name) + ":" + value;
  }
  return out + "}";
}

std::string format_batch(const rapidjson::Value& batch) {
  std::string out;
  field(out, "batch", json::str(batch, "batch_id"));
  field(out, "user", json::str(batch, "user_id"));
  field(out, "priority", json::str(batch, "priority"));
  field(out, "created", json::str(batch, "created_at"));
  if (json::flag(batch, "cancelled"))
    field(out, "cancelled",
          json::str(batch, "cancelled_at").empty() ? std::string("yes")
                                                   : json::str(batch, "cancelled_at"));
  field(out, "ended", number_text(batch, "ended") + " of " + number_text(batch, "total"));
  const auto& counts = json::at(batch, "counts");
  std::string by_status;
  for (const char* s :
       {"queued", "dispatched", "running", "succeeded", "failed", "timed_out", "cancelled"}) {
    by_status += (by_status.empty() ? "" : ", ") + std::string(s) + " " + number_text(counts, s);
  }
  field(out, "status", by_status);
  const auto& types = json::at(batch, "result_types");
  std::string by_type;
  for (const char* t : {"action_completed", "need_clarification", "error"})
    by_type += (by_type.empty() ? "" : ", ") + std::string(t) + " " + number_text(types, t);
  field(out, "results", by_type);
  field(out, "waiting", waiting_text(json::str(batch, "waiting_reason")));
  static const rapidjson::Value kNoTotals;
  const auto& usage = json::at(batch, "usage");
  if (usage.IsArray() && !usage.Empty())
    out += "usage:\n" + format_usage(usage, kNoTotals);
  return out;
}

namespace {
const std::vector<std::size_t> kResultWidths = {36, 6, 24, 9, 18, 5, 16, 0};
const std::vector<bool> kResultRight = {false, true, false, false, false, true, true, false};
}  // namespace

std::string batch_results_header() {
  return fixed_row(
      {"TASK", "LINE", "IDEMPOTENCY KEY", "STATUS", "RESULT", "STEPS", "COST", "MESSAGE"},
      kResultWidths, kResultRight);
}

std::string format_batch_result(std::string_view line) {
  rapidjson::Document doc;
  if (!codec::parse_json(doc, line) || !doc.IsObject())
    return {};
  const auto& result = json::at(doc, "result");
  std::string message = message_or_error(doc);
  // A failed task the batch's retry ran again: where its new outcome is.
  if (const auto& retry = json::at(doc, "retried_as"); retry.IsObject()) {
    message = "retried as " + json::str(retry, "task_id") + " (" + json::str(retry, "status") +
              ")" + (message.empty() ? "" : "; " + message);
  }
  const std::string cost = json::str(doc, "cost");
  const std::string line_number = json::at(doc, "line").IsInt64() ? number_text(doc, "line") : "-";
  return fixed_row({json::str(doc, "task_id"), line_number, json::str(doc, "idempotency_key"),
                    json::str(doc, "status"), json::str(result, "type"), number_text(doc, "steps"),
                    cost.empty() ? "-" : cost + " " + json::str(doc, "currency"), message},
                   kResultWidths, kResultRight);
}

std::string format_stats(const rapidjson::Value& stats) {
  std::string out;
  const std::string user = json::str(stats, "user_id");
  std::string window = json::str(stats, "from");
  if (!json::str(stats, "to").empty())
    window += (window.empty() ? "until " : " to ") + json::str(stats, "to");
  field(out, "user", user.empty() ? std::string("every user") : user);
  field(out, "window", window.empty() ? std::string("every task") : window);
  field(out, "tasks", number_text(stats, "tasks") + " (" + number_text(stats, "ended") + " ended)");
  const auto& rate = json::at(stats, "success_rate");
  field(out, "succeeded",
        rate.IsNumber() ? real_text(stats, "success_rate", 4) + " of those ended" : "-");
  // A task can succeed with an error answer or a question back: done as asked says so.
  const auto& done = json::at(stats, "action_completed_rate");
  field(out, "done",
        done.IsNumber()
            ? real_text(stats, "action_completed_rate", 4) + " of those ended did as asked"
            : "-");
  field(out, "status", counts_text(json::at(stats, "by_status")));
  field(out, "results", counts_text(json::at(stats, "by_result_type")));
  field(out, "strategy", counts_text(json::at(stats, "by_strategy")));
  const auto& duration = json::at(stats, "duration_s");
  field(out, "duration",
        "avg " + real_text(duration, "avg", 3) + " s, p95 " + real_text(duration, "p95", 3) + " s");
  field(out, "steps",
        "avg " + real_text(stats, "avg_steps", 2) + ", tool calls avg " +
            real_text(stats, "avg_tool_calls", 2));
  const auto& tokens = json::at(stats, "tokens");
  field(out, "tokens",
        number_text(tokens, "input") + " in (" + number_text(tokens, "cached_input") +
            " cached), " + number_text(tokens, "output") + " out");
  std::string cost;
  const auto& costs = json::at(stats, "cost");
  if (costs.IsArray()) {
    for (const auto& c : costs.GetArray())
      cost += (cost.empty() ? "" : ", ") + json::str(c, "cost") + " " + json::str(c, "currency");
  }
  field(out, "cost", cost.empty() ? std::string("-") : cost);
  return out;
}

std::string format_tools(const rapidjson::Value& tools, bool with_descriptions) {
  bool with_permitted = false;
  if (tools.IsArray()) {
    for (const auto& t : tools.GetArray())
      with_permitted = with_permitted || json::at(t, "permitted").IsBool();
  }
  std::vector<Column> columns = {
      {"NAME"}, {"CATEGORY"}, {"PERMISSION"}, {"IDEMPOTENT"}, {"TIMEOUT", true}};
  if (with_permitted)
    columns.push_back({"PERMITTED"});
  if (with_descriptions)
    columns.push_back({"DESCRIPTION", false, 80});
  Table table(columns);
  if (tools.IsArray()) {
    for (const auto& t : tools.GetArray()) {
      std::vector<std::string> row = {
          json::str(t, "name"), json::str(t, "category"), json::str(t, "permission"),
          json::flag(t, "idempotent") ? "yes" : "no", number_text(t, "timeout_s") + " s"};
      if (with_permitted)
        row.push_back(json::flag(t, "permitted") ? "yes" : "no");
      if (with_descriptions)
        row.push_back(json::str(t, "description"));
      table.add_row(std::move(row));
    }
  }
  return table.render();
}

std::string format_plan(const rapidjson::Value& plan) {
  std::string out;
  field(out, "task", json::str(plan, "task_id"));
  field(out, "status", json::str(plan, "status"));
  const auto& body = json::at(plan, "plan");
  if (!body.IsObject()) {
    out += "the plan is not made yet: `agentctl wait " + json::str(plan, "task_id") +
           "` waits for it\n";
    return out;
  }
  Table table({{"STEP", true}, {"TOOL"}, {"DESCRIPTION", false, 60}, {"NEEDS"}, {"EST", true}});
  const auto& steps = json::at(body, "steps");
  if (steps.IsArray()) {
    for (const auto& step : steps.GetArray()) {
      std::string needs;
      const auto& deps = json::at(step, "dependencies");
      if (deps.IsArray()) {
        for (const auto& d : deps.GetArray())
          needs += (needs.empty() ? "" : ",") + (d.IsInt64() ? std::to_string(d.GetInt64()) : "?");
      }
      table.add_row({number_text(step, "step_number"), json::str(step, "tool"),
                     json::str(step, "description"), needs.empty() ? "-" : needs,
                     real_text(step, "estimated_time_s", 1) + " s"});
    }
  }
  out += table.render();
  field(out, "estimate",
        real_text(body, "estimated_total_time_s", 1) + " s for " +
            number_text(body, "total_steps") + " steps");
  field(out, "tokens", tokens_text(json::at(plan, "usage")));
  field(out, "cost", json::str(plan, "cost") + " " + json::str(plan, "currency"));
  return out;
}

}  // namespace agentfleet::agentctl
