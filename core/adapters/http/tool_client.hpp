#pragma once
// Calls a configured tool over HTTP (a ports::ToolClient): sends the arguments to the
// tool's URL (JSON body, or query parameters for GET) with the task's identity
// (X-User-ID, X-Device-ID, X-Task-ID), its Idempotency-Key and X-Task-Attempt, traceparent
// and the tool's configured service headers. Only tools marked idempotent are retried on
// 5xx and connection failures (bounded, backed off, within the deadline); a 409
// `idempotency_key_in_use` (the service is still running the call with that key) is
// asked again for any tool, after its Retry-After: the service answers the stored outcome
// and runs nothing twice (docs/tools.md). A result is accepted
// bare or wrapped as {"data": ...}; {"error": ...} is a failure. Every failure becomes an
// observation the model can read.
//
// Thread-safety: use from the one io thread of `executor` (the connection pool is not
// thread-safe); destroy before that io_context.

#include <map>
#include <optional>

#include "core/adapters/http/client.hpp"
#include "core/config/config.hpp"
#include "core/ports/tool_client.hpp"

namespace agentfleet::http {

// What a 2xx body tells the model: the payload of {"data": X} (alone or with "meta"), or
// the bare body; nullopt-free: `ok` false when the body is {"error": ...}.
struct ToolBody {
  bool ok = true;
  std::string content;
};
ToolBody read_tool_body(const std::string& body);

// The query string ("?a=1&b=x") of a GET call: scalar arguments as they are, arrays and
// objects as JSON text, all percent-encoded. Empty for no arguments.
std::string query_of_arguments(const std::string& arguments_json);

// The headers of a call: the tool's service headers first, then what the worker sets from
// the task, last, so nothing configured can replace it.
std::vector<std::pair<std::string, std::string>> tool_request_headers(
    const config::ToolConfig& tool, const ports::ToolInvocation& invocation);

// What to do after the `sent`-th request of a call (1 for the first) got `response`: give
// the answer to the model, or send again after `wait`. Pure; the caller also stops when
// the wait would pass the call's deadline.
struct ToolRetry {
  bool again = false;
  std::chrono::milliseconds wait{0};
};
inline constexpr int kToolMaxSends = 3;       // 5xx and connection failures, idempotent tools
inline constexpr int kToolMaxInUseSends = 8;  // 409 idempotency_key_in_use, any tool
ToolRetry tool_retry(bool idempotent, int sent, const ClientResponse& response,
                     std::chrono::system_clock::time_point now);

class HttpToolClient : public ports::ToolClient {
 public:
  HttpToolClient(boost::asio::any_io_executor executor, std::vector<config::ToolConfig> tools);
  boost::asio::awaitable<ports::ToolOutcome> call(ports::ToolInvocation invocation) override;

 private:
  boost::asio::any_io_executor executor_;
  std::map<std::string, config::ToolConfig> tools_;
  ConnectionPool pool_;  // keep-alive connections to the tool services
};

}  // namespace agentfleet::http
