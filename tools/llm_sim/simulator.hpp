#pragma once
// llm-sim's answer to one OpenAI chat-completions request, computed from the request alone:
// the scenario is chosen by the last user message, the step index is the number of
// assistant messages already in the conversation, and the tool results of earlier steps
// are read back from the `tool` messages. No sockets, no clock: the caller passes `now`.
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

#include "tools/llm_sim/scenario.hpp"
#include "tools/llm_sim/tokens.hpp"

namespace agentfleet::llm_sim {

// A request llm-sim refuses with 400 (OpenAI's invalid_request_error).
struct RequestError {
  std::string message;
  std::string param;  // e.g. "messages", "messages[2].role"; empty when not one field
};

struct Completion {
  std::string body;                        // the chat.completion JSON
  std::string scenario;                    // name of the scenario that answered
  std::size_t step = 0;                    // step index (assistant messages in the request)
  std::optional<std::int64_t> latency_ms;  // the scenario's latency_ms, if it sets one
  Usage usage;
  std::string summary;  // e.g. "tool_calls search_items" or "finish need_clarification"
};

// The user text a scenario's `match` sees is cut to this many bytes (at a UTF-8 boundary):
// libstdc++'s std::regex recurses per character and would overflow the stack on long text.
inline constexpr std::size_t kMatchTextLimit = 2048;

class Simulator {
 public:
  explicit Simulator(ScenarioSet scenarios);

  // Answers one request body. Deterministic: the same body, `now` and `sequence` give the
  // same bytes. `now` gives `created` and "today" when no system message holds a
  // YYYY-MM-DD date; `sequence` makes the response id unique within a process.
  std::variant<Completion, RequestError> complete(std::string_view body,
                                                  std::chrono::system_clock::time_point now,
                                                  std::uint64_t sequence) const;

  const ScenarioSet& scenarios() const { return set_; }

 private:
  ScenarioSet set_;
};

}  // namespace agentfleet::llm_sim
