#include "core/codec/task_codec.hpp"

#include <cctype>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "core/billing/money.hpp"
#include "core/codec/json_writer.hpp"
#include "core/codec/task_json.hpp"

namespace agentfleet::codec {

namespace {
using Writer = JsonWriter;

std::string get_string(const rapidjson::Value& object, const char* name) {
  auto it = object.FindMember(name);
  if (it == object.MemberEnd() || !it->value.IsString())
    return {};
  return std::string(it->value.GetString(), it->value.GetStringLength());
}

int get_int(const rapidjson::Value& object, const char* name, int fallback) {
  auto it = object.FindMember(name);
  return it != object.MemberEnd() && it->value.IsInt() ? it->value.GetInt() : fallback;
}
}  // namespace

std::size_t count_code_points(std::string_view utf8) {
  std::size_t count = 0;
  for (unsigned char c : utf8) {
    if ((c & 0xC0) != 0x80)
      ++count;
  }
  return count;
}

std::string format_rfc3339(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  const auto ms = time_point_cast<milliseconds>(t);
  const auto day = floor<days>(ms);
  const year_month_day ymd{day};
  const hh_mm_ss hms{ms - day};
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%04d-%02u-%02uT%02ld:%02ld:%02ld.%03ldZ",
                static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()),
                static_cast<unsigned>(ymd.day()), static_cast<long>(hms.hours().count()),
                static_cast<long>(hms.minutes().count()), static_cast<long>(hms.seconds().count()),
                static_cast<long>(hms.subseconds().count()));
  return buf;
}

bool looks_like_timestamp(std::string_view text) {
  if (text.size() < 10 || text.size() > 40)
    return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool digit = c >= '0' && c <= '9';
    if (i < 10) {
      if ((i == 4 || i == 7) ? c != '-' : !digit)
        return false;
    } else if (i == 10) {
      if (c != 'T' && c != 't' && c != ' ')
        return false;
    } else if (!(digit || c == ':' || c == '.' || c == '+' || c == '-' || c == 'Z' || c == 'z')) {
      return false;
    }
  }
  return true;
}

namespace {
// The path of the first string holding a NUL character (legal JSON as \u0000, but neither
// Postgres nor the HTTP headers tools receive can carry it). The schema bounds the depth.
std::optional<std::string> nul_path(const rapidjson::Value& value, const std::string& path) {
  if (value.IsString()) {
    std::string_view text(value.GetString(), value.GetStringLength());
    if (text.find('\0') != std::string_view::npos)
      return path.empty() ? "/" : path;
  } else if (value.IsObject()) {
    for (const auto& member : value.GetObject()) {
      std::string key(member.name.GetString(), member.name.GetStringLength());
      if (key.find('\0') != std::string::npos)
        return path + "/";
      if (auto found = nul_path(member.value, path + "/" + json_pointer_token(key)))
        return found;
    }
  } else if (value.IsArray()) {
    for (rapidjson::SizeType i = 0; i < value.Size(); ++i) {
      if (auto found = nul_path(value[i], path + "/" + std::to_string(i)))
        return found;
    }
  }
  return std::nullopt;
}
}  // namespace

std::variant<Submission, SchemaViolation> parse_submission(std::string_view json,
                                                           const SubmissionDefaults& defaults) {
  rapidjson::Document doc;
  if (auto violation = parse_json_text(json, doc))
    return *violation;
  if (!defaults.user_id.empty() && doc.IsObject() && !doc.HasMember("user_id")) {
    doc.AddMember("user_id",
                  rapidjson::Value(defaults.user_id.data(),
                                   static_cast<rapidjson::SizeType>(defaults.user_id.size()),
                                   doc.GetAllocator()),
                  doc.GetAllocator());
  }
  if (auto violation = validate(doc, "task_submission.schema.json"))
    return *violation;
  if (auto path = nul_path(doc, "")) {
    return SchemaViolation{*path, "must not contain NUL characters"};
  }
  Submission submission;
  TaskSpec& spec = submission.spec;
  spec.user_id = get_string(doc, "user_id");
  spec.text = get_string(doc, "text");
  if (count_code_points(spec.text) > defaults.max_text_chars) {
    return SchemaViolation{
        "/text", "text is longer than " + std::to_string(defaults.max_text_chars) + " characters"};
  }
  spec.model = get_string(doc, "model");
  if (spec.model.empty())
    spec.model = defaults.model;
  if (auto tools = doc.FindMember("tools"); tools != doc.MemberEnd()) {
    spec.tools.emplace();
    for (const auto& tool : tools->value.GetArray())
      spec.tools->emplace_back(tool.GetString());
  }
  spec.timeout_s = get_int(doc, "timeout_s", defaults.timeout_s);
  spec.schedule_timeout_s = get_int(doc, "schedule_timeout_s", defaults.schedule_timeout_s);
  spec.max_steps = get_int(doc, "max_steps", defaults.max_steps);
  const std::string priority = get_string(doc, "priority");
  spec.priority = priority.empty() ? defaults.priority : *parse_priority(priority);
  spec.idempotency_key = get_string(doc, "idempotency_key");
  spec.batch_id = get_string(doc, "batch_id");
  if (const std::string strategy = get_string(doc, "strategy"); !strategy.empty())
    spec.strategy = parse_agent_strategy(strategy);
  spec.parent_task_id = get_string(doc, "parent_task_id");
  for (char& c : spec.parent_task_id)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  spec.session_id = get_string(doc, "session_id");
  if (auto max_tokens = doc.FindMember("max_tokens"); max_tokens != doc.MemberEnd())
    spec.max_tokens = max_tokens->value.GetInt64();
  if (const std::string max_cost = get_string(doc, "max_cost"); !max_cost.empty()) {
    // The schema's pattern holds at most 12 digits and 6 decimals: it parses.
    spec.max_cost_micros = billing::parse_decimal_micros(max_cost);
    if (!spec.max_cost_micros || *spec.max_cost_micros <= 0)
      return SchemaViolation{"/max_cost", "max_cost must be more than zero"};
  }
  spec.metadata.time_zone = defaults.time_zone;
  spec.metadata.locale = defaults.locale;
  if (auto metadata = doc.FindMember("metadata"); metadata != doc.MemberEnd()) {
    spec.metadata.device_id = get_string(metadata->value, "device_id");
    if (auto tz = get_string(metadata->value, "time_zone"); !tz.empty())
      spec.metadata.time_zone = tz;
    if (auto locale = get_string(metadata->value, "locale"); !locale.empty()) {
      spec.metadata.locale = locale;
    }
  }
  // Canonical form: the effective request, so "default model" and "model: <default>" agree.
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  key_string(w, "user_id", spec.user_id);
  key_string(w, "text", spec.text);
  key_string(w, "model", spec.model);
  w.Key("tools");
  if (spec.tools) {
    w.StartArray();
    for (const auto& tool : *spec.tools)
      write_string(w, tool);
    w.EndArray();
  } else {
    w.Null();
  }
  w.Key("timeout_s");
  w.Int(spec.timeout_s);
  w.Key("schedule_timeout_s");
  w.Int(spec.schedule_timeout_s);
  w.Key("max_steps");
  w.Int(spec.max_steps);
  key_string(w, "priority", to_string(spec.priority));
  key_string(w, "batch_id", spec.batch_id);
  key_string(w, "device_id", spec.metadata.device_id);
  key_string(w, "time_zone", spec.metadata.time_zone);
  key_string(w, "locale", spec.metadata.locale);
  // Only when given, so the canonical form of submissions without it stays as it was.
  if (spec.strategy)
    key_string(w, "strategy", to_string(*spec.strategy));
  if (!spec.parent_task_id.empty())
    key_string(w, "parent_task_id", spec.parent_task_id);
  if (!spec.session_id.empty())
    key_string(w, "session_id", spec.session_id);
  if (spec.max_tokens) {
    w.Key("max_tokens");
    w.Int64(*spec.max_tokens);
  }
  if (spec.max_cost_micros)
    key_string(w, "max_cost", billing::format_micros(*spec.max_cost_micros));
  w.EndObject();
  submission.canonical.assign(buffer.GetString(), buffer.GetSize());
  return submission;
}

std::optional<std::string> submission_from_canonical(std::string_view canonical,
                                                     std::string_view idempotency_key) {
  rapidjson::Document doc;
  doc.Parse(canonical.data(), canonical.size());
  if (doc.HasParseError() || !doc.IsObject())
    return std::nullopt;
  rapidjson::Document out(rapidjson::kObjectType);
  auto& alloc = out.GetAllocator();
  rapidjson::Value metadata(rapidjson::kObjectType);
  for (auto& member : doc.GetObject()) {
    const std::string_view name(member.name.GetString(), member.name.GetStringLength());
    if (name == "device_id" || name == "time_zone" || name == "locale") {
      if (member.value.IsString() && member.value.GetStringLength() > 0)
        metadata.AddMember(rapidjson::Value(member.name, alloc),
                           rapidjson::Value(member.value, alloc), alloc);
    } else if (name != "batch_id" && name != "retry_of" && !member.value.IsNull()) {
      out.AddMember(rapidjson::Value(member.name, alloc), rapidjson::Value(member.value, alloc),
                    alloc);
    }
  }
  if (!out.HasMember("user_id") || !out.HasMember("text"))
    return std::nullopt;
  if (!metadata.ObjectEmpty())
    out.AddMember("metadata", metadata, alloc);
  if (!idempotency_key.empty()) {
    out.AddMember("idempotency_key",
                  rapidjson::Value(idempotency_key.data(),
                                   static_cast<rapidjson::SizeType>(idempotency_key.size()), alloc),
                  alloc);
  }
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  out.Accept(w);
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::string canonical_with_retry_of(std::string_view canonical, std::string_view retry_of) {
  rapidjson::Document doc;
  doc.Parse(canonical.data(), canonical.size());
  if (doc.HasParseError() || !doc.IsObject())
    return std::string(canonical);
  doc.RemoveMember("retry_of");
  doc.AddMember("retry_of",
                rapidjson::Value(retry_of.data(), static_cast<rapidjson::SizeType>(retry_of.size()),
                                 doc.GetAllocator()),
                doc.GetAllocator());
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  doc.Accept(w);
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::variant<DispatchMessage, SchemaViolation> parse_dispatch_message(std::string_view json) {
  rapidjson::Document doc;
  if (auto violation = validate_json_text(json, "dispatch_message.schema.json", &doc)) {
    return *violation;
  }
  DispatchMessage message;
  message.task_id = get_string(doc, "task_id");
  message.user_id = get_string(doc, "user_id");
  message.priority = *parse_priority(get_string(doc, "priority"));
  message.dispatched_at = get_string(doc, "dispatched_at");
  return message;
}

std::vector<std::string> unmet_needs(std::string_view header) {
  static const std::vector<std::string> kMet = [] {
    std::vector<std::string> met{"feature:follow_up", "feature:spend_limits"};
    for (AgentStrategy s :
         {AgentStrategy::kReact, AgentStrategy::kPlanExecute, AgentStrategy::kPlanOnly})
      met.push_back("strategy:" + std::string(to_string(s)));
    return met;
  }();
  std::vector<std::string> unmet;
  std::size_t at = 0;
  while (at < header.size()) {
    const std::size_t end = std::min(header.find(' ', at), header.size());
    const std::string word(header.substr(at, end - at));
    if (!word.empty() && std::find(kMet.begin(), kMet.end(), word) == kMet.end())
      unmet.push_back(word);
    at = end + 1;
  }
  return unmet;
}

std::string result_event_json(const ResultEvent& event) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("version");
  w.Int(1);
  key_string(w, "task_id", event.task_id);
  key_string(w, "user_id", event.user_id);
  if (!event.batch_id.empty())
    key_string(w, "batch_id", batch_name(event.batch_id));  // as its user names it
  key_string(w, "status", to_string(event.status));
  if (event.result) {
    w.Key("result");
    write_result(w, to_string(event.result->type), event.result->message, event.result->options);
  }
  if (!event.error.empty())
    key_string(w, "error", event.error);
  if (!event.error_code.empty())
    key_string(w, "error_code", event.error_code);
  w.Key("attempt");
  w.Int(event.attempt);
  w.Key("steps");
  w.Int(event.steps);
  w.Key("tool_calls");
  w.Int(event.tool_calls);
  w.Key("usage");
  write_usage(w, event.usage);
  key_string(w, "cost", event.cost);
  key_string(w, "currency", event.currency);
  key_string(w, "finished_at", event.finished_at);
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::string progress_event_json(const ProgressEvent& event) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("version");
  w.Int(1);
  key_string(w, "task_id", event.task_id);
  key_string(w, "user_id", event.user_id);
  w.Key("seq");
  w.Int(event.seq);
  w.Key("attempt");
  w.Int(event.attempt);
  key_string(w, "event", event.event);
  w.Key("step");
  w.Int(event.step);
  if (!event.tool.empty())
    key_string(w, "tool", event.tool);
  w.Key("data");
  w.RawValue(event.data_json.data(), event.data_json.size(), rapidjson::kObjectType);
  key_string(w, "at", event.at);
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace agentfleet::codec
