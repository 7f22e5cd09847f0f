#include "tools/llm_sim/latency.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <vector>

namespace agentfleet::sim {

namespace {

std::optional<double> parse_number(std::string_view text) {
  if (text.empty() || text.find_first_not_of("0123456789.") != std::string_view::npos) {
    return std::nullopt;
  }
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::string format_number(double value) {
  char buffer[32];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return ec == std::errc() ? std::string(buffer, end) : std::string("0");
}

}  // namespace

std::string LatencyDistribution::describe() const {
  switch (kind) {
    case Kind::kFixed:
      return "fixed:" + format_number(a);
    case Kind::kUniform:
      return "uniform:" + format_number(a) + ":" + format_number(b);
    case Kind::kLogNormal:
      return "lognormal:" + format_number(a) + ":" + format_number(b);
  }
  return "fixed:0";
}

std::optional<LatencyDistribution> parse_latency(std::string_view text, std::string* error) {
  const auto fail = [&](const std::string& message) -> std::optional<LatencyDistribution> {
    if (error != nullptr) {
      *error = "latency '" + std::string(text) + "': " + message +
               " (expected fixed:MS, uniform:MIN:MAX or lognormal:MEDIAN:SIGMA)";
    }
    return std::nullopt;
  };
  std::vector<std::string_view> parts;
  std::string_view rest = text;
  for (;;) {
    const auto colon = rest.find(':');
    parts.push_back(rest.substr(0, colon));
    if (colon == std::string_view::npos) {
      break;
    }
    rest = rest.substr(colon + 1);
  }
  if (parts.size() == 1) {
    parts.insert(parts.begin(), "fixed");
  }
  const std::string_view kind = parts[0];
  std::vector<double> values;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const auto value = parse_number(parts[i]);
    if (!value) {
      return fail("'" + std::string(parts[i]) + "' is not a non-negative number");
    }
    values.push_back(*value);
  }
  const auto in_range = [](double ms) { return ms >= 0 && ms <= kMaxLatencyMs; };
  if (kind == "fixed") {
    if (values.size() != 1) {
      return fail("fixed takes one value");
    }
    if (!in_range(values[0])) {
      return fail("milliseconds must be 0.." + std::to_string(kMaxLatencyMs));
    }
    return LatencyDistribution{LatencyDistribution::Kind::kFixed, values[0], 0};
  }
  if (kind == "uniform") {
    if (values.size() != 2) {
      return fail("uniform takes MIN:MAX");
    }
    if (!in_range(values[0]) || !in_range(values[1]) || values[0] > values[1]) {
      return fail("needs 0 <= MIN <= MAX <= " + std::to_string(kMaxLatencyMs));
    }
    return LatencyDistribution{LatencyDistribution::Kind::kUniform, values[0], values[1]};
  }
  if (kind == "lognormal") {
    if (values.size() != 2) {
      return fail("lognormal takes MEDIAN:SIGMA");
    }
    if (values[0] <= 0 || values[0] > kMaxLatencyMs || values[1] > 10) {
      return fail("needs 0 < MEDIAN <= " + std::to_string(kMaxLatencyMs) + " and 0 <= SIGMA <= 10");
    }
    return LatencyDistribution{LatencyDistribution::Kind::kLogNormal, values[0], values[1]};
  }
  return fail("unknown distribution '" + std::string(kind) + "'");
}

double RandomSource::uniform_locked() {
  // 53 random bits -> [0, 1).
  return static_cast<double>(engine_() >> 11) * 0x1.0p-53;
}

double RandomSource::uniform() {
  std::lock_guard lock(mutex_);
  return uniform_locked();
}

double RandomSource::normal() {
  std::lock_guard lock(mutex_);
  const double u1 = 1.0 - uniform_locked();  // (0, 1]: log is finite
  const double u2 = uniform_locked();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

std::chrono::milliseconds RandomSource::sample(const LatencyDistribution& distribution) {
  double ms = 0;
  switch (distribution.kind) {
    case LatencyDistribution::Kind::kFixed:
      ms = distribution.a;
      break;
    case LatencyDistribution::Kind::kUniform:
      ms = distribution.a + (distribution.b - distribution.a) * uniform();
      break;
    case LatencyDistribution::Kind::kLogNormal:
      ms = distribution.a * std::exp(distribution.b * normal());
      break;
  }
  ms = std::clamp(std::round(ms), 0.0, static_cast<double>(kMaxLatencyMs));
  return std::chrono::milliseconds(static_cast<std::int64_t>(ms));
}

}  // namespace agentfleet::sim
