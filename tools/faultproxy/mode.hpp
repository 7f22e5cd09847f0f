#pragma once
// The fault in force in the proxy (its Mode) and how control commands change it over time.
//
// FaultState holds one Mode at a time: a later command replaces an earlier one, and a timed
// mode reverts to `pass` once its time is up (expire). Each change bumps the mode's
// generation, so a shaper knows to restart its bandwidth bucket. Time comes from the caller
// (`now`, a steady-clock reading); nothing here reads a clock.
//
// Lifecycle: one FaultState per proxy, created in `pass`. Thread-safety: none; the proxy
// uses it from its single io_context thread.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "tools/faultproxy/control.hpp"

namespace agentfleet::faultproxy {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

enum class ModeKind { kPass, kBlackhole, kLatency, kBandwidth, kRefuse };

struct Mode {
  ModeKind kind = ModeKind::kPass;
  std::int64_t latency_us = 0;     // kLatency
  std::int64_t bytes_per_s = 0;    // kBandwidth
  std::optional<TimePoint> until;  // set: reverts to pass at this time
  std::uint64_t generation = 0;    // bumped by every change
};

// One word for the mode, as `status` shows it: pass, blackhole, latency:300ms,
// bandwidth:1000B/s, refuse.
std::string mode_name(const Mode& mode);

// The proxy's counters, for `status`.
struct ProxyCounters {
  std::size_t open_connections = 0;
  std::uint64_t accepted = 0;    // every accepted socket, refused ones included
  std::uint64_t bytes_up = 0;    // written to the target
  std::uint64_t bytes_down = 0;  // written to clients
};

// The `status` reply without its `ok ` prefix:
// mode=M connections=N accepted=N bytes_up=N bytes_down=N[ left_s=S]
// (left_s: whole seconds, rounded up, until a timed mode ends).
std::string status_text(const Mode& mode, const ProxyCounters& counters, TimePoint now);

class FaultState {
 public:
  const Mode& mode() const { return mode_; }

  // Replaces the mode with the one `command` sets (sets_mode(command) must hold; other
  // commands leave it unchanged). Returns the reply without `ok `: `mode=M for S s` or
  // `mode=M until pass` (or `mode=pass`).
  std::string apply(const ControlCommand& command, TimePoint now);

  // When a timed mode's time is up at `now`: back to pass, and true.
  bool expire(TimePoint now);

 private:
  Mode mode_;
};

}  // namespace agentfleet::faultproxy
