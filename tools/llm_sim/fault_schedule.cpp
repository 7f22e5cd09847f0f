#include "tools/llm_sim/fault_schedule.hpp"

#include <algorithm>
#include <cmath>

#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace agentfleet::sim {

namespace {

using rapidjson::Value;

constexpr std::pair<FaultMode, std::string_view> kModeNames[] = {
    {FaultMode::kHttp429, "http_429"},
    {FaultMode::kHttp500, "http_500"},
    {FaultMode::kHttp502, "http_502"},
    {FaultMode::kHttp503, "http_503"},
    {FaultMode::kInsufficientQuota, "insufficient_quota"},
    {FaultMode::kCloseMidResponse, "close_mid_response"},
    {FaultMode::kNotJson, "not_json"},
    {FaultMode::kHang, "hang"},
    {FaultMode::kSlow, "slow"},
};

constexpr std::int64_t kMaxCount = 1'000'000'000;
constexpr double kMaxSeconds = 86400;
constexpr std::int64_t kMaxHangSeconds = 3600;

FaultSpecError error_at(std::string path, std::string message) {
  return FaultSpecError{std::move(path), std::move(message)};
}

std::optional<double> number_of(const Value& value) {
  return value.IsNumber() ? std::optional<double>(value.GetDouble()) : std::nullopt;
}

std::optional<std::int64_t> integer_of(const Value& value) {
  if (value.IsInt64()) {
    return value.GetInt64();
  }
  if (value.IsDouble() && std::floor(value.GetDouble()) == value.GetDouble() &&
      std::abs(value.GetDouble()) < 9e15) {
    return static_cast<std::int64_t>(value.GetDouble());
  }
  return std::nullopt;
}

}  // namespace

std::string_view fault_mode_name(FaultMode mode) {
  for (const auto& [candidate, name] : kModeNames) {
    if (candidate == mode) {
      return name;
    }
  }
  return "unknown";
}

std::optional<FaultMode> parse_fault_mode(std::string_view name) {
  for (const auto& [mode, candidate] : kModeNames) {
    if (candidate == name) {
      return mode;
    }
  }
  return std::nullopt;
}

std::variant<FaultSpec, FaultSpecError> parse_fault_spec(const Value& object,
                                                         const FaultRules& rules) {
  if (!object.IsObject()) {
    return error_at("", "a fault is a JSON object such as {\"mode\":\"http_503\",\"count\":5}");
  }
  FaultSpec spec;
  const auto mode_member = object.FindMember("mode");
  if (mode_member == object.MemberEnd() || !mode_member->value.IsString()) {
    return error_at("/mode", "'mode' is required and must be a string");
  }
  const std::string_view mode_name(mode_member->value.GetString(),
                                   mode_member->value.GetStringLength());
  const auto mode = parse_fault_mode(mode_name);
  if (!mode || std::find(rules.modes.begin(), rules.modes.end(), *mode) == rules.modes.end()) {
    std::string known;
    for (const FaultMode allowed : rules.modes) {
      known += (known.empty() ? "" : ", ") + std::string(fault_mode_name(allowed));
    }
    return error_at("/mode",
                    "unknown mode '" + std::string(mode_name) + "' (known: " + known + ")");
  }
  spec.mode = *mode;

  for (auto it = object.MemberBegin(); it != object.MemberEnd(); ++it) {
    const std::string key(it->name.GetString(), it->name.GetStringLength());
    const std::string path = "/" + key;
    const Value& value = it->value;
    if (key == "mode") {
      continue;
    }
    if (key == "probability") {
      const auto p = number_of(value);
      if (!p || *p < 0 || *p > 1) {
        return error_at(path, "'probability' must be a number from 0 to 1");
      }
      spec.probability = *p;
    } else if (key == "count") {
      const auto n = integer_of(value);
      if (!n || *n < 1 || *n > kMaxCount) {
        return error_at(path, "'count' must be an integer from 1 to " + std::to_string(kMaxCount));
      }
      spec.count = *n;
    } else if (key == "duration_s") {
      const auto s = number_of(value);
      if (!s || *s <= 0 || *s > kMaxSeconds) {
        return error_at(path, "'duration_s' must be a number above 0 and at most 86400");
      }
      spec.duration_s = *s;
    } else if (key == "retry_after_s") {
      const auto s = number_of(value);
      if (!s || *s < 0 || *s > kMaxSeconds) {
        return error_at(path, "'retry_after_s' must be a number from 0 to 86400");
      }
      spec.retry_after_s = *s;
    } else if (key == "retry_after_ms") {
      const auto ms = integer_of(value);
      if (!ms || *ms < 0 || *ms > 86'400'000) {
        return error_at(path, "'retry_after_ms' must be an integer from 0 to 86400000");
      }
      spec.retry_after_ms = *ms;
    } else if (key == "hang_s") {
      const auto s = integer_of(value);
      if (!s || *s < 1 || *s > kMaxHangSeconds) {
        return error_at(path, "'hang_s' must be an integer from 1 to 3600");
      }
      spec.hang_s = *s;
    } else if (key == "latency") {
      std::string problem;
      std::optional<LatencyDistribution> latency;
      if (value.IsString()) {
        latency =
            parse_latency(std::string_view(value.GetString(), value.GetStringLength()), &problem);
      } else if (value.IsInt64()) {
        latency = parse_latency(std::to_string(value.GetInt64()), &problem);
      } else {
        problem = "'latency' must be a string such as \"uniform:50:300\"";
      }
      if (!latency) {
        return error_at(path, problem);
      }
      spec.latency = latency;
    } else if (!rules.scope_key.empty() && key == rules.scope_key) {
      if (!value.IsString() || value.GetStringLength() == 0) {
        return error_at(path, "'" + key + "' must be a non-empty string");
      }
      spec.scope.assign(value.GetString(), value.GetStringLength());
    } else if (rules.allow_step && key == "step") {
      const auto step = integer_of(value);
      if (!step || *step < 0 || *step > 100000) {
        return error_at(path, "'step' must be an integer from 0 to 100000");
      }
      spec.step = *step;
    } else {
      std::string known =
          "mode, probability, count, duration_s, retry_after_s, retry_after_ms, "
          "hang_s, latency";
      if (!rules.scope_key.empty()) {
        known += ", " + rules.scope_key;
      }
      if (rules.allow_step) {
        known += ", step";
      }
      return error_at(path, "unknown key '" + key + "' (known: " + known + ")");
    }
  }
  if (rules.require_bound && !spec.count && !spec.duration_s) {
    return error_at("", "a fault needs 'count' or 'duration_s' (or both) so that it ends");
  }
  if (spec.mode == FaultMode::kSlow && !spec.latency) {
    return error_at("/latency", "mode 'slow' needs 'latency', e.g. \"fixed:5000\"");
  }
  return spec;
}

std::variant<FaultSpec, FaultSpecError> parse_fault_spec(std::string_view json,
                                                         const FaultRules& rules) {
  rapidjson::Document document;
  document.Parse(json.data(), json.size());
  if (document.HasParseError()) {
    return error_at("", std::string("the body is not valid JSON: ") +
                            rapidjson::GetParseError_En(document.GetParseError()));
  }
  return parse_fault_spec(document, rules);
}

std::vector<std::pair<std::string, std::string>> retry_headers(const FaultSpec& spec) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (spec.retry_after_s) {
    const auto seconds = static_cast<std::int64_t>(std::ceil(*spec.retry_after_s));
    headers.emplace_back("Retry-After", std::to_string(seconds));
  }
  if (spec.retry_after_ms) {
    headers.emplace_back("retry-after-ms", std::to_string(*spec.retry_after_ms));
  }
  return headers;
}

FaultSchedule::FaultSchedule(RandomSource& random, SteadyClock clock, std::string scope_key)
    : random_(random), clock_(std::move(clock)), scope_key_(std::move(scope_key)) {
  if (!clock_) {
    clock_ = [] { return std::chrono::steady_clock::now(); };
  }
}

std::uint64_t FaultSchedule::add(FaultSpec spec, Origin origin) {
  const auto now = clock_();
  std::lock_guard lock(mutex_);
  Entry entry;
  entry.id = next_id_++;
  entry.origin = origin;
  entry.spec = std::move(spec);
  entry.added = now;
  entries_.push_back(std::move(entry));
  return entries_.back().id;
}

bool FaultSchedule::expired(const Entry& entry, std::chrono::steady_clock::time_point now) const {
  if (entry.spec.count && entry.served >= static_cast<std::uint64_t>(*entry.spec.count)) {
    return true;
  }
  if (entry.spec.duration_s) {
    const auto limit = std::chrono::duration<double>(*entry.spec.duration_s);
    if (now - entry.added >= limit) {
      return true;
    }
  }
  return false;
}

void FaultSchedule::record_ended(const Entry& entry) {
  if (ended_.size() == kEndedKept)
    ended_.pop_front();
  ended_.push_back(entry);
}

void FaultSchedule::drop_expired(std::chrono::steady_clock::time_point now) {
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [&](const Entry& entry) {
                                  if (!expired(entry, now))
                                    return false;
                                  record_ended(entry);
                                  return true;
                                }),
                 entries_.end());
}

std::optional<FaultSpec> FaultSchedule::next(const std::optional<FaultTarget>& target) {
  const auto now = clock_();
  std::lock_guard lock(mutex_);
  drop_expired(now);
  for (Entry& entry : entries_) {
    const bool scoped = !entry.spec.scope.empty() || entry.spec.step.has_value();
    if (scoped != target.has_value()) {
      continue;
    }
    if (target) {
      if (!entry.spec.scope.empty() && entry.spec.scope != target->scope) {
        continue;
      }
      if (entry.spec.step && entry.spec.step != target->step) {
        continue;
      }
    }
    ++entry.seen;
    if (entry.spec.probability < 1 && !(random_.uniform() < entry.spec.probability)) {
      continue;
    }
    ++entry.served;
    FaultSpec fired = entry.spec;
    drop_expired(now);  // a count bound may just have been reached
    return fired;
  }
  return std::nullopt;
}

std::size_t FaultSchedule::clear(bool include_startup) {
  std::lock_guard lock(mutex_);
  const std::size_t before = entries_.size();
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [&](const Entry& entry) {
                                  if (!include_startup && entry.origin != Origin::kRuntime)
                                    return false;
                                  record_ended(entry);
                                  return true;
                                }),
                 entries_.end());
  return before - entries_.size();
}

std::size_t FaultSchedule::active() {
  const auto now = clock_();
  std::lock_guard lock(mutex_);
  drop_expired(now);
  return entries_.size();
}

std::string FaultSchedule::list_json() {
  const auto now = clock_();
  std::lock_guard lock(mutex_);
  drop_expired(now);
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> writer(out);
  const auto key = [&](std::string_view name) {
    writer.Key(name.data(), static_cast<rapidjson::SizeType>(name.size()));
  };
  const auto text = [&](std::string_view value) {
    writer.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
  };
  // What every listed fault says, active or ended: who it is, then what it did.
  const auto identity = [&](const Entry& entry) {
    key("id");
    writer.Uint64(entry.id);
    key("origin");
    text(entry.origin == Origin::kRuntime ? "runtime" : "startup");
    key("mode");
    text(fault_mode_name(entry.spec.mode));
  };
  const auto counts = [&](const Entry& entry) {
    key("served");
    writer.Uint64(entry.served);
    key("seen");
    writer.Uint64(entry.seen);
  };
  writer.StartObject();
  key("faults");
  writer.StartArray();
  for (const Entry& entry : entries_) {
    const FaultSpec& spec = entry.spec;
    writer.StartObject();
    identity(entry);
    key("probability");
    writer.Double(spec.probability);
    if (spec.count) {
      key("count");
      writer.Int64(*spec.count);
      key("remaining_count");
      writer.Int64(*spec.count - static_cast<std::int64_t>(entry.served));
    }
    if (spec.duration_s) {
      key("duration_s");
      writer.Double(*spec.duration_s);
      const double elapsed = std::chrono::duration<double>(now - entry.added).count();
      key("remaining_s");
      writer.Double(std::max(0.0, *spec.duration_s - elapsed));
    }
    if (spec.retry_after_s) {
      key("retry_after_s");
      writer.Double(*spec.retry_after_s);
    }
    if (spec.retry_after_ms) {
      key("retry_after_ms");
      writer.Int64(*spec.retry_after_ms);
    }
    if (spec.mode == FaultMode::kHang) {
      key("hang_s");
      writer.Int64(spec.hang_s);
    }
    if (spec.latency) {
      key("latency");
      text(spec.latency->describe());
    }
    if (!spec.scope.empty()) {
      key(scope_key_);
      text(spec.scope);
    }
    if (spec.step) {
      key("step");
      writer.Int64(*spec.step);
    }
    counts(entry);
    writer.EndObject();
  }
  writer.EndArray();
  key("ended");
  writer.StartArray();
  for (const Entry& entry : ended_) {
    writer.StartObject();
    identity(entry);
    counts(entry);
    writer.EndObject();
  }
  writer.EndArray();
  writer.EndObject();
  return std::string(out.GetString(), out.GetSize());
}

}  // namespace agentfleet::sim
