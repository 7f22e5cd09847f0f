#include "tools/faultproxy/control.hpp"

#include <algorithm>
#include <charconv>
#include <type_traits>
#include <vector>

namespace agentfleet::faultproxy {

namespace {

std::optional<std::int64_t> parse_number(std::string_view s, std::int64_t lo, std::int64_t hi) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) {
    return std::nullopt;
  }
  return v;
}

// Milliseconds with up to 3 decimals ("2", "0.5", "2.25"), as microseconds, within lo..hi ms.
std::optional<std::int64_t> parse_millis(std::string_view s, std::int64_t lo, std::int64_t hi) {
  const std::size_t dot = s.find('.');
  const auto whole = parse_number(s.substr(0, dot), lo, hi);
  if (!whole)
    return std::nullopt;
  std::int64_t us = *whole * 1000;
  if (dot != std::string_view::npos) {
    const std::string_view fraction = s.substr(dot + 1);
    if (fraction.empty() || fraction.size() > 3 ||
        !std::all_of(fraction.begin(), fraction.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::nullopt;
    std::int64_t scale = 100;
    for (char c : fraction) {
      us += (c - '0') * scale;
      scale /= 10;
    }
    if (us > hi * 1000)
      return std::nullopt;
  }
  return us;
}

std::vector<std::string_view> words_of(std::string_view line) {
  std::vector<std::string_view> words;
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && blank(line[i])) {
      ++i;
    }
    const std::size_t start = i;
    while (i < line.size() && !blank(line[i])) {
      ++i;
    }
    if (i > start) {
      words.push_back(line.substr(start, i - start));
    }
  }
  return words;
}

std::string range_text(std::int64_t lo, std::int64_t hi) {
  return std::to_string(lo) + ".." + std::to_string(hi);
}

ParsedCommand fail(std::string error) {
  return {std::nullopt, std::move(error)};
}

}  // namespace

const char kControlHelp[] =
    "commands: pass | blackhole [SECONDS] | latency MS [SECONDS] | bandwidth BYTES_PER_S "
    "[SECONDS] | reset | refuse [SECONDS] | status | help";

ParsedCommand parse_control_command(std::string_view line) {
  if (line.size() > kMaxControlLine) {
    return fail("line longer than " + std::to_string(kMaxControlLine) + " bytes");
  }
  const auto w = words_of(line);
  if (w.empty()) {
    return fail("empty command; " + std::string(kControlHelp));
  }
  const std::string_view verb = w[0];
  auto arity = [&](std::size_t lo, std::size_t hi) { return w.size() >= lo && w.size() <= hi; };
  // The optional SECONDS at w[i]: nullopt when absent; `bad` set when present but invalid.
  bool bad_seconds = false;
  auto seconds_at = [&](std::size_t i) -> std::optional<int> {
    if (i >= w.size()) {
      return std::nullopt;
    }
    auto s = parse_number(w[i], kMinFaultSeconds, kMaxFaultSeconds);
    bad_seconds = !s;
    return s ? std::optional<int>(static_cast<int>(*s)) : std::nullopt;
  };
  const std::string seconds_error =
      "SECONDS must be " + range_text(kMinFaultSeconds, kMaxFaultSeconds);

  if (verb == "pass" && arity(1, 1)) {
    return {PassCommand{}, {}};
  }
  if (verb == "reset" && arity(1, 1)) {
    return {ResetCommand{}, {}};
  }
  if (verb == "status" && arity(1, 1)) {
    return {StatusCommand{}, {}};
  }
  if (verb == "help" && arity(1, 1)) {
    return {HelpCommand{}, {}};
  }
  if (verb == "blackhole" && arity(1, 2)) {
    auto seconds = seconds_at(1);
    return bad_seconds ? fail(seconds_error) : ParsedCommand{BlackholeCommand{seconds}, {}};
  }
  if (verb == "refuse" && arity(1, 2)) {
    auto seconds = seconds_at(1);
    return bad_seconds ? fail(seconds_error) : ParsedCommand{RefuseCommand{seconds}, {}};
  }
  if (verb == "latency" && arity(2, 3)) {
    auto us = parse_millis(w[1], 0, kMaxLatencyMs);
    if (!us) {
      return fail("MS must be " + range_text(0, kMaxLatencyMs));
    }
    auto seconds = seconds_at(2);
    return bad_seconds ? fail(seconds_error) : ParsedCommand{LatencyCommand{*us, seconds}, {}};
  }
  if (verb == "bandwidth" && arity(2, 3)) {
    auto rate = parse_number(w[1], 1, kMaxBytesPerSecond);
    if (!rate) {
      return fail("BYTES_PER_S must be " + range_text(1, kMaxBytesPerSecond));
    }
    auto seconds = seconds_at(2);
    return bad_seconds ? fail(seconds_error) : ParsedCommand{BandwidthCommand{*rate, seconds}, {}};
  }
  return fail("cannot read '" + std::string(line.substr(0, 80)) + "'; " +
              std::string(kControlHelp));
}

bool sets_mode(const ControlCommand& command) {
  return std::visit(
      [](const auto& c) {
        using C = std::decay_t<decltype(c)>;
        return std::is_same_v<C, PassCommand> || std::is_same_v<C, BlackholeCommand> ||
               std::is_same_v<C, LatencyCommand> || std::is_same_v<C, BandwidthCommand> ||
               std::is_same_v<C, RefuseCommand>;
      },
      command);
}

}  // namespace agentfleet::faultproxy
