#include "core/adapters/otlp/otlp_http_sink.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <charconv>
#include <future>

namespace agentfleet::otlp {

namespace asio = boost::asio;

OtlpHttpSink::OtlpHttpSink(std::string endpoint,
                           std::vector<std::pair<std::string, std::string>> headers)
    : url_(traces_url(endpoint)),
      headers_(std::move(headers)),
      pool_(std::make_unique<http::ConnectionPool>(
          http::ConnectionPoolOptions{2, std::chrono::milliseconds(20000)})) {}

OtlpHttpSink::~OtlpHttpSink() {
  pool_.reset();  // its idle sockets belong to io_
}

std::string OtlpHttpSink::traces_url(std::string_view endpoint) {
  while (!endpoint.empty() && endpoint.back() == '/')
    endpoint.remove_suffix(1);
  return std::string(endpoint) + "/v1/traces";
}

SendOutcome OtlpHttpSink::outcome_of(const http::ClientResponse& response) {
  SendOutcome out;
  if (!response.ok()) {
    out.retryable = response.error != http::ClientErrorKind::kBadUrl &&
                    response.error != http::ClientErrorKind::kTls &&
                    response.error != http::ClientErrorKind::kUnsupported;
    out.message = std::string(http::to_string(response.error)) + ": " + response.error_message;
    return out;
  }
  if (response.status >= 200 && response.status < 300) {
    out.ok = true;
    return out;
  }
  const int s = response.status;
  out.retryable = s == 429 || s == 502 || s == 503 || s == 504;
  const std::string retry_after = response.header("retry-after");
  int seconds = 0;
  const auto [ptr, ec] =
      std::from_chars(retry_after.data(), retry_after.data() + retry_after.size(), seconds);
  if (ec == std::errc() && ptr == retry_after.data() + retry_after.size() && seconds >= 0)
    out.retry_after = std::chrono::seconds(seconds);
  out.message = "HTTP " + std::to_string(s) + ": " + response.body.substr(0, 200);
  return out;
}

SendOutcome OtlpHttpSink::send(const std::string& body,
                               std::chrono::steady_clock::time_point deadline) {
  http::ClientRequest request;
  request.method = boost::beast::http::verb::post;
  request.url = url_;
  request.headers = headers_;
  request.body = body;
  request.content_type = "application/json";
  request.deadline = deadline;
  io_.restart();
  auto answer = asio::co_spawn(
      io_, http::fetch(io_.get_executor(), std::move(request), pool_.get()), asio::use_future);
  // Until the answer is in: idle connections may keep work of their own on io_.
  while (answer.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    if (io_.run_one() == 0)
      break;
  }
  return outcome_of(answer.get());
}

}  // namespace agentfleet::otlp
