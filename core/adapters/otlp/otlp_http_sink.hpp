#pragma once
// SpanSink over OTLP/HTTP with JSON bodies: POST <endpoint>/v1/traces. 2xx delivered;
// 429, 502, 503, 504 and no answer at all are worth sending again (the OTLP specification's
// retryable answers), with the collector's Retry-After (seconds) when it sends one; any other
// answer is final. Each send runs the HTTP client on an io_context of the sink's own, on the
// calling thread (the exporter's), and keeps its connection alive between sends.
//
// Lifecycle: one per exporter. Thread-safety: send() from one thread at a time.

#include <boost/asio/io_context.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/adapters/http/client.hpp"
#include "core/adapters/otlp/span_exporter.hpp"

namespace agentfleet::otlp {

class OtlpHttpSink final : public SpanSink {
 public:
  // `endpoint`: the collector's base URL (http://collector:4318); `headers` go on every
  // request (an authorization a hosted collector wants, say).
  OtlpHttpSink(std::string endpoint, std::vector<std::pair<std::string, std::string>> headers);
  ~OtlpHttpSink() override;

  SendOutcome send(const std::string& body,
                   std::chrono::steady_clock::time_point deadline) override;

  // <endpoint>/v1/traces (the endpoint's trailing slashes dropped).
  static std::string traces_url(std::string_view endpoint);
  // What an answer (or none) means for the export.
  static SendOutcome outcome_of(const http::ClientResponse& response);

 private:
  std::string url_;
  std::vector<std::pair<std::string, std::string>> headers_;
  boost::asio::io_context io_;
  std::unique_ptr<http::ConnectionPool> pool_;
};

}  // namespace agentfleet::otlp
