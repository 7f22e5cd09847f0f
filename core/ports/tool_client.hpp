#pragma once
// Port: one tool call on behalf of a user. Identity travels in the invocation (from the
// task), never in the model's arguments.

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <string>

#include "core/domain/conversation.hpp"

namespace agentfleet::ports {

struct ToolInvocation {
  std::string task_id;
  std::string user_id;
  std::string device_id;  // from the task's metadata; empty when it brought none
  std::string tool;
  std::string arguments;        // JSON object text, already validated against the schema
  std::string idempotency_key;  // "<task_id>:<step>:<call index>"
  std::chrono::steady_clock::time_point deadline;
  std::string traceparent;
  // The task's attempt (X-Task-Attempt): a tool service that keeps idempotency keys refuses
  // a call whose attempt is lower than one it has seen with the key (docs/tools.md).
  int attempt = 0;
};

struct ToolOutcome {
  ToolObservation observation;
  int http_status = 0;
  std::chrono::milliseconds latency{0};
};

class ToolClient {
 public:
  virtual ~ToolClient() = default;
  // Never throws; failures become observations with ok == false.
  virtual boost::asio::awaitable<ToolOutcome> call(ToolInvocation invocation) = 0;
};

}  // namespace agentfleet::ports
