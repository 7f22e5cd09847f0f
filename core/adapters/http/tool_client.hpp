#pragma once
// Calls a configured tool over HTTP (a ports::ToolClient): POST the arguments to the tool's
// URL with the task's identity (X-User-Id), its Idempotency-Key and traceparent. Only
// tools marked idempotent are retried (5xx and connection failures, bounded, backed off,
// within the deadline). Every failure becomes an observation the model can read.
//
// Thread-safety: immutable after construction; share freely.

#include <map>

#include "core/config/config.hpp"
#include "core/ports/tool_client.hpp"

namespace agentfleet::http {

class HttpToolClient : public ports::ToolClient {
 public:
  HttpToolClient(boost::asio::any_io_executor executor, std::vector<config::ToolConfig> tools);
  boost::asio::awaitable<ports::ToolOutcome> call(ports::ToolInvocation invocation) override;

 private:
  boost::asio::any_io_executor executor_;
  std::map<std::string, config::ToolConfig> tools_;
};

}  // namespace agentfleet::http
