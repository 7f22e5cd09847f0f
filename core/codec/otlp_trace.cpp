#include "core/codec/otlp_trace.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <optional>
#include <set>

#include "core/codec/json_text.hpp"

namespace agentfleet::codec {

namespace {

using rapidjson::Value;

constexpr std::int64_t kNsPerMs = 1'000'000;

// FNV-1a, 64 bits: stable across builds and machines (std::hash is not).
std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string hex16(std::uint64_t value) {
  if (value == 0)
    value = 1;  // an all-zero span id is invalid
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) {
    out[static_cast<std::size_t>(i)] = kDigits[value & 0xF];
    value >>= 4;
  }
  return out;
}

std::string derived_span_id(std::string_view task_id, std::string_view what) {
  std::string key(task_id);
  key += '/';
  key += what;
  return hex16(fnv1a(key));
}

bool is_lower_hex(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

struct TraceParent {
  std::string trace_id;
  std::string parent_id;
};

// "00-<32 hex>-<16 hex>-<2 hex>" (a later version may append fields); neither id all zeros.
std::optional<TraceParent> parse_traceparent(std::string_view text) {
  if (text.size() < 55 || text[2] != '-' || text[35] != '-' || text[52] != '-')
    return std::nullopt;
  if (text.size() > 55 && text[55] != '-')
    return std::nullopt;
  TraceParent tp{std::string(text.substr(3, 32)), std::string(text.substr(36, 16))};
  if (!is_lower_hex(text.substr(0, 2)) || text.substr(0, 2) == "ff" || !is_lower_hex(tp.trace_id) ||
      !is_lower_hex(tp.parent_id) || !is_lower_hex(text.substr(53, 2)) ||
      tp.trace_id == std::string(32, '0') || tp.parent_id == std::string(16, '0')) {
    return std::nullopt;
  }
  return tp;
}

std::string string_of(const Value& object, const char* name) {
  if (!object.IsObject())
    return {};
  auto it = object.FindMember(name);
  return it != object.MemberEnd() && it->value.IsString()
             ? std::string(it->value.GetString(), it->value.GetStringLength())
             : std::string();
}

std::optional<std::int64_t> int_of(const Value& object, const char* name) {
  if (!object.IsObject())
    return std::nullopt;
  auto it = object.FindMember(name);
  if (it == object.MemberEnd() || !it->value.IsInt64())
    return std::nullopt;
  return it->value.GetInt64();
}

std::optional<std::int64_t> time_of(const Value& object, const char* name) {
  return parse_rfc3339_ns(string_of(object, name));
}

// `text` cut to `max_chars` characters (whole UTF-8 sequences), marked when cut.
std::string bounded(std::string_view text, std::size_t max_chars) {
  std::size_t i = 0;
  std::size_t chars = 0;
  while (i < text.size() && chars < max_chars) {
    const std::size_t length = std::max<std::size_t>(1, utf8_sequence_at(text, i).length);
    i += length;
    ++chars;
  }
  if (i >= text.size())
    return std::string(text);
  return std::string(text.substr(0, i)) + "…";
}

double decimal_value(std::string_view text) {
  double value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() ? value : 0.0;
}

class SpanBuilder {
 public:
  SpanBuilder(std::string trace_id, std::vector<Span>& out)
      : trace_id_(std::move(trace_id)), out_(out) {}

  Span& add(std::string span_id, std::string parent, std::string name, SpanKind kind,
            std::int64_t start_ns, std::int64_t end_ns) {
    Span span;
    span.trace_id = trace_id_;
    span.span_id = std::move(span_id);
    span.parent_span_id = std::move(parent);
    span.name = std::move(name);
    span.kind = kind;
    span.start_ns = start_ns;
    span.end_ns = std::max(start_ns, end_ns);
    out_.push_back(std::move(span));
    return out_.back();
  }

 private:
  std::string trace_id_;
  std::vector<Span>& out_;
};

void put(Span& span, std::string key, SpanValue value) {
  span.attributes.push_back({std::move(key), std::move(value)});
}
void put_if(Span& span, std::string key, const std::string& value) {
  if (!value.empty())
    put(span, std::move(key), value);
}

struct StepTimes {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};

}  // namespace

const SpanValue* Span::attribute(std::string_view key) const {
  for (const auto& a : attributes) {
    if (a.key == key)
      return &a.value;
  }
  return nullptr;
}

std::string task_span_id(std::string_view task_id) {
  return derived_span_id(task_id, "task");
}

std::string batch_span_id(std::string_view batch_id) {
  return derived_span_id(batch_id, "batch");
}

std::optional<std::int64_t> parse_rfc3339_ns(std::string_view s) {
  // YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)
  auto digits = [&](std::size_t at, std::size_t n) -> std::optional<int> {
    if (at + n > s.size())
      return std::nullopt;
    int value = 0;
    for (std::size_t i = at; i < at + n; ++i) {
      if (s[i] < '0' || s[i] > '9')
        return std::nullopt;
      value = value * 10 + (s[i] - '0');
    }
    return value;
  };
  if (s.size() < 20 || s[4] != '-' || s[7] != '-' ||
      (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || s[13] != ':' || s[16] != ':') {
    return std::nullopt;
  }
  const auto year = digits(0, 4), month = digits(5, 2), day = digits(8, 2);
  const auto hour = digits(11, 2), minute = digits(14, 2), second = digits(17, 2);
  if (!year || !month || !day || !hour || !minute || !second || *hour > 23 || *minute > 59 ||
      *second > 60) {
    return std::nullopt;
  }
  const std::chrono::year_month_day date{std::chrono::year(*year),
                                         std::chrono::month(static_cast<unsigned>(*month)),
                                         std::chrono::day(static_cast<unsigned>(*day))};
  if (!date.ok())
    return std::nullopt;
  std::size_t i = 19;
  std::int64_t fraction_ns = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    std::int64_t scale = 100'000'000;
    const std::size_t first = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      fraction_ns += (s[i] - '0') * scale;
      scale /= 10;
      ++i;
    }
    if (i == first)
      return std::nullopt;
  }
  std::int64_t offset_s = 0;
  if (i < s.size() && (s[i] == 'Z' || s[i] == 'z')) {
    ++i;
  } else if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    const auto oh = digits(i + 1, 2), om = digits(i + 4, 2);
    if (!oh || !om || i + 3 >= s.size() || s[i + 3] != ':' || *oh > 23 || *om > 59)
      return std::nullopt;
    offset_s = (s[i] == '+' ? 1 : -1) * (*oh * 3600 + *om * 60);
    i += 6;
  } else {
    return std::nullopt;
  }
  if (i != s.size())
    return std::nullopt;
  const std::int64_t days = std::chrono::sys_days(date).time_since_epoch().count();
  const std::int64_t seconds = days * 86400 + *hour * 3600 + *minute * 60 + *second - offset_s;
  return seconds * 1'000'000'000 + fraction_ns;
}

Result<std::vector<Span>> task_spans(std::string_view task_json, std::string_view traceparent,
                                     const std::map<int, StepCost>& costs,
                                     const TaskSpansOptions& options) {
  const auto tp = parse_traceparent(traceparent);
  if (!tp)
    return Error{ErrorKind::kInvalid, "not a W3C traceparent: '" + bounded(traceparent, 80) + "'"};
  rapidjson::Document doc;
  if (!parse_json(doc, task_json) || !doc.IsObject())
    return Error{ErrorKind::kInvalid, "the task document is not a JSON object"};
  const std::string task_id = string_of(doc, "task_id");
  const auto created = time_of(doc, "created_at");
  if (task_id.empty() || !created)
    return Error{ErrorKind::kInvalid, "the task document has no task_id or created_at"};

  const std::string batch_id = string_of(doc, "batch_id");
  const std::string root_id = task_span_id(task_id);
  const bool made_up =
      tp->parent_id == root_id || (!batch_id.empty() && tp->parent_id == batch_span_id(batch_id));
  const std::string model = string_of(doc, "model");
  const std::size_t max_chars = options.max_attribute_chars;

  std::vector<Span> spans;
  SpanBuilder builder(tp->trace_id, spans);

  // The steps first: the root and the attempts span them.
  const Value empty_array(rapidjson::kArrayType);
  auto trace_it = doc.FindMember("trace");
  const Value& trace =
      trace_it != doc.MemberEnd() && trace_it->value.IsArray() ? trace_it->value : empty_array;
  std::map<int, StepTimes> attempts;  // by attempt: the extent of its steps
  std::vector<Span> step_spans;
  SpanBuilder step_builder(tp->trace_id, step_spans);
  std::int64_t last_ns = *created;
  for (const Value& step : trace.GetArray()) {
    const auto at = time_of(step, "at");
    const auto number = int_of(step, "step");
    if (!at || !number)
      continue;
    const int attempt = static_cast<int>(int_of(step, "attempt").value_or(1));
    const std::string attempt_id = derived_span_id(task_id, "attempt/" + std::to_string(attempt));
    const std::string step_key = "step/" + std::to_string(*number);
    StepTimes extent{*at, *at};
    const auto latency_ms = int_of(step, "model_latency_ms");
    const bool model_step = string_of(step, "role") != "tool" && latency_ms.has_value();
    if (model_step) {
      const auto cost_it = costs.find(static_cast<int>(*number));
      const std::string call_model =
          cost_it != costs.end() && !cost_it->second.model.empty() ? cost_it->second.model : model;
      Span& span =
          step_builder.add(derived_span_id(task_id, step_key), attempt_id, "chat " + call_model,
                           SpanKind::kClient, *at - *latency_ms * kNsPerMs, *at);
      extent.start_ns = span.start_ns;
      put(span, "gen_ai.operation.name", std::string("chat"));
      put(span, "gen_ai.request.model", call_model);
      put(span, "agentfleet.step", *number);
      auto usage_it = step.FindMember("usage");
      if (usage_it != step.MemberEnd() && usage_it->value.IsObject()) {
        const Value& usage = usage_it->value;
        if (auto v = int_of(usage, "input_tokens"))
          put(span, "gen_ai.usage.input_tokens", *v);
        if (auto v = int_of(usage, "output_tokens"))
          put(span, "gen_ai.usage.output_tokens", *v);
        if (auto v = int_of(usage, "cached_input_tokens"))
          put(span, "agentfleet.usage.cached_input_tokens", *v);
        if (auto v = int_of(usage, "reasoning_tokens"))
          put(span, "agentfleet.usage.reasoning_tokens", *v);
      }
      // The provider sent no usage: the tokens and the bill are the worker's estimate.
      if (auto estimated = step.FindMember("usage_estimated");
          estimated != step.MemberEnd() && estimated->value.IsBool())
        put(span, "agentfleet.usage.estimated", estimated->value.GetBool());
      if (cost_it != costs.end()) {
        put(span, "agentfleet.cost", decimal_value(cost_it->second.cost));
        put_if(span, "agentfleet.currency", cost_it->second.currency);
      }
    }
    auto calls_it = step.FindMember("tool_calls");
    if (calls_it != step.MemberEnd() && calls_it->value.IsArray()) {
      int index = 0;
      for (const Value& call : calls_it->value.GetArray()) {
        const std::string tool = string_of(call, "tool");
        const std::string call_id = string_of(call, "call_id");
        const std::string status = string_of(call, "status");
        // A refused call never left: a span of no length where the model asked for it.
        const std::int64_t start = time_of(call, "at").value_or(*at);
        const std::int64_t end = start + int_of(call, "latency_ms").value_or(0) * kNsPerMs;
        Span& span = step_builder.add(
            derived_span_id(task_id, step_key + "/call/" + std::to_string(index++) + "/" + call_id),
            attempt_id, "execute_tool " + tool, SpanKind::kClient, start, end);
        put(span, "gen_ai.operation.name", std::string("execute_tool"));
        put(span, "gen_ai.tool.name", tool);
        put_if(span, "gen_ai.tool.call.id", call_id);
        put(span, "agentfleet.step", *number);
        put_if(span, "agentfleet.tool.status", status);
        if (auto http_status = int_of(call, "http_status"); http_status && *http_status > 0)
          put(span, "http.response.status_code", *http_status);
        put_if(span, "agentfleet.tool.arguments", bounded(string_of(call, "arguments"), max_chars));
        const std::string result = bounded(string_of(call, "result"), max_chars);
        put_if(span, "agentfleet.tool.result", result);
        if (status != "ok") {
          span.status = SpanStatus::kError;
          span.status_message = status.empty() ? "error" : status;
        }
        extent.start_ns = std::min(extent.start_ns, span.start_ns);
        extent.end_ns = std::max(extent.end_ns, span.end_ns);
      }
    }
    auto [it, fresh] = attempts.try_emplace(attempt, extent);
    if (!fresh) {
      it->second.start_ns = std::min(it->second.start_ns, extent.start_ns);
      it->second.end_ns = std::max(it->second.end_ns, extent.end_ns);
    }
    last_ns = std::max(last_ns, extent.end_ns);
  }

  const std::string status = string_of(doc, "status");
  const auto dispatched = time_of(doc, "dispatched_at");
  const auto started = time_of(doc, "started_at");
  const auto finished = time_of(doc, "finished_at");
  const std::int64_t end_ns = finished.value_or(last_ns);

  Span& root = builder.add(root_id, made_up ? std::string() : tp->parent_id, "task",
                           SpanKind::kConsumer, *created, end_ns);
  put(root, "agentfleet.task.id", task_id);
  put_if(root, "agentfleet.user.id", string_of(doc, "user_id"));
  put_if(root, "agentfleet.batch.id", batch_id);
  put_if(root, "agentfleet.task.status", status);
  put_if(root, "agentfleet.task.priority", string_of(doc, "priority"));
  put_if(root, "agentfleet.task.strategy", string_of(doc, "strategy"));
  put_if(root, "agentfleet.task.parent_task_id", string_of(doc, "parent_task_id"));
  put_if(root, "agentfleet.task.retry_of", string_of(doc, "retry_of"));
  put_if(root, "gen_ai.request.model", model);
  if (auto v = int_of(doc, "attempt"))
    put(root, "agentfleet.task.attempts", *v);
  if (auto v = int_of(doc, "steps"))
    put(root, "agentfleet.task.steps", *v);
  if (auto v = int_of(doc, "tool_calls"))
    put(root, "agentfleet.task.tool_calls", *v);
  if (auto usage = doc.FindMember("usage"); usage != doc.MemberEnd() && usage->value.IsObject()) {
    if (auto v = int_of(usage->value, "input_tokens"))
      put(root, "gen_ai.usage.input_tokens", *v);
    if (auto v = int_of(usage->value, "output_tokens"))
      put(root, "gen_ai.usage.output_tokens", *v);
    if (auto v = int_of(usage->value, "cached_input_tokens"))
      put(root, "agentfleet.usage.cached_input_tokens", *v);
  }
  if (const std::string cost = string_of(doc, "cost"); !cost.empty()) {
    put(root, "agentfleet.cost", decimal_value(cost));
    put_if(root, "agentfleet.currency", string_of(doc, "currency"));
  }
  if (auto result = doc.FindMember("result");
      result != doc.MemberEnd() && result->value.IsObject()) {
    put_if(root, "agentfleet.result.type", string_of(result->value, "type"));
    put_if(root, "agentfleet.result.message",
           bounded(string_of(result->value, "message"), max_chars));
  }
  const std::string error_code = string_of(doc, "error_code");
  put_if(root, "error.type", error_code);
  if (status == "failed" || status == "timed_out") {
    root.status = SpanStatus::kError;
    root.status_message = bounded(string_of(doc, "error"), max_chars);
    if (root.status_message.empty())
      root.status_message = error_code.empty() ? status : error_code;
  }
  const std::size_t root_index = spans.size() - 1;

  // Waiting: until the scheduler dispatched it (or, without that time, until it started).
  // A recovery dispatches it again and moves dispatched_at past the first claim, which
  // started_at keeps: the wait ends at the earlier of the two.
  std::optional<std::int64_t> queue_end = dispatched ? dispatched : started;
  if (dispatched && started)
    queue_end = std::min(*dispatched, *started);
  if (queue_end) {
    Span& queue = builder.add(derived_span_id(task_id, "queue"), root_id, "queue",
                              SpanKind::kInternal, *created, *queue_end);
    put_if(queue, "agentfleet.task.priority", string_of(doc, "priority"));
  }

  // The last attempt runs from its start to the end; earlier ones as far as their steps go.
  // started_at is the first claim's: a later attempt starts no earlier than its own
  // dispatch (dispatched_at, the latest) and the end of the earlier attempts' steps.
  const int last_attempt = static_cast<int>(int_of(doc, "attempt").value_or(0));
  if (last_attempt > 0 && started) {
    std::int64_t begin = *started;
    if (last_attempt > 1) {
      if (dispatched)
        begin = std::max(begin, *dispatched);
      for (const auto& [attempt, times] : attempts) {
        if (attempt < last_attempt)
          begin = std::max(begin, times.end_ns);
      }
    }
    begin = std::min(begin, end_ns);
    StepTimes& last = attempts[last_attempt];
    if (last.start_ns == 0 && last.end_ns == 0)
      last = StepTimes{begin, end_ns};
    last.start_ns = std::min(last.start_ns, begin);
    last.end_ns = std::max(last.end_ns, end_ns);
  }
  for (const auto& [attempt, times] : attempts) {
    Span& span = builder.add(derived_span_id(task_id, "attempt/" + std::to_string(attempt)),
                             root_id, "attempt", SpanKind::kInternal, times.start_ns, times.end_ns);
    put(span, "agentfleet.attempt", static_cast<std::int64_t>(attempt));
    if (attempt < last_attempt) {
      span.status = SpanStatus::kError;
      span.status_message = "the attempt was interrupted (its worker was lost or handed it back)";
    }
  }
  spans[root_index].start_ns = std::min(spans[root_index].start_ns, *created);
  for (Span& s : step_spans)
    spans.push_back(std::move(s));
  return spans;
}

namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void write_string(Writer& w, std::string_view text) {
  w.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
}

void write_attributes(Writer& w, const std::vector<SpanAttribute>& attributes) {
  w.Key("attributes");
  w.StartArray();
  for (const auto& a : attributes) {
    w.StartObject();
    w.Key("key");
    write_string(w, a.key);
    w.Key("value");
    w.StartObject();
    std::visit(
        [&w](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>) {
            w.Key("stringValue");
            write_string(w, v);
          } else if constexpr (std::is_same_v<T, std::int64_t>) {
            // int64 values are decimal strings in OTLP's JSON mapping.
            w.Key("intValue");
            write_string(w, std::to_string(v));
          } else if constexpr (std::is_same_v<T, double>) {
            w.Key("doubleValue");
            w.Double(v);
          } else {
            w.Key("boolValue");
            w.Bool(v);
          }
        },
        a.value);
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
}

}  // namespace

std::string otlp_trace_request(const std::vector<Span>& spans,
                               const std::vector<SpanAttribute>& resource,
                               std::string_view scope_version) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("resourceSpans");
  w.StartArray();
  w.StartObject();
  w.Key("resource");
  w.StartObject();
  write_attributes(w, resource);
  w.EndObject();
  w.Key("scopeSpans");
  w.StartArray();
  w.StartObject();
  w.Key("scope");
  w.StartObject();
  w.Key("name");
  w.String("agentfleet");
  w.Key("version");
  write_string(w, scope_version);
  w.EndObject();
  w.Key("spans");
  w.StartArray();
  for (const Span& s : spans) {
    w.StartObject();
    w.Key("traceId");
    write_string(w, s.trace_id);
    w.Key("spanId");
    write_string(w, s.span_id);
    if (!s.parent_span_id.empty()) {
      w.Key("parentSpanId");
      write_string(w, s.parent_span_id);
    }
    w.Key("name");
    write_string(w, s.name);
    w.Key("kind");
    w.Int(static_cast<int>(s.kind));
    w.Key("startTimeUnixNano");
    write_string(w, std::to_string(s.start_ns));
    w.Key("endTimeUnixNano");
    write_string(w, std::to_string(s.end_ns));
    write_attributes(w, s.attributes);
    w.Key("status");
    w.StartObject();
    if (s.status != SpanStatus::kUnset) {
      w.Key("code");
      w.Int(static_cast<int>(s.status));
    }
    if (!s.status_message.empty()) {
      w.Key("message");
      write_string(w, s.status_message);
    }
    w.EndObject();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  w.EndArray();
  w.EndObject();
  w.EndArray();
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace agentfleet::codec
