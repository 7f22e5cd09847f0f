// http::fetch_stream against an http::Server in this process: a chunked upload produced
// piece by piece arrives whole; a response body reaches the sink while the server is still
// sending; a sink can stop a stream; an idle stream times out; an answer that is not 2xx is
// kept whole; a refusal on the head stops a large upload; the answer to a whole upload is
// waited for past the idle timeout; a 2xx body kept without a sink is bounded; a failing
// source abandons the call. No fleet needed; every wait is bounded.

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "core/adapters/http/server.hpp"
#include "core/adapters/http/stream_client.hpp"

namespace agentfleet::http {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using namespace std::chrono_literals;

// An http::Server on 127.0.0.1 with one io thread; every request goes to `handler` as an
// Exchange.
class StreamServer {
 public:
  explicit StreamServer(StreamHandler handler) {
    ServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    server_ = std::make_unique<Server>(
        io_.get_executor(), options, Handler([](Request& request) -> asio::awaitable<Response> {
          co_return make_error(request, Status::not_found, "not_found", "streams only");
        }));
    server_->set_stream_route([](const Request&) { return true; }, std::move(handler));
    server_->start();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~StreamServer() {
    server_->stop();
    work_.reset();
    thread_.join();
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(server_->port()) + path;
  }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

ClientResponse run_stream(ClientRequest request, StreamOptions options) {
  asio::io_context io;
  auto future =
      asio::co_spawn(io, fetch_stream(io.get_executor(), std::move(request), std::move(options)),
                     asio::use_future);
  io.run_for(60s);
  if (future.wait_for(0s) != std::future_status::ready) {
    ADD_FAILURE() << "the call did not end in time";
    ClientResponse unfinished;
    unfinished.error = ClientErrorKind::kTimeout;
    unfinished.error_message = "the test gave up on the call";
    return unfinished;
  }
  return future.get();
}

ClientRequest request_to(const std::string& url, bhttp::verb method = bhttp::verb::get) {
  ClientRequest r;
  r.method = method;
  r.url = url;
  r.deadline = std::chrono::steady_clock::now() + 30s;
  return r;
}

asio::awaitable<void> pause(std::chrono::milliseconds duration) {
  asio::steady_timer timer(co_await asio::this_coro::executor, duration);
  co_await timer.async_wait(asio::use_awaitable);
}

std::uint64_t fnv1a(std::uint64_t hash, std::string_view bytes) {
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

TEST(HttpStreamClient, AChunkedUploadFromASourceArrivesWhole) {
  StreamServer server([](Exchange& exchange) -> asio::awaitable<void> {
    std::uint64_t bytes = 0, hash = 14695981039346656037ull;
    for (;;) {
      std::string piece;
      boost::system::error_code ec;
      const std::size_t n = co_await exchange.read_body(piece, 1 << 20, ec);
      if (ec || n == 0)
        break;
      bytes += n;
      hash = fnv1a(hash, piece);
    }
    co_await exchange.respond(make_response(exchange.head(), Status::created,
                                            std::to_string(bytes) + " " + std::to_string(hash) +
                                                " " + std::string(exchange.head()["Content-Type"]),
                                            "text/plain"));
  });
  // 12 MiB in pieces of changing size (1 byte to ~300 KiB), never held whole by the client.
  std::uint64_t sent = 0, hash = 14695981039346656037ull, state = 7;
  auto source = [&](std::string& out) {
    if (sent >= 12u * 1024 * 1024)
      return true;  // empty: the end
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const std::size_t size = 1 + (state >> 33) % 300000;
    for (std::size_t i = 0; i < size; ++i)
      out.push_back(static_cast<char>('a' + (sent + i) % 26));
    sent += size;
    hash = fnv1a(hash, out);
    return true;
  };
  auto request = request_to(server.url("/upload"), bhttp::verb::post);
  request.content_type = "application/x-ndjson";
  StreamOptions options;
  options.body_source = source;
  options.idle_timeout = 10s;
  const ClientResponse response = run_stream(std::move(request), std::move(options));
  ASSERT_TRUE(response.ok()) << response.error_message;
  EXPECT_EQ(response.status, 201);
  EXPECT_EQ(response.body,
            std::to_string(sent) + " " + std::to_string(hash) + " application/x-ndjson");
}

TEST(HttpStreamClient, TheSinkGetsEachPieceWhileTheServerIsStillSending) {
  std::atomic<int> pieces_seen{0};
  std::atomic<bool> waited_out{false};
  StreamServer server([&](Exchange& exchange) -> asio::awaitable<void> {
    Response head = make_response(exchange.head(), Status::ok, "", "text/event-stream");
    if (!co_await exchange.begin(std::move(head)))
      co_return;
    for (int i = 0; i < 3; ++i) {
      if (!co_await exchange.send("data: " + std::to_string(i) + "\n\n"))
        co_return;
      // The next piece only once the client has seen this one (bounded): a client that
      // waited for the whole body would never see it.
      for (int wait = 0; wait < 2000 && pieces_seen.load() <= i; ++wait)
        co_await pause(5ms);
      if (pieces_seen.load() <= i)
        waited_out = true;
    }
    co_await exchange.end();
  });
  std::string received;
  StreamOptions options;
  options.on_body = [&](std::string_view piece) {
    received.append(piece);
    pieces_seen = static_cast<int>(std::count(received.begin(), received.end(), '\n') / 2);
    return true;
  };
  options.idle_timeout = 20s;
  const ClientResponse response = run_stream(request_to(server.url("/events")), options);
  ASSERT_TRUE(response.ok()) << response.error_message;
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.header("Content-Type"), "text/event-stream");
  EXPECT_EQ(received, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  EXPECT_FALSE(waited_out) << "a piece reached the sink only after the server sent more";
  EXPECT_TRUE(response.body.empty()) << "a streamed body is not kept";
}

TEST(HttpStreamClient, ASinkThatSaysStopEndsAnEndlessStream) {
  StreamServer server([](Exchange& exchange) -> asio::awaitable<void> {
    if (!co_await exchange.begin(make_response(exchange.head(), Status::ok, "", "text/plain")))
      co_return;
    for (int i = 0; i < 6000; ++i) {  // a minute at most
      if (!co_await exchange.send("tick\n"))
        co_return;
      co_await pause(10ms);
    }
  });
  int calls = 0;
  StreamOptions options;
  options.on_body = [&](std::string_view) { return ++calls < 3; };
  const auto started = std::chrono::steady_clock::now();
  const ClientResponse response = run_stream(request_to(server.url("/ticks")), options);
  EXPECT_TRUE(response.ok()) << response.error_message;
  EXPECT_EQ(calls, 3);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
}

TEST(HttpStreamClient, AStreamSilentLongerThanTheIdleTimeoutEndsAsATimeout) {
  StreamServer server([](Exchange& exchange) -> asio::awaitable<void> {
    if (!co_await exchange.begin(
            make_response(exchange.head(), Status::ok, "first\n", "text/plain")))
      co_return;
    co_await pause(5s);
    co_await exchange.end();
  });
  std::string received;
  StreamOptions options;
  options.on_body = [&](std::string_view piece) {
    received.append(piece);
    return true;
  };
  options.idle_timeout = 500ms;
  const auto started = std::chrono::steady_clock::now();
  const ClientResponse response = run_stream(request_to(server.url("/quiet")), options);
  EXPECT_EQ(response.error, ClientErrorKind::kTimeout) << response.error_message;
  EXPECT_EQ(response.status, 200) << "the head had arrived";
  EXPECT_EQ(received, "first\n");
  EXPECT_LT(std::chrono::steady_clock::now() - started, 4s);
}

TEST(HttpStreamClient, AnAnswerThatIsNot2xxIsKeptWholeAndTheSinkNeverSeesIt) {
  StreamServer server([](Exchange& exchange) -> asio::awaitable<void> {
    co_await exchange.respond(
        make_error(exchange.head(), Status::not_found, "not_found", "no such stream", "/path"));
  });
  bool sink_called = false;
  StreamOptions options;
  options.on_body = [&](std::string_view) {
    sink_called = true;
    return true;
  };
  const ClientResponse response = run_stream(request_to(server.url("/missing")), options);
  ASSERT_TRUE(response.ok()) << response.error_message;
  EXPECT_EQ(response.status, 404);
  EXPECT_NE(response.body.find("no such stream"), std::string::npos) << response.body;
  EXPECT_FALSE(sink_called);
}

TEST(HttpStreamClient, ARefusalOnTheHeadStopsALargeUploadAndIsReturned) {
  StreamServer server([](Exchange& exchange) -> asio::awaitable<void> {
    co_await exchange.respond(
        make_error(exchange.head(), Status::forbidden, "forbidden", "not for this key"));
  });
  std::uint64_t sent = 0;
  StreamOptions options;
  options.body_source = [&](std::string& out) {
    if (sent >= 512u * 1024 * 1024)
      return true;
    out.assign(256 * 1024, 'x');
    sent += out.size();
    return true;
  };
  options.idle_timeout = 10s;
  const ClientResponse response =
      run_stream(request_to(server.url("/upload"), bhttp::verb::post), std::move(options));
  ASSERT_TRUE(response.ok()) << response.error_message;
  EXPECT_EQ(response.status, 403);
  EXPECT_NE(response.body.find("not for this key"), std::string::npos);
  EXPECT_LT(sent, 512u * 1024 * 1024) << "the upload stopped when the answer came";
}

TEST(HttpStreamClient, AnAnswerSlowerThanTheIdleTimeoutAfterAWholeUploadIsWaitedFor) {
  StreamServer server([](Exchange& exchange) -> asio::awaitable<void> {
    std::string piece;
    boost::system::error_code ec;
    std::size_t bytes = 0;
    while (const std::size_t n = co_await exchange.read_body(piece, 4096, ec))
      bytes += n;
    co_await pause(1500ms);  // acting on the body (storing a batch) before answering
    co_await exchange.respond(
        make_response(exchange.head(), Status::created, std::to_string(bytes), "text/plain"));
  });
  int calls = 0;
  StreamOptions options;
  options.body_source = [&](std::string& out) {
    if (++calls <= 3)
      out = "line\n";
    return true;
  };
  options.idle_timeout = 300ms;
  const ClientResponse response =
      run_stream(request_to(server.url("/upload"), bhttp::verb::post), std::move(options));
  ASSERT_TRUE(response.ok()) << response.error_message;
  EXPECT_EQ(response.status, 201);
  EXPECT_EQ(response.body, "15");
}

TEST(HttpStreamClient, A2xxBodyOverTheLimitWithoutASinkIsAProtocolError) {
  StreamServer server([](Exchange& exchange) -> asio::awaitable<void> {
    co_await exchange.respond(
        make_response(exchange.head(), Status::ok, std::string(5000, 'x'), "text/plain"));
  });
  StreamOptions options;
  options.body_limit = 1000;
  const ClientResponse big = run_stream(request_to(server.url("/big")), options);
  EXPECT_EQ(big.error, ClientErrorKind::kProtocol) << big.error_message;
  EXPECT_NE(big.error_message.find("body over limit"), std::string::npos) << big.error_message;
  options.body_limit = 5000;
  const ClientResponse whole = run_stream(request_to(server.url("/big")), options);
  ASSERT_TRUE(whole.ok()) << whole.error_message;
  EXPECT_EQ(whole.body.size(), 5000u);
}

TEST(HttpStreamClient, ASourceThatFailsAbandonsTheCall) {
  StreamServer server([](Exchange& exchange) -> asio::awaitable<void> {
    std::string piece;
    boost::system::error_code ec;
    while (co_await exchange.read_body(piece, 4096, ec) > 0) {
    }
    co_await exchange.respond(make_response(exchange.head(), Status::ok, "read", "text/plain"));
  });
  int calls = 0;
  StreamOptions options;
  options.body_source = [&](std::string& out) {
    out = "some";
    return ++calls < 3;
  };
  const ClientResponse response =
      run_stream(request_to(server.url("/upload"), bhttp::verb::post), std::move(options));
  EXPECT_EQ(response.error, ClientErrorKind::kProtocol);
  EXPECT_NE(response.error_message.find("source"), std::string::npos) << response.error_message;
}

TEST(HttpStreamClient, AnUnreachableServerIsAConnectFailure) {
  const ClientResponse response = run_stream(request_to("http://127.0.0.1:1/x"), StreamOptions{});
  EXPECT_EQ(response.error, ClientErrorKind::kConnect) << response.error_message;
  EXPECT_EQ(run_stream(request_to("not a url"), StreamOptions{}).error, ClientErrorKind::kBadUrl);
}

}  // namespace
}  // namespace agentfleet::http
