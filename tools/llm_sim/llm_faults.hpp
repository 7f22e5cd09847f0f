#pragma once
// What llm-sim answers when a fault fires (see fault_schedule.hpp for when one fires):
// OpenAI-shaped error bodies with the retry headers the fault asks for. The modes that
// are about delivery rather than content (close_mid_response, hang, slow) are carried
// out by main.cpp through http::Reply; here they only have their rules.
//
// Pure functions; no I/O.

#include <string>
#include <utility>
#include <vector>

#include "tools/llm_sim/fault_schedule.hpp"

namespace agentfleet::llm_sim {

// Every mode; a `scenario` scope and a `step`; `runtime` faults (POST /admin/faults)
// must have `count` or `duration_s`, a scenario file's need not.
sim::FaultRules llm_fault_rules(bool runtime);

struct FaultAnswer {
  int status = 500;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string content_type = "application/json";
  std::string body;
};

// The answer of an http_*, insufficient_quota or not_json fault. For example http_429:
// 429, Retry-After / retry-after-ms as given,
// {"error":{"message":"Rate limit reached ...","type":"requests","param":null,
//           "code":"rate_limit_exceeded"}}; insufficient_quota: 429 with
// {"error":{"message":"You exceeded your current quota ...","type":"insufficient_quota",
//           "param":null,"code":"insufficient_quota"}}; not_json: 200, Content-Type
//           application/json, an HTML body.
FaultAnswer fault_answer(const sim::FaultSpec& spec);

}  // namespace agentfleet::llm_sim
