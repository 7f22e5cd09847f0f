#pragma once
// Writes text as a JSON string literal, for the few small JSON documents the loop itself
// produces (tool errors, truncation and trim stubs). Standard library only, pure.

#include <string>
#include <string_view>

namespace agentfleet::react {

// Appends `text` to `out` as a quoted JSON string (", \ and control characters escaped;
// other bytes copied as they are).
void append_json_string(std::string& out, std::string_view text);

}  // namespace agentfleet::react
