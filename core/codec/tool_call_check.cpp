#include "core/codec/tool_call_check.hpp"

#include <rapidjson/document.h>

#include "core/codec/json_text.hpp"
#include "core/react/react_loop.hpp"

namespace agentfleet::codec {

namespace {
ToolCallRefusal refusal(std::string_view code, std::string message) {
  ToolCallRefusal r;
  r.code = std::string(code);
  r.error_json = react::tool_error_json(code, message);
  r.message = std::move(message);
  return r;
}
}  // namespace

std::optional<ToolCallRefusal> check_tool_call(const ToolCall& call,
                                               const std::set<std::string>& permitted,
                                               const CompiledSchema* schema) {
  if (!permitted.count(call.name)) {
    return refusal(kPermissionDenied,
                   "tool '" + call.name + "' needs a higher permission level than this user has");
  }
  rapidjson::Document args;
  if (!parse_json(args, call.arguments) || !args.IsObject())
    return refusal(kInvalidArguments, "arguments must be a JSON object");
  if (schema != nullptr) {
    if (auto violation = schema->validate(args)) {
      return refusal(kInvalidArguments,
                     (violation->path.empty() ? std::string("arguments") : violation->path) + ": " +
                         violation->message);
    }
  }
  return std::nullopt;
}

}  // namespace agentfleet::codec
