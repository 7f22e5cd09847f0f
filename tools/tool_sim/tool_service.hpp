#pragma once
// tool-sim's whole behaviour without sockets: one tool call in (tool name, the caller's
// user id from the X-User-Id header, the Idempotency-Key header, the JSON arguments), one
// HTTP status and JSON body out; plus the read-only views served by /stats, /records and
// /items, and the reset behind /admin/reset. main.cpp only maps HTTP onto these calls.
//
// Idempotency: the first call with a given (user, key) executes and its response (status
// and body, errors included) is stored; later calls with the same (user, key) get the
// stored response back without executing, counted as duplicates, and additionally as key
// conflicts when their tool or arguments differ from the first call's. Keys of different
// users never collide. At most `max_keys` keys are kept; the oldest are forgotten first
// (counted in stats as keys_evicted).
//
// The protocol of docs/tools.md, for a service whose calls take time: admit() runs when a
// call arrives, before its latency. A key another request is running right now is answered
// 409 idempotency_key_in_use (the caller asks again after Retry-After and gets the stored
// answer); a call whose X-Task-Attempt is lower than one already seen with its key is
// refused 409 stale_attempt (a worker that lost the task to a later attempt), whether the
// key is running or stored. Otherwise admit() reserves the key until call() runs it.
// `keyless_tools` run as a service without idempotency support would: every call
// executes, so a call sent twice shows in /records as its key executed twice.
//
// Time: "now" comes from the injected clock and is read at the configured fixed UTC offset
// (timestamps, the seed's {{today}}). Tests pass a fixed clock.
//
// Faults (tool_sim's side of tools/llm_sim/fault_schedule.hpp): main.cpp decides when a
// fault fires; `refuse` answers such a call without executing it (no side effect, no
// idempotency record, so a retry with the same key executes), and `note_fault` counts a
// fault that only touched the delivery of an executed call.
//
// Envelope: successful results are the bare payload ({"items": ...}) by default, or
// {"data": <payload>} with Envelope::kData; errors are {"error": ...} either way.
//
// Thread-safety: every public member takes one internal mutex, so a ToolService may be
// shared by the threads of an io_context; calls are serialized, which also makes two
// concurrent calls with the same key execute once.

#include "tools/llm_sim/fault_schedule.hpp"
#include "tools/tool_sim/item_store.hpp"
#include "tools/tool_sim/seed.hpp"
#include "tools/tool_sim/time_model.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace agentfleet::tool_sim {

using Clock = std::function<std::chrono::system_clock::time_point()>;

enum class Envelope { kBare, kData };

struct ToolServiceOptions {
  int utc_offset_minutes = 8 * 60;  // +08:00
  Envelope envelope = Envelope::kBare;
  std::size_t max_records = 100000;
  std::size_t max_keys = 1000000;
  Clock clock;                             // empty: std::chrono::system_clock::now
  std::vector<std::string> keyless_tools;  // tools that keep no idempotency keys
};

struct ToolCall {
  std::string_view tool;             // the {name} of POST /tools/{name}
  std::string_view user_id;          // X-User-Id; empty when the header is missing
  std::string_view idempotency_key;  // Idempotency-Key; empty when absent
  std::string_view body;             // the JSON arguments; empty means {}
  int attempt = 0;                   // X-Task-Attempt; 0 when absent or unreadable
};

struct ToolResponse {
  int status = 200;
  std::string body;       // a JSON object
  bool replayed = false;  // served from the idempotency store
};

class ToolService {
 public:
  explicit ToolService(ToolServiceOptions options = {});

  // Replaces every user's items and groups with the seed's (empty text: no items) and
  // clears counters, idempotency keys and records; item ids restart at 1, so a seed gives
  // the same ids every time. Throws SeedError, leaving the state untouched, when the seed
  // is malformed or one of its items fails create_item's validation.
  void reset(std::string_view seed_yaml);

  // On arrival (see above): an answer that ends the call now, or nullopt with the key
  // reserved for it (release() gives the reservation up if call() will not run).
  std::optional<ToolResponse> admit(const ToolCall& call);
  void release(const ToolCall& call);
  ToolResponse call(const ToolCall& call);

  // The answer of a fault that fires instead of the call (http_429/500/502/503: the error
  // status with {"error":{"code":"injected_fault",...}}; not_json: 200 with an HTML body;
  // hang: nothing is sent, the body is empty). Counted in `calls` and `injected`; the
  // call does not execute.
  ToolResponse refuse(const ToolCall& call, const sim::FaultSpec& fault);
  // Counts a fault on the delivery of a call that executed (close_mid_response, slow).
  void note_fault(sim::FaultMode mode);

  // {"calls","executed","duplicates","key_conflicts","side_effects","keys_evicted",
  //  "injected","in_progress","stale_attempts","keyless_calls","faults": {mode: N},
  //  "by_tool": {tool: {"calls","executed","duplicates","errors","injected"}}}
  std::string stats_json() const;
  // [{"user_id","tool","idempotency_key","status","side_effect","at"}] of executed calls,
  // oldest first; all users when user_id is nullopt.
  std::string records_json(const std::optional<std::string>& user_id) const;
  // {"items": [...], "count": N} in display order.
  std::string items_json(const std::string& user_id) const;

  CivilDate today() const;
  static const std::vector<std::string_view>& tool_names();

 private:
  struct Executed {
    int status = 200;
    std::string body;
    bool side_effect = false;
  };
  struct StoredResponse {
    std::string fingerprint;  // tool + canonical arguments of the first call
    int status = 200;
    std::string body;
    int attempt = 0;  // the highest X-Task-Attempt seen with the key
  };
  struct ToolCounters {
    std::uint64_t calls = 0;
    std::uint64_t executed = 0;
    std::uint64_t duplicates = 0;
    std::uint64_t errors = 0;
    std::uint64_t injected = 0;
  };
  struct Record {
    std::string user_id;
    std::string tool;
    std::optional<std::string> idempotency_key;
    int status = 200;
    bool side_effect = false;
    std::string at;
  };

  ToolResponse enveloped(ToolResponse response) const;
  Executed execute(std::string_view tool, const std::string& user_id, std::string_view body);
  std::string now_timestamp() const;
  void remember(std::string key, StoredResponse response);
  // "user \0 key", or empty when the call keeps no key (none sent, or a keyless tool).
  std::string key_of(const ToolCall& call) const;
  // 409 stale_attempt, counted.
  ToolResponse stale(const ToolCall& call, int seen);

  ToolServiceOptions options_;
  mutable std::mutex mutex_;
  ItemStore store_;
  std::uint64_t calls_ = 0;
  std::uint64_t executed_ = 0;
  std::uint64_t duplicates_ = 0;
  std::uint64_t key_conflicts_ = 0;
  std::uint64_t side_effects_ = 0;
  std::uint64_t keys_evicted_ = 0;
  std::uint64_t injected_ = 0;
  std::uint64_t in_progress_ = 0;
  std::uint64_t stale_attempts_ = 0;
  std::uint64_t keyless_ = 0;
  std::map<std::string, std::uint64_t, std::less<>> faults_;
  std::map<std::string, ToolCounters, std::less<>> by_tool_;
  std::unordered_map<std::string, StoredResponse> responses_;  // user '\0' key -> response
  std::deque<std::string> key_order_;                          // oldest first, for eviction
  std::unordered_map<std::string, int> running_;  // keys admitted, not yet run -> attempt
  std::deque<Record> records_;
};

// Builds a store from a parsed seed through create_item's rules (exposed for tests).
// Throws SeedError naming the item's path.
ItemStore build_store(const Seed& seed, const std::string& now);

}  // namespace agentfleet::tool_sim
