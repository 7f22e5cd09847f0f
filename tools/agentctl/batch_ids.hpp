#pragma once
// Batch ids given by their start: `agentctl batch status nigh` for the batch nightly-2026-12-01.
// The batch routes of the API take whole ids only; agentctl asks for the id as given first,
// and when there is no batch of that id, lists the batches whose ids begin with it
// (GET /v1/batches?prefix=) and takes the one it finds, saying which. Pure: the choice among
// those listed.

#include <rapidjson/document.h>

#include <cstddef>
#include <string>

namespace agentfleet::agentctl {

// The fewest characters of a batch id's start agentctl looks up.
inline constexpr std::size_t kMinBatchIdPrefix = 4;
// How many batches the lookup lists: enough to name a few when several begin so.
inline constexpr int kBatchPrefixCandidates = 6;

// What the start of a batch id stands for among `batches` (the array GET /v1/batches?prefix=
// answered, each with "batch_id" and "user_id"): the one batch, or the problem (none begins
// so: `none`; several do: a message naming up to five of them with their users).
struct BatchPrefixMatch {
  std::string batch_id;
  std::string user_id;
  bool none = false;
  std::string problem;  // empty: batch_id and user_id name the one batch
};
BatchPrefixMatch match_batch_prefix(const std::string& prefix, const rapidjson::Value& batches);

}  // namespace agentfleet::agentctl
