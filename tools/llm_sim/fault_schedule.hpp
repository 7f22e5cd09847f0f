#pragma once
// Fault injection shared by llm-sim and tool-sim: the fault specification both accept (on
// `POST /admin/faults`, in a scenario file, or from a flag) and the schedule that decides,
// request by request, whether a fault answers instead of the simulator.
//
// A fault has a mode, a probability (default 1) and bounds: it is removed once it has
// answered `count` requests, or once `duration_s` seconds have passed since it was added,
// whichever comes first. Runtime faults need at least one bound; faults from flags and
// scenario files may have none (they last until the process ends). A fault may be scoped
// (llm-sim: to a scenario and optionally a step; tool-sim: to a tool).
//
// Each request asks the schedule once per pass: `next(nullopt)` before anything else looks
// at the request (unscoped faults), `next(target)` once the scenario or tool is known
// (scoped faults). Active faults are tried in the order they were added; each draws from
// the RandomSource (only when its probability is below 1), and the first that fires answers.
//
// Time comes from an injected steady clock and chance from an injected RandomSource, so
// tests are exact. Thread-safety: every member takes one mutex.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <rapidjson/document.h>

#include "tools/llm_sim/latency.hpp"

namespace agentfleet::sim {

enum class FaultMode {
  kHttp429,            // 429 with Retry-After / retry-after-ms as given
  kHttp500,            // 500
  kHttp502,            // 502
  kHttp503,            // 503 (Retry-After as given)
  kInsufficientQuota,  // 429 whose body says insufficient_quota (llm-sim only)
  kCloseMidResponse,   // the status line, headers and part of the body, then close
  kNotJson,            // 200 with a body that is not JSON
  kHang,               // nothing until the client closes, at most hang_s
  kSlow,               // the normal answer after an extra delay drawn from `latency`
};

std::string_view fault_mode_name(FaultMode mode);
std::optional<FaultMode> parse_fault_mode(std::string_view name);

struct FaultSpec {
  FaultMode mode = FaultMode::kHttp500;
  double probability = 1;
  std::optional<std::int64_t> count;
  std::optional<double> duration_s;
  std::optional<double> retry_after_s;         // Retry-After: ceil(seconds)
  std::optional<std::int64_t> retry_after_ms;  // retry-after-ms
  std::int64_t hang_s = 600;                   // kHang: upper bound of the silence
  std::optional<LatencyDistribution> latency;  // kSlow: the extra delay (required)
  std::string scope;                           // scenario or tool; empty = every request
  std::optional<std::int64_t> step;            // llm-sim: only this step index
};

// What one simulator accepts.
struct FaultRules {
  std::vector<FaultMode> modes;
  std::string scope_key;  // "scenario" (llm-sim) or "tool" (tool-sim)
  bool allow_step = false;
  bool require_bound = true;  // runtime faults must end by themselves
};

struct FaultSpecError {
  std::string path;  // JSON pointer of the problem, e.g. "/probability"
  std::string message;
};

// Parses `{"mode":"http_429","retry_after_s":2,"duration_s":10}`; unknown keys, wrong
// types, out-of-range values, a mode the rules do not allow, and (when required) a fault
// without `count` or `duration_s` are errors.
std::variant<FaultSpec, FaultSpecError> parse_fault_spec(const rapidjson::Value& object,
                                                         const FaultRules& rules);
std::variant<FaultSpec, FaultSpecError> parse_fault_spec(std::string_view json,
                                                         const FaultRules& rules);

// The retry headers a fault asks for: ("Retry-After", "2"), ("retry-after-ms", "1500").
std::vector<std::pair<std::string, std::string>> retry_headers(const FaultSpec& spec);

using SteadyClock = std::function<std::chrono::steady_clock::time_point()>;

// Where a request goes once known: the scenario (or tool) and the step.
struct FaultTarget {
  std::string_view scope;
  std::optional<std::int64_t> step;
};

class FaultSchedule {
 public:
  enum class Origin { kRuntime, kStartup };

  // `scope_key` names the scope in list_json ("scenario" or "tool"); an empty clock means
  // std::chrono::steady_clock::now.
  FaultSchedule(RandomSource& random, SteadyClock clock, std::string scope_key);

  // Adds a fault (its duration starts now) and returns its id (1, 2, ...).
  std::uint64_t add(FaultSpec spec, Origin origin = Origin::kRuntime);
  // The fault answering this request, if any, counted as served. nullopt target: unscoped
  // faults only; a target: scoped faults whose scope (and step, if set) match.
  std::optional<FaultSpec> next(const std::optional<FaultTarget>& target);
  // Removes runtime faults (and start-up ones too when asked); returns how many.
  std::size_t clear(bool include_startup = false);
  // {"faults":[{"id","origin","mode","probability",<bounds and parameters>,
  //   "served","seen","remaining_count","remaining_s"}],
  //  "ended":[{"id","origin","mode","served","seen"}]}: the active faults, then the last
  // kEndedKept that ended (their bound reached, or cleared), oldest first: what a fault did
  // can be asked after it is gone (tools/check-invariants: a fault took effect only if it
  // answered a request).
  std::string list_json();
  static constexpr std::size_t kEndedKept = 256;
  std::size_t active();

 private:
  struct Entry {
    std::uint64_t id = 0;
    Origin origin = Origin::kRuntime;
    FaultSpec spec;
    std::chrono::steady_clock::time_point added;
    std::uint64_t served = 0;
    std::uint64_t seen = 0;
  };
  bool expired(const Entry& entry, std::chrono::steady_clock::time_point now) const;
  void drop_expired(std::chrono::steady_clock::time_point now);
  void record_ended(const Entry& entry);

  RandomSource& random_;
  SteadyClock clock_;
  std::string scope_key_;
  std::mutex mutex_;
  std::uint64_t next_id_ = 1;
  std::deque<Entry> entries_;
  std::deque<Entry> ended_;  // at most kEndedKept, oldest first
};

}  // namespace agentfleet::sim
