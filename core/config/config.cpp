#include "core/config/config.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <yaml-cpp/yaml.h>

#include "core/codec/json_schema.hpp"
#include "core/codec/text_tool_calls.hpp"
#include "core/config/config_reader.hpp"
#include "core/config/time_zone_loader.hpp"
#include "core/config/yaml_json.hpp"

namespace agentfleet::config {
namespace {

using rapidjson::SizeType;
using rapidjson::Value;
using Allocator = rapidjson::Document::AllocatorType;
using namespace detail;  // Problem, Section and the tables (config_reader.hpp)

constexpr std::string_view kSchemaFile = "config.schema.json";
constexpr int kMaxYamlDepth = 64;
// Values of the converted document at most. Aliases are copied where they are used, so an
// alias of a list of aliases of lists... grows exponentially (450 bytes of YAML made 10^8
// values and hung the loader: tests/fuzz/regressions/config_fuzz); a real configuration has a
// few thousand.
constexpr std::size_t kMaxYamlValues = 100000;

// ---- Environment references ----

bool is_name_start(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

bool is_name_char(char c) {
  return is_name_start(c) || (c >= '0' && c <= '9');
}

// A reference that cannot be replaced: what is wrong, and the line of the text (1-based)
// it is on.
struct ReferenceError : std::runtime_error {
  ReferenceError(const std::string& what, int at_line, std::string_view ref)
      : std::runtime_error(what), line(at_line), reference(ref) {}
  int line;
  // The reference's text as written ("${NAME...}"), to find it in the source.
  std::string reference;
};

// Replaces `${NAME}` and `${NAME:-default}` (the default when NAME is unset or empty) in
// one string; `$${` is a literal `${`. A reference does not span lines.
std::string substitute(std::string_view text, EnvLookup lookup) {
  std::string out;
  out.reserve(text.size());
  int line = 1;
  std::size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == '\n') {
      ++line;
    }
    if (c == '$' && text.substr(i, 3) == "$${") {
      out += "${";
      i += 3;
      continue;
    }
    if (c != '$' || text.substr(i, 2) != "${") {
      out += c;
      ++i;
      continue;
    }
    std::size_t close = text.find('}', i + 2);
    std::size_t newline = text.find('\n', i + 2);
    if (close == std::string_view::npos || (newline != std::string_view::npos && newline < close)) {
      throw ReferenceError(
          "unterminated '${' (write $${ for a literal ${)", line,
          text.substr(i, (newline == std::string_view::npos ? text.size() : newline) - i));
    }
    std::string_view body = text.substr(i + 2, close - i - 2);
    std::size_t n = 0;
    while (n < body.size() && is_name_char(body[n])) {
      ++n;
    }
    std::string name(body.substr(0, n));
    std::optional<std::string> fallback;
    if (n < body.size() && body.substr(n, 2) == ":-") {
      fallback = std::string(body.substr(n + 2));
    } else if (n != body.size()) {
      name.clear();
    }
    if (name.empty() || !is_name_start(name[0])) {
      throw ReferenceError("invalid reference '${" + std::string(body) +
                               "}': expected ${NAME} or ${NAME:-default}; write $${ for a "
                               "literal ${",
                           line, text.substr(i, close + 1 - i));
    }
    std::optional<std::string> value = lookup(name);
    if (fallback && (!value || value->empty())) {
      value = fallback;
    }
    if (!value) {
      throw ReferenceError("environment variable " + name + " is not set", line,
                           text.substr(i, close + 1 - i));
    }
    out += *value;
    i = close + 1;
  }
  return out;
}

// ---- YAML -> JSON ----

// Line (1-based) of the YAML node behind each JSON pointer, for error messages.
using LineMap = std::map<std::string, int>;

bool all_digits(std::string_view s, bool (*pred)(char)) {
  return !s.empty() && std::all_of(s.begin(), s.end(), pred);
}

bool is_dec(char c) {
  return c >= '0' && c <= '9';
}
bool is_oct(char c) {
  return c >= '0' && c <= '7';
}
bool is_hex(char c) {
  return is_dec(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

std::optional<std::int64_t> parse_int(std::string_view s, int base) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc() || end != s.data() + s.size()) {
    return std::nullopt;
  }
  return v;
}

// YAML 1.2 core schema float: [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?
bool looks_like_float(std::string_view s) {
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) {
    ++i;
  }
  std::size_t int_digits = 0;
  while (i < s.size() && is_dec(s[i])) {
    ++i;
    ++int_digits;
  }
  std::size_t frac_digits = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && is_dec(s[i])) {
      ++i;
      ++frac_digits;
    }
  }
  if (int_digits == 0 && frac_digits == 0) {
    return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) {
      ++i;
    }
    std::size_t exp_digits = 0;
    while (i < s.size() && is_dec(s[i])) {
      ++i;
      ++exp_digits;
    }
    if (exp_digits == 0) {
      return false;
    }
  }
  return i == s.size();
}

// Plain scalars follow the YAML 1.2 core schema; quoted and block scalars (tag "!") and
// explicit !!str stay strings, so "8080" and "2.00" are strings and 8080 is an integer.
// `text` is the scalar's value after substitution, never parsed as YAML again.
void scalar_to_json(const std::string& text, const std::string& tag, Value& out, Allocator& alloc) {
  if (tag == "!" || tag == "tag:yaml.org,2002:str") {
    out.SetString(text.c_str(), static_cast<SizeType>(text.size()), alloc);
    return;
  }
  std::string_view s = text;
  if (s == "null" || s == "Null" || s == "NULL" || s == "~" || s.empty()) {
    out.SetNull();
    return;
  }
  if (s == "true" || s == "True" || s == "TRUE") {
    out.SetBool(true);
    return;
  }
  if (s == "false" || s == "False" || s == "FALSE") {
    out.SetBool(false);
    return;
  }
  std::optional<std::int64_t> integer;
  if (s.size() > 2 && s.substr(0, 2) == "0x" && all_digits(s.substr(2), is_hex)) {
    integer = parse_int(s.substr(2), 16);
  } else if (s.size() > 2 && s.substr(0, 2) == "0o" && all_digits(s.substr(2), is_oct)) {
    integer = parse_int(s.substr(2), 8);
  } else {
    std::string_view digits = s;
    bool negative = false;
    if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) {
      negative = digits[0] == '-';
      digits.remove_prefix(1);
    }
    if (all_digits(digits, is_dec)) {
      integer = parse_int(negative ? s : digits, 10);
    }
  }
  if (integer) {
    out.SetInt64(*integer);
    return;
  }
  if (looks_like_float(s)) {
    double d = 0;
    std::string_view digits = s[0] == '+' ? s.substr(1) : s;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), d);
    if (ec == std::errc() && end == digits.data() + digits.size()) {
      out.SetDouble(d);
      return;
    }
  }
  // Out-of-range numbers, .inf, .nan and everything else: a string (which the schema
  // then refuses where a number is expected).
  out.SetString(text.c_str(), static_cast<SizeType>(text.size()), alloc);
}

// Whether plain-scalar typing keeps `text` as it is: empty (null), true, false, or an
// integer in canonical decimal form (no sign but '-', no leading zero).
bool reads_back_as_itself(std::string_view text) {
  if (text.empty() || text == "true" || text == "false") {
    return true;
  }
  std::string_view digits = text[0] == '-' ? text.substr(1) : text;
  if (digits.empty() || !all_digits(digits, is_dec) || (digits[0] == '0' && digits.size() > 1) ||
      text == "-0") {
    return false;
  }
  return parse_int(text, 10).has_value();
}

// What scalar values are substituted from: the environment, and the YAML text the nodes
// were parsed from (to place an error inside a block scalar on its line).
struct Substitution {
  EnvLookup lookup;
  std::string_view source;
};

// The scalar's value with its environment references replaced. References are replaced in
// values after parsing, so whatever a variable holds is never YAML syntax.
std::string substituted_value(const YAML::Node& node, const std::string& path,
                              const Substitution& env) {
  try {
    return substitute(node.Scalar(), env.lookup);
  } catch (const ReferenceError& e) {
    const YAML::Mark mark = node.Mark();
    if (mark.is_null()) {
      throw Problem(path, e.what());
    }
    // The value's lines are not the source's (folded and multi-line scalars join them), so
    // the reference is looked up in the source from where the scalar starts. A reference
    // never spans lines, so it is there as written.
    int line = mark.line + e.line;
    const std::size_t start = mark.pos >= 0 ? static_cast<std::size_t>(mark.pos) : 0;
    const std::size_t found = env.source.find(e.reference, start);
    if (found != std::string_view::npos) {
      line = mark.line + 1 +
             static_cast<int>(std::count(env.source.begin() + static_cast<std::ptrdiff_t>(start),
                                         env.source.begin() + static_cast<std::ptrdiff_t>(found),
                                         '\n'));
    }
    throw Problem(path, e.what(), line);
  }
}

// `values` counts the values converted so far, against kMaxYamlValues.
void yaml_to_json(const YAML::Node& node, Value& out, Allocator& alloc, const std::string& path,
                  LineMap& lines, const Substitution& env, int depth, std::size_t& values) {
  if (depth > kMaxYamlDepth) {
    throw Problem(path, "nested too deeply");
  }
  if (++values > kMaxYamlValues) {
    throw Problem(path, "the configuration has more than " + std::to_string(kMaxYamlValues) +
                            " values once its aliases are expanded");
  }
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      out.SetNull();
      return;
    case YAML::NodeType::Scalar: {
      std::string value = substituted_value(node, path, env);
      std::string tag = node.Tag();
      // A plain value that came from the environment is typed only when it reads back as
      // itself: "60" is the integer 60 and "true" a boolean, but a password "007", "0x10"
      // or "1e3" stays exactly that text.
      if (tag == "?" && value != node.Scalar() && !reads_back_as_itself(value)) {
        tag = "!";
      }
      scalar_to_json(value, tag, out, alloc);
      return;
    }
    case YAML::NodeType::Sequence: {
      out.SetArray();
      std::size_t index = 0;
      for (const auto& item : node) {
        std::string item_path = path + "/" + std::to_string(index++);
        if (!item.Mark().is_null()) {
          lines.emplace(item_path, item.Mark().line + 1);
        }
        Value v;
        yaml_to_json(item, v, alloc, item_path, lines, env, depth + 1, values);
        out.PushBack(v, alloc);
      }
      return;
    }
    case YAML::NodeType::Map: {
      out.SetObject();
      std::set<std::string> seen;
      for (const auto& entry : node) {
        const YAML::Node& key = entry.first;
        if (!key.IsScalar()) {
          throw Problem(path, "mapping keys must be plain strings");
        }
        const std::string& name = key.Scalar();
        std::string key_path = path + "/" + codec::json_pointer_token(name);
        if (!key.Mark().is_null()) {
          lines.emplace(key_path, key.Mark().line + 1);
        }
        if (!seen.insert(name).second) {
          throw Problem(key_path, "duplicate key '" + name + "'");
        }
        Value k(name.c_str(), static_cast<SizeType>(name.size()), alloc);
        Value v;
        yaml_to_json(entry.second, v, alloc, key_path, lines, env, depth + 1, values);
        out.AddMember(k, v, alloc);
      }
      return;
    }
  }
}

// ---- Reading the validated document into the structs ----

std::string json_text(const Value& v) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> writer(sb);
  v.Accept(writer);
  return std::string(sb.GetString(), sb.GetSize());
}

// Minutes since midnight of "HH:MM" (24:00 allowed as the end of the day).
std::optional<int> minutes_of(std::string_view s) {
  if (s.size() != 5 || s[2] != ':') {
    return std::nullopt;
  }
  auto h = parse_int(s.substr(0, 2), 10);
  auto m = parse_int(s.substr(3, 2), 10);
  if (!h || !m || *h < 0 || *m < 0 || *m > 59 || *h > 24 || (*h == 24 && *m != 0)) {
    return std::nullopt;
  }
  return static_cast<int>(*h * 60 + *m);
}

// librdkafka properties: strings, integers and booleans, passed on as text.
void read_properties(const Section& s, const char* name, std::map<std::string, std::string>& out) {
  const Value* props = s.get(name);
  if (!props)
    return;
  if (!props->IsObject())
    throw Problem(s.path(name), "expected object");
  for (const auto& m : props->GetObject()) {
    std::string key(m.name.GetString(), m.name.GetStringLength());
    const Value& v = m.value;
    if (v.IsString()) {
      out[key].assign(v.GetString(), v.GetStringLength());
    } else if (v.IsBool()) {
      out[key] = v.GetBool() ? "true" : "false";
    } else if (v.IsInt64()) {
      out[key] = std::to_string(v.GetInt64());
    } else {
      throw Problem(s.path(name) + "/" + codec::json_pointer_token(key),
                    "expected string, integer or boolean");
    }
  }
}

void read_kafka(const Section& s, KafkaConfig& out) {
  read_fields(s, out, kKafkaFields);
  read_fields(s.child("topics"), out.topics, kTopicFields);
  read_properties(s, "properties", out.properties);
  read_properties(s, "consumer_properties", out.consumer_properties);
  std::vector<std::pair<std::string, const std::string*>> names = {
      {"submit", &out.topics.submit},
      {"dispatch", &out.topics.dispatch},
      {"results", &out.topics.results},
      {"events", &out.topics.events},
      {"dlq", &out.topics.dlq}};
  for (std::size_t i = 0; i < names.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (*names[i].second == *names[j].second) {
        throw Problem(s.path("topics") + "/" + names[i].first,
                      "topic '" + *names[i].second + "' is also the " + names[j].first +
                          " topic; each topic needs its own name");
      }
    }
  }
}

void read_dispatcher(const Section& s, DispatcherConfig& out) {
  read_fields(s.child("http"), out.http, kHttpFields);
  read_fields(s, out, kDispatcherFields);
  if (out.leader_silence_s * 1000 <=
      2 * std::max({out.leader_retry_ms, out.scheduler_interval_ms, out.housekeeping_interval_ms,
                    out.scheduler_idle_ms})) {
    throw Problem(s.path("leader_silence_s"),
                  "must be more than twice leader_retry_ms, scheduler_interval_ms, "
                  "housekeeping_interval_ms and scheduler_idle_ms: a scheduler connection is "
                  "idle that long between its statements");
  }
}

bool is_sha256_hex(const std::string& text) {
  return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

void read_auth(const Section& s, AuthConfig& out) {
  read_fields(s, out, kAuthFields);
  s.each("gateway_keys", [&](const Section& k) {
    ApiKey key;
    read_fields(k, key, kGatewayKeyFields);
    if (!is_sha256_hex(key.sha256)) {
      throw Problem(k.path("sha256"),
                    "must be the gateway secret's SHA-256 as 64 lower-case hex digits (e.g. printf "
                    "%s SECRET | sha256sum)");
    }
    for (const ApiKey& other : out.gateway_keys) {
      if (other.name == key.name)
        throw Problem(k.path("name"), "duplicate gateway key name '" + key.name + "'");
    }
    out.gateway_keys.push_back(std::move(key));
  });
  if (out.mode == "gateway" && out.gateway_keys.empty()) {
    throw Problem(s.path("gateway_keys"),
                  "auth.mode gateway needs at least one gateway key: the identity headers are "
                  "believed only from a request that proves it came through the gateway");
  }
  s.each("api_keys", [&](const Section& k) {
    ApiKey key;
    read_fields(k, key, kApiKeyFields);
    if (!is_sha256_hex(key.sha256)) {
      throw Problem(k.path("sha256"),
                    "must be the key's SHA-256 as 64 lower-case hex digits (e.g. printf %s KEY | "
                    "sha256sum)");
    }
    if (!key.admin && key.users.empty()) {
      throw Problem(k.path("users"),
                    "a key that is not admin must name the users it may act for (\"*\": any)");
    }
    for (const ApiKey& other : out.api_keys) {
      if (other.name == key.name)
        throw Problem(k.path("name"), "duplicate key name '" + key.name + "'");
      if (other.sha256 == key.sha256)
        throw Problem(k.path("sha256"), "the same key is configured as '" + other.name + "'");
    }
    out.api_keys.push_back(std::move(key));
  });
  if (out.mode == "api_keys" && out.api_keys.empty()) {
    throw Problem(s.path("api_keys"),
                  "auth.mode api_keys needs at least one key (or mode gateway / none)");
  }
}

void read_worker(const Section& s, WorkerConfig& out) {
  read_fields(s, out, kWorkerFields);
  if (out.in_flight_min > out.max_in_flight) {
    throw Problem(s.path("in_flight_min"),
                  "must not exceed max_in_flight (" + std::to_string(out.max_in_flight) + ")");
  }
  if (out.heartbeat_timeout_ms >= out.lease_s * 1000) {
    throw Problem(s.path("heartbeat_timeout_ms"),
                  "must be less than lease_s (" + std::to_string(out.lease_s) + " s)");
  }
  if (out.heartbeat_s >= out.lease_s) {
    throw Problem(s.path("heartbeat_s"), "must be less than lease_s (" +
                                             std::to_string(out.lease_s) +
                                             ") so a live worker keeps its leases");
  }
}

// Host of an http(s) URL (the schema has checked its shape), without port or brackets.
std::string url_host(std::string_view url) {
  const auto scheme_end = url.find("://");
  std::string_view rest = scheme_end == std::string_view::npos ? url : url.substr(scheme_end + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  if (const auto at = rest.rfind('@'); at != std::string_view::npos)
    rest = rest.substr(at + 1);
  if (!rest.empty() && rest.front() == '[')
    return std::string(rest.substr(1, rest.find(']') - 1));
  return std::string(rest.substr(0, rest.find(':')));
}

void read_models(const Section& root, std::vector<ModelConfig>& out) {
  root.each("models", [&](const Section& s) {
    ModelConfig m;
    read_fields(s, m, kModelFields);
    s.each("endpoints", [&](const Section& e) {
      ModelEndpoint endpoint;
      read_fields(e, endpoint, kEndpointFields);
      const bool named = !endpoint.name.empty();
      if (!named)
        endpoint.name = url_host(endpoint.url);
      for (std::size_t i = 0; i < m.endpoints.size(); ++i) {
        if (m.endpoints[i].name != endpoint.name)
          continue;
        if (named) {
          throw Problem(e.path("name"), "duplicate endpoint name '" + endpoint.name +
                                            "' (also endpoint " + std::to_string(i) + ")");
        }
        // Two unnamed endpoints on one host: the position tells them apart.
        endpoint.name += "#" + std::to_string(m.endpoints.size());
      }
      m.endpoints.push_back(std::move(endpoint));
    });
    Section retry = s.child("retry");
    read_fields(retry, m.retry, kRetryFields);
    if (m.retry.max_ms < m.retry.base_ms) {
      throw Problem(retry.path("max_ms"),
                    "must be at least base_ms (" + std::to_string(m.retry.base_ms) + ")");
    }
    read_fields(s.child("circuit_breaker"), m.circuit_breaker, kBreakerFields);
    for (std::size_t i = 0; i < m.text_tool_calls.size(); ++i) {
      if (!codec::parse_text_call_format(m.text_tool_calls[i])) {
        std::string names;
        for (codec::TextCallFormat format : codec::all_text_call_formats())
          names += (names.empty() ? "" : ", ") + std::string(codec::to_string(format));
        throw Problem(s.path("text_tool_calls") + "/" + std::to_string(i),
                      "unknown format '" + m.text_tool_calls[i] + "'; the formats are " + names);
      }
    }
    std::string echo(to_string(m.reasoning_echo));
    s.read("reasoning_echo", echo);
    if (auto parsed = parse_reasoning_echo(echo)) {
      m.reasoning_echo = *parsed;
    } else {
      throw Problem(s.path("reasoning_echo"),
                    "unknown value '" + echo + "'; it is none, tool_turns or all");
    }
    if (m.endpoints.empty()) {
      throw Problem(s.path("endpoints"), "a model needs at least one endpoint");
    }
    if (m.provider_model.empty()) {
      m.provider_model = m.name;
    }
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (out[i].name == m.name) {
        throw Problem(s.path("name"), "duplicate model name '" + m.name + "' (also /models/" +
                                          std::to_string(i) + ")");
      }
    }
    out.push_back(std::move(m));
  });
  if (out.empty()) {
    throw Problem("/models", "at least one model is required");
  }
}

void read_tools(const Section& root, std::vector<ToolConfig>& out) {
  root.each("tools", [&](const Section& s) {
    ToolConfig t;
    read_fields(s, t, kToolFields);
    std::map<std::string, std::string> headers;
    read_properties(s, "headers", headers);
    for (auto& [name, value] : headers) {
      static const std::set<std::string> kReserved = {
          "x-user-id",    "x-device-id", "x-task-id",      "idempotency-key", "traceparent",
          "content-type", "host",        "content-length", "x-task-attempt"};
      std::string lower = name;
      std::transform(lower.begin(), lower.end(), lower.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
      if (kReserved.count(lower)) {
        throw Problem(s.path("headers") + "/" + codec::json_pointer_token(name),
                      "header '" + name + "' is set by the worker from the task");
      }
      t.headers.emplace_back(name, value);
    }
    std::string permission = to_string(t.permission);
    s.read("permission", permission);
    auto parsed = parse_permission(permission);
    if (!parsed) {
      throw Problem(s.path("permission"),
                    "must be one of read, write, execute, admin (got '" + permission + "')");
    }
    t.permission = *parsed;
    const Value* params = s.get("parameters");
    if (params == nullptr || !params->IsObject()) {
      throw Problem(s.path("parameters"), "must be a JSON Schema object");
    }
    try {
      codec::CompiledSchema compiled(*params);
    } catch (const std::invalid_argument& e) {
      throw Problem(s.path("parameters"), e.what());
    }
    t.parameters_schema = json_text(*params);
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (out[i].name == t.name) {
        throw Problem(s.path("name"), "duplicate tool name '" + t.name + "' (also /tools/" +
                                          std::to_string(i) + ")");
      }
    }
    out.push_back(std::move(t));
  });
}

bool is_currency_code(const std::string& code) {
  return code.size() == 3 &&
         std::all_of(code.begin(), code.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

// The zone `name` names in the system's zoneinfo; a problem at `path` when there is none.
TimeZone known_zone(const std::string& name, const std::string& path) {
  LoadedZone loaded = load_time_zone(name);
  if (!loaded.found) {
    throw Problem(path, "unknown time zone '" + name + "' (an IANA name such as Asia/Shanghai)");
  }
  return std::move(loaded.zone);
}

void read_billing(const Section& s, const std::vector<ModelConfig>& models, BillingConfig& out) {
  read_fields(s, out, kBillingFields);
  const TimeZone billing_zone = known_zone(out.time_zone, s.path("time_zone"));
  for (std::size_t i = 0; i < out.holidays.size(); ++i) {
    const std::string path = s.path("holidays") + "/" + std::to_string(i);
    if (!billing::parse_date(out.holidays[i]))
      throw Problem(path, "'" + out.holidays[i] + "' is not a valid YYYY-MM-DD date from " +
                              std::to_string(billing::kFirstYear) + " to " +
                              std::to_string(billing::kLastYear));
    if (std::find(out.holidays.begin(), out.holidays.begin() + static_cast<std::ptrdiff_t>(i),
                  out.holidays[i]) != out.holidays.begin() + static_cast<std::ptrdiff_t>(i))
      throw Problem(path, "'" + out.holidays[i] + "' is listed twice");
  }
  // When each price applies from, to find two of one model from the same instant.
  std::vector<std::chrono::sys_seconds> starts;
  s.each("prices", [&](const Section& p) {
    PriceConfig price;
    read_fields(p, price, kPriceFields);
    const TimeZone zone =
        price.time_zone.empty() ? billing_zone : known_zone(price.time_zone, p.path("time_zone"));
    p.each("windows", [&](const Section& w) {
      PriceWindow window;
      read_fields(w, window, kWindowFields);
      if (const auto m = billing::parse_decimal_micros(window.multiplier); !m || *m < 0) {
        throw Problem(w.path("multiplier"),
                      "'" + window.multiplier +
                          "' is not a multiplier: a decimal string of 0 or more with at most 6 "
                          "decimals");
      }
      auto from = minutes_of(window.from);
      auto to = minutes_of(window.to);
      if (!from || *from == 24 * 60) {
        throw Problem(w.path("from"), "expected HH:MM between 00:00 and 23:59");
      }
      if (!to) {
        throw Problem(w.path("to"), "expected HH:MM between 00:00 and 24:00");
      }
      if (*from == *to) {  // 00:00 to 24:00 is the whole day
        throw Problem(w.path("to"), "a window must not be empty (from equals to)");
      }
      if (w.get("days") != nullptr && window.days.empty())
        throw Problem(w.path("days"), "name at least one day (leave it out for every day)");
      for (std::size_t i = 0; i < window.days.size(); ++i) {
        const std::string path = w.path("days") + "/" + std::to_string(i);
        if (!billing::parse_day_kind(window.days[i])) {
          throw Problem(path, "'" + window.days[i] +
                                  "' is not a day: mon, tue, wed, thu, fri, sat, sun or holiday");
        }
        if (std::count(window.days.begin(), window.days.end(), window.days[i]) > 1)
          throw Problem(path, "'" + window.days[i] + "' is listed twice");
      }
      price.windows.push_back(std::move(window));
    });
    if (std::none_of(models.begin(), models.end(),
                     [&](const ModelConfig& m) { return m.name == price.model; })) {
      throw Problem(p.path("model"), "unknown model '" + price.model + "' (not in models)");
    }
    for (const auto& [key, text] :
         {std::pair<const char*, const std::string*>{"input_per_million", &price.input_per_million},
          {"cached_input_per_million", &price.cached_input_per_million},
          {"output_per_million", &price.output_per_million}}) {
      const auto micros = billing::parse_decimal_micros(*text);
      if (!micros || *micros < 0) {
        throw Problem(p.path(key), "'" + *text +
                                       "' is not a price: a decimal string of 0 or more with at "
                                       "most 6 decimals");
      }
    }
    const auto start = billing::parse_effective_from(price.effective_from, zone);
    if (!start) {
      throw Problem(p.path("effective_from"),
                    "'" + price.effective_from +
                        "' is neither a YYYY-MM-DD date nor an instant with its offset "
                        "(YYYY-MM-DDTHH:MM[:SS]Z or +HH:MM), in the years " +
                        std::to_string(billing::kFirstYear) + " to " +
                        std::to_string(billing::kLastYear));
    }
    for (std::size_t i = 0; i < out.prices.size(); ++i) {
      if (out.prices[i].model == price.model && starts[i] == *start) {
        throw Problem(p.path("effective_from"), "model '" + price.model +
                                                    "' already has a price from that instant (" +
                                                    out.prices[i].effective_from + ")");
      }
    }
    starts.push_back(*start);
    out.prices.push_back(std::move(price));
  });
  if (out.budget_currency.empty())
    out.budget_currency = out.prices.empty() ? "CNY" : out.prices.front().currency;
  if (!is_currency_code(out.budget_currency)) {
    throw Problem(s.path("budget_currency"),
                  "'" + out.budget_currency + "' is not an ISO 4217 code (three capitals)");
  }
  read_properties(s, "exchange_rates", out.exchange_rates);
  for (const auto& [currency, rate] : out.exchange_rates) {
    const std::string path = s.path("exchange_rates") + "/" + codec::json_pointer_token(currency);
    if (!is_currency_code(currency))
      throw Problem(path, "'" + currency + "' is not an ISO 4217 code (three capitals)");
    if (currency == out.budget_currency)
      throw Problem(path, "the budget currency needs no rate");
    const auto micros = billing::parse_decimal_micros(rate);
    if (!micros || *micros <= 0) {
      throw Problem(path, "'" + rate +
                              "' is not a rate: a decimal string above 0 with at most 6 decimals, "
                              "the " +
                              out.budget_currency + " one " + currency + " is worth");
    }
  }
  // A price in a currency the budgets cannot count would make that model free to a user
  // with a budget.
  for (std::size_t i = 0; i < out.prices.size(); ++i) {
    const std::string& currency = out.prices[i].currency;
    if (currency != out.budget_currency && !out.exchange_rates.count(currency)) {
      throw Problem(s.path("prices") + "/" + std::to_string(i) + "/currency",
                    "prices in " + currency + " need billing.exchange_rates." + currency +
                        " (what one " + currency + " is worth in the budget currency, " +
                        out.budget_currency + ")");
    }
  }
}

void read_react(const Section& s, ReactConfig& out) {
  read_fields(s, out, kReactFields);
  if (!out.system_prompt.empty() && !out.system_prompt_file.empty()) {
    throw Problem(s.path("system_prompt_file"),
                  "give system_prompt or system_prompt_file, not both");
  }
  read_fields(s.child("markers"), out.markers, kMarkerFields);
}

void read_plan_execute(const Section& s, PlanExecuteConfig& out) {
  read_fields(s, out, kPlanExecuteFields);
  if (out.weight_accuracy + out.weight_completeness + out.weight_relevance + out.weight_logic <=
      0) {
    throw Problem(s.path("weights"), "at least one weight must be above 0");
  }
}

void read_tiers(const Section& root, const std::vector<ModelConfig>& models,
                std::vector<UserTierLimits>& out) {
  root.each("tiers", [&](const Section& s) {
    UserTierLimits t;
    read_fields(s, t, kTierFields);
    read_fields(s, t.limits, kTierLimitFields);
    std::string budget = "0";
    s.read("monthly_budget", budget);
    const auto micros = billing::parse_decimal_micros(budget);
    if (!micros || *micros < 0) {
      throw Problem(s.path("monthly_budget"),
                    "must be a decimal with at most 6 decimals (got '" + budget + "')");
    }
    t.limits.monthly_budget_micros = *micros;
    std::string permission = to_string(t.limits.tool_permission);
    s.read("tool_permission", permission);
    auto parsed = parse_permission(permission);
    if (!parsed) {
      throw Problem(s.path("tool_permission"),
                    "must be one of read, write, execute, admin (got '" + permission + "')");
    }
    t.limits.tool_permission = *parsed;
    for (std::size_t i = 0; i < t.allowed_models.size(); ++i) {
      const std::string& name = t.allowed_models[i];
      if (std::none_of(models.begin(), models.end(),
                       [&](const ModelConfig& m) { return m.name == name; })) {
        throw Problem(s.path("allowed_models") + "/" + std::to_string(i),
                      "unknown model '" + name + "' (not in models)");
      }
    }
    for (const UserTierLimits& other : out) {
      if (other.tier == t.tier) {
        throw Problem(s.path("tier"), "duplicate tier '" + t.tier + "'");
      }
    }
    out.push_back(std::move(t));
  });
}

}  // namespace

billing::PriceTable price_table(const BillingConfig& billing) {
  const TimeZone zone = load_time_zone(billing.time_zone).zone;
  std::vector<billing::Price> prices;
  for (const PriceConfig& p : billing.prices) {
    billing::Price price;
    price.model = p.model;
    price.currency = p.currency;
    if (!p.time_zone.empty())
      price.zone = std::make_shared<const TimeZone>(load_time_zone(p.time_zone).zone);
    price.effective_from =
        billing::parse_effective_from(p.effective_from, price.zone ? *price.zone : zone)
            .value_or(std::chrono::sys_seconds{});
    price.input_per_million_micros = billing::parse_decimal_micros(p.input_per_million).value_or(0);
    price.cached_input_per_million_micros =
        billing::parse_decimal_micros(p.cached_input_per_million).value_or(0);
    price.output_per_million_micros =
        billing::parse_decimal_micros(p.output_per_million).value_or(0);
    for (const PriceWindow& w : p.windows) {
      billing::PriceWindow window;
      window.from_minute = billing::parse_clock_minutes(w.from).value_or(0);
      window.to_minute = billing::parse_clock_minutes(w.to).value_or(0);
      window.multiplier_micros =
          billing::parse_decimal_micros(w.multiplier).value_or(billing::kMicrosPerUnit);
      if (!w.days.empty()) {
        window.days = 0;
        for (const std::string& day : w.days)
          window.days |= billing::parse_day_kind(day).value_or(0);
      }
      price.windows.push_back(window);
    }
    prices.push_back(std::move(price));
  }
  std::vector<std::chrono::sys_days> holidays;
  for (const std::string& date : billing.holidays) {
    if (auto day = billing::parse_date(date))
      holidays.push_back(*day);
  }
  return billing::PriceTable(zone, std::move(prices), std::move(holidays));
}

billing::Exchange budget_exchange(const BillingConfig& billing) {
  std::map<std::string, std::int64_t, std::less<>> rates;
  for (const auto& [currency, rate] : billing.exchange_rates)
    rates[currency] = billing::parse_decimal_micros(rate).value_or(0);
  return billing::Exchange(billing.budget_currency, std::move(rates));
}

namespace {

void read_otlp(const Section& s, OtlpConfig& out) {
  read_fields(s, out, kOtlpFields);
  if (!out.endpoint.empty() && out.endpoint.rfind("http://", 0) != 0 &&
      out.endpoint.rfind("https://", 0) != 0) {
    throw Problem(s.path("endpoint"),
                  "expected an http:// or https:// URL, not '" + out.endpoint + "'");
  }
  read_properties(s, "headers", out.headers);
}

Config read_config(const Value& doc) {
  Config c;
  Section root(&doc, "");
  read_fields(root.child("postgres"), c.postgres, kPostgresFields);
  read_kafka(root.child("kafka"), c.kafka);
  read_dispatcher(root.child("dispatcher"), c.dispatcher);
  read_worker(root.child("worker"), c.worker);
  read_fields(root.child("task_defaults"), c.task_defaults, kTaskDefaultFields);
  read_models(root, c.models);
  read_tools(root, c.tools);
  read_billing(root.child("billing"), c.models, c.billing);
  // Every model call is billed: a model without a price would cost nothing, silently.
  for (std::size_t i = 0; i < c.models.size(); ++i) {
    const std::string& name = c.models[i].name;
    if (std::none_of(c.billing.prices.begin(), c.billing.prices.end(),
                     [&](const PriceConfig& p) { return p.model == name; })) {
      throw Problem("/models/" + std::to_string(i) + "/name",
                    "model '" + name + "' has no price in billing.prices");
    }
  }
  read_react(root.child("react"), c.react);
  read_plan_execute(root.child("plan_execute"), c.plan_execute);
  read_tiers(root, c.models, c.tiers);
  read_fields(root.child("metrics"), c.metrics, kMetricsFields);
  read_fields(root.child("telemetry"), c.telemetry, kTelemetryFields);
  if (const std::string& link = c.telemetry.trace_link;
      !link.empty() && ((link.rfind("http://", 0) != 0 && link.rfind("https://", 0) != 0) ||
                        link.find("{trace_id}") == std::string::npos)) {
    throw Problem("/telemetry/trace_link",
                  "expected an http:// or https:// URL holding {trace_id}, not '" + link + "'");
  }
  read_otlp(root.child("telemetry").child("otlp"), c.telemetry.otlp);
  // Without an auth section every API request is refused (401): closed by default.
  if (root.get("auth") != nullptr)
    read_auth(root.child("auth"), c.auth);

  if (!c.tiers.empty() && c.find_tier(c.task_defaults.tier) == nullptr) {
    throw Problem("/task_defaults/tier",
                  "unknown tier '" + c.task_defaults.tier + "' (not in tiers)");
  }
  if (c.task_defaults.model.empty()) {
    c.task_defaults.model = c.models.front().name;
  } else if (c.find_model(c.task_defaults.model) == nullptr) {
    throw Problem("/task_defaults/model",
                  "unknown model '" + c.task_defaults.model + "' (not in models)");
  }
  return c;
}

// Reads react.system_prompt_file into react.system_prompt. A relative path is taken from
// the folder of the configuration file, so the file can sit beside it wherever the
// process starts. Trailing white space is dropped (editors add a final newline).
void read_system_prompt_file(ReactConfig& react, const std::string& source_name) {
  if (react.system_prompt_file.empty())
    return;
  std::filesystem::path path(react.system_prompt_file);
  if (path.is_relative())
    path = std::filesystem::path(source_name).parent_path() / path;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Problem("/react/system_prompt_file",
                  "cannot open '" + path.string() + "': " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    throw Problem("/react/system_prompt_file",
                  "cannot read '" + path.string() + "': " + std::strerror(errno));
  }
  std::string prompt = text.str();
  prompt.erase(prompt.find_last_not_of(" \t\r\n") + 1);
  if (prompt.empty())
    throw Problem("/react/system_prompt_file", "'" + path.string() + "' is empty");
  react.system_prompt = std::move(prompt);
}

// " (line N)" for the nearest node at or above `path` that has a known line.
std::string line_suffix(const LineMap& lines, std::string path) {
  while (!path.empty()) {
    if (auto it = lines.find(path); it != lines.end()) {
      return " (line " + std::to_string(it->second) + ")";
    }
    path.erase(path.rfind('/'));
  }
  return "";
}

// `line`, when known (non-zero), is more exact than the line of the node at `path`.
[[noreturn]] void fail(const std::string& source, const std::string& path,
                       const std::string& message, const LineMap& lines, int line = 0) {
  throw ConfigError(source + ": " + (path.empty() ? "(root)" : path) + ": " + message +
                    (line > 0 ? " (line " + std::to_string(line) + ")" : line_suffix(lines, path)));
}

// Braces are flow syntax inside [...] and {...}, so an unquoted ${VAR} there is not valid
// YAML; yaml-cpp only says the collection is not closed.
std::string flow_reference_hint(const std::string& text, const YAML::Exception& e) {
  if (e.mark.is_null() || e.msg.find("flow") == std::string::npos) {
    return "";
  }
  std::size_t begin = 0;
  for (int n = 0; n < e.mark.line; ++n) {
    begin = text.find('\n', begin);
    if (begin == std::string::npos) {
      return "";
    }
    ++begin;
  }
  std::size_t end = text.find('\n', begin);
  std::string_view line =
      std::string_view(text).substr(begin, end == std::string::npos ? end : end - begin);
  if (line.find("${") == std::string_view::npos) {
    return "";
  }
  return " (an unquoted ${...} cannot be inside [...] or {...}: quote it, or write the "
         "collection in block style)";
}

}  // namespace

const ModelConfig* Config::find_model(const std::string& name) const {
  for (const ModelConfig& m : models) {
    if (m.name == name) {
      return &m;
    }
  }
  return nullptr;
}

const UserTierLimits* Config::find_tier(const std::string& name) const {
  for (const UserTierLimits& t : tiers) {
    if (t.tier == name)
      return &t;
  }
  return nullptr;
}

const UserTierLimits* Config::tier_for(const std::string& user_tier) const {
  const UserTierLimits* tier = user_tier.empty() ? nullptr : find_tier(user_tier);
  return tier != nullptr ? tier : find_tier(task_defaults.tier);
}

UserLimits Config::limits_for(const UserLimitOverrides& overrides) const {
  const UserTierLimits* tier = tier_for(overrides.tier);
  return with_overrides(tier != nullptr ? tier->limits : UserLimits{}, overrides);
}

Permission Config::tool_permission_for(const std::string& user_tier,
                                       const std::string& user_override) const {
  if (auto own = parse_permission(user_override))
    return *own;
  const UserTierLimits* tier = tier_for(user_tier);
  return tier ? tier->limits.tool_permission : Permission::kWrite;
}

std::string Config::model_refusal(const std::string& user_tier, const std::string& model) const {
  const UserTierLimits* tier = tier_for(user_tier);
  if (tier == nullptr || tier->allowed_models.empty() ||
      std::find(tier->allowed_models.begin(), tier->allowed_models.end(), model) !=
          tier->allowed_models.end()) {
    return {};
  }
  std::string allowed;
  for (const std::string& name : tier->allowed_models)
    allowed += (allowed.empty() ? "" : ", ") + name;
  return "model '" + model + "' is not allowed for tier '" + tier->tier + "' (allowed: " + allowed +
         ")";
}

std::int64_t Config::monthly_budget_micros_for(const std::string& user_tier,
                                               std::optional<std::int64_t> user_override) const {
  if (user_override)
    return *user_override;
  const UserTierLimits* tier = tier_for(user_tier);
  return tier == nullptr ? 0 : tier->limits.monthly_budget_micros;
}

const std::string& Config::strategy_for(const std::string& user_tier) const {
  const UserTierLimits* tier = tier_for(user_tier);
  return tier != nullptr && !tier->strategy.empty() ? tier->strategy : task_defaults.strategy;
}

const ToolConfig* Config::find_tool(const std::string& name) const {
  for (const ToolConfig& t : tools) {
    if (t.name == name) {
      return &t;
    }
  }
  return nullptr;
}

std::optional<std::string> process_environment(const std::string& name) {
  if (const char* value = std::getenv(name.c_str())) {
    return std::string(value);
  }
  return std::nullopt;
}

std::string interpolate(const std::string& text, EnvLookup lookup) {
  try {
    return substitute(text, lookup == nullptr ? process_environment : lookup);
  } catch (const ReferenceError& e) {
    throw ConfigError(std::string(e.what()) + " (line " + std::to_string(e.line) + ")");
  }
}

Config load_config_text(const std::string& yaml_text, const std::string& source_name,
                        EnvLookup lookup) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    std::string where = e.mark.is_null() ? ""
                                         : "line " + std::to_string(e.mark.line + 1) + ", column " +
                                               std::to_string(e.mark.column + 1) + ": ";
    throw ConfigError(source_name + ": invalid YAML: " + where + e.msg +
                      flow_reference_hint(yaml_text, e));
  }

  LineMap lines;
  rapidjson::Document doc;
  const Substitution env{lookup == nullptr ? process_environment : lookup, yaml_text};
  try {
    std::size_t values = 0;
    yaml_to_json(root, doc, doc.GetAllocator(), "", lines, env, 0, values);
  } catch (const Problem& p) {
    fail(source_name, p.path, p.what(), lines, p.line);
  } catch (const YAML::Exception& e) {
    throw ConfigError(source_name + ": invalid YAML: " + e.msg);
  }

  std::optional<codec::SchemaViolation> violation;
  try {
    violation = codec::validate(doc, kSchemaFile);
  } catch (const std::invalid_argument& e) {
    // A broken embedded schema: a build problem, but still reported as a startup error.
    throw ConfigError(source_name + ": cannot validate: " + e.what());
  }
  if (violation) {
    fail(source_name, violation->path, violation->message, lines);
  }

  try {
    Config config = read_config(doc);
    config.source = source_name;
    read_system_prompt_file(config.react, source_name);
    return config;
  } catch (const Problem& p) {
    fail(source_name, p.path, p.what(), lines, p.line);
  }
}

Config load_config_file(const std::string& path, EnvLookup lookup) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError(path + ": cannot open: " + std::strerror(errno));
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) {
    throw ConfigError(path + ": cannot read: " + std::strerror(errno));
  }
  return load_config_text(buffer.str(), path, lookup);
}

}  // namespace agentfleet::config

namespace agentfleet::config {

std::string default_config_path() {
  const char* from_env = std::getenv("AGENTFLEET_CONFIG");
  return from_env && *from_env ? from_env : "config/agentfleet.yaml";
}

}  // namespace agentfleet::config

namespace agentfleet::config {

namespace {
void plain_yaml_to_json(const YAML::Node& node, Value& out, Allocator& alloc,
                        const std::string& path, int depth, std::size_t& values) {
  if (depth > kMaxYamlDepth)
    throw std::runtime_error(path + ": nested too deeply");
  if (++values > kMaxYamlValues)
    throw std::runtime_error(path + ": more than " + std::to_string(kMaxYamlValues) + " values");
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      out.SetNull();
      return;
    case YAML::NodeType::Scalar:
      scalar_to_json(node.Scalar(), node.Tag(), out, alloc);
      return;
    case YAML::NodeType::Sequence: {
      out.SetArray();
      std::size_t index = 0;
      for (const auto& item : node) {
        Value v;
        plain_yaml_to_json(item, v, alloc, path + "/" + std::to_string(index++), depth + 1, values);
        out.PushBack(v, alloc);
      }
      return;
    }
    case YAML::NodeType::Map: {
      out.SetObject();
      std::set<std::string> seen;
      for (const auto& entry : node) {
        if (!entry.first.IsScalar())
          throw std::runtime_error(path + ": mapping keys must be plain strings");
        const std::string& name = entry.first.Scalar();
        const std::string key_path = path + "/" + codec::json_pointer_token(name);
        if (!seen.insert(name).second)
          throw std::runtime_error(key_path + ": duplicate key '" + name + "'");
        Value k(name.c_str(), static_cast<SizeType>(name.size()), alloc);
        Value v;
        plain_yaml_to_json(entry.second, v, alloc, key_path, depth + 1, values);
        out.AddMember(k, v, alloc);
      }
      return;
    }
  }
}
}  // namespace

rapidjson::Document yaml_text_to_json(std::string_view yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    throw std::runtime_error(std::string("invalid YAML: ") + e.what());
  }
  rapidjson::Document doc;
  std::size_t values = 0;
  plain_yaml_to_json(root, doc, doc.GetAllocator(), "", 0, values);
  return doc;
}

}  // namespace agentfleet::config
