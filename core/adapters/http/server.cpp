#include "core/adapters/http/server.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>

namespace agentfleet::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

struct Server::Connection {
  explicit Connection(tcp::socket socket) : stream(std::move(socket)) {}
  beast::tcp_stream stream;
};

Server::Server(asio::any_io_executor executor, ServerOptions options, Handler handler)
    : Server(
          executor, std::move(options),
          ReplyHandler([handler = std::move(handler)](Request& request) -> asio::awaitable<Reply> {
            Reply reply;
            reply.response = co_await handler(request);
            co_return reply;
          })) {}

Server::Server(asio::any_io_executor executor, ServerOptions options, ReplyHandler handler)
    : executor_(executor),
      options_(std::move(options)),
      handler_(std::move(handler)),
      acceptor_(executor) {}

Server::~Server() {
  stop();
}

void Server::start() {
  tcp::endpoint endpoint(asio::ip::make_address(options_.host), options_.port);
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(asio::socket_base::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen(asio::socket_base::max_listen_connections);
  bound_port_ = acceptor_.local_endpoint().port();
  asio::co_spawn(executor_, accept_loop(), asio::detached);
}

void Server::stop() {
  std::set<std::shared_ptr<Connection>> open;
  {
    std::lock_guard lock(connections_mutex_);
    if (stopped_)
      return;
    stopped_ = true;
    open.swap(connections_);
  }
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  for (const auto& connection : open) {
    connection->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    connection->stream.socket().close(ignored);
  }
}

asio::awaitable<void> Server::accept_loop() {
  for (;;) {
    boost::system::error_code ec;
    tcp::socket socket =
        co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec == asio::error::operation_aborted || !acceptor_.is_open())
      co_return;
    if (ec)
      continue;  // a failed accept (e.g. peer reset) must not stop the listener
    socket.set_option(tcp::no_delay(true), ec);
    auto connection = std::make_shared<Connection>(std::move(socket));
    {
      std::lock_guard lock(connections_mutex_);
      if (stopped_)
        co_return;
      connections_.insert(connection);
    }
    asio::co_spawn(executor_, serve(connection), asio::detached);
  }
}

asio::awaitable<void> Server::serve(std::shared_ptr<Connection> connection) {
  beast::flat_buffer buffer;
  for (;;) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.body_limit(options_.body_limit);
    connection->stream.expires_after(options_.read_timeout);
    boost::system::error_code ec;
    co_await bhttp::async_read(connection->stream, buffer, parser,
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec == bhttp::error::body_limit) {
      Request head = parser.release();
      Response response =
          make_error(head, Status::payload_too_large, "payload_too_large",
                     "request body exceeds " + std::to_string(options_.body_limit) + " bytes");
      response.keep_alive(false);
      co_await bhttp::async_write(connection->stream, response,
                                  asio::redirect_error(asio::use_awaitable, ec));
      break;
    }
    if (ec)
      break;  // closed, timed out or malformed: nothing to answer on this stream
    Request request = parser.release();
    Reply reply;
    try {
      reply = co_await handler_(request);
    } catch (const std::exception& e) {
      reply = Reply{};
      reply.response = make_error(request, Status::internal_server_error, "internal", e.what());
    }
    Response& response = reply.response;
    response.set(bhttp::field::server, options_.server_name);
    response.prepare_payload();
    if (reply.delivery == Delivery::kHang) {
      co_await hang(connection, reply.hang_for);
      break;
    }
    connection->stream.expires_after(options_.read_timeout);
    if (reply.delivery == Delivery::kTruncate) {
      // The head promises the whole body; the client sees the connection end early.
      bhttp::response_serializer<bhttp::string_body> serializer(response);
      co_await bhttp::async_write_header(connection->stream, serializer,
                                         asio::redirect_error(asio::use_awaitable, ec));
      const std::size_t bytes = std::min(reply.truncate_at, response.body().size());
      if (!ec && bytes > 0) {
        co_await asio::async_write(connection->stream, asio::buffer(response.body().data(), bytes),
                                   asio::redirect_error(asio::use_awaitable, ec));
      }
      break;
    }
    const bool keep_alive = response.keep_alive();
    co_await bhttp::async_write(connection->stream, response,
                                asio::redirect_error(asio::use_awaitable, ec));
    if (ec || !keep_alive)
      break;
  }
  boost::system::error_code ignored;
  connection->stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  std::lock_guard lock(connections_mutex_);
  connections_.erase(connection);
}

asio::awaitable<void> Server::hang(std::shared_ptr<Connection> connection,
                                   std::chrono::milliseconds limit) {
  // Reading is how a closed peer is noticed; whatever it sends meanwhile is dropped.
  connection->stream.expires_after(limit);
  char scratch[4096];
  for (;;) {
    boost::system::error_code ec;
    co_await connection->stream.async_read_some(asio::buffer(scratch),
                                                asio::redirect_error(asio::use_awaitable, ec));
    if (ec)
      co_return;  // closed by the peer, by stop(), or the limit passed
  }
}

Response make_response(const Request& request, Status status, std::string body,
                       std::string content_type) {
  Response response{status, request.version()};
  response.set(bhttp::field::content_type, content_type);
  response.keep_alive(request.keep_alive());
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

Response make_error(const Request& request, Status status, std::string_view code,
                    std::string_view message, std::string_view path) {
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> writer(out);
  writer.StartObject();
  writer.Key("error");
  writer.StartObject();
  writer.Key("code");
  writer.String(code.data(), static_cast<rapidjson::SizeType>(code.size()));
  writer.Key("message");
  writer.String(message.data(), static_cast<rapidjson::SizeType>(message.size()));
  if (!path.empty()) {
    writer.Key("path");
    writer.String(path.data(), static_cast<rapidjson::SizeType>(path.size()));
  }
  writer.EndObject();
  writer.EndObject();
  return make_response(request, status, std::string(out.GetString(), out.GetSize()));
}

std::string_view target_path(std::string_view target) {
  return target.substr(0, target.find('?'));
}

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out.push_back(' ');
    } else if (text[i] == '%' && i + 2 < text.size() && hex_value(text[i + 1]) >= 0 &&
               hex_value(text[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2])));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}
}  // namespace

std::optional<std::string> query_param(std::string_view target, std::string_view name) {
  const auto question = target.find('?');
  if (question == std::string_view::npos)
    return std::nullopt;
  std::string_view query = target.substr(question + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    const auto eq = pair.find('=');
    std::string key = percent_decode(pair.substr(0, eq));
    if (key == name) {
      return eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1));
    }
    if (amp == std::string_view::npos)
      break;
    query = query.substr(amp + 1);
  }
  return std::nullopt;
}

}  // namespace agentfleet::http
