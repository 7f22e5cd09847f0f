#pragma once
// The OpenAI-compatible chat completions client (a ports::ModelClient). Each call has one
// deadline (the request's, already min(call timeout, task deadline)). Retries 429, 5xx and
// connection failures with exponential backoff and full jitter, honouring Retry-After and
// retry-after-ms, bounded in attempts and never sleeping past the deadline; fails over
// to the model's next endpoint on each retry. 400/401/403 are not retried.
//
// Thread-safety: stateless apart from the endpoint cursor (atomic); share freely.

#include <atomic>
#include <memory>
#include <random>
#include <vector>

#include "core/config/config.hpp"
#include "core/ports/model_client.hpp"

namespace agentfleet::http {

class OpenAiModelClient : public ports::ModelClient {
 public:
  OpenAiModelClient(boost::asio::any_io_executor executor, std::vector<config::ModelConfig> models);

  boost::asio::awaitable<Result<ModelReply>> complete(ports::ModelRequest request) override;

 private:
  boost::asio::any_io_executor executor_;
  std::vector<config::ModelConfig> models_;
  std::atomic<unsigned> cursor_{0};
};

// How long a Retry-After / retry-after-ms header asks to wait; nullopt when absent or
// unreadable. Seconds form only (HTTP-date is treated as absent).
std::optional<std::chrono::milliseconds> retry_after(const std::string& retry_after_ms,
                                                     const std::string& retry_after_s);

}  // namespace agentfleet::http
