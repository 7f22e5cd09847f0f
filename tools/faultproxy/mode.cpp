#include "tools/faultproxy/mode.hpp"

#include <type_traits>

namespace agentfleet::faultproxy {

namespace {

std::int64_t seconds_left(const Mode& mode, TimePoint now) {
  if (!mode.until || *mode.until <= now) {
    return 0;
  }
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(*mode.until - now).count();
  return (ms + 999) / 1000;
}

}  // namespace

std::string mode_name(const Mode& mode) {
  switch (mode.kind) {
    case ModeKind::kPass:
      return "pass";
    case ModeKind::kBlackhole:
      return "blackhole";
    case ModeKind::kLatency: {
      // In milliseconds, with the decimals it was given: latency:300ms, latency:0.5ms.
      std::string ms = std::to_string(mode.latency_us / 1000);
      if (std::int64_t us = mode.latency_us % 1000; us != 0) {
        std::string fraction = std::to_string(1000 + us).substr(1);
        fraction.erase(fraction.find_last_not_of('0') + 1);
        ms += "." + fraction;
      }
      return "latency:" + ms + "ms";
    }
    case ModeKind::kBandwidth:
      return "bandwidth:" + std::to_string(mode.bytes_per_s) + "B/s";
    case ModeKind::kRefuse:
      return "refuse";
  }
  return "unknown";
}

std::string status_text(const Mode& mode, const ProxyCounters& counters, TimePoint now) {
  std::string text = "mode=" + mode_name(mode) +
                     " connections=" + std::to_string(counters.open_connections) +
                     " accepted=" + std::to_string(counters.accepted) +
                     " bytes_up=" + std::to_string(counters.bytes_up) +
                     " bytes_down=" + std::to_string(counters.bytes_down);
  if (mode.until) {
    text += " left_s=" + std::to_string(seconds_left(mode, now));
  }
  return text;
}

std::string FaultState::apply(const ControlCommand& command, TimePoint now) {
  if (!sets_mode(command)) {
    return "mode=" + mode_name(mode_);
  }
  Mode next;
  std::optional<int> seconds;
  std::visit(
      [&](const auto& c) {
        using C = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<C, BlackholeCommand>) {
          next.kind = ModeKind::kBlackhole;
          seconds = c.seconds;
        } else if constexpr (std::is_same_v<C, LatencyCommand>) {
          next.kind = ModeKind::kLatency;
          next.latency_us = c.us;
          seconds = c.seconds;
        } else if constexpr (std::is_same_v<C, BandwidthCommand>) {
          next.kind = ModeKind::kBandwidth;
          next.bytes_per_s = c.bytes_per_s;
          seconds = c.seconds;
        } else if constexpr (std::is_same_v<C, RefuseCommand>) {
          next.kind = ModeKind::kRefuse;
          seconds = c.seconds;
        }
      },
      command);
  if (seconds) {
    next.until = now + std::chrono::seconds(*seconds);
  }
  next.generation = mode_.generation + 1;
  mode_ = next;
  if (mode_.kind == ModeKind::kPass) {
    return "mode=pass";
  }
  return "mode=" + mode_name(mode_) +
         (seconds ? " for " + std::to_string(*seconds) + " s" : std::string(" until pass"));
}

bool FaultState::expire(TimePoint now) {
  if (!mode_.until || *mode_.until > now) {
    return false;
  }
  mode_ = Mode{ModeKind::kPass, 0, 0, std::nullopt, mode_.generation + 1};
  return true;
}

}  // namespace agentfleet::faultproxy
