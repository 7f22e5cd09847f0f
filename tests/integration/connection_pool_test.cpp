// Keep-alive in the HTTP client against a real plain-HTTP server in this process: reuse
// per host, `Connection: close` honoured, the idle timeout, and the one retry when a
// reused connection turns out to be closed. No fleet needed.

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <string>
#include <thread>

#include "core/adapters/http/client.hpp"

namespace agentfleet::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using namespace std::chrono_literals;

// Answers "n" (the request's number on its connection) to each request of a connection.
class KeepAliveServer {
 public:
  enum class Mode {
    kKeepAlive,          // keeps every connection open
    kCloseHeader,        // answers with `Connection: close` and closes
    kDropSecondRequest,  // reads the 2nd request of a connection and closes without answering
    kDropEveryRequest,   // reads each request and closes without answering
    kHoldSecondRequest,  // reads the 2nd request, works on it for a second, closes unanswered
  };

  explicit KeepAliveServer(Mode mode) : mode_(mode) {
    acceptor_.open(asio::ip::tcp::v4());
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    asio::co_spawn(io_, accept_loop(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~KeepAliveServer() {
    io_.stop();
    thread_.join();
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()) + "/x";
  }
  int accepted() const { return accepted_; }
  int requests() const { return requests_; }

 private:
  asio::awaitable<void> accept_loop() {
    for (;;) {
      boost::system::error_code ec;
      auto socket = co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec)
        co_return;
      ++accepted_;
      asio::co_spawn(io_, serve(std::move(socket)), asio::detached);
    }
  }
  asio::awaitable<void> serve(asio::ip::tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    boost::system::error_code ec;
    for (int n = 1;; ++n) {
      stream.expires_after(10s);
      bhttp::request<bhttp::string_body> request;
      co_await bhttp::async_read(stream, buffer, request,
                                 asio::redirect_error(asio::use_awaitable, ec));
      if (ec)
        co_return;
      ++requests_;
      if (mode_ == Mode::kHoldSecondRequest && n == 2) {
        asio::steady_timer work(co_await asio::this_coro::executor, 1s);
        co_await work.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      if ((mode_ == Mode::kDropSecondRequest && n == 2) || mode_ == Mode::kDropEveryRequest ||
          (mode_ == Mode::kHoldSecondRequest && n == 2)) {
        stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
        co_return;
      }
      bhttp::response<bhttp::string_body> response{bhttp::status::ok, 11};
      response.body() = std::to_string(n);
      response.keep_alive(mode_ != Mode::kCloseHeader);
      response.prepare_payload();
      co_await bhttp::async_write(stream, response, asio::redirect_error(asio::use_awaitable, ec));
      if (ec || mode_ == Mode::kCloseHeader) {
        stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
        co_return;
      }
    }
  }

  Mode mode_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_{io_};
  std::thread thread_;
  std::atomic<int> accepted_{0};
  std::atomic<int> requests_{0};
};

ClientResponse call(asio::io_context& io, bhttp::verb method, const std::string& url,
                    ConnectionPool* pool) {
  ClientRequest request;
  request.method = method;
  request.url = url;
  request.deadline = std::chrono::steady_clock::now() + 10s;
  if (method == bhttp::verb::post)
    request.body = "{}";
  auto future =
      asio::co_spawn(io, fetch(io.get_executor(), std::move(request), pool), asio::use_future);
  io.restart();
  io.run();
  return future.get();
}

ClientResponse get(asio::io_context& io, const std::string& url, ConnectionPool* pool) {
  return call(io, bhttp::verb::get, url, pool);
}

TEST(ConnectionPool, ReusesAKeptAliveConnection) {
  KeepAliveServer server(KeepAliveServer::Mode::kKeepAlive);
  asio::io_context io;
  ConnectionPool pool;
  for (int i = 1; i <= 3; ++i) {
    auto response = get(io, server.url(), &pool);
    ASSERT_TRUE(response.ok()) << response.error_message;
    EXPECT_EQ(response.body, std::to_string(i));  // the i-th request on one connection
  }
  EXPECT_EQ(server.accepted(), 1);
  EXPECT_EQ(pool.stats().opened, 1u);
  EXPECT_EQ(pool.stats().reused, 2u);
  EXPECT_EQ(pool.idle_count(), 1u);
}

TEST(ConnectionPool, WithoutAPoolEveryCallHasItsOwnConnection) {
  KeepAliveServer server(KeepAliveServer::Mode::kKeepAlive);
  asio::io_context io;
  EXPECT_EQ(get(io, server.url(), nullptr).body, "1");
  EXPECT_EQ(get(io, server.url(), nullptr).body, "1");
  EXPECT_EQ(server.accepted(), 2);
}

TEST(ConnectionPool, ConnectionCloseFromTheServerIsHonoured) {
  KeepAliveServer server(KeepAliveServer::Mode::kCloseHeader);
  asio::io_context io;
  ConnectionPool pool;
  EXPECT_EQ(get(io, server.url(), &pool).body, "1");
  EXPECT_EQ(pool.idle_count(), 0u);
  EXPECT_EQ(get(io, server.url(), &pool).body, "1");
  EXPECT_EQ(server.accepted(), 2);
  EXPECT_EQ(pool.stats().reused, 0u);
}

TEST(ConnectionPool, IdleConnectionsExpire) {
  KeepAliveServer server(KeepAliveServer::Mode::kKeepAlive);
  asio::io_context io;
  ConnectionPoolOptions options;
  options.idle_timeout = 50ms;
  ConnectionPool pool(options);
  EXPECT_EQ(get(io, server.url(), &pool).body, "1");
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(get(io, server.url(), &pool).body, "1");
  EXPECT_EQ(server.accepted(), 2);
}

TEST(ConnectionPool, AGetOnAReusedConnectionThatEndsBeforeAnyAnswerIsSentOnceMoreOnAFreshOne) {
  KeepAliveServer server(KeepAliveServer::Mode::kDropSecondRequest);
  asio::io_context io;
  ConnectionPool pool;
  EXPECT_EQ(get(io, server.url(), &pool).body, "1");
  auto response = get(io, server.url(), &pool);
  ASSERT_TRUE(response.ok()) << response.error_message;
  EXPECT_EQ(response.body, "1");  // the first request of a new connection
  EXPECT_EQ(server.accepted(), 2);
  EXPECT_EQ(pool.stats().stale_retries, 1u);
}

TEST(ConnectionPool, APostTheServerReadIsNeverSentAgainEvenWhenTheConnectionEndsAtOnce) {
  // A model call: the server had the whole request, and may have charged for it however
  // soon the connection ended. The caller sees a failure that was sent (and bills it).
  KeepAliveServer server(KeepAliveServer::Mode::kDropSecondRequest);
  asio::io_context io;
  ConnectionPool pool;
  EXPECT_EQ(call(io, bhttp::verb::post, server.url(), &pool).body, "1");
  auto response = call(io, bhttp::verb::post, server.url(), &pool);
  ASSERT_FALSE(response.ok());
  EXPECT_TRUE(response.sent);
  EXPECT_EQ(server.requests(), 2);
  EXPECT_EQ(server.accepted(), 1);
  EXPECT_EQ(pool.stats().stale_retries, 0u);
}

TEST(ConnectionPool, AReusedConnectionThatEndsUnansweredAfterTheServerWorkedOnItIsNotSentAgain) {
  // The server took the request and worked on it (a provider that may charge for it) before
  // the connection ended: sending it again would act on it twice.
  KeepAliveServer server(KeepAliveServer::Mode::kHoldSecondRequest);
  asio::io_context io;
  ConnectionPool pool;
  EXPECT_EQ(call(io, bhttp::verb::post, server.url(), &pool).body, "1");
  auto response = call(io, bhttp::verb::post, server.url(), &pool);
  ASSERT_FALSE(response.ok());
  EXPECT_TRUE(response.sent);
  EXPECT_EQ(server.requests(), 2);
  EXPECT_EQ(server.accepted(), 1);
  EXPECT_EQ(pool.stats().stale_retries, 0u);
}

TEST(ConnectionPool, ARequestTheServerReadAndNeverAnsweredWasSentOneNeverDeliveredWasNot) {
  // What a model call bills on: the server had the whole request, and may have acted on it.
  KeepAliveServer server(KeepAliveServer::Mode::kDropEveryRequest);
  asio::io_context io;
  auto dropped = get(io, server.url(), nullptr);
  ASSERT_FALSE(dropped.ok());
  EXPECT_EQ(dropped.error, ClientErrorKind::kProtocol);
  EXPECT_TRUE(dropped.sent);
  // Nobody listens on the port any more: nothing was delivered.
  asio::ip::tcp::acceptor probe(io, {asio::ip::make_address("127.0.0.1"), 0});
  const std::string closed =
      "http://127.0.0.1:" + std::to_string(probe.local_endpoint().port()) + "/x";
  probe.close();
  auto refused = get(io, closed, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_FALSE(refused.sent);
  KeepAliveServer answering(KeepAliveServer::Mode::kKeepAlive);
  EXPECT_TRUE(get(io, answering.url(), nullptr).sent);
}

}  // namespace
}  // namespace agentfleet::http
