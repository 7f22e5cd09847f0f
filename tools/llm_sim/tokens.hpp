#pragma once
// llm-sim's deterministic token counts. No real tokenizer: roughly four code points per
// token, plus a fixed overhead per message, so the same request always costs the same and
// tests can compute the bill by hand. Formulas (also in README.md), with cp(x) = number of
// Unicode code points of x:
//
//   cp(message)   = cp(content text) + Σ over its tool_calls of cp(name) + cp(arguments)
//   cp(tools)     = cp(compact JSON serialization of the request's `tools` array)
//   prompt_tokens = ceil((cp(tools) + Σ cp(message)) / 4) + 4 × number of messages
//   cached_tokens = 0 when the request has no assistant message; otherwise, with P the
//                   index of the last assistant message:
//                   floor((cp(tools) + Σ_{i<P} cp(message i)) / 4) + 4 × P
//   completion_tokens = ceil((cp(content) + Σ cp(name) + cp(arguments)) / 4) + 1
//
// cached_tokens ≤ prompt_tokens always holds. reasoning_tokens is 0 except in the
// reasoning_content style, which adds them to completion_tokens (see simulator.cpp).
// A legacy `function_call` counts like one tool call.

#include <cstdint>
#include <string_view>

#include <rapidjson/document.h>

namespace agentfleet::llm_sim {

struct Usage {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::int64_t cached_tokens = 0;
  std::int64_t reasoning_tokens = 0;  // inside completion_tokens (reasoning_content style)
  std::int64_t total_tokens() const { return prompt_tokens + completion_tokens; }
};

// Code points of UTF-8 text; each byte of a malformed sequence counts as one.
std::int64_t count_code_points(std::string_view utf8);

// cp(message) as above, for one element of `messages`. `content` may be a string, null, or
// an array of parts whose `text` members count.
std::int64_t message_code_points(const rapidjson::Value& message);

// prompt_tokens and cached_tokens of a request object (`messages` array, optional `tools`).
void count_prompt(const rapidjson::Value& request, Usage& usage);

// completion_tokens of an assistant message as it is sent back.
std::int64_t count_completion(const rapidjson::Value& message);

}  // namespace agentfleet::llm_sim
