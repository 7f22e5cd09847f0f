#include "tools/agentctl/batch_ids.hpp"

#include "tools/agentctl/json_fields.hpp"

namespace agentfleet::agentctl {

BatchPrefixMatch match_batch_prefix(const std::string& prefix, const rapidjson::Value& batches) {
  BatchPrefixMatch match;
  if (!batches.IsArray() || batches.Empty()) {
    match.none = true;
    match.problem = "no batch's id begins '" + prefix + "'";
    return match;
  }
  if (batches.Size() == 1) {
    match.batch_id = json::str(batches[0], "batch_id");
    match.user_id = json::str(batches[0], "user_id");
    return match;
  }
  std::string named;
  for (rapidjson::SizeType i = 0; i < batches.Size() && i < 5; ++i) {
    named += (i ? ", " : "") + json::str(batches[i], "batch_id") + " (" +
             json::str(batches[i], "user_id") + ")";
  }
  match.problem = "the ids of " +
                  std::string(batches.Size() > 5 ? "more than 5" : std::to_string(batches.Size())) +
                  " batches begin '" + prefix + "': " + named +
                  (batches.Size() > 5 ? ", ..." : "") + "; give more of the id (or --user)";
  return match;
}

}  // namespace agentfleet::agentctl
