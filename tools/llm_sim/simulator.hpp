#pragma once
// llm-sim's answer to one OpenAI chat-completions request, computed from the request alone:
// the scenario is chosen by the last user message, the step index is the number of
// assistant messages already in the conversation, and the tool results of earlier steps
// are read back from the `tool` messages. No sockets, no clock: the caller passes `now`.
//
// Two protocols: function calling (tools in the request, tool_calls in the answer) and
// `react_json`, chosen when a system message holds the line `Protocol: react_json`: the
// answer is a JSON object in the assistant's content ({"thought","action","action_input"}
// or {"thought","final"}), and each observation comes back as a user message
// "Observation: <tool result JSON>". The same scenarios drive both.
//
// The answer's shape follows a ResponseStyle (the scenario's, else the caller's), so the
// provider variants a client must tolerate can be produced on demand.
//
// Thread-safety: a Simulator is immutable after construction; `complete` may be called
// concurrently from any thread.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tools/llm_sim/scenario.hpp"
#include "tools/llm_sim/tokens.hpp"

namespace agentfleet::llm_sim {

// A request llm-sim refuses with 400 (OpenAI's invalid_request_error).
struct RequestError {
  std::string message;
  std::string param;  // e.g. "messages", "messages[2].role"; empty when not one field
};

enum class Protocol { kFunctionCalling, kReactJson };
std::string_view protocol_name(Protocol protocol);  // "function_calling", "react_json"

// The literal line of a system message that selects react_json.
inline constexpr std::string_view kReactJsonMarker = "Protocol: react_json";
// plan_execute's lines (core/react/plan_execute.hpp): which role a call is for, its plan
// round and plan step.
inline constexpr std::string_view kAgentRoleLine = "Agent-Role:";
inline constexpr std::string_view kPlanRoundLine = "Plan-Round:";
inline constexpr std::string_view kPlanStepLine = "Plan-Step:";
// The prefix of a react_json observation (a user message).
inline constexpr std::string_view kObservationPrefix = "Observation:";

struct Completion {
  std::string body;                                 // the chat.completion JSON
  std::string scenario;                             // name of the scenario that answered
  std::size_t step = 0;                             // step index (assistant messages so far)
  std::optional<sim::LatencyDistribution> latency;  // the scenario's latency, if it sets one
  Protocol protocol = Protocol::kFunctionCalling;
  ResponseStyle style = ResponseStyle::kOpenAI;  // the style the body was rendered in
  Usage usage;                                   // reasoning_tokens are inside completion_tokens
  std::string summary;  // e.g. "tool_calls search_items" or "finish need_clarification"
};

struct CompletionOptions {
  ResponseStyle style = ResponseStyle::kOpenAI;  // used when the scenario sets none
};

// The user text a scenario's `match` sees is cut to this many bytes (at a UTF-8 boundary):
// libstdc++'s std::regex recurses per character and would overflow the stack on long text.
inline constexpr std::size_t kMatchTextLimit = 2048;

class Simulator {
 public:
  // `default_scenario` replaces the file's default for user text no scenario matches: the
  // name of a scenario, or a text chosen as if the user had written it (for example
  // "bench: steps=3 calls=2", whose captures the scenario then sees). Throws
  // std::invalid_argument when it names no scenario and matches none.
  explicit Simulator(ScenarioSet scenarios, std::string default_scenario = {});

  // Answers one request body. Deterministic: the same body, `now`, `sequence` and options
  // give the same bytes. `now` gives `created` and "today" when no system message holds a
  // YYYY-MM-DD date; `sequence` makes the response id unique within a process.
  std::variant<Completion, RequestError> complete(std::string_view body,
                                                  std::chrono::system_clock::time_point now,
                                                  std::uint64_t sequence,
                                                  const CompletionOptions& options = {}) const;

  const ScenarioSet& scenarios() const { return set_; }

 private:
  ScenarioSet set_;
  // The replacement default: index into set_.scenarios and its captures.
  std::optional<std::size_t> default_index_;
  std::vector<std::string> default_captures_;
};

}  // namespace agentfleet::llm_sim
