#pragma once
// The fault proxy's control commands: one line of text in, a typed command (or the text
// of an `error` reply) out. The line protocol itself (a loopback TCP port, one reply line
// per command) lives in proxy.hpp; this file is only the grammar and its bounds.
//
//   pass                              forward normally (the default)
//   blackhole [SECONDS]               read nothing from either side, forward nothing, hold
//                                     new connections without connecting upstream
//   latency MS [SECONDS]              deliver every chunk MS after it was read (MS may have up
//                                     to 3 decimals: 0.5 is 500 microseconds)
//   bandwidth BYTES_PER_S [SECONDS]   cap each direction of each connection at that rate
//   reset                             close every open connection with RST on both sides
//   refuse [SECONDS]                  close new connections with RST right after accept
//   status                            mode and counters
//   help                              the commands
//
// Without SECONDS a fault lasts until the next command replaces it; with SECONDS it reverts
// to `pass` when they run out. Every number is bounded (the k* constants below).
//
// Pure functions; no state, safe from any thread.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace agentfleet::faultproxy {

inline constexpr int kMinFaultSeconds = 1;
inline constexpr int kMaxFaultSeconds = 3600;
inline constexpr int kMaxLatencyMs = 60000;
inline constexpr std::int64_t kMaxBytesPerSecond = 1'000'000'000;
// Longest control line accepted, without its newline.
inline constexpr std::size_t kMaxControlLine = 256;

struct PassCommand {};
struct BlackholeCommand {
  std::optional<int> seconds;  // nullopt: until replaced
};
struct LatencyCommand {
  std::int64_t us = 0;  // the delay, in microseconds
  std::optional<int> seconds;
};
struct BandwidthCommand {
  std::int64_t bytes_per_s = 0;
  std::optional<int> seconds;
};
struct ResetCommand {};
struct RefuseCommand {
  std::optional<int> seconds;
};
struct StatusCommand {};
struct HelpCommand {};

using ControlCommand = std::variant<PassCommand, BlackholeCommand, LatencyCommand, BandwidthCommand,
                                    ResetCommand, RefuseCommand, StatusCommand, HelpCommand>;

// A parsed command, or the message of an `error` reply (without the `error ` prefix).
struct ParsedCommand {
  std::optional<ControlCommand> command;
  std::string error;
};

// Parses one line (without its newline; a trailing '\r' and extra blanks are ignored).
ParsedCommand parse_control_command(std::string_view line);

// Whether the command replaces the proxy's mode (pass, blackhole, latency, bandwidth,
// refuse); reset, status and help leave it as it is.
bool sets_mode(const ControlCommand& command);

extern const char kControlHelp[];

}  // namespace agentfleet::faultproxy
