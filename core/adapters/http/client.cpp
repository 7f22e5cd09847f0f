#include "core/adapters/http/client.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>

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
  if (authority.empty())
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

asio::awaitable<std::optional<ClientResponse>> connect(beast::tcp_stream& stream,
                                                       const tcp::resolver::results_type& endpoints,
                                                       const Url& url) {
  boost::system::error_code ec;
  co_await stream.async_connect(endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    co_return failure(timed_out(ec) ? ClientErrorKind::kTimeout : ClientErrorKind::kConnect,
                      "connect " + url.host + ":" + url.port + ": " + ec.message());
  }
  stream.socket().set_option(tcp::no_delay(true), ec);
  co_return std::nullopt;
}

// Writes the request and reads the response on a connected (and, for HTTPS, handshaken)
// stream; its deadline is already set.
template <typename Stream>
asio::awaitable<ClientResponse> exchange(Stream& stream, const Url& url, ClientRequest request) {
  boost::system::error_code ec;
  bhttp::request<bhttp::string_body> out{request.method, url.target, 11};
  out.set(bhttp::field::host, url.host + ":" + url.port);
  out.set(bhttp::field::user_agent, "agentfleet");
  for (const auto& [name, value] : request.headers)
    out.set(name, value);
  if (!request.body.empty() || request.method == bhttp::verb::post) {
    out.set(bhttp::field::content_type, request.content_type);
    out.body() = std::move(request.body);
  }
  out.prepare_payload();
  co_await bhttp::async_write(stream, out, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    co_return failure(timed_out(ec) ? ClientErrorKind::kTimeout : ClientErrorKind::kConnect,
                      "write: " + ec.message());
  }
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(64 * 1024 * 1024);
  co_await bhttp::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    co_return failure(timed_out(ec) ? ClientErrorKind::kTimeout : ClientErrorKind::kProtocol,
                      "read: " + ec.message());
  }
  auto in = parser.release();
  ClientResponse response;
  response.status = static_cast<int>(in.result_int());
  for (const auto& field : in)
    response.headers.insert(field.name_string(), field.value());
  response.body = std::move(in.body());
  co_return response;
}
}  // namespace

asio::awaitable<ClientResponse> fetch(asio::any_io_executor executor, ClientRequest request) {
  const auto url = Url::parse(request.url);
  if (!url)
    co_return failure(ClientErrorKind::kBadUrl, "invalid URL: " + request.url);
  if (std::chrono::steady_clock::now() >= request.deadline) {
    co_return failure(ClientErrorKind::kTimeout, "deadline passed before the call");
  }
  boost::system::error_code ec;
  tcp::resolver resolver(executor);
  // The stream's deadline starts at connect; a lookup runs on Asio's resolver thread, so a
  // timer cancels it at the same deadline.
  asio::steady_timer resolve_deadline(executor, request.deadline);
  resolve_deadline.async_wait([&resolver](const boost::system::error_code& timer_ec) {
    if (!timer_ec)
      resolver.cancel();
  });
  auto endpoints = co_await resolver.async_resolve(url->host, url->port,
                                                   asio::redirect_error(asio::use_awaitable, ec));
  resolve_deadline.cancel();
  if (ec == asio::error::operation_aborted) {
    co_return failure(ClientErrorKind::kTimeout, "resolve " + url->host + ": deadline passed");
  }
  if (ec)
    co_return failure(ClientErrorKind::kConnect, "resolve " + url->host + ": " + ec.message());

  if (url->scheme == "https") {
    beast::ssl_stream<beast::tcp_stream> stream(executor, client_tls_context());
    // SNI, and the certificate must name the host we asked for.
    if (!SSL_set_tlsext_host_name(stream.native_handle(), url->host.c_str())) {
      co_return failure(ClientErrorKind::kTls, "cannot set SNI for " + url->host);
    }
    stream.set_verify_callback(asio::ssl::host_name_verification(url->host));
    beast::get_lowest_layer(stream).expires_at(request.deadline);
    if (auto failed = co_await connect(beast::get_lowest_layer(stream), endpoints, *url)) {
      co_return *failed;
    }
    co_await stream.async_handshake(asio::ssl::stream_base::client,
                                    asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      co_return failure(timed_out(ec) ? ClientErrorKind::kTimeout
                        : ec.category() == asio::error::get_ssl_category()
                            ? ClientErrorKind::kTls
                            : ClientErrorKind::kConnect,
                        "TLS handshake with " + url->host + ": " + ec.message());
    }
    ClientResponse response = co_await exchange(stream, *url, std::move(request));
    // No TLS close_notify exchange: many servers never answer it, and the body is complete.
    beast::get_lowest_layer(stream).socket().close(ec);
    co_return response;
  }
  beast::tcp_stream stream(executor);
  stream.expires_at(request.deadline);
  if (auto failed = co_await connect(stream, endpoints, *url))
    co_return *failed;
  ClientResponse response = co_await exchange(stream, *url, std::move(request));
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  co_return response;
}

}  // namespace agentfleet::http
