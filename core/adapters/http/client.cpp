#include "core/adapters/http/client.hpp"
#include "core/adapters/http/stream_client.hpp"
#include "core/domain/redaction.hpp"

#include <poll.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>

#include <algorithm>
#include <array>
#include <deque>
#include <limits>
#include <map>

namespace agentfleet::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

std::optional<Url> Url::parse(std::string_view text) {
  Url url;
  const auto scheme_end = text.find("://");
  if (scheme_end == std::string_view::npos)
    return std::nullopt;
  url.scheme = std::string(text.substr(0, scheme_end));
  if (url.scheme != "http" && url.scheme != "https")
    return std::nullopt;
  std::string_view rest = text.substr(scheme_end + 3);
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  url.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  // Credentials in a URL (user:password@) are not sent; they belong in headers. Refused, so
  // they never become part of a host name in an error.
  if (authority.empty() || authority.find('@') != std::string_view::npos)
    return std::nullopt;
  if (authority.front() == '[') {  // [v6]:port
    const auto close = authority.find(']');
    if (close == std::string_view::npos)
      return std::nullopt;
    url.host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':')
        return std::nullopt;
      url.port = std::string(authority.substr(close + 2));
    }
  } else {
    const auto colon = authority.rfind(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos)
      url.port = std::string(authority.substr(colon + 1));
  }
  if (url.host.empty())
    return std::nullopt;
  if (url.port.empty())
    url.port = url.scheme == "https" ? "443" : "80";
  for (char c : url.port) {
    if (c < '0' || c > '9')
      return std::nullopt;
  }
  return url;
}

std::string ClientResponse::header(std::string_view name) const {
  auto it = headers.find(beast::string_view(name.data(), name.size()));
  return it == headers.end() ? std::string() : std::string(it->value());
}

std::string_view to_string(ClientErrorKind kind) {
  switch (kind) {
    case ClientErrorKind::kNone:
      return "none";
    case ClientErrorKind::kBadUrl:
      return "bad_url";
    case ClientErrorKind::kTimeout:
      return "timeout";
    case ClientErrorKind::kConnect:
      return "connect";
    case ClientErrorKind::kProtocol:
      return "protocol";
    case ClientErrorKind::kUnsupported:
      return "unsupported";
    case ClientErrorKind::kTls:
      return "tls";
  }
  return "unknown";
}

namespace {
ClientResponse failure(ClientErrorKind kind, std::string message) {
  ClientResponse response;
  response.error = kind;
  response.error_message = std::move(message);
  return response;
}

// A header whose name or value holds CR, LF or NUL would end the header early and write
// headers of its own (Beast sends values as they are): such a request is not sent. The
// value is not quoted, as it may be a credential.
std::optional<ClientResponse> unsendable_header(const ClientRequest& request) {
  static constexpr std::string_view kBreaks("\r\n\0", 3);
  for (const auto& [name, value] : request.headers) {
    const auto bad_name = name.find_first_of(kBreaks);
    if (name.empty() || bad_name != std::string::npos ||
        value.find_first_of(kBreaks) != std::string::npos) {
      return failure(ClientErrorKind::kUnsupported,
                     "header '" + name.substr(0, bad_name) +
                         "' holds a line break or NUL; the request was not sent");
    }
  }
  return std::nullopt;
}

bool timed_out(const boost::system::error_code& ec) {
  return ec == beast::error::timeout || ec == asio::error::timed_out;
}
}  // namespace

namespace {
// One context for every HTTPS call of the process: the system's trust store (OpenSSL's
// default paths, which honour SSL_CERT_FILE and SSL_CERT_DIR), peer verification, TLS 1.2+.
asio::ssl::context& client_tls_context() {
  static asio::ssl::context context = [] {
    asio::ssl::context c(asio::ssl::context::tls_client);
    c.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                  asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                  asio::ssl::context::no_tlsv1_1);
    c.set_default_verify_paths();
    c.set_verify_mode(asio::ssl::verify_peer);
    return c;
  }();
  return context;
}
}  // namespace

// One open connection: a plain TCP stream or a TLS stream over one, and the read buffer
// that belongs to it.
struct ConnectionPool::Connection {
  std::unique_ptr<beast::tcp_stream> plain;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;
  std::chrono::steady_clock::time_point idle_since;

  beast::tcp_stream& lowest() { return tls ? beast::get_lowest_layer(*tls) : *plain; }

  // No TLS close_notify exchange: many servers never answer it, and the body is complete.
  void close() {
    boost::system::error_code ec;
    if (!tls)
      lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
    lowest().socket().close(ec);
  }

  // An idle connection the server has closed (EOF pending) or written to out of turn is
  // not worth a request. TLS may legitimately have bytes pending (TLS 1.3 session
  // tickets), so only EOF and errors disqualify it. A server closing a TLS connection
  // sends close_notify before its FIN: the bytes pending hide the FIN from a peek, so the
  // kernel is asked whether the peer shut its side (POLLRDHUP), whatever is pending.
  bool looks_alive() {
    auto& socket = lowest().socket();
    if (!socket.is_open() || (!tls && buffer.size() > 0))
      return false;
    pollfd state{socket.native_handle(), POLLIN | POLLRDHUP, 0};
    if (::poll(&state, 1, 0) > 0 && (state.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0)
      return false;
    boost::system::error_code ec, ignored;
    char byte = 0;
    socket.non_blocking(true, ec);
    if (ec)
      return false;
    const std::size_t n = socket.receive(asio::buffer(&byte, 1), tcp::socket::message_peek, ec);
    socket.non_blocking(false, ignored);
    if (ec == asio::error::would_block || ec == asio::error::try_again)
      return true;
    if (ec)
      return false;
    return n > 0 && tls != nullptr;
  }
};

struct ConnectionPool::Idle {
  std::map<std::string, std::deque<std::unique_ptr<Connection>>> by_key;
};

ConnectionPool::ConnectionPool(ConnectionPoolOptions options)
    : options_(options), idle_(std::make_unique<Idle>()) {}

ConnectionPool::~ConnectionPool() {
  clear();
}

std::size_t ConnectionPool::idle_count() const {
  std::size_t n = 0;
  for (const auto& [key, connections] : idle_->by_key)
    n += connections.size();
  return n;
}

void ConnectionPool::clear() {
  for (auto& [key, connections] : idle_->by_key) {
    for (auto& c : connections)
      c->close();
  }
  idle_->by_key.clear();
}

// fetch's access to the pool's idle lists.
struct PoolAccess {
  using Connection = ConnectionPool::Connection;
  using Clock = std::chrono::steady_clock;

  static void drop_expired(ConnectionPool& pool, Clock::time_point now) {
    for (auto it = pool.idle_->by_key.begin(); it != pool.idle_->by_key.end();) {
      auto& list = it->second;
      while (!list.empty() && list.front()->idle_since + pool.options_.idle_timeout <= now) {
        list.front()->close();
        list.pop_front();
      }
      it = list.empty() ? pool.idle_->by_key.erase(it) : std::next(it);
    }
  }

  // The most recently used live connection for `key`, or null.
  static std::unique_ptr<Connection> take(ConnectionPool& pool, const std::string& key) {
    drop_expired(pool, Clock::now());
    auto it = pool.idle_->by_key.find(key);
    while (it != pool.idle_->by_key.end() && !it->second.empty()) {
      std::unique_ptr<Connection> c = std::move(it->second.back());
      it->second.pop_back();
      if (c->looks_alive())
        return c;
      c->close();
    }
    return nullptr;
  }

  static void give_back(ConnectionPool& pool, const std::string& key,
                        std::unique_ptr<Connection> c) {
    if (pool.options_.max_idle_per_host == 0) {
      c->close();
      return;
    }
    c->lowest().expires_never();
    c->idle_since = Clock::now();
    auto& list = pool.idle_->by_key[key];
    while (list.size() >= pool.options_.max_idle_per_host) {
      list.front()->close();
      list.pop_front();
    }
    list.push_back(std::move(c));
    drop_expired(pool, Clock::now());
  }

  static ConnectionPool::Stats& stats(ConnectionPool& pool) { return pool.stats_; }
};

namespace {
using Connection = ConnectionPool::Connection;

struct Opened {
  std::unique_ptr<Connection> connection;
  ClientResponse failure;  // when connection is null
};

// Resolves, connects and (for HTTPS) handshakes, all within `deadline`.
asio::awaitable<Opened> open_connection(asio::any_io_executor executor, const Url& url,
                                        std::chrono::steady_clock::time_point deadline) {
  Opened opened;
  boost::system::error_code ec;
  tcp::resolver resolver(executor);
  // The stream's deadline starts at connect; a lookup runs on Asio's resolver thread, so a
  // timer cancels it at the same deadline.
  asio::steady_timer resolve_deadline(executor, deadline);
  resolve_deadline.async_wait([&resolver](const boost::system::error_code& timer_ec) {
    if (!timer_ec)
      resolver.cancel();
  });
  auto endpoints = co_await resolver.async_resolve(url.host, url.port,
                                                   asio::redirect_error(asio::use_awaitable, ec));
  resolve_deadline.cancel();
  if (ec == asio::error::operation_aborted) {
    opened.failure =
        failure(ClientErrorKind::kTimeout, "resolve " + url.host + ": deadline passed");
    co_return opened;
  }
  if (ec) {
    opened.failure =
        failure(ClientErrorKind::kConnect, "resolve " + url.host + ": " + ec.message());
    co_return opened;
  }

  auto c = std::make_unique<Connection>();
  if (url.scheme == "https") {
    c->tls = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(executor, client_tls_context());
    // SNI, and the certificate must name the host we asked for.
    if (!SSL_set_tlsext_host_name(c->tls->native_handle(), url.host.c_str())) {
      opened.failure = failure(ClientErrorKind::kTls, "cannot set SNI for " + url.host);
      co_return opened;
    }
    c->tls->set_verify_callback(asio::ssl::host_name_verification(url.host));
  } else {
    c->plain = std::make_unique<beast::tcp_stream>(executor);
  }
  c->lowest().expires_at(deadline);
  co_await c->lowest().async_connect(endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    opened.failure = failure(timed_out(ec) ? ClientErrorKind::kTimeout : ClientErrorKind::kConnect,
                             "connect " + url.host + ":" + url.port + ": " + ec.message());
    co_return opened;
  }
  c->lowest().socket().set_option(tcp::no_delay(true), ec);
  if (c->tls) {
    co_await c->tls->async_handshake(asio::ssl::stream_base::client,
                                     asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      opened.failure =
          failure(timed_out(ec)                                      ? ClientErrorKind::kTimeout
                  : ec.category() == asio::error::get_ssl_category() ? ClientErrorKind::kTls
                                                                     : ClientErrorKind::kConnect,
                  "TLS handshake with " + url.host + ": " + ec.message());
      c->close();
      co_return opened;
    }
  }
  opened.connection = std::move(c);
  co_return opened;
}

struct Exchanged {
  ClientResponse response;
  bool write_failed = false;   // the request did not reach the server whole
  bool answered_none = false;  // failed before any byte of a response arrived
  bool reusable = false;       // complete response, both sides keep the connection
};

template <typename Stream>
asio::awaitable<Exchanged> exchange(Stream& stream, beast::flat_buffer& buffer,
                                    const bhttp::request<bhttp::string_body>& out) {
  Exchanged result;
  boost::system::error_code ec;
  co_await bhttp::async_write(stream, out, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    result.write_failed = true;
    result.answered_none = true;
    result.response = failure(timed_out(ec) ? ClientErrorKind::kTimeout : ClientErrorKind::kConnect,
                              "write: " + ec.message());
    co_return result;
  }
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(64 * 1024 * 1024);
  co_await bhttp::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    result.answered_none = !parser.got_some();
    result.response =
        failure(timed_out(ec) ? ClientErrorKind::kTimeout : ClientErrorKind::kProtocol,
                "read: " + ec.message());
    result.response.sent = true;
    co_return result;
  }
  result.response.sent = true;
  result.reusable = parser.get().keep_alive() && !parser.get().need_eof() && out.keep_alive();
  auto in = parser.release();
  result.response.status = static_cast<int>(in.result_int());
  for (const auto& field : in)
    result.response.headers.insert(field.name_string(), field.value());
  result.response.body = std::move(in.body());
  co_return result;
}
}  // namespace

// The rule of Go's net/http Transport. A request whose write failed (the connection was
// reset) never reached the server whole. A server's close of an idle connection is caught
// before the reuse (looks_alive: its FIN, or its reset); one that lands between that check
// and the write is seen only after the write, like any other failure. A failure after the
// write does
// not tell an idle close from a server that took the request, worked on it (a provider may
// have charged for it) and then dropped the connection, so only a method that may be sent
// twice is sent again then, and only when no byte of an answer came. The pool's check
// before each reuse (looks_alive) and its idle timeout, well under servers' keep-alive,
// keep the race with an idle close rare.
bool send_again_on_fresh_connection(bhttp::verb method, const ClientResponse& failed,
                                    bool write_failed, bool answered_none) {
  if (failed.ok() || failed.error == ClientErrorKind::kTimeout)
    return false;
  if (write_failed)
    return true;
  const bool replayable = method == bhttp::verb::get || method == bhttp::verb::head ||
                          method == bhttp::verb::options || method == bhttp::verb::trace;
  return replayable && answered_none;
}

asio::awaitable<ClientResponse> fetch(asio::any_io_executor executor, ClientRequest request,
                                      ConnectionPool* pool) {
  const auto url = Url::parse(request.url);
  if (!url)
    co_return failure(ClientErrorKind::kBadUrl, "invalid URL: " + redact_credentials(request.url));
  if (auto refused = unsendable_header(request))
    co_return std::move(*refused);
  if (std::chrono::steady_clock::now() >= request.deadline) {
    co_return failure(ClientErrorKind::kTimeout, "deadline passed before the call");
  }
  bhttp::request<bhttp::string_body> out{request.method, url->target, 11};
  out.set(bhttp::field::host, url->host + ":" + url->port);
  out.set(bhttp::field::user_agent, "agentfleet");
  for (const auto& [name, value] : request.headers)
    out.set(name, value);
  if (!request.body.empty() || request.method == bhttp::verb::post) {
    out.set(bhttp::field::content_type, request.content_type);
    out.body() = std::move(request.body);
  }
  out.prepare_payload();

  const std::string key = url->scheme + "://" + url->host + ":" + url->port;
  bool fresh_only = pool == nullptr;
  for (;;) {
    std::unique_ptr<Connection> connection;
    if (!fresh_only)
      connection = PoolAccess::take(*pool, key);
    const bool reused = connection != nullptr;
    if (!connection) {
      Opened opened = co_await open_connection(executor, *url, request.deadline);
      if (!opened.connection)
        co_return std::move(opened.failure);
      connection = std::move(opened.connection);
      if (pool)
        ++PoolAccess::stats(*pool).opened;
    } else {
      ++PoolAccess::stats(*pool).reused;
    }
    connection->lowest().expires_at(request.deadline);
    Exchanged result;
    if (connection->tls) {
      result = co_await exchange(*connection->tls, connection->buffer, out);
    } else {
      result = co_await exchange(*connection->plain, connection->buffer, out);
    }
    // A kept-alive connection the server had closed: once more on a new one (send_again).
    if (reused &&
        send_again_on_fresh_connection(out.method(), result.response, result.write_failed,
                                       result.answered_none) &&
        std::chrono::steady_clock::now() < request.deadline) {
      connection->close();
      ++PoolAccess::stats(*pool).stale_retries;
      fresh_only = true;
      continue;
    }
    if (pool && result.response.ok() && result.reusable) {
      PoolAccess::give_back(*pool, key, std::move(connection));
    } else {
      connection->close();
    }
    co_return std::move(result.response);
  }
}

namespace {
using Clock = std::chrono::steady_clock;

// When the next read or write must be done: the idle bound, within the deadline.
Clock::time_point next_expiry(Clock::time_point deadline, std::chrono::milliseconds idle) {
  if (idle.count() <= 0)
    return deadline;
  return std::min(deadline, Clock::now() + idle);
}

// An answer is waiting on a plain connection while the request body is still being sent
// (a refusal on the head). TLS connections may have records of their own pending (session
// tickets), so they are not looked at.
bool answer_waiting(Connection& c) {
  if (c.tls)
    return false;
  if (c.buffer.size() > 0)
    return true;
  boost::system::error_code ec;
  const std::size_t available = c.plain->socket().available(ec);
  return !ec && available > 0;
}

template <typename Fields>
void set_request_fields(Fields& out, const Url& url, const ClientRequest& request) {
  out.set(bhttp::field::host, url.host + ":" + url.port);
  out.set(bhttp::field::user_agent, "agentfleet");
  for (const auto& [name, value] : request.headers)
    out.set(name, value);
}

// Sends the request (whole, or chunked from the source), then reads the answer, handing a
// 2xx body to the sink as it arrives.
template <typename Stream>
asio::awaitable<ClientResponse> stream_exchange(Stream& stream, Connection& c, const Url& url,
                                                ClientRequest& request, StreamOptions& options) {
  boost::system::error_code ec;
  const auto deadline = request.deadline;
  const auto idle = options.idle_timeout;
  auto transport_failure = [&](const char* what) {
    return failure(timed_out(ec) ? ClientErrorKind::kTimeout : ClientErrorKind::kConnect,
                   std::string(what) + ": " + ec.message());
  };

  std::optional<ClientResponse> send_failure;  // the request could not be sent whole
  bool streamed_body_sent = false;             // the source's body went out to its last chunk
  bool whole_sent = false;  // every byte of the request was written: the server may act on it
  if (!options.body_source) {
    bhttp::request<bhttp::string_body> out{request.method, url.target, 11};
    set_request_fields(out, url, request);
    if (!request.body.empty() || request.method == bhttp::verb::post) {
      out.set(bhttp::field::content_type, request.content_type);
      out.body() = std::move(request.body);
    }
    out.prepare_payload();
    c.lowest().expires_at(next_expiry(deadline, idle));
    co_await bhttp::async_write(stream, out, asio::redirect_error(asio::use_awaitable, ec));
    if (ec)
      co_return transport_failure("write");
    whole_sent = true;
  } else {
    bhttp::request<bhttp::empty_body> head{request.method, url.target, 11};
    set_request_fields(head, url, request);
    head.set(bhttp::field::content_type, request.content_type);
    head.chunked(true);
    bhttp::request_serializer<bhttp::empty_body> serializer{head};
    c.lowest().expires_at(next_expiry(deadline, idle));
    co_await bhttp::async_write_header(stream, serializer,
                                       asio::redirect_error(asio::use_awaitable, ec));
    if (ec)
      co_return transport_failure("write");
    std::string piece;
    for (;;) {
      if (answer_waiting(c))
        break;  // answered before the body was sent: read that answer
      piece.clear();
      if (!options.body_source(piece))
        co_return failure(ClientErrorKind::kProtocol, "request body: the source failed");
      c.lowest().expires_at(next_expiry(deadline, idle));
      if (piece.empty()) {
        co_await asio::async_write(stream, bhttp::make_chunk_last(),
                                   asio::redirect_error(asio::use_awaitable, ec));
      } else {
        co_await asio::async_write(stream, bhttp::make_chunk(asio::buffer(piece)),
                                   asio::redirect_error(asio::use_awaitable, ec));
      }
      if (ec) {
        // The server may have answered and closed: its answer is worth more than the error.
        send_failure = transport_failure("write");
        break;
      }
      if (piece.empty()) {
        streamed_body_sent = true;
        whole_sent = true;
        break;
      }
    }
  }

  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  // A server reads a streamed body whole before it answers and may then take a while to act
  // on it (a batch is stored first): that wait is bounded by the deadline alone. Giving up
  // sooner would leave the caller not knowing whether the upload took effect.
  c.lowest().expires_at(streamed_body_sent ? deadline : next_expiry(deadline, idle));
  co_await bhttp::async_read_header(stream, c.buffer, parser,
                                    asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    if (send_failure)
      co_return std::move(*send_failure);
    ClientResponse failed =
        failure(timed_out(ec) ? ClientErrorKind::kTimeout : ClientErrorKind::kProtocol,
                "read: " + ec.message());
    failed.sent = whole_sent;  // the server may have acted on a request it got whole
    co_return failed;
  }
  ClientResponse response;
  response.sent = whole_sent;
  response.status = static_cast<int>(parser.get().result_int());
  for (const auto& field : parser.get())
    response.headers.insert(field.name_string(), field.value());
  const bool to_sink = options.on_body && response.status / 100 == 2;
  std::array<char, 64 * 1024> chunk;
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    c.lowest().expires_at(next_expiry(deadline, idle));
    // read_some, not read: read waits to fill the buffer, and a stream's events would sit
    // there until 64 KiB of them had come.
    co_await bhttp::async_read_some(stream, c.buffer, parser,
                                    asio::redirect_error(asio::use_awaitable, ec));
    if (ec == bhttp::error::need_buffer)
      ec = {};
    const std::size_t n = chunk.size() - parser.get().body().size;
    if (n > 0) {
      const std::string_view piece(chunk.data(), n);
      if (to_sink) {
        if (!options.on_body(piece))
          co_return response;  // the caller has what it wanted
      } else if (response.body.size() + piece.size() <= options.body_limit) {
        response.body.append(piece);
      } else if (response.status / 100 == 2) {
        // A 2xx body cut short would read as a whole answer.
        response.error = ClientErrorKind::kProtocol;
        response.error_message =
            "read: body over limit (" + std::to_string(options.body_limit) + " bytes)";
        co_return response;
      } else {
        // Enough of an answer that is not a 2xx: the start of its error shape.
        response.body.append(piece.substr(0, options.body_limit - response.body.size()));
        break;
      }
    }
    if (ec) {
      response.error = timed_out(ec) ? ClientErrorKind::kTimeout : ClientErrorKind::kProtocol;
      response.error_message = "read: " + ec.message();
      co_return response;
    }
  }
  co_return response;
}
}  // namespace

asio::awaitable<ClientResponse> fetch_stream(asio::any_io_executor executor, ClientRequest request,
                                             StreamOptions options) {
  const auto url = Url::parse(request.url);
  if (!url)
    co_return failure(ClientErrorKind::kBadUrl, "invalid URL: " + redact_credentials(request.url));
  if (auto refused = unsendable_header(request))
    co_return std::move(*refused);
  if (Clock::now() >= request.deadline)
    co_return failure(ClientErrorKind::kTimeout, "deadline passed before the call");
  Opened opened =
      co_await open_connection(executor, *url, next_expiry(request.deadline, options.idle_timeout));
  if (!opened.connection)
    co_return std::move(opened.failure);
  Connection& c = *opened.connection;
  ClientResponse response;
  if (c.tls) {
    response = co_await stream_exchange(*c.tls, c, *url, request, options);
  } else {
    response = co_await stream_exchange(*c.plain, c, *url, request, options);
  }
  c.close();
  co_return response;
}

}  // namespace agentfleet::http
