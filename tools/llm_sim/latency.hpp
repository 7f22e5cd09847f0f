#pragma once
// Latency distributions and the seeded random source of both simulators (llm-sim and
// tool-sim link this part of tools/llm_sim as agentfleet_sim_faults).
//
// A distribution is written `fixed:MS`, `uniform:MIN:MAX` or `lognormal:MEDIAN:SIGMA`
// (milliseconds; a bare number means fixed). Samples are whole milliseconds clamped to
// [0, kMaxLatencyMs].
//
// RandomSource: a 64-bit Mersenne Twister with its own uniform and normal transforms (not
// the standard library's distributions, whose output is implementation-defined), so a
// seed gives the same sequence everywhere. Thread-safety: every member takes a mutex.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace agentfleet::sim {

inline constexpr std::int64_t kMaxLatencyMs = 600000;

struct LatencyDistribution {
  enum class Kind { kFixed, kUniform, kLogNormal };
  Kind kind = Kind::kFixed;
  double a = 0;  // fixed: the value; uniform: min; lognormal: median
  double b = 0;  // uniform: max; lognormal: sigma

  static LatencyDistribution fixed(double ms) { return {Kind::kFixed, ms, 0}; }
  bool is_zero() const { return kind == Kind::kFixed && a <= 0; }
  // The text it parses from, e.g. "uniform:50:300".
  std::string describe() const;
};

// Parses `fixed:200`, `200`, `uniform:50:300`, `lognormal:200:0.5`. Returns nullopt and
// sets `error` when the text is malformed or out of range (values 0..kMaxLatencyMs,
// min <= max, median > 0, sigma 0..10).
std::optional<LatencyDistribution> parse_latency(std::string_view text, std::string* error);

class RandomSource {
 public:
  explicit RandomSource(std::uint64_t seed) : engine_(seed) {}
  RandomSource(const RandomSource&) = delete;
  RandomSource& operator=(const RandomSource&) = delete;

  // Uniform in [0, 1).
  double uniform();
  // Standard normal (Box-Muller).
  double normal();
  // A sample of `distribution`, clamped to [0, kMaxLatencyMs].
  std::chrono::milliseconds sample(const LatencyDistribution& distribution);

 private:
  double uniform_locked();
  std::mutex mutex_;
  std::mt19937_64 engine_;
};

}  // namespace agentfleet::sim
