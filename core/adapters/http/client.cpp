#include "core/adapters/http/client.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>

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

asio::awaitable<ClientResponse> fetch(asio::any_io_executor executor, ClientRequest request) {
  const auto url = Url::parse(request.url);
  if (!url)
    co_return failure(ClientErrorKind::kBadUrl, "invalid URL: " + request.url);
  if (url->scheme != "http") {
    co_return failure(ClientErrorKind::kUnsupported, "scheme not supported: " + url->scheme);
  }
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

  beast::tcp_stream stream(executor);
  stream.expires_at(request.deadline);
  co_await stream.async_connect(endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    co_return failure(timed_out(ec) ? ClientErrorKind::kTimeout : ClientErrorKind::kConnect,
                      "connect " + url->host + ":" + url->port + ": " + ec.message());
  }
  stream.socket().set_option(tcp::no_delay(true), ec);

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
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  co_return response;
}

}  // namespace agentfleet::http
