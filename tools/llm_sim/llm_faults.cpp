#include "tools/llm_sim/llm_faults.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace agentfleet::llm_sim {

namespace {

std::string openai_error_body(std::string_view message, std::string_view type,
                              std::string_view code) {
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> writer(out);
  const auto text = [&](std::string_view value) {
    writer.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
  };
  writer.StartObject();
  writer.Key("error");
  writer.StartObject();
  writer.Key("message");
  text(message);
  writer.Key("type");
  text(type);
  writer.Key("param");
  writer.Null();
  writer.Key("code");
  if (code.empty()) {
    writer.Null();
  } else {
    text(code);
  }
  writer.EndObject();
  writer.EndObject();
  return std::string(out.GetString(), out.GetSize());
}

}  // namespace

sim::FaultRules llm_fault_rules(bool runtime) {
  using sim::FaultMode;
  sim::FaultRules rules;
  rules.modes = {FaultMode::kHttp429,
                 FaultMode::kHttp500,
                 FaultMode::kHttp502,
                 FaultMode::kHttp503,
                 FaultMode::kInsufficientQuota,
                 FaultMode::kCloseMidResponse,
                 FaultMode::kNotJson,
                 FaultMode::kHang,
                 FaultMode::kSlow};
  rules.scope_key = runtime ? "scenario" : "";  // a scenario's own faults are scoped to it
  rules.allow_step = true;
  rules.require_bound = runtime;
  return rules;
}

FaultAnswer fault_answer(const sim::FaultSpec& spec) {
  using sim::FaultMode;
  FaultAnswer answer;
  answer.headers = sim::retry_headers(spec);
  switch (spec.mode) {
    case FaultMode::kHttp429:
      answer.status = 429;
      answer.body = openai_error_body(
          "Rate limit reached for requests (llm-sim fault http_429). Please try again later.",
          "requests", "rate_limit_exceeded");
      break;
    case FaultMode::kInsufficientQuota:
      answer.status = 429;
      answer.body = openai_error_body(
          "You exceeded your current quota, please check your plan and billing details "
          "(llm-sim fault insufficient_quota).",
          "insufficient_quota", "insufficient_quota");
      break;
    case FaultMode::kHttp500:
      answer.status = 500;
      answer.body = openai_error_body(
          "The server had an error while processing your request (llm-sim fault http_500).",
          "server_error", "");
      break;
    case FaultMode::kHttp502:
      answer.status = 502;
      answer.body = openai_error_body("Bad gateway (llm-sim fault http_502).", "server_error", "");
      break;
    case FaultMode::kHttp503:
      answer.status = 503;
      answer.body = openai_error_body(
          "The engine is currently overloaded, please try again later (llm-sim fault http_503).",
          "server_error", "");
      break;
    case FaultMode::kNotJson:
      answer.status = 200;
      // Claims JSON, as a misbehaving proxy does, so the client's parser meets it.
      answer.body =
          "<html><head><title>upstream</title></head>"
          "<body>llm-sim fault not_json: this is not a chat completion</body></html>";
      break;
    case FaultMode::kCloseMidResponse:
    case FaultMode::kHang:
    case FaultMode::kSlow:
      // Delivery faults: main.cpp shapes the normal answer instead.
      answer.status = 200;
      break;
  }
  return answer;
}

}  // namespace agentfleet::llm_sim
