#include "tools/agentctl/task_events.hpp"

#include "core/codec/json_text.hpp"
#include "tools/agentctl/json_fields.hpp"
#include "tools/agentctl/table.hpp"

namespace agentfleet::agentctl {

std::vector<SseEvent> SseParser::feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  pending_.append(bytes);
  std::size_t start = 0;
  for (std::size_t nl = pending_.find('\n'); nl != std::string::npos;
       nl = pending_.find('\n', start)) {
    std::string_view text(pending_.data() + start, nl - start);
    if (!text.empty() && text.back() == '\r')
      text.remove_suffix(1);
    line(text, out);
    start = nl + 1;
  }
  pending_.erase(0, start);
  return out;
}

void SseParser::line(std::string_view text, std::vector<SseEvent>& out) {
  if (text.empty()) {  // the end of an event
    if (any_field_)
      out.push_back(std::move(current_));
    current_ = SseEvent{};
    any_field_ = false;
    return;
  }
  if (text.front() == ':')
    return;  // a comment (heartbeat)
  const auto colon = text.find(':');
  const std::string_view field = text.substr(0, colon);
  std::string_view value =
      colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
  if (!value.empty() && value.front() == ' ')
    value.remove_prefix(1);
  if (field == "event") {
    current_.event = std::string(value);
  } else if (field == "data") {
    if (any_field_ && !current_.data.empty())
      current_.data += '\n';
    current_.data += value;
  } else if (field == "id") {
    current_.id = std::string(value);
  } else {
    return;  // retry and unknown fields
  }
  any_field_ = true;
}

namespace {
// The end of a task from a result event (live) or the task's history (replayed).
void read_end(const rapidjson::Value& end, TaskEvent& e) {
  e.status = json::str(end, "status");
  const auto& result = json::at(end, "result");
  e.result_type = json::str(result, "type");
  e.message = json::str(result, "message");
  const auto& options = json::at(result, "options");
  if (options.IsArray()) {
    for (const auto& o : options.GetArray()) {
      if (o.IsString())
        e.options.emplace_back(o.GetString(), o.GetStringLength());
    }
  }
  e.error = json::str(end, "error");
  e.error_code = json::str(end, "error_code");
  const auto& steps = json::at(end, "steps");
  e.steps = steps.IsArray()   ? static_cast<std::int64_t>(steps.Size())
            : steps.IsInt64() ? steps.GetInt64()
                              : -1;
  const auto& usage = json::at(end, "usage");
  e.input_tokens = json::num(usage, "input_tokens", 0);
  e.cached_input_tokens = json::num(usage, "cached_input_tokens", 0);
  e.output_tokens = json::num(usage, "output_tokens", 0);
  e.cost = json::str(end, "cost");
  e.currency = json::str(end, "currency");
}
}  // namespace

std::optional<TaskEvent> normalise_task_event(const SseEvent& event) {
  static const char* const kKinds[] = {"step", "delta", "action", "execution", "error", "done"};
  bool known = false;
  for (const char* k : kKinds)
    known = known || event.event == k;
  if (!known)
    return std::nullopt;
  rapidjson::Document doc;
  if (!codec::parse_json(doc, event.data) || !doc.IsObject())
    return std::nullopt;
  TaskEvent e;
  e.kind = event.event;
  // Live events are progress events: they name their kind and carry "seq".
  const bool live = doc.HasMember("event") && doc.HasMember("seq");
  const rapidjson::Value& data = json::at(doc, "data");
  if (e.kind == "done") {
    read_end(live ? data : static_cast<const rapidjson::Value&>(doc), e);
    return e;
  }
  if (e.kind == "error") {
    if (live) {
      e.text = json::str(data, "text");
      e.error_code = json::str(data, "error_code");
    } else {
      e.text = json::str(doc, "message");
      e.error_code = json::str(doc, "error_code");
      if (e.text.empty())
        e.text = json::str(doc, "code");
    }
    return e;
  }
  e.step = static_cast<int>(json::num(doc, "step", -1));
  e.tool = json::str(doc, "tool");
  if (e.kind == "delta") {
    e.text = json::str(data, "text");
  } else if (e.kind == "action") {
    e.text = data.IsObject() ? json::text_of(data) : "{}";
  } else if (e.kind == "execution") {
    e.text = json::flag(data, "ok") ? "ok" : "failed";
  }
  return e;
}

std::string format_task_event(const TaskEvent& e) {
  if (e.kind == "step")
    return "step " + std::to_string(e.step);
  if (e.kind == "delta")
    return "  text: " + single_line(e.text);
  if (e.kind == "action")
    return "  call " + e.tool + " " + single_line(e.text);
  if (e.kind == "execution")
    return "  " + e.tool + ": " + e.text;
  if (e.kind == "error")
    return "error" + (e.error_code.empty() ? std::string() : " (" + e.error_code + ")") + ": " +
           single_line(e.text);
  // done
  std::string line = "done: " + e.status;
  if (!e.result_type.empty())
    line += " " + e.result_type;
  if (!e.message.empty())
    line += ": " + single_line(e.message);
  for (std::size_t i = 0; i < e.options.size(); ++i)
    line += (i == 0 ? " [" : " | ") + single_line(e.options[i]) +
            (i + 1 == e.options.size() ? "]" : "");
  if (!e.error_code.empty() || !e.error.empty()) {
    line += " (" + e.error_code + (e.error_code.empty() || e.error.empty() ? "" : ": ") +
            single_line(e.error) + ")";
  }
  if (e.steps >= 0)
    line += "; steps " + std::to_string(e.steps);
  line += "; tokens " + std::to_string(e.input_tokens) + " in (" +
          std::to_string(e.cached_input_tokens) + " cached), " + std::to_string(e.output_tokens) +
          " out";
  if (!e.cost.empty())
    line += "; cost " + e.cost + (e.currency.empty() ? "" : " " + e.currency);
  return line;
}

}  // namespace agentfleet::agentctl
