#pragma once
// A small HTTP/1.1 server on Boost.Beast with C++20 coroutines: one coroutine per
// connection, keep-alive, a body limit and an idle/read deadline per request. The
// dispatcher's API and the simulators (llm-sim, tool-sim) are built on it.
//
// Lifecycle: construct, `start()` binds and begins accepting (throws on bind failure),
// `stop()` closes the listener and every open connection. All work runs on the
// executor given at construction; the handler may be called concurrently on a
// multi-threaded io_context, so it must guard any state it shares.
//
// A handler returns a Response, written whole. A handler that needs to misbehave on
// purpose (the simulators' fault injection) returns a Reply instead, whose Delivery can
// cut the body short and close the connection, or answer nothing at all until the client
// gives up (bounded); other connections are served meanwhile either way.

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace agentfleet::http {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;
using Status = boost::beast::http::status;
using Handler = std::function<boost::asio::awaitable<Response>(Request&)>;

// How a Reply reaches the client.
enum class Delivery {
  kNormal,    // the whole response, as for a Handler
  kTruncate,  // the head (with the full Content-Length) and `truncate_at` body bytes, then close
  kHang,      // nothing; the connection stays open until the client closes it or `hang_for`
              // passes, then it is closed
};

struct Reply {
  Response response;
  Delivery delivery = Delivery::kNormal;
  std::size_t truncate_at = 0;
  std::chrono::milliseconds hang_for{std::chrono::minutes(10)};
};
using ReplyHandler = std::function<boost::asio::awaitable<Reply>(Request&)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0 picks a free port; see Server::port()
  std::size_t body_limit = 8 * 1024 * 1024;
  std::chrono::seconds read_timeout{30};
  std::string server_name = "agentfleet";
};

class Server {
 public:
  Server(boost::asio::any_io_executor executor, ServerOptions options, Handler handler);
  Server(boost::asio::any_io_executor executor, ServerOptions options, ReplyHandler handler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  void start();
  void stop();
  std::uint16_t port() const { return bound_port_; }

 private:
  struct Connection;
  boost::asio::awaitable<void> accept_loop();
  boost::asio::awaitable<void> serve(std::shared_ptr<Connection> connection);
  // Waits, reading and discarding, until the peer closes or `limit` passes.
  boost::asio::awaitable<void> hang(std::shared_ptr<Connection> connection,
                                    std::chrono::milliseconds limit);

  boost::asio::any_io_executor executor_;
  ServerOptions options_;
  ReplyHandler handler_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::uint16_t bound_port_ = 0;
  std::mutex connections_mutex_;
  std::set<std::shared_ptr<Connection>> connections_;
  bool stopped_ = false;
};

// Response helpers; each sets Content-Type, keep-alive from the request and the length.
Response make_response(const Request& request, Status status, std::string body,
                       std::string content_type = "application/json");
// {"error": {"code": CODE, "message": MESSAGE, "path": PATH}}; path omitted when empty.
Response make_error(const Request& request, Status status, std::string_view code,
                    std::string_view message, std::string_view path = {});

// The path of a request target without its query, and one decoded query parameter.
std::string_view target_path(std::string_view target);
std::optional<std::string> query_param(std::string_view target, std::string_view name);

}  // namespace agentfleet::http
