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

std::string model_reply_json(const ModelReply& reply);
Result<ModelReply> parse_model_reply_json(std::string_view json);

std::string observations_json(const std::vector<ToolObservation>& observations);
Result<std::vector<ToolObservation>> parse_observations_json(std::string_view json);

}  // namespace agentfleet::codec
