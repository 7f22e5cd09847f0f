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
    request.method = verb_of(tool.method);
    if (request.method == boost::beast::http::verb::get) {
      request.url = tool.url + query_of_arguments(invocation.arguments);
      request.content_type.clear();
    } else {
      request.url = tool.url;
      request.body = invocation.arguments;
    }
    request.deadline = deadline;
    // Service credentials first; identity last, from the task, so nothing can replace it.
    request.headers = tool.headers;
    request.headers.emplace_back("X-User-ID", invocation.user_id);
    if (!invocation.device_id.empty())
      request.headers.emplace_back("X-Device-ID", invocation.device_id);
    if (!invocation.task_id.empty())
      request.headers.emplace_back("X-Task-ID", invocation.task_id);
    request.headers.emplace_back("Idempotency-Key", invocation.idempotency_key);
    if (!invocation.traceparent.empty())
      request.headers.emplace_back("traceparent", invocation.traceparent);
    ClientResponse response = co_await fetch(executor_, std::move(request), &pool_);
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
      ToolBody read = read_tool_body(response.body);
      outcome.observation.ok = read.ok;
      outcome.observation.content = std::move(read.content);
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
