// Streamed request bodies and streamed (chunked) responses in http::Server, against a
// server in this process and raw Beast clients: uploads read in bounded pieces,
// `Expect: 100-continue`, server-sent events and JSON Lines downloads chunk by chunk,
// refusal on the head, stop() and a client gone mid-stream; whole requests alongside.
// No fleet needed. Every wait is bounded: clients run on a private io_context for a
// limited time, with a deadline on each socket operation.

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/adapters/http/server.hpp"

namespace agentfleet::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

constexpr auto kClientDeadline = 20s;  // each client socket operation
constexpr std::size_t kWholeBodyLimit = 1024 * 1024;

// ---- the server under test ----------------------------------------------------------

// An http::Server on 127.0.0.1 with two io threads. Whole requests: `POST /echo` answers
// its body. Requests under /stream/ go to the given stream handler. Stopping it checks
// that every connection coroutine (streams included) ends within a bound.
class TestServer {
 public:
  explicit TestServer(StreamHandler stream_handler, ServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    options.body_limit = kWholeBodyLimit;
    server_ = std::make_unique<Server>(
        io_.get_executor(), options, Handler([](Request& request) -> asio::awaitable<Response> {
          if (request.method() == bhttp::verb::post && request.target() == "/echo") {
            co_return make_response(request, Status::ok, request.body(), "text/plain");
          }
          co_return make_error(request, Status::not_found, "not_found", "no such route");
        }));
    server_->set_stream_route(
        [](const Request& head) {
          const std::string_view target(head.target().data(), head.target().size());
          return target_path(target).starts_with("/stream/");
        },
        std::move(stream_handler));
    server_->start();
    for (int i = 0; i < 2; ++i) {
      threads_.emplace_back([this] {
        io_.run();
        std::lock_guard lock(mutex_);
        ++finished_;
        finished_changed_.notify_all();
      });
    }
  }

  ~TestServer() {
    server_->stop();
    work_.reset();
    std::unique_lock lock(mutex_);
    const bool drained = finished_changed_.wait_for(
        lock, 15s, [&] { return finished_ == static_cast<int>(threads_.size()); });
    lock.unlock();
    if (!drained) {
      ADD_FAILURE() << "a connection was still running 15 s after stop()";
      io_.stop();
    }
    for (auto& thread : threads_) {
      thread.join();
    }
  }

  std::uint16_t port() const { return server_->port(); }
  void stop() { server_->stop(); }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  std::unique_ptr<Server> server_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable finished_changed_;
  int finished_ = 0;
};

// ---- stream handlers -----------------------------------------------------------------

std::uint64_t fnv1a(std::uint64_t hash, std::string_view bytes) {
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}
constexpr std::uint64_t kFnvOffset = 14695981039346656037ull;

// What the upload handler saw of a body; the handler answers it as text.
struct UploadTally {
  std::uint64_t bytes = 0;
  std::uint64_t lines = 0;
  std::uint64_t hash = kFnvOffset;
  std::uint64_t reads = 0;
  std::uint64_t over_max = 0;  // reads that returned more than asked for (must stay 0)
  bool body_done = false;

  std::string text() const {
    std::ostringstream out;
    out << bytes << ' ' << lines << ' ' << hash << ' ' << reads << ' ' << over_max << ' '
        << body_done;
    return out.str();
  }
  static UploadTally parse(const std::string& text) {
    UploadTally tally;
    std::istringstream in(text);
    in >> tally.bytes >> tally.lines >> tally.hash >> tally.reads >> tally.over_max >>
        tally.body_done;
    if (!in)
      throw std::runtime_error("not a tally: " + text);
    return tally;
  }
};

// Reads the body in pieces of varying size (one byte to 1 MiB), counting lines and
// hashing every byte without keeping the body; a read failure is answered with 413 (over
// the stream limit) or 400.
asio::awaitable<void> tally_upload(Exchange& exchange) {
  static constexpr std::size_t kMaxes[] = {65536, 1, 4096, 1024 * 1024, 7};
  UploadTally tally;
  std::string piece;
  for (;;) {
    piece.clear();
    const std::size_t max = kMaxes[tally.reads % std::size(kMaxes)];
    boost::system::error_code ec;
    const std::size_t n = co_await exchange.read_body(piece, max, ec);
    if (ec) {
      Response refusal =
          ec == bhttp::error::body_limit
              ? make_error(exchange.head(), Status::payload_too_large, "payload_too_large",
                           ec.message())
              : make_error(exchange.head(), Status::bad_request, "bad_body", ec.message());
      co_await exchange.respond(std::move(refusal));
      co_return;
    }
    if (n == 0)
      break;
    ++tally.reads;
    if (n > max || piece.size() != n)
      ++tally.over_max;
    tally.bytes += n;
    tally.hash = fnv1a(tally.hash, piece);
    for (const char c : piece) {
      tally.lines += c == '\n';
    }
  }
  tally.body_done = exchange.body_done();
  co_await exchange.respond(make_response(exchange.head(), Status::ok, tally.text(), "text/plain"));
}

// Polls `ready` (a bounded wait, not a guess): false when `limit` passed first.
asio::awaitable<bool> wait_until(std::function<bool()> ready, std::chrono::milliseconds limit) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  const auto give_up = std::chrono::steady_clock::now() + limit;
  while (!ready()) {
    if (std::chrono::steady_clock::now() >= give_up)
      co_return false;
    timer.expires_after(1ms);
    co_await timer.async_wait(asio::use_awaitable);
  }
  co_return true;
}

asio::awaitable<void> pause(std::chrono::milliseconds duration) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  timer.expires_after(duration);
  co_await timer.async_wait(asio::use_awaitable);
}

Response event_stream_head(const Request& request) {
  Response head = make_response(request, Status::ok, "", "text/event-stream");
  head.set(bhttp::field::cache_control, "no-cache");
  return head;
}

// ---- clients ------------------------------------------------------------------------

// Runs a client coroutine on a private io_context on this thread, for at most `limit`.
template <typename T>
T run_client(asio::awaitable<T> client, std::chrono::seconds limit = 90s) {
  asio::io_context io;
  auto future = asio::co_spawn(io, std::move(client), asio::use_future);
  io.run_for(limit);
  if (future.wait_for(0s) != std::future_status::ready)
    throw std::runtime_error("the client did not finish in time");
  return future.get();
}

asio::awaitable<beast::tcp_stream> connect(std::uint16_t port) {
  beast::tcp_stream stream(co_await asio::this_coro::executor);
  stream.expires_after(kClientDeadline);
  co_await stream.async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port),
                                asio::use_awaitable);
  co_return stream;
}

asio::awaitable<void> write_text(beast::tcp_stream& stream, std::string_view text) {
  stream.expires_after(kClientDeadline);
  co_await asio::async_write(stream, asio::buffer(text.data(), text.size()), asio::use_awaitable);
}

// Writes `body` with chunked encoding in pieces of pseudo-random size (1 to 300000
// bytes, not aligned to lines), then the last chunk.
asio::awaitable<void> write_chunked(beast::tcp_stream& stream, std::string_view body) {
  std::uint64_t state = 12345;
  std::size_t offset = 0;
  while (offset < body.size()) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const std::size_t size =
        std::min<std::size_t>(1 + (state >> 33) % 300000, body.size() - offset);
    stream.expires_after(kClientDeadline);
    co_await asio::async_write(stream, bhttp::make_chunk(asio::buffer(body.data() + offset, size)),
                               asio::use_awaitable);
    offset += size;
  }
  stream.expires_after(kClientDeadline);
  co_await asio::async_write(stream, bhttp::make_chunk_last(), asio::use_awaitable);
}

using ClientResponse = bhttp::response<bhttp::string_body>;

// One whole response (a 100 Continue is one too: a 1xx has no body).
asio::awaitable<ClientResponse> read_response(beast::tcp_stream& stream,
                                              beast::flat_buffer& buffer) {
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // not none: see server.cpp
  stream.expires_after(kClientDeadline);
  co_await bhttp::async_read(stream, buffer, parser, asio::use_awaitable);
  co_return parser.release();
}

// The error of the next read; eof when the server closed the connection.
asio::awaitable<boost::system::error_code> next_read_error(beast::tcp_stream& stream,
                                                           beast::flat_buffer& buffer) {
  boost::system::error_code ec;
  stream.expires_after(kClientDeadline);
  while (!ec) {
    const std::size_t n = co_await stream.async_read_some(
        buffer.prepare(4096), asio::redirect_error(asio::use_awaitable, ec));
    buffer.commit(n);
  }
  co_return ec;
}

// Reads a chunked response and keeps each chunk as it was framed by the server.
class ChunkReader {
 public:
  ChunkReader(beast::tcp_stream& stream, beast::flat_buffer& buffer)
      : stream_(stream), buffer_(buffer) {
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
    parser_.on_chunk_header(on_header_);
    parser_.on_chunk_body(on_body_);
  }
  ChunkReader(const ChunkReader&) = delete;
  ChunkReader& operator=(const ChunkReader&) = delete;

  // Called with each whole chunk as soon as it was parsed.
  std::function<void(const std::string&)> on_chunk;

  asio::awaitable<void> read_head() {
    stream_.expires_after(kClientDeadline);
    co_await bhttp::async_read_header(stream_, buffer_, parser_, asio::use_awaitable);
  }
  // Reads until `count` chunks arrived in all, the response ended or a read failed.
  asio::awaitable<boost::system::error_code> read_chunks(std::size_t count) {
    boost::system::error_code ec;
    while (!ec && !parser_.is_done() && chunks_.size() < count) {
      stream_.expires_after(kClientDeadline);
      co_await bhttp::async_read_some(stream_, buffer_, parser_,
                                      asio::redirect_error(asio::use_awaitable, ec));
    }
    co_return ec;
  }

  const bhttp::response<bhttp::string_body>& head() const { return parser_.get(); }
  bool complete() const { return parser_.is_done(); }
  const std::vector<std::string>& chunks() const { return chunks_; }

 private:
  beast::tcp_stream& stream_;
  beast::flat_buffer& buffer_;
  bhttp::response_parser<bhttp::string_body> parser_;
  std::string current_;
  std::vector<std::string> chunks_;
  std::function<void(std::uint64_t, beast::string_view, boost::system::error_code&)> on_header_ =
      [this](std::uint64_t, beast::string_view, boost::system::error_code&) { current_.clear(); };
  std::function<std::size_t(std::uint64_t, beast::string_view, boost::system::error_code&)>
      on_body_ = [this](std::uint64_t remain, beast::string_view body, boost::system::error_code&) {
        current_.append(body.data(), body.size());
        if (remain == body.size()) {  // `remain` counts this piece too: the chunk is whole
          chunks_.push_back(current_);
          if (on_chunk)
            on_chunk(chunks_.back());
        }
        return body.size();
      };
};

struct JsonLines {
  std::string text;
  std::uint64_t lines = 0;
  std::uint64_t hash = kFnvOffset;
};

JsonLines json_lines(std::size_t at_least) {
  JsonLines out;
  out.text.reserve(at_least + 256);
  while (out.text.size() < at_least) {
    out.text += "{\"n\":" + std::to_string(out.lines) + ",\"pad\":\"" +
                std::string(out.lines % 97, 'x') + "\"}\n";
    ++out.lines;
  }
  out.hash = fnv1a(kFnvOffset, out.text);
  return out;
}

std::string upload_head(std::string_view framing, std::string_view extra = {}) {
  return "POST /stream/upload HTTP/1.1\r\nHost: 127.0.0.1\r\n" + std::string(framing) + "\r\n" +
         std::string(extra) + "\r\n";
}

// ---- uploads ------------------------------------------------------------------------

TEST(HttpStreaming, A40MiBChunkedUploadIsReadInPiecesNoLargerThanAskedFor) {
  TestServer server(tally_upload);
  const JsonLines body = json_lines(40 * 1024 * 1024);
  const ClientResponse response = run_client([&]() -> asio::awaitable<ClientResponse> {
    beast::tcp_stream stream = co_await connect(server.port());
    beast::flat_buffer buffer;
    co_await write_text(stream, upload_head("Transfer-Encoding: chunked"));
    co_await write_chunked(stream, body.text);
    co_return co_await read_response(stream, buffer);
  }());
  ASSERT_EQ(response.result(), Status::ok) << response.body();
  const UploadTally tally = UploadTally::parse(response.body());
  EXPECT_EQ(tally.bytes, body.text.size());
  EXPECT_EQ(tally.lines, body.lines);
  EXPECT_EQ(tally.hash, body.hash);
  EXPECT_EQ(tally.over_max, 0u);
  EXPECT_GT(tally.reads, 600u);  // 40 MiB in pieces of at most 1 MiB, a fifth of one byte
  EXPECT_TRUE(tally.body_done);
  EXPECT_FALSE(response.keep_alive());
}

TEST(HttpStreaming, A20MiBContentLengthUploadIsReadInPiecesNoLargerThanAskedFor) {
  TestServer server(tally_upload);
  const JsonLines body = json_lines(20 * 1024 * 1024);
  const ClientResponse response = run_client([&]() -> asio::awaitable<ClientResponse> {
    beast::tcp_stream stream = co_await connect(server.port());
    beast::flat_buffer buffer;
    co_await write_text(stream, upload_head("Content-Length: " + std::to_string(body.text.size())));
    for (std::size_t offset = 0; offset < body.text.size(); offset += 1024 * 1024) {
      co_await write_text(stream, std::string_view(body.text).substr(offset, 1024 * 1024));
    }
    co_return co_await read_response(stream, buffer);
  }());
  ASSERT_EQ(response.result(), Status::ok) << response.body();
  const UploadTally tally = UploadTally::parse(response.body());
  EXPECT_EQ(tally.bytes, body.text.size());
  EXPECT_EQ(tally.lines, body.lines);
  EXPECT_EQ(tally.hash, body.hash);
  EXPECT_EQ(tally.over_max, 0u);
  EXPECT_GT(tally.reads, 300u);
  EXPECT_TRUE(tally.body_done);
}

TEST(HttpStreaming, AStreamedBodyOverTheStreamLimitFailsTheReadAnd413StillReachesTheClient) {
  ServerOptions options;
  options.stream_body_limit = 1024 * 1024;
  TestServer server(tally_upload, options);
  // Far more than the socket buffers hold: the client is still sending when the server
  // answers, and gets the answer only if the server reads on meanwhile.
  const JsonLines body = json_lines(24 * 1024 * 1024);

  // Chunked: the limit is noticed in the middle of the body, while the client still sends.
  const ClientResponse chunked = run_client([&]() -> asio::awaitable<ClientResponse> {
    beast::tcp_stream stream = co_await connect(server.port());
    beast::flat_buffer buffer;
    co_await write_text(stream, upload_head("Transfer-Encoding: chunked"));
    co_await write_chunked(stream, body.text);
    co_return co_await read_response(stream, buffer);
  }());
  EXPECT_EQ(chunked.result(), Status::payload_too_large) << chunked.body();

  // Content-Length: refused at the first read, so the body is never invited (no 100).
  const ClientResponse declared = run_client([&]() -> asio::awaitable<ClientResponse> {
    beast::tcp_stream stream = co_await connect(server.port());
    beast::flat_buffer buffer;
    co_await write_text(stream, upload_head("Content-Length: " + std::to_string(body.text.size()),
                                            "Expect: 100-continue\r\n"));
    co_return co_await read_response(stream, buffer);
  }());
  EXPECT_EQ(declared.result(), Status::payload_too_large) << declared.body();
  EXPECT_FALSE(declared.keep_alive());
}

// ---- Expect: 100-continue -----------------------------------------------------------

TEST(HttpStreaming, ExpectContinueOnAStreamedRouteGets100BeforeTheBodyIsSent) {
  TestServer server(tally_upload);
  const std::string body = "{\"a\":1}\n{\"b\":2}\n";
  const auto [interim, final_response] =
      run_client([&]() -> asio::awaitable<std::pair<ClientResponse, ClientResponse>> {
        beast::tcp_stream stream = co_await connect(server.port());
        beast::flat_buffer buffer;
        co_await write_text(stream, upload_head("Content-Length: " + std::to_string(body.size()),
                                                "Expect: 100-continue\r\n"));
        // Nothing of the body is sent until the 100 arrives (the read would time out).
        ClientResponse continue_response = co_await read_response(stream, buffer);
        co_await write_text(stream, body);
        ClientResponse answer = co_await read_response(stream, buffer);
        co_return std::pair(std::move(continue_response), std::move(answer));
      }());
  EXPECT_EQ(interim.result(), Status::continue_);
  ASSERT_EQ(final_response.result(), Status::ok) << final_response.body();
  const UploadTally tally = UploadTally::parse(final_response.body());
  EXPECT_EQ(tally.bytes, body.size());
  EXPECT_EQ(tally.lines, 2u);
}

TEST(HttpStreaming, ExpectContinueOnAWholeRouteGets100BeforeTheBodyIsSent) {
  TestServer server(tally_upload);
  const auto [interim, final_response] =
      run_client([&]() -> asio::awaitable<std::pair<ClientResponse, ClientResponse>> {
        beast::tcp_stream stream = co_await connect(server.port());
        beast::flat_buffer buffer;
        co_await write_text(stream,
                            "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n"
                            "Expect: 100-continue\r\n\r\n");
        ClientResponse continue_response = co_await read_response(stream, buffer);
        co_await write_text(stream, "hello");
        ClientResponse answer = co_await read_response(stream, buffer);
        co_return std::pair(std::move(continue_response), std::move(answer));
      }());
  EXPECT_EQ(interim.result(), Status::continue_);
  EXPECT_EQ(final_response.result(), Status::ok);
  EXPECT_EQ(final_response.body(), "hello");
}

// ---- refusing on the head -----------------------------------------------------------

asio::awaitable<void> require_authorization(Exchange& exchange) {
  if (exchange.head()[bhttp::field::authorization] != "Bearer secret") {
    co_await exchange.respond(
        make_error(exchange.head(), Status::unauthorized, "unauthorized", "no token"));
    co_return;
  }
  co_await tally_upload(exchange);
}

TEST(HttpStreaming, AHandlerThatRefusesOnTheHeadAnswersWithoutInvitingTheBody) {
  TestServer server(require_authorization);

  // With Expect: the first thing the client hears is the 401, not a 100.
  const auto [expecting, after_expecting] =
      run_client([&]() -> asio::awaitable<std::pair<ClientResponse, boost::system::error_code>> {
        beast::tcp_stream stream = co_await connect(server.port());
        beast::flat_buffer buffer;
        co_await write_text(stream,
                            upload_head("Content-Length: 10485760", "Expect: 100-continue\r\n"));
        ClientResponse response = co_await read_response(stream, buffer);
        const boost::system::error_code after = co_await next_read_error(stream, buffer);
        co_return std::pair(std::move(response), after);
      }());
  EXPECT_EQ(expecting.result(), Status::unauthorized);
  EXPECT_FALSE(expecting.keep_alive());
  EXPECT_EQ(after_expecting, asio::error::eof);  // and the server closed the connection

  // Without Expect the body is already on its way; the client still gets the 401.
  const ClientResponse sending = run_client([&]() -> asio::awaitable<ClientResponse> {
    beast::tcp_stream stream = co_await connect(server.port());
    beast::flat_buffer buffer;
    const std::string body(256 * 1024, 'x');
    co_await write_text(stream,
                        upload_head("Content-Length: " + std::to_string(body.size())) + body);
    co_return co_await read_response(stream, buffer);
  }());
  EXPECT_EQ(sending.result(), Status::unauthorized);

  // With the token the same route reads the body.
  const ClientResponse allowed = run_client([&]() -> asio::awaitable<ClientResponse> {
    beast::tcp_stream stream = co_await connect(server.port());
    beast::flat_buffer buffer;
    co_await write_text(
        stream, upload_head("Content-Length: 4", "Authorization: Bearer secret\r\n") + "a\nb\n");
    co_return co_await read_response(stream, buffer);
  }());
  ASSERT_EQ(allowed.result(), Status::ok) << allowed.body();
  EXPECT_EQ(UploadTally::parse(allowed.body()).lines, 2u);
}

TEST(HttpStreaming, AHandlerThatAnswersNothingOrThrowsGets500) {
  TestServer server([](Exchange& exchange) -> asio::awaitable<void> {
    if (exchange.head().target() == "/stream/throw")
      throw std::runtime_error("handler failed");
    co_return;  // no answer at all
  });
  for (const char* target : {"/stream/silent", "/stream/throw"}) {
    const ClientResponse response = run_client([&]() -> asio::awaitable<ClientResponse> {
      beast::tcp_stream stream = co_await connect(server.port());
      beast::flat_buffer buffer;
      co_await write_text(stream,
                          std::string("GET ") + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
      co_return co_await read_response(stream, buffer);
    }());
    EXPECT_EQ(response.result(), Status::internal_server_error) << target;
    EXPECT_FALSE(response.keep_alive()) << target;
  }
}

// ---- whole requests alongside -------------------------------------------------------

TEST(HttpStreaming, WholeRequestsStillWorkWithKeepAliveAndTheirBodyLimit) {
  TestServer server(tally_upload);

  // Two whole requests on one connection, then a streamed one, which ends it.
  struct Seen {
    ClientResponse first, second, streamed;
    boost::system::error_code after;
  };
  const Seen seen = run_client([&]() -> asio::awaitable<Seen> {
    beast::tcp_stream stream = co_await connect(server.port());
    beast::flat_buffer buffer;
    Seen out;
    co_await write_text(stream, "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\none");
    out.first = co_await read_response(stream, buffer);
    co_await write_text(stream,
                        "POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "3\r\ntwo\r\n0\r\n\r\n");
    out.second = co_await read_response(stream, buffer);
    co_await write_text(stream, upload_head("Content-Length: 2") + "x\n");
    out.streamed = co_await read_response(stream, buffer);
    out.after = co_await next_read_error(stream, buffer);
    co_return out;
  }());
  EXPECT_EQ(seen.first.result(), Status::ok);
  EXPECT_EQ(seen.first.body(), "one");
  EXPECT_TRUE(seen.first.keep_alive());
  EXPECT_EQ(seen.second.body(), "two");
  EXPECT_TRUE(seen.second.keep_alive());
  ASSERT_EQ(seen.streamed.result(), Status::ok) << seen.streamed.body();
  EXPECT_EQ(UploadTally::parse(seen.streamed.body()).bytes, 2u);
  EXPECT_FALSE(seen.streamed.keep_alive());
  EXPECT_EQ(seen.after, asio::error::eof);

  // Over the whole-body limit, declared: 413 at once, and no 100 for the refused body.
  const ClientResponse declared = run_client([&]() -> asio::awaitable<ClientResponse> {
    beast::tcp_stream stream = co_await connect(server.port());
    beast::flat_buffer buffer;
    co_await write_text(stream, "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: " +
                                    std::to_string(2 * kWholeBodyLimit) +
                                    "\r\nExpect: 100-continue\r\n\r\n");
    co_return co_await read_response(stream, buffer);
  }());
  EXPECT_EQ(declared.result(), Status::payload_too_large);
  EXPECT_FALSE(declared.keep_alive());

  // Over the limit, chunked and sent whole (more than the socket buffers hold) before
  // reading: still a 413.
  const ClientResponse chunked = run_client([&]() -> asio::awaitable<ClientResponse> {
    beast::tcp_stream stream = co_await connect(server.port());
    beast::flat_buffer buffer;
    co_await write_text(stream,
                        "POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n");
    co_await write_chunked(stream, std::string(24 * kWholeBodyLimit, 'y'));
    co_return co_await read_response(stream, buffer);
  }());
  EXPECT_EQ(chunked.result(), Status::payload_too_large);
}

// ---- streamed responses -------------------------------------------------------------

TEST(HttpStreaming, ServerSentEventsArriveOneChunkAtATime) {
  // The handler sends an event only after the client has parsed the one before: if the
  // server held chunks back, the client would never see the first and the handler would
  // give up (cutting the stream short).
  std::atomic<int> received{0};
  TestServer server([&](Exchange& exchange) -> asio::awaitable<void> {
    if (!co_await exchange.begin(event_stream_head(exchange.head())))
      co_return;
    for (int i = 0; i < 3; ++i) {
      if (!co_await exchange.send("id: " + std::to_string(i) + "\ndata: event " +
                                  std::to_string(i) + "\n\n"))
        co_return;
      if (!co_await wait_until([&] { return received.load() > i; }, 10s))
        co_return;
      co_await pause(20ms);  // a small gap between events
    }
    co_await exchange.end();
  });

  struct Seen {
    ClientResponse head;
    std::vector<std::string> chunks;
    bool complete = false;
    boost::system::error_code after;
  };
  const Seen seen = run_client([&]() -> asio::awaitable<Seen> {
    beast::tcp_stream stream = co_await connect(server.port());
    beast::flat_buffer buffer;
    co_await write_text(
        stream, "GET /stream/events HTTP/1.1\r\nHost: h\r\nAccept: text/event-stream\r\n\r\n");
    ChunkReader reader(stream, buffer);
    reader.on_chunk = [&](const std::string&) { ++received; };
    co_await reader.read_head();
    const auto ec = co_await reader.read_chunks(SIZE_MAX);
    if (ec)
      throw boost::system::system_error(ec);
    Seen out{reader.head(), reader.chunks(), reader.complete(), {}};
    out.after = co_await next_read_error(stream, buffer);
    co_return out;
  }());
  EXPECT_EQ(seen.head.result(), Status::ok);
  EXPECT_EQ(seen.head[bhttp::field::content_type], "text/event-stream");
  EXPECT_EQ(seen.head[bhttp::field::cache_control], "no-cache");
  EXPECT_TRUE(seen.head.chunked());
  EXPECT_FALSE(seen.head.keep_alive());
  EXPECT_EQ(seen.head.count(bhttp::field::content_length), 0u);
  EXPECT_EQ(seen.chunks,
            (std::vector<std::string>{"id: 0\ndata: event 0\n\n", "id: 1\ndata: event 1\n\n",
                                      "id: 2\ndata: event 2\n\n"}));
  EXPECT_TRUE(seen.complete);
  EXPECT_EQ(seen.after, asio::error::eof);
}

TEST(HttpStreaming, AJsonLinesDownloadOfManyChunksArrivesComplete) {
  constexpr int kChunks = 2000;
  constexpr int kLinesPerChunk = 5;
  TestServer server([&](Exchange& exchange) -> asio::awaitable<void> {
    Response head = make_response(exchange.head(), Status::ok, "", "application/x-ndjson");
    if (!co_await exchange.begin(std::move(head)))
      co_return;
    for (int chunk = 0; chunk < kChunks; ++chunk) {
      std::string lines;
      for (int i = 0; i < kLinesPerChunk; ++i) {
        lines += "{\"i\":" + std::to_string(chunk * kLinesPerChunk + i) + "}\n";
      }
      if (!co_await exchange.send(lines))
        co_return;
    }
    co_await exchange.end();
  });

  struct Seen {
    std::vector<std::string> chunks;
    bool complete = false;
  };
  const Seen seen = run_client([&]() -> asio::awaitable<Seen> {
    beast::tcp_stream stream = co_await connect(server.port());
    beast::flat_buffer buffer;
    co_await write_text(stream, "GET /stream/results HTTP/1.1\r\nHost: h\r\n\r\n");
    ChunkReader reader(stream, buffer);
    co_await reader.read_head();
    const auto ec = co_await reader.read_chunks(SIZE_MAX);
    if (ec)
      throw boost::system::system_error(ec);
    co_return Seen{reader.chunks(), reader.complete()};
  }());
  EXPECT_TRUE(seen.complete);
  ASSERT_EQ(seen.chunks.size(), static_cast<std::size_t>(kChunks));
  std::string expected;
  std::string received;
  for (int i = 0; i < kChunks * kLinesPerChunk; ++i) {
    expected += "{\"i\":" + std::to_string(i) + "}\n";
  }
  for (const auto& chunk : seen.chunks) {
    received += chunk;
  }
  EXPECT_EQ(received, expected);
}

// Sends one event, then a heartbeat every `gap` until a send fails or 10 s pass; tells
// how it ended.
struct HeartbeatOutcome {
  bool send_failed = false;
  std::chrono::steady_clock::time_point ended;
};

StreamHandler heartbeats(std::promise<HeartbeatOutcome>& outcome, std::chrono::milliseconds gap) {
  return [&outcome, gap](Exchange& exchange) -> asio::awaitable<void> {
    HeartbeatOutcome result;
    if (co_await exchange.begin(event_stream_head(exchange.head())) &&
        co_await exchange.send("data: first\n\n")) {
      const auto give_up = std::chrono::steady_clock::now() + 10s;
      while (std::chrono::steady_clock::now() < give_up) {
        co_await pause(gap);  // waiting for the next event
        if (!co_await exchange.send(": heartbeat\n\n")) {
          result.send_failed = true;
          break;
        }
      }
    }
    result.ended = std::chrono::steady_clock::now();
    outcome.set_value(result);
  };
}

TEST(HttpStreaming, StopEndsAStreamWaitingForItsNextChunk) {
  std::promise<HeartbeatOutcome> outcome;
  auto ended = outcome.get_future();
  auto server = std::make_unique<TestServer>(heartbeats(outcome, 200ms));

  std::chrono::steady_clock::time_point stopped;
  const auto [first, after_stop] =
      run_client([&]() -> asio::awaitable<std::pair<std::string, boost::system::error_code>> {
        beast::tcp_stream stream = co_await connect(server->port());
        beast::flat_buffer buffer;
        co_await write_text(stream, "GET /stream/events HTTP/1.1\r\nHost: h\r\n\r\n");
        ChunkReader reader(stream, buffer);
        co_await reader.read_head();
        const auto ec = co_await reader.read_chunks(1);
        if (ec || reader.chunks().empty())
          throw std::runtime_error("no first event: " + ec.message());
        stopped = std::chrono::steady_clock::now();
        server->stop();
        // The stream is cut: the connection ends before the last chunk.
        const boost::system::error_code after = co_await reader.read_chunks(SIZE_MAX);
        co_return std::pair(reader.chunks().front(), after);
      }());
  EXPECT_EQ(first, "data: first\n\n");
  EXPECT_TRUE(after_stop) << "the stream went on after stop()";

  ASSERT_EQ(ended.wait_for(5s), std::future_status::ready) << "the handler ran on after stop()";
  const HeartbeatOutcome result = ended.get();
  EXPECT_TRUE(result.send_failed);
  EXPECT_LT(result.ended - stopped, 2s);
  server.reset();  // and every connection coroutine ends (checked by ~TestServer)
}

TEST(HttpStreaming, AClientGoneMidStreamMakesSendReturnFalse) {
  std::promise<HeartbeatOutcome> outcome;
  auto ended = outcome.get_future();
  TestServer server(heartbeats(outcome, 5ms));

  std::chrono::steady_clock::time_point closed;
  const std::string first = run_client([&]() -> asio::awaitable<std::string> {
    beast::tcp_stream stream = co_await connect(server.port());
    beast::flat_buffer buffer;
    co_await write_text(stream, "GET /stream/events HTTP/1.1\r\nHost: h\r\n\r\n");
    ChunkReader reader(stream, buffer);
    co_await reader.read_head();
    const auto ec = co_await reader.read_chunks(1);
    if (ec || reader.chunks().empty())
      throw std::runtime_error("no first event: " + ec.message());
    closed = std::chrono::steady_clock::now();
    stream.close();
    co_return reader.chunks().front();
  }());
  EXPECT_EQ(first, "data: first\n\n");

  ASSERT_EQ(ended.wait_for(10s), std::future_status::ready) << "the handler never noticed";
  const HeartbeatOutcome result = ended.get();
  EXPECT_TRUE(result.send_failed);
  EXPECT_LT(result.ended - closed, 5s);
}

}  // namespace
}  // namespace agentfleet::http
