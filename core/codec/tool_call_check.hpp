#pragma once
// Admission of one tool call the model asked for, decided before anything is sent: the
// tool must be permitted for the user's permission level, its arguments must be a JSON
// object, and they must validate against the tool's argument schema. A refused call is not
// an error of the task: its refusal is the observation the model reads (and may fix).
//
// Pure and deterministic; thread-safe (a CompiledSchema is immutable).

#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "core/codec/json_schema.hpp"
#include "core/domain/conversation.hpp"

namespace agentfleet::codec {

inline constexpr std::string_view kPermissionDenied = "permission_denied";
inline constexpr std::string_view kInvalidArguments = "invalid_arguments";

struct ToolCallRefusal {
  std::string code;        // kPermissionDenied or kInvalidArguments
  std::string message;     // what was wrong; for a schema violation it starts with the path
  std::string error_json;  // react::tool_error_json(code, message): the observation
};

// nullopt when `call` may be sent. `permitted`: the tools the user's permission level
// allows (within the task's allow-list). `schema`: the tool's compiled argument schema, or
// null when it has none (then any JSON object passes). Checks run in that order and the
// first failure is reported; a schema violation's message is "<JSON pointer>: <problem>",
// or "arguments: <problem>" when the problem is at the root (e.g. a missing required key).
std::optional<ToolCallRefusal> check_tool_call(const ToolCall& call,
                                               const std::set<std::string>& permitted,
                                               const CompiledSchema* schema);

}  // namespace agentfleet::codec
