#include "core/adapters/http/tool_client.hpp"

#include <rapidjson/document.h>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "core/adapters/http/client.hpp"
#include "core/codec/json_text.hpp"
#include "core/react/react_loop.hpp"

namespace agentfleet::http {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

HttpToolClient::HttpToolClient(asio::any_io_executor executor,
                               std::vector<config::ToolConfig> tools)
    : executor_(std::move(executor)) {
  for (auto& tool : tools)
    tools_.emplace(tool.name, std::move(tool));
}

namespace {
// A 4xx body that already is {"error": {...}} goes to the model as it is; anything else
// is wrapped so the model always sees the same shape.
std::string error_content(int status, const std::string& body) {
  rapidjson::Document doc;
  if (codec::parse_json(doc, body) && doc.IsObject() && doc.HasMember("error"))
    return codec::sanitize_text(body);
  // Cut first, then sanitize: a cut through a multi-byte character becomes U+FFFD.
  std::string excerpt = codec::sanitize_text(body.size() > 300 ? body.substr(0, 300) : body);
  return react::tool_error_json(
      "http_" + std::to_string(status),
      excerpt.empty() ? "the tool answered HTTP " + std::to_string(status) : excerpt);
}
}  // namespace

asio::awaitable<ports::ToolOutcome> HttpToolClient::call(ports::ToolInvocation invocation) {
  ports::ToolOutcome outcome;
  outcome.observation.tool = invocation.tool;
  const auto started = Clock::now();
  auto it = tools_.find(invocation.tool);
  if (it == tools_.end()) {
    outcome.observation.content =
        react::tool_error_json("unknown_tool", "no tool named '" + invocation.tool + "'");
    co_return outcome;
  }
  const config::ToolConfig& tool = it->second;
  const auto deadline =
      std::min(invocation.deadline, started + std::chrono::seconds(tool.timeout_s));
  const int max_attempts = tool.idempotent ? 3 : 1;
  for (int attempt = 0; attempt < max_attempts; ++attempt) {
    ClientRequest request;
    request.url = tool.url;
    request.body = invocation.arguments;
    request.deadline = deadline;
    request.headers = {{"X-User-Id", invocation.user_id},
                       {"Idempotency-Key", invocation.idempotency_key}};
    if (!invocation.traceparent.empty())
      request.headers.emplace_back("traceparent", invocation.traceparent);
    ClientResponse response = co_await fetch(executor_, std::move(request));
    outcome.latency = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    outcome.http_status = response.status;
    bool retry = false;
    if (!response.ok()) {
      outcome.observation.ok = false;
      outcome.observation.content = react::tool_error_json(
          response.error == ClientErrorKind::kTimeout ? "timeout" : "unavailable",
          "tool " + tool.name + ": " + response.error_message);
      retry = response.error != ClientErrorKind::kTimeout;
    } else if (response.status >= 200 && response.status < 300) {
      outcome.observation.ok = true;
      outcome.observation.content =
          response.body.empty() ? "{}" : codec::sanitize_text(response.body);
      co_return outcome;
    } else {
      outcome.observation.ok = false;
      outcome.observation.content = error_content(response.status, response.body);
      retry = response.status >= 500;
    }
    if (!retry || attempt + 1 == max_attempts)
      break;
    const auto wait = std::chrono::milliseconds(100LL << attempt);
    if (Clock::now() + wait >= deadline)
      break;
    asio::steady_timer timer(executor_, wait);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return outcome;
}

}  // namespace agentfleet::http
