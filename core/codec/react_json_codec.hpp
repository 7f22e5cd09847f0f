#pragma once
// The react_json protocol, for models without function calling. The request carries no
// `tools`: the system message ends with react_json_addendum() (every tool's name,
// description and argument schema, the reply format, and the line `Protocol: react_json`);
// assistant turns go back as their raw text; an observation goes back as one user message
// `Observation: <result JSON>` (build_chat_request with ChatProtocol::kReactJson).
//
// The model answers with one JSON object as text, possibly in a ``` / ```json fence and
// with text around it:
//   {"thought": "...", "action": "<tool>", "action_input": {...}}         a tool call
//   {"thought": "...", "final": {"type": ..., "message": ..., "options": [...]}}   finish
// also `"action": "finish"` with the finish arguments in action_input, `"final": "<text>"`
// (classified by the result markers) and action_input as a JSON string holding an object.
//
// read_react_json_reply turns such a reply into the provider-neutral ModelReply the loop
// works on. Pure and deterministic (same reply and step, same result), so the converted
// reply can be checkpointed and replayed. Thread-safe.

#include <string>
#include <vector>

#include "core/domain/conversation.hpp"
#include "core/ports/model_client.hpp"

namespace agentfleet::codec {

// The text appended to the system prompt. Lists `tools` in order, then `finish` unless
// `tools` already holds it.
std::string react_json_addendum(const std::vector<ports::ToolSchema>& tools);

// `reply` as parse_chat_response returned it; `step` the step number of this model call
// (0 for the first; the number of assistant messages in the conversation sent works).
// The result keeps `content` (the raw text, sent back verbatim) and usage, and has either
//   - one tool call {id "rj-<step>", name = action, arguments = action_input as JSON text},
//     plus `finish` parsed when the action is finish or `final` is an object; or
//   - `final_text` when `final` is a string; or
//   - `unreadable` saying what was wrong and what to write instead.
// The thought becomes `reasoning` when the provider sent none. Returned unchanged: a reply
// that already has native tool calls, and one whose finish_reason is "length" or
// "content_filter" when its text cannot be read (the loop fails those as it would).
ModelReply read_react_json_reply(ModelReply reply, int step);

}  // namespace agentfleet::codec
