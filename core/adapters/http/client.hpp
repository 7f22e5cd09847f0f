#pragma once
// An HTTP/1.1 client call, over HTTP or HTTPS, as one coroutine with one deadline for the
// whole exchange (resolve, connect, TLS handshake, write, read, and the one retry below).
// HTTPS sends SNI and verifies the peer's certificate chain against the system's trust
// store (SSL_CERT_FILE / SSL_CERT_DIR override it) and its host name. Used by the worker's
// model and tool clients and by tests. Failures are values, never exceptions: a caller
// decides what is retryable.
//
// Keep-alive: pass a ConnectionPool (the client that calls owns it) and connections are
// reused per (scheme, host, port). A request that fails on a reused connection is sent
// once more on a fresh one, within the same deadline, when its write failed (the server
// had reset the connection while it sat idle), or, for GET, HEAD, OPTIONS and TRACE only,
// when it failed before any byte of an answer. A POST that was written whole and then went
// unanswered is never sent again here: the server may have acted on it (Go's rule). An
// idle connection the server closed (its FIN, after close_notify on TLS) is found before
// it is reused and never written to. Without a pool every call opens and closes its own
// connection.
//
// Thread-safety: `fetch` without a pool: each call is independent; run it on any
// executor. A ConnectionPool is NOT thread-safe: every fetch that uses one must run on one
// thread with one executor (the worker's io thread); the pool must outlive those fetches,
// and be destroyed before that io_context (its idle sockets belong to it).

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
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
  // The whole request was written to the server, which may have acted on it (and charged
  // for it) even when no complete answer came back.
  bool sent = false;
  int status = 0;
  boost::beast::http::fields headers;
  std::string body;

  bool ok() const { return error == ClientErrorKind::kNone; }
  // Value of a response header, or empty.
  std::string header(std::string_view name) const;
};

struct ConnectionPoolOptions {
  std::size_t max_idle_per_host = 16;  // idle connections kept per (scheme, host, port); 0: none
  std::chrono::milliseconds idle_timeout{30000};  // an idle connection older than this is closed
};

// Idle keep-alive connections, keyed by scheme://host:port. A connection is checked out
// by one fetch, and returned after a complete response when both sides allow keep-alive
// (HTTP/1.1 without `Connection: close`, a body not delimited by end of stream). Idle ones
// past idle_timeout, or that the server has closed, are dropped when the pool is next
// touched. Keep idle_timeout well under the servers' keep-alive timeout: a POST that meets
// a close of an idle connection after its write fails (see above), and is not sent again.
// Not thread-safe (see above).
class ConnectionPool {
 public:
  struct Stats {
    std::uint64_t opened = 0;         // new connections made by fetches using the pool
    std::uint64_t reused = 0;         // requests sent on an idle connection
    std::uint64_t stale_retries = 0;  // reused connections found closed, request sent again
  };

  explicit ConnectionPool(ConnectionPoolOptions options = {});
  ~ConnectionPool();
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  const Stats& stats() const { return stats_; }
  std::size_t idle_count() const;
  void clear();  // closes every idle connection

  struct Connection;  // defined in client.cpp

 private:
  friend struct PoolAccess;
  struct Idle;

  ConnectionPoolOptions options_;
  Stats stats_;
  std::unique_ptr<Idle> idle_;
};

boost::asio::awaitable<ClientResponse> fetch(boost::asio::any_io_executor executor,
                                             ClientRequest request, ConnectionPool* pool = nullptr);

// Whether a request that `failed` on a reused connection is sent once more on a fresh one:
// when its write failed (the server had reset the connection while it sat idle), or, for
// GET, HEAD, OPTIONS and TRACE, when no byte of an answer came (`answered_none`). Never
// after a timeout.
bool send_again_on_fresh_connection(boost::beast::http::verb method, const ClientResponse& failed,
                                    bool write_failed, bool answered_none);

std::string_view to_string(ClientErrorKind kind);

}  // namespace agentfleet::http
