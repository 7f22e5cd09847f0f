#pragma once
// JSON of what a step checkpoints: the model's reply (enough to replay it into the ReAct
// state machine without calling the model again) and the observations the model was
// shown. A react_json reply is stored as read_react_json_reply returned it (its raw text,
// the synthetic call, final_text or unreadable), so a replay needs no re-reading and
// rebuilds the same conversation. Pure functions.

#include <string>
#include <string_view>
#include <vector>

#include "core/domain/conversation.hpp"
#include "core/domain/error.hpp"

namespace agentfleet::codec {

// `role` (plan_execute's "planner", "executor", "critic", "synthesizer") is stored beside
// the reply for the trace; empty for ReAct.
std::string model_reply_json(const ModelReply& reply, std::string_view role = {});
Result<ModelReply> parse_model_reply_json(std::string_view json);

// The model_reply of a plan_execute tool step's checkpoint, which no model call made:
// {"kind":"tool_step","tool_calls":[{"id","name","arguments"}]} (the calls as a model
// reply lists them), written before the calls run.
std::string tool_step_checkpoint_json(const std::vector<ToolCall>& calls);
bool is_tool_step_checkpoint(std::string_view model_reply_json);
// The role a checkpointed model call was made for ("planner", ..., "tool_step" for a plan
// tool step), or "" for a ReAct step or an unreadable one.
std::string checkpoint_role(std::string_view model_reply_json);

std::string observations_json(const std::vector<ToolObservation>& observations);
Result<std::vector<ToolObservation>> parse_observations_json(std::string_view json);

}  // namespace agentfleet::codec
