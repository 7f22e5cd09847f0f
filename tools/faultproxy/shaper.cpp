#include "tools/faultproxy/shaper.hpp"

#include <algorithm>
#include <cmath>

namespace agentfleet::faultproxy {

namespace {

constexpr std::size_t kMaxBurstBytes = 1 << 20;
// Floating-point slack when comparing the bucket's level with a slice: a refill computed
// from a retry time that was rounded up must not come out a hair short and loop.
constexpr double kLevelSlack = 1e-6;

}  // namespace

std::size_t burst_bytes(std::int64_t bytes_per_s) {
  return static_cast<std::size_t>(
      std::clamp<std::int64_t>(bytes_per_s / 20, 1, static_cast<std::int64_t>(kMaxBurstBytes)));
}

Admission DirectionShaper::admit(const Mode& mode, TimePoint read_at, std::size_t bytes,
                                 TimePoint now) {
  switch (mode.kind) {
    case ModeKind::kPass:
    case ModeKind::kRefuse:
      return {bytes, std::nullopt};
    case ModeKind::kBlackhole:
      return {0, std::nullopt};
    case ModeKind::kLatency: {
      const TimePoint due = read_at + std::chrono::microseconds(mode.latency_us);
      if (due > now) {
        return {0, due};
      }
      return {bytes, std::nullopt};
    }
    case ModeKind::kBandwidth:
      break;
  }
  const double rate = static_cast<double>(std::max<std::int64_t>(mode.bytes_per_s, 1));
  const auto capacity = static_cast<double>(burst_bytes(mode.bytes_per_s));
  if (generation_ != mode.generation) {
    generation_ = mode.generation;
    level_ = capacity;
    last_ = now;
  } else if (now > last_) {
    const double elapsed_s = std::chrono::duration<double>(now - last_).count();
    level_ = std::min(capacity, level_ + elapsed_s * rate);
    last_ = now;
  }
  const double slice = std::min(static_cast<double>(bytes), capacity);
  if (level_ + kLevelSlack >= slice) {
    const auto granted = std::min(
        bytes, static_cast<std::size_t>(std::max(slice, std::floor(level_ + kLevelSlack))));
    level_ -= static_cast<double>(granted);
    return {granted, std::nullopt};
  }
  const double wait_ns = std::ceil((slice - level_) / rate * 1e9);
  return {0, now + std::chrono::nanoseconds(static_cast<std::int64_t>(wait_ns))};
}

}  // namespace agentfleet::faultproxy
