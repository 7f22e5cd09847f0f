// What one client can make http::Server hold: a request decided on its head before any
// body byte is read (refused, or given a body limit of its own), a head or target over its
// limit, deadlines for an idle connection, a head and a whole request (a client trickling
// a byte at a time is cut off all the same), caps on connections in all and per client
// address answered 503/429 with Retry-After, and accepts that fail backing off instead of
// spinning. Against a server in this process and plain blocking sockets, each operation
// with a deadline. No fleet needed.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/adapters/http/server.hpp"

namespace agentfleet::http {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A server on 127.0.0.1 with two io threads. `/locked` needs "Authorization: Bearer
// secret" (decided on the head); `/small` takes at most 100 body bytes; every other request
// is answered 200 with its body.
class LimitServer {
 public:
  explicit LimitServer(ServerOptions options) {
    options.host = "127.0.0.1";
    options.port = 0;
    server_ = std::make_unique<Server>(
        io_.get_executor(), options, Handler([](Request& request) -> asio::awaitable<Response> {
          co_return make_response(request, Status::ok, request.body(), "text/plain");
        }));
    server_->set_head_route(
        [](const Request& head) {
          Admission admission;
          const std::string_view path =
              target_path(std::string_view(head.target().data(), head.target().size()));
          if (path == "/locked" && head[bhttp::field::authorization] != "Bearer secret") {
            admission.refusal =
                make_error(head, Status::unauthorized, "unauthorized", "a key is needed");
          }
          if (path == "/small")
            admission.body_limit = 100;
          return admission;
        },
        [](Exchange&) -> asio::awaitable<void> { co_return; });
    server_->start();
    for (int i = 0; i < 2; ++i)
      threads_.emplace_back([this] { io_.run(); });
  }
  ~LimitServer() {
    server_->stop();
    work_.reset();
    for (auto& thread : threads_)
      thread.join();
  }
  std::uint16_t port() const { return server_->port(); }
  ServerCounts counts() const { return server_->counts(); }

  // Waits (bounded) until `ready(counts())`; the condition the test set up, not a guess.
  bool wait_for(const std::function<bool(const ServerCounts&)>& ready,
                std::chrono::milliseconds limit = 10s) const {
    const auto until = Clock::now() + limit;
    while (Clock::now() < until) {
      if (ready(counts()))
        return true;
      std::this_thread::sleep_for(5ms);
    }
    return ready(counts());
  }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  std::unique_ptr<Server> server_;
  std::vector<std::thread> threads_;
};

// A blocking client socket; every call is bounded by `poll`.
class Client {
 public:
  // Connects to 127.0.0.1:port, from `from` (another loopback address) when given.
  explicit Client(std::uint16_t port, const char* from = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0)
      return;
    if (from) {
      sockaddr_in local{};
      local.sin_family = AF_INET;
      ::inet_pton(AF_INET, from, &local.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0)
        close();
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      close();
  }
  // Only creates the socket; connect_to() connects it later (for the descriptor test).
  Client() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {}
  bool connect_to(std::uint16_t port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    return fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~Client() { close(); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool ok() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = -1;
  }
  // False once the server closed or reset the connection.
  bool send(std::string_view text) {
    while (!text.empty()) {
      const ssize_t n = ::send(fd_, text.data(), text.size(), MSG_NOSIGNAL);
      if (n <= 0)
        return false;
      text.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }
  // What arrives until the server closes the connection, `limit` passes, or (with
  // `until_complete`) a whole response with its Content-Length body is in.
  std::string receive(std::chrono::milliseconds limit, bool until_complete = true) {
    std::string out;
    const auto until = Clock::now() + limit;
    closed_ = false;
    while (Clock::now() < until) {
      if (until_complete && complete(out))
        break;
      pollfd p{fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 1))) <= 0)
        continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
  }
  // The last receive() ended because the server closed (or reset) the connection.
  bool closed() const { return closed_; }

 private:
  static bool complete(const std::string& text) {
    const auto end = text.find("\r\n\r\n");
    if (end == std::string::npos)
      return false;
    const auto at = text.find("Content-Length: ");
    if (at == std::string::npos || at > end)
      return true;
    return text.size() >= end + 4 + std::stoul(text.substr(at + 16));
  }
  int fd_ = -1;
  bool closed_ = false;
};

std::string status_line(const std::string& response) {
  return response.substr(0, response.find("\r\n"));
}

TEST(HttpLimits, ARequestRefusedOnItsHeadIsAnsweredBeforeAnyBodyByteIsSent) {
  LimitServer server({});
  Client client(server.port());
  ASSERT_TRUE(client.ok());
  // An 8 MiB body is announced and none of it is sent: the answer comes anyway.
  ASSERT_TRUE(client.send("POST /locked HTTP/1.1\r\nHost: x\r\nContent-Length: 8388608\r\n\r\n"));
  const std::string answer = client.receive(5s);
  EXPECT_EQ(status_line(answer), "HTTP/1.1 401 Unauthorized") << answer;
  EXPECT_NE(answer.find("Connection: close"), std::string::npos) << answer;

  // With the key the same route reads its body.
  Client keyed(server.port());
  ASSERT_TRUE(
      keyed.send("POST /locked HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer secret\r\n"
                 "Content-Length: 5\r\n\r\nhello"));
  const std::string ok = keyed.receive(5s);
  EXPECT_EQ(status_line(ok), "HTTP/1.1 200 OK") << ok;
  EXPECT_TRUE(ok.ends_with("hello"));

  // A refusal of a request without a body keeps the connection for the next one.
  Client reuse(server.port());
  ASSERT_TRUE(reuse.send("GET /locked HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(status_line(reuse.receive(5s)), "HTTP/1.1 401 Unauthorized");
  ASSERT_TRUE(reuse.send("GET /other HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(status_line(reuse.receive(5s)), "HTTP/1.1 200 OK");
}

TEST(HttpLimits, ARouteBodyLimitIsCheckedOnTheHeadAndWhileReading) {
  LimitServer server({});
  Client declared(server.port());
  ASSERT_TRUE(declared.send("POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n"));
  const std::string refused = declared.receive(5s);
  EXPECT_EQ(status_line(refused), "HTTP/1.1 413 Payload Too Large") << refused;
  EXPECT_NE(refused.find("exceeds 100 bytes"), std::string::npos) << refused;

  // Chunked: no length to check on the head; the read stops at the limit.
  Client chunked(server.port());
  ASSERT_TRUE(chunked.send("POST /small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                           std::string("c8\r\n") + std::string(200, 'a') + "\r\n0\r\n\r\n"));
  EXPECT_EQ(status_line(chunked.receive(5s)), "HTTP/1.1 413 Payload Too Large");

  Client fits(server.port());
  ASSERT_TRUE(fits.send("POST /small HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" +
                        std::string(100, 'b')));
  EXPECT_EQ(status_line(fits.receive(5s)), "HTTP/1.1 200 OK");
}

TEST(HttpLimits, AnOversizedHeadGets431AndAnOversizedTarget414) {
  ServerOptions options;
  options.header_limit = 4096;
  options.target_limit = 1024;
  LimitServer server(options);

  Client big_header(server.port());
  ASSERT_TRUE(big_header.send("GET / HTTP/1.1\r\nHost: x\r\nX-Filler: " + std::string(8000, 'f') +
                              "\r\n\r\n"));
  const std::string header_answer = big_header.receive(5s);
  EXPECT_EQ(status_line(header_answer), "HTTP/1.1 431 Request Header Fields Too Large")
      << header_answer;

  Client long_target(server.port());
  ASSERT_TRUE(long_target.send("GET /" + std::string(2000, 't') + " HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string target_answer = long_target.receive(5s);
  EXPECT_EQ(status_line(target_answer), "HTTP/1.1 414 URI Too Long") << target_answer;

  EXPECT_TRUE(server.wait_for([](const ServerCounts& c) { return c.oversized_heads == 2; }));
}

TEST(HttpLimits, AClientTricklingItsBodyIsCutOffAtTheRequestDeadline) {
  ServerOptions options;
  options.request_timeout = 1s;
  options.read_timeout = 30s;  // each read is short: a per-read deadline would never fire
  LimitServer server(options);
  Client client(server.port());
  const auto started = Clock::now();
  ASSERT_TRUE(client.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"));
  // One byte every 50 ms: 1,000 bytes would take 50 s. At most 10 s of trickling.
  bool cut = false;
  while (Clock::now() - started < 10s) {
    if (!client.send("x")) {
      cut = true;
      break;
    }
    client.receive(50ms, false);
    if (client.closed()) {
      cut = true;
      break;
    }
  }
  const auto took = Clock::now() - started;
  EXPECT_TRUE(cut) << "the trickling client was never cut off";
  EXPECT_GE(took, 900ms) << "cut before the request deadline";
  EXPECT_TRUE(server.wait_for([](const ServerCounts& c) { return c.timed_out >= 1; }));
}

TEST(HttpLimits, AClientTricklingItsHeadIsCutOffAtTheHeaderDeadline) {
  ServerOptions options;
  options.header_timeout = 1s;
  LimitServer server(options);
  Client client(server.port());
  const auto started = Clock::now();
  ASSERT_TRUE(client.send("GET / HTTP/1.1\r\nHost: x\r\n"));
  bool cut = false;
  while (Clock::now() - started < 10s) {
    if (!client.send("X")) {
      cut = true;
      break;
    }
    const std::string got = client.receive(50ms, false);
    EXPECT_TRUE(got.empty()) << "no answer to a head that never ended: " << got;
    if (client.closed()) {
      cut = true;
      break;
    }
  }
  EXPECT_TRUE(cut);
  EXPECT_GE(Clock::now() - started, 900ms);
}

TEST(HttpLimits, AnIdleConnectionIsClosedAfterTheIdleDeadline) {
  ServerOptions options;
  options.idle_timeout = 1s;
  LimitServer server(options);
  Client client(server.port());
  // One request, then nothing: the connection closes about a second later. The idle
  // deadline starts once the server has written its answer, after `sent`, so the close can
  // never come sooner than a second after it (measured from the answer's arrival, a busy
  // machine could deliver it late and shorten what the test sees).
  const auto sent = Clock::now();
  ASSERT_TRUE(client.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(status_line(client.receive(5s)), "HTTP/1.1 200 OK");
  const std::string rest = client.receive(10s, false);
  EXPECT_TRUE(rest.empty());
  EXPECT_TRUE(client.closed()) << "still open 10 s after its last request";
  EXPECT_GE(Clock::now() - sent, 1s);
  EXPECT_TRUE(server.wait_for([](const ServerCounts& c) { return c.open == 0; }));
}

TEST(HttpLimits, ConnectionsOverTheCapOfOneAddressGet429AndOtherAddressesAreServed) {
  ServerOptions options;
  options.max_connections_per_address = 2;
  options.retry_after = 3s;
  LimitServer server(options);
  auto first = std::make_unique<Client>(server.port());
  Client second(server.port());
  ASSERT_TRUE(first->ok() && second.ok());
  ASSERT_TRUE(server.wait_for([](const ServerCounts& c) { return c.open == 2; }));

  Client third(server.port());
  const std::string refused = third.receive(5s);
  EXPECT_EQ(status_line(refused), "HTTP/1.1 429 Too Many Requests") << refused;
  EXPECT_NE(refused.find("Retry-After: 3"), std::string::npos) << refused;
  EXPECT_NE(refused.find("too_many_connections"), std::string::npos) << refused;
  third.receive(5s, false);
  EXPECT_TRUE(third.closed());

  // Another loopback address has caps of its own.
  Client other(server.port(), "127.0.0.2");
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(other.send("GET /x HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(status_line(other.receive(5s)), "HTTP/1.1 200 OK");

  // Once one of the first two is gone, the address may connect again.
  first.reset();
  ASSERT_TRUE(server.wait_for([](const ServerCounts& c) { return c.open == 2; }));
  Client again(server.port());
  ASSERT_TRUE(again.send("GET /y HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(status_line(again.receive(5s)), "HTTP/1.1 200 OK");
  EXPECT_EQ(server.counts().refused_address, 1u);
}

TEST(HttpLimits, ConnectionsOverTheServerCapGet503WithRetryAfter) {
  ServerOptions options;
  options.max_connections = 2;
  LimitServer server(options);
  Client first(server.port(), "127.0.0.3");
  Client second(server.port(), "127.0.0.4");
  ASSERT_TRUE(server.wait_for([](const ServerCounts& c) { return c.open == 2; }));
  Client third(server.port(), "127.0.0.5");
  const std::string refused = third.receive(5s);
  EXPECT_EQ(status_line(refused), "HTTP/1.1 503 Service Unavailable") << refused;
  EXPECT_NE(refused.find("Retry-After: 1"), std::string::npos) << refused;
  EXPECT_EQ(server.counts().refused_total, 1u);
  // The connections within the cap are served all the while.
  ASSERT_TRUE(first.send("GET /z HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_EQ(status_line(first.receive(5s)), "HTTP/1.1 200 OK");
}

std::size_t open_descriptors() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

// Out of descriptors, accept() fails at once, every time: re-armed at once it would spin a
// CPU. With the backoff it is tried a few dozen times a minute at most, and the waiting
// connections are served once descriptors are free again.
TEST(HttpLimits, AcceptsThatFailForWantOfDescriptorsBackOffAndRecover) {
  LimitServer server({});
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  // The client sockets exist before the limit falls, so connecting them needs no descriptor;
  // the server's accept of each does.
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<Client>());
    ASSERT_TRUE(clients.back()->ok());
  }
  rlimit tight = saved;
  // The directory listing below takes one descriptor of its own.
  tight.rlim_cur = open_descriptors() - 1;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  bool connected = true;
  for (auto& client : clients)
    connected = client->connect_to(server.port()) && connected;
  const bool failing =
      server.wait_for([](const ServerCounts& c) { return c.accept_failures >= 1; });
  // Half a second out of descriptors: the backoff (5 ms doubling) tries about 7 times.
  std::this_thread::sleep_for(500ms);
  const std::uint64_t failures = server.counts().accept_failures;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_TRUE(connected);
  ASSERT_TRUE(failing) << "no accept failed while no descriptor was free";
  EXPECT_LE(failures, 20u) << "accepts retried without backing off";
  for (auto& client : clients) {
    ASSERT_TRUE(client->send("GET /after HTTP/1.1\r\nHost: x\r\n\r\n"));
    EXPECT_EQ(status_line(client->receive(5s)), "HTTP/1.1 200 OK");
  }
}

}  // namespace
}  // namespace agentfleet::http
