#pragma once
// An HTTP/1.1 client call, over HTTP or HTTPS, as one coroutine with one deadline for the
// whole exchange (resolve, connect, TLS handshake, write, read). HTTPS sends SNI and
// verifies the peer's certificate chain against the system's trust store (SSL_CERT_FILE /
// SSL_CERT_DIR override it) and its host name. Used by the worker's model and tool clients and by
// tests. Failures are values, never exceptions: a caller decides what is retryable.
//
// Thread-safety: each call is independent; run it on any executor.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace agentfleet::http {

struct Url {
  std::string scheme;  // "http" or "https"
  std::string host;
  std::string port;    // defaulted from the scheme
  std::string target;  // path and query, at least "/"

  static std::optional<Url> parse(std::string_view text);
};

struct ClientRequest {
  boost::beast::http::verb method = boost::beast::http::verb::post;
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string content_type = "application/json";
  std::chrono::steady_clock::time_point deadline;
};

// kTls: the TLS handshake failed for a reason of TLS itself (an untrusted certificate, a
// name mismatch, no common protocol); trying again will not help.
enum class ClientErrorKind { kNone, kBadUrl, kTimeout, kConnect, kProtocol, kUnsupported, kTls };

struct ClientResponse {
  ClientErrorKind error = ClientErrorKind::kNone;
  std::string error_message;  // set when error != kNone
  int status = 0;
  boost::beast::http::fields headers;
  std::string body;

  bool ok() const { return error == ClientErrorKind::kNone; }
  // Value of a response header, or empty.
  std::string header(std::string_view name) const;
};

boost::asio::awaitable<ClientResponse> fetch(boost::asio::any_io_executor executor,
                                             ClientRequest request);

std::string_view to_string(ClientErrorKind kind);

}  // namespace agentfleet::http
