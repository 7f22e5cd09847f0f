#include "core/adapters/http/tool_client.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "core/adapters/http/client.hpp"

#include <algorithm>
#include <cctype>
#include "core/codec/json_text.hpp"
#include "core/limits/retry_after.hpp"
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
std::string json_of(const rapidjson::Value& value) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  value.Accept(w);
  return std::string(buffer.GetString(), buffer.GetSize());
}

void percent_encode(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
}

// The error code of a {"error": {"code": C}} body, or empty.
std::string error_code_of(const std::string& body) {
  rapidjson::Document doc;
  if (!codec::parse_json(doc, body) || !doc.IsObject())
    return {};
  auto error = doc.FindMember("error");
  if (error == doc.MemberEnd() || !error->value.IsObject())
    return {};
  auto code = error->value.FindMember("code");
  if (code == error->value.MemberEnd() || !code->value.IsString())
    return {};
  return std::string(code->value.GetString(), code->value.GetStringLength());
}

boost::beast::http::verb verb_of(const std::string& method) {
  namespace bh = boost::beast::http;
  if (method == "GET")
    return bh::verb::get;
  if (method == "PUT")
    return bh::verb::put;
  if (method == "PATCH")
    return bh::verb::patch;
  return bh::verb::post;
}
}  // namespace

ToolBody read_tool_body(const std::string& body) {
  if (body.empty())
    return ToolBody{true, "{}"};
  rapidjson::Document doc;
  if (!codec::parse_json(doc, body) || !doc.IsObject())
    return ToolBody{true, codec::sanitize_text(body)};
  auto data = doc.FindMember("data");
  auto error = doc.FindMember("error");
  if (error != doc.MemberEnd() && !error->value.IsNull() && data == doc.MemberEnd())
    return ToolBody{false, codec::sanitize_text(body)};
  if (data != doc.MemberEnd()) {
    const bool envelope = std::all_of(doc.MemberBegin(), doc.MemberEnd(), [](const auto& m) {
      const std::string_view name(m.name.GetString(), m.name.GetStringLength());
      return name == "data" || name == "meta" || (name == "error" && m.value.IsNull());
    });
    if (envelope)
      return ToolBody{true, codec::sanitize_text(json_of(data->value))};
  }
  return ToolBody{true, codec::sanitize_text(body)};
}

std::string query_of_arguments(const std::string& arguments_json) {
  rapidjson::Document doc;
  if (!codec::parse_json(doc, arguments_json) || !doc.IsObject() || doc.MemberCount() == 0)
    return {};
  std::string out;
  for (const auto& m : doc.GetObject()) {
    out.push_back(out.empty() ? '?' : '&');
    percent_encode(out, std::string_view(m.name.GetString(), m.name.GetStringLength()));
    out.push_back('=');
    const auto& v = m.value;
    if (v.IsString()) {
      percent_encode(out, std::string_view(v.GetString(), v.GetStringLength()));
    } else {
      percent_encode(out, json_of(v));
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> tool_request_headers(
    const config::ToolConfig& tool, const ports::ToolInvocation& invocation) {
  std::vector<std::pair<std::string, std::string>> headers = tool.headers;
  headers.emplace_back("X-User-ID", invocation.user_id);
  if (!invocation.device_id.empty())
    headers.emplace_back("X-Device-ID", invocation.device_id);
  if (!invocation.task_id.empty())
    headers.emplace_back("X-Task-ID", invocation.task_id);
  headers.emplace_back("Idempotency-Key", invocation.idempotency_key);
  if (invocation.attempt > 0)
    headers.emplace_back("X-Task-Attempt", std::to_string(invocation.attempt));
  if (!invocation.traceparent.empty())
    headers.emplace_back("traceparent", invocation.traceparent);
  return headers;
}

ToolRetry tool_retry(bool idempotent, int sent, const ClientResponse& response,
                     std::chrono::system_clock::time_point now) {
  using std::chrono::milliseconds;
  const milliseconds backoff(100LL << std::clamp(sent - 1, 0, 10));
  if (!response.ok()) {
    // A timeout may have acted and took the whole budget; a bad URL or TLS fails again.
    const bool transient =
        response.error != ClientErrorKind::kTimeout && response.error != ClientErrorKind::kBadUrl &&
        response.error != ClientErrorKind::kUnsupported && response.error != ClientErrorKind::kTls;
    return {idempotent && transient && sent < kToolMaxSends, backoff};
  }
  if (response.status == 409 && error_code_of(response.body) == "idempotency_key_in_use") {
    // The service runs the call with this key right now: it will answer what that one did.
    const milliseconds asked = limits::parse_retry_after(response.header("retry-after-ms"),
                                                         response.header("Retry-After"), now)
                                   .value_or(milliseconds(500));
    return {sent < kToolMaxInUseSends, std::clamp(asked, milliseconds(100), milliseconds(5000))};
  }
  if (response.status >= 500)
    return {idempotent && sent < kToolMaxSends, backoff};
  return {};
}

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
  for (int sent = 1;; ++sent) {
    ClientRequest request;
    request.method = verb_of(tool.method);
    if (request.method == boost::beast::http::verb::get) {
      request.url = tool.url + query_of_arguments(invocation.arguments);
      request.content_type.clear();
    } else {
      request.url = tool.url;
      request.body = invocation.arguments;
    }
    request.deadline = deadline;
    request.headers = tool_request_headers(tool, invocation);
    ClientResponse response = co_await fetch(executor_, std::move(request), &pool_);
    outcome.latency = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    outcome.http_status = response.status;
    if (!response.ok()) {
      outcome.observation.ok = false;
      outcome.observation.content = react::tool_error_json(
          response.error == ClientErrorKind::kTimeout ? "timeout" : "unavailable",
          "tool " + tool.name + ": " + response.error_message);
    } else if (response.status >= 200 && response.status < 300) {
      ToolBody read = read_tool_body(response.body);
      outcome.observation.ok = read.ok;
      outcome.observation.content = std::move(read.content);
      co_return outcome;
    } else {
      outcome.observation.ok = false;
      outcome.observation.content = error_content(response.status, response.body);
    }
    const ToolRetry retry =
        tool_retry(tool.idempotent, sent, response, std::chrono::system_clock::now());
    if (!retry.again || Clock::now() + retry.wait >= deadline)
      break;
    asio::steady_timer timer(executor_, retry.wait);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return outcome;
}

}  // namespace agentfleet::http
