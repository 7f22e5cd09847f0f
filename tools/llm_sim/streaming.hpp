#pragma once
// A completion llm-sim answers with, as the server-sent events of a streamed answer
// (`"stream": true`): the role, the reasoning and the text in small deltas, each tool call
// opened with its id, type and name and its arguments sent in fragments, the fragments of
// several calls interleaved (each tagged with its index, as providers do), the finish
// reason, the usage chunk when asked for (stream_options.include_usage), then [DONE]. The
// server writes the body in pieces cut anywhere. Pure.

#include <optional>
#include <string>
#include <string_view>

namespace agentfleet::llm_sim {

struct StreamRequest {
  bool stream = false;
  bool include_usage = false;
};
// What a request body asks of the answer's form (nothing for a body that is not JSON).
StreamRequest stream_request(std::string_view request_body);

// The events of `completion_body` (a chat.completion JSON); nullopt when it is not one.
std::optional<std::string> stream_events(std::string_view completion_body, bool include_usage);

}  // namespace agentfleet::llm_sim
