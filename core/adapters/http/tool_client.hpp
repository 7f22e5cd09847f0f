#pragma once
// Calls a configured tool over HTTP (a ports::ToolClient): sends the arguments to the
// tool's URL (JSON body, or query parameters for GET) with the task's identity
// (X-User-ID, X-Device-ID, X-Task-ID), its Idempotency-Key, traceparent and the tool's
// configured service headers. Only tools marked idempotent are retried (5xx and
// connection failures, bounded, backed off, within the deadline). A result is accepted
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
