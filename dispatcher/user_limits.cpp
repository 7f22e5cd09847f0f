#include "dispatcher/user_limits.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "core/billing/money.hpp"
#include "core/codec/json_schema.hpp"
#include "core/codec/json_text.hpp"

namespace agentfleet::dispatcher {

namespace {
using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void key_string(Writer& w, const char* key, std::string_view value) {
  w.Key(key);
  w.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
}
}  // namespace

EffectiveLimits effective_limits(const config::Config& config, const ports::UserOverrides& o) {
  const config::UserTierLimits* tier = config.tier_for(o.tier);
  return EffectiveLimits{tier ? tier->tier : config.task_defaults.tier, config.limits_for(o)};
}

ports::QueueLimit queue_limit(const config::Config& config) {
  return [&config](const std::string& tier, std::optional<int> max_queued) {
    ports::UserOverrides o;
    o.tier = tier;
    o.max_queued = max_queued;
    return config.limits_for(o).max_queued;
  };
}

ports::ModelCheck model_check(const config::Config& config) {
  return [&config](const std::string& tier, const std::string& model) {
    return config.model_refusal(tier, model);
  };
}

std::string limits_json(const std::string& user_id, const EffectiveLimits& e,
                        const std::optional<ports::UserOverrides>& overrides) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  key_string(w, "user_id", user_id);
  key_string(w, "tier", e.tier);
  w.Key("effective");
  w.StartObject();
  w.Key("max_concurrency");
  w.Int(e.limits.max_concurrency);
  w.Key("requests_per_minute");
  w.Int(e.limits.requests_per_minute);
  w.Key("tokens_per_minute");
  w.Int64(e.limits.tokens_per_minute);
  w.Key("max_queued");
  w.Int(e.limits.max_queued);
  key_string(w, "monthly_budget", billing::format_micros(e.limits.monthly_budget_micros));
  key_string(w, "tool_permission", to_string(e.limits.tool_permission));
  w.Key("weight");
  w.Int(e.limits.weight);
  w.EndObject();
  w.Key("overrides");
  w.StartObject();
  if (overrides) {
    const ports::UserOverrides& o = *overrides;
    if (!o.tier.empty())
      key_string(w, "tier", o.tier);
    if (o.max_concurrency) {
      w.Key("max_concurrency");
      w.Int(*o.max_concurrency);
    }
    if (o.requests_per_minute) {
      w.Key("requests_per_minute");
      w.Int(*o.requests_per_minute);
    }
    if (o.tokens_per_minute) {
      w.Key("tokens_per_minute");
      w.Int64(*o.tokens_per_minute);
    }
    if (o.max_queued) {
      w.Key("max_queued");
      w.Int(*o.max_queued);
    }
    if (o.monthly_budget_micros)
      key_string(w, "monthly_budget", billing::format_micros(*o.monthly_budget_micros));
    if (o.tool_permission)
      key_string(w, "tool_permission", to_string(*o.tool_permission));
  }
  w.EndObject();
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::variant<ports::UserOverrides, codec::SchemaViolation> parse_limits_body(
    const config::Config& config, const std::string& user_id, std::string_view body) {
  rapidjson::Document doc;
  if (!codec::parse_json(doc, body))
    return codec::SchemaViolation{"/", "the body is not valid JSON (UTF-8, nesting at most 64)"};
  if (!doc.IsObject())
    return codec::SchemaViolation{"/", "expected a JSON object of limit overrides"};
  ports::UserOverrides o;
  o.user_id = user_id;
  // A positive integer up to `max`, or null (no override).
  auto positive = [](const rapidjson::Value& v, std::int64_t max) -> std::optional<std::int64_t> {
    if (!v.IsInt64() || v.GetInt64() < 1 || v.GetInt64() > max)
      return std::nullopt;
    return v.GetInt64();
  };
  for (const auto& m : doc.GetObject()) {
    const std::string key(m.name.GetString(), m.name.GetStringLength());
    const rapidjson::Value& v = m.value;
    const std::string path = "/" + codec::json_pointer_token(key);
    if (v.IsNull())
      continue;
    if (key == "tier") {
      if (!v.IsString() || !config.find_tier(v.GetString()))
        return codec::SchemaViolation{path, "must be the name of a configured tier"};
      o.tier = v.GetString();
    } else if (key == "max_concurrency" || key == "requests_per_minute" || key == "max_queued") {
      auto n = positive(v, 2147483647);
      if (!n)
        return codec::SchemaViolation{path, "must be an integer from 1 to 2147483647, or null"};
      (key == "max_concurrency"       ? o.max_concurrency
       : key == "requests_per_minute" ? o.requests_per_minute
                                      : o.max_queued) = static_cast<int>(*n);
    } else if (key == "tokens_per_minute") {
      auto n = positive(v, INT64_MAX);
      if (!n)
        return codec::SchemaViolation{path, "must be a positive integer, or null"};
      o.tokens_per_minute = *n;
    } else if (key == "monthly_budget") {
      const auto micros =
          v.IsString() ? billing::parse_decimal_micros(v.GetString()) : std::nullopt;
      if (!micros || *micros < 0) {
        return codec::SchemaViolation{
            path,
            "must be a decimal string with at most 6 decimals, e.g. \"100.50\" (\"0\": unlimited)"};
      }
      o.monthly_budget_micros = *micros;
    } else if (key == "tool_permission") {
      const auto permission =
          v.IsString() ? parse_permission(std::string_view(v.GetString(), v.GetStringLength()))
                       : std::nullopt;
      if (!permission)
        return codec::SchemaViolation{path, "must be one of read, write, execute, admin"};
      o.tool_permission = *permission;
    } else {
      return codec::SchemaViolation{
          path, "unknown field '" + key +
                    "' (expected tier, max_concurrency, requests_per_minute, tokens_per_minute, "
                    "max_queued, monthly_budget, tool_permission)"};
    }
  }
  return o;
}

}  // namespace agentfleet::dispatcher
