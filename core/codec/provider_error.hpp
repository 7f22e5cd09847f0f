#pragma once
// What a model provider said when it refused a call: the error body of a non-2xx chat
// completions response, in the shapes real providers use ({"error": {"message", "type",
// "code"}}, {"error": "text"}, {"code", "message"}, {"detail": ...}, or plain text), and
// whether it means the account is out of money rather than busy: OpenAI's
// `insufficient_quota`, DeepSeek's 402 "Insufficient Balance", Moonshot's
// `exceeded_current_quota_error`, Zhipu's code 1113, DashScope's `Arrearage`, any 402.
// Pure functions, thread-safe.

#include <string>
#include <string_view>

namespace agentfleet::codec {

struct ProviderError {
  std::string message;  // the provider's message, or an excerpt of the body; sanitized
  std::string type;     // error.type when present
  std::string code;     // error.code when present (a number as its text)
  bool quota_exhausted = false;
};

ProviderError parse_provider_error(int http_status, std::string_view body);

}  // namespace agentfleet::codec
