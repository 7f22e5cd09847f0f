#include "core/adapters/http/server.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <array>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <limits>
#include <sstream>

#include "core/codec/json_text.hpp"

namespace agentfleet::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

struct Server::Connection {
  Connection(tcp::socket socket, std::string peer)
      : stream(std::move(socket)), address(std::move(peer)) {}
  beast::tcp_stream stream;  // its executor is the connection's strand
  std::string address;       // the client's IP address, for the per-address cap
};

namespace {

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

// How long a connection closed with part of a request body unread keeps reading (and
// dropping) what the client still sends. Closing a socket with unread input resets the
// connection, and the client may then lose the answer it has not read yet (a 413 or 401
// sent while it was still uploading).
constexpr std::chrono::seconds kLingerLimit{5};

// What one socket read of a streamed body may take (Beast reads at most 64 KiB at a time).
constexpr std::size_t kStreamReadSize = 64 * 1024;

// What the first read of a request may take (the rest of its head is read by Beast).
constexpr std::size_t kFirstRead = 4 * 1024;

bool expects_continue(const Request& head) {
  return head.version() >= 11 && beast::iequals(head[bhttp::field::expect], "100-continue");
}

asio::awaitable<boost::system::error_code> write_continue(beast::tcp_stream& stream,
                                                          std::chrono::seconds timeout) {
  boost::system::error_code ec;
  stream.expires_after(timeout);
  co_await asio::async_write(stream, asio::buffer(kContinue.data(), kContinue.size()),
                             asio::redirect_error(asio::use_awaitable, ec));
  co_return ec;
}

// Ends the sending side, then drops what the client still sends until it closes too.
asio::awaitable<void> linger(beast::tcp_stream& stream, std::chrono::seconds limit) {
  boost::system::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.expires_after(limit);
  std::array<char, 4096> scratch;
  while (!ec) {
    co_await stream.async_read_some(asio::buffer(scratch),
                                    asio::redirect_error(asio::use_awaitable, ec));
  }
}

// The whole answer to a connection over a cap, written straight to a new socket (a fresh
// socket's send buffer always takes it) so that refusing costs no coroutine and no buffer.
std::string over_cap_answer(Status status, std::string_view code, std::string_view message,
                            std::chrono::seconds retry_after, std::string_view server_name) {
  const std::string body = std::string(R"({"error":{"code":")") + std::string(code) +
                           R"(","message":")" + std::string(message) + "\"}}";
  Response response{status, 11};
  response.set(bhttp::field::server, std::string(server_name));
  response.set(bhttp::field::retry_after, std::to_string(retry_after.count()));
  response.set(bhttp::field::content_type, "application/json");
  response.keep_alive(false);
  response.body() = body;
  response.prepare_payload();
  std::ostringstream out;
  out << response;
  return out.str();
}

// The answer to a head over the server's limits; the connection closes after it.
Response head_refused(const Request& head, Status status, std::string_view code,
                      std::string message) {
  Response response = make_error(head, status, code, message, "/");
  response.keep_alive(false);
  return response;
}

Response payload_too_large(const Request& head, std::uint64_t limit) {
  // The path of the problem is the body as a whole.
  Response response = make_error(head, Status::payload_too_large, "payload_too_large",
                                 "request body exceeds " + std::to_string(limit) + " bytes", "/");
  response.keep_alive(false);
  return response;
}

}  // namespace

struct Exchange::State {
  State(beast::tcp_stream& connection_stream, beast::flat_buffer& read_buffer,
        const ServerOptions& server_options,
        bhttp::request_parser<bhttp::string_body>& header_parser)
      : stream(connection_stream),
        buffer(read_buffer),
        options(server_options),
        head(header_parser.get()),
        parser(std::move(header_parser)) {
    // No body octet was parsed yet, so the limit may still change; a Content-Length is
    // checked by Beast only while the head is parsed, hence the explicit check.
    parser.body_limit(options.stream_body_limit);
    const auto length = parser.content_length();
    over_limit = length && *length > options.stream_body_limit;
    continue_pending = !parser.is_done() && expects_continue(head);
    // Beast reads from the socket only as much as the buffer holds without growing; left
    // at the size of the request head, a large body would come in pieces of ~1 KiB.
    buffer.reserve(kStreamReadSize);
  }

  enum class Phase { kNothingSent, kResponded, kStreaming, kEnded, kFailed };

  beast::tcp_stream& stream;
  beast::flat_buffer& buffer;
  const ServerOptions& options;
  Request head;
  bhttp::request_parser<bhttp::buffer_body> parser;
  bool over_limit = false;
  bool continue_pending = false;
  boost::system::error_code read_error;  // sticky: the body cannot be read any further
  Phase phase = Phase::kNothingSent;
  bool chunked = true;  // false for an HTTP/1.0 client: the body ends with the connection
};

Exchange::Exchange(std::unique_ptr<State> state) : state_(std::move(state)) {}

Exchange::~Exchange() = default;

const Request& Exchange::head() const {
  return state_->head;
}

bool Exchange::body_done() const {
  return state_->parser.is_done();
}

bool Exchange::responded() const {
  return state_->phase != State::Phase::kNothingSent;
}

asio::awaitable<std::size_t> Exchange::read_body(std::string& out, std::size_t max,
                                                 boost::system::error_code& ec) {
  State& s = *state_;
  ec = {};
  if (s.read_error) {
    ec = s.read_error;
    co_return 0;
  }
  if (s.parser.is_done())
    co_return 0;
  if (max == 0) {
    ec = asio::error::invalid_argument;
    co_return 0;
  }
  if (s.over_limit) {
    ec = s.read_error = bhttp::error::body_limit;
    co_return 0;
  }
  if (s.continue_pending) {
    s.continue_pending = false;
    // After a final response has started, a 100 would be a protocol error.
    if (s.phase == State::Phase::kNothingSent) {
      ec = co_await write_continue(s.stream, s.options.write_timeout);
      if (ec) {
        s.read_error = ec;
        co_return 0;
      }
    }
  }
  const std::size_t old_size = out.size();
  out.resize(old_size + max);
  auto& body = s.parser.get().body();
  std::size_t got = 0;
  // A read may parse only chunk framing and yield no body byte; read on until one comes.
  while (got == 0 && !ec && !s.parser.is_done()) {
    body.data = out.data() + old_size;
    body.size = max;
    body.more = true;
    s.stream.expires_after(s.options.read_timeout);
    co_await bhttp::async_read_some(s.stream, s.buffer, s.parser,
                                    asio::redirect_error(asio::use_awaitable, ec));
    got = max - body.size;
    if (ec == bhttp::error::need_buffer)
      ec = {};  // our piece is full: not an error
  }
  body.data = nullptr;  // `out` is the caller's: never parse into it outside this call
  body.size = 0;
  if (ec) {
    out.resize(old_size);
    s.read_error = ec;
    co_return 0;
  }
  out.resize(old_size + got);
  co_return got;
}

asio::awaitable<bool> Exchange::respond(Response response) {
  State& s = *state_;
  if (s.phase != State::Phase::kNothingSent)
    co_return false;
  s.phase = State::Phase::kResponded;
  response.set(bhttp::field::server, s.options.server_name);
  response.keep_alive(false);
  response.prepare_payload();
  s.stream.expires_after(s.options.write_timeout);
  boost::system::error_code ec;
  co_await bhttp::async_write(s.stream, response, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    s.phase = State::Phase::kFailed;
    co_return false;
  }
  co_return true;
}

asio::awaitable<bool> Exchange::begin(Response head) {
  State& s = *state_;
  if (s.phase != State::Phase::kNothingSent)
    co_return false;
  s.phase = State::Phase::kStreaming;
  std::string first = std::move(head.body());
  head.body().clear();
  if (s.head.version() < 11)
    head.version(s.head.version());
  s.chunked = head.version() >= 11;
  head.set(bhttp::field::server, s.options.server_name);
  head.keep_alive(false);
  head.erase(bhttp::field::content_length);
  head.chunked(s.chunked);
  bhttp::response_serializer<bhttp::string_body> serializer(head);
  s.stream.expires_after(s.options.write_timeout);
  boost::system::error_code ec;
  co_await bhttp::async_write_header(s.stream, serializer,
                                     asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    s.phase = State::Phase::kFailed;
    co_return false;
  }
  co_return co_await send(first);
}

asio::awaitable<bool> Exchange::send(std::string_view data) {
  State& s = *state_;
  if (s.phase != State::Phase::kStreaming)
    co_return false;
  if (data.empty())
    co_return true;  // an empty chunk would be the last one
  const asio::const_buffer bytes(data.data(), data.size());
  s.stream.expires_after(s.options.write_timeout);
  boost::system::error_code ec;
  if (s.chunked) {
    co_await asio::async_write(s.stream, bhttp::make_chunk(bytes),
                               asio::redirect_error(asio::use_awaitable, ec));
  } else {
    co_await asio::async_write(s.stream, bytes, asio::redirect_error(asio::use_awaitable, ec));
  }
  if (ec) {
    s.phase = State::Phase::kFailed;
    co_return false;
  }
  co_return true;
}

asio::awaitable<bool> Exchange::end() {
  State& s = *state_;
  if (s.phase != State::Phase::kStreaming)
    co_return false;
  s.phase = State::Phase::kEnded;
  if (!s.chunked)
    co_return true;
  s.stream.expires_after(s.options.write_timeout);
  boost::system::error_code ec;
  co_await asio::async_write(s.stream, bhttp::make_chunk_last(),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    s.phase = State::Phase::kFailed;
    co_return false;
  }
  co_return true;
}

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
      acceptor_(executor),
      accept_backoff_(executor) {}

Server::~Server() {
  stop();
}

void Server::set_stream_route(StreamPredicate wants_stream, StreamHandler handler) {
  set_head_route(
      [wants_stream = std::move(wants_stream)](const Request& head) {
        Admission admission;
        admission.streamed = wants_stream(head);
        return admission;
      },
      std::move(handler));
}

void Server::set_head_route(HeadRoute route, StreamHandler handler) {
  head_route_ = std::move(route);
  stream_handler_ = std::move(handler);
}

ServerCounts Server::counts() const {
  std::lock_guard lock(connections_mutex_);
  ServerCounts counts = counts_;
  counts.open = connections_.size();
  return counts;
}

void Server::start() {
  tcp::endpoint endpoint(asio::ip::make_address(options_.host), options_.port);
  acceptor_.open(endpoint.protocol());
  acceptor_.set_option(asio::socket_base::reuse_address(true));
  acceptor_.bind(endpoint);
  acceptor_.listen(asio::socket_base::max_listen_connections);
  bound_port_ = acceptor_.local_endpoint().port();
  std::lock_guard lock(acceptor_mutex_);
  accept_next();
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
  {
    // The pending accept completes with operation_aborted and arms no other.
    std::lock_guard lock(acceptor_mutex_);
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    accept_backoff_.cancel();
  }
  for (const auto& connection : open) {
    // On the connection's strand: its coroutine (and a stream handler) may be using the
    // socket on another thread right now.
    asio::dispatch(connection->stream.get_executor(), [connection] {
      boost::system::error_code shutdown_error;
      connection->stream.socket().shutdown(tcp::socket::shutdown_both, shutdown_error);
      connection->stream.close();
    });
  }
}

void Server::accept_next() {
  if (!acceptor_.is_open())
    return;
  // Each connection gets its own strand: its socket, its deadline timer and its coroutine
  // never run on two threads at once, and stop() can join in safely.
  asio::any_io_executor strand = asio::make_strand(executor_);
  acceptor_.async_accept(strand, [this, strand](boost::system::error_code ec, tcp::socket socket) {
    {
      std::lock_guard lock(acceptor_mutex_);
      if (ec == asio::error::operation_aborted || !acceptor_.is_open())
        return;
    }
    if (!ec)
      accepted(strand, std::move(socket));
    std::lock_guard lock(acceptor_mutex_);
    if (!ec) {
      accept_delay_ = std::chrono::milliseconds(0);
      accept_next();
      return;
    }
    // A failed accept (a peer that reset at once, no descriptor left) does not stop the
    // listener, but the next one waits: out of descriptors, accept fails at once, and
    // re-arming at once would spin. 5 ms, doubling to 1 s while accepts keep failing.
    {
      std::lock_guard count_lock(connections_mutex_);
      ++counts_.accept_failures;
    }
    accept_delay_ = std::clamp(accept_delay_ * 2, std::chrono::milliseconds(5),
                               std::chrono::milliseconds(1000));
    accept_after(accept_delay_);
  });
}

void Server::accept_after(std::chrono::milliseconds delay) {
  accept_backoff_.expires_after(delay);
  accept_backoff_.async_wait([this](boost::system::error_code ec) {
    std::lock_guard lock(acceptor_mutex_);
    if (ec == asio::error::operation_aborted || !acceptor_.is_open())
      return;
    accept_next();
  });
}

void Server::accepted(asio::any_io_executor strand, tcp::socket socket) {
  boost::system::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  const auto peer = socket.remote_endpoint(ec);
  std::string address = ec ? std::string() : peer.address().to_string();
  std::string_view refusal;  // the reason a cap refuses it
  bool whole_server = false;
  auto connection = std::make_shared<Connection>(std::move(socket), std::move(address));
  {
    std::lock_guard lock(connections_mutex_);
    if (stopped_)
      return;
    if (options_.max_connections > 0 && connections_.size() >= options_.max_connections) {
      refusal = "the server has as many connections as it serves; try again later";
      whole_server = true;
      ++counts_.refused_total;
    } else if (std::size_t& mine = per_address_[connection->address];
               options_.max_connections_per_address > 0 &&
               mine >= options_.max_connections_per_address) {
      refusal = "too many connections from this address; try again later";
      ++counts_.refused_address;
    } else {
      ++mine;
      connections_.insert(connection);
    }
    if (!refusal.empty() && per_address_[connection->address] == 0)
      per_address_.erase(connection->address);
  }
  if (refusal.empty()) {
    asio::co_spawn(strand, serve(connection), asio::detached);
    return;
  }
  const std::string answer =
      over_cap_answer(whole_server ? Status::service_unavailable : Status::too_many_requests,
                      whole_server ? "server_busy" : "too_many_connections", refusal,
                      options_.retry_after, options_.server_name);
  tcp::socket& raw = connection->stream.socket();
  raw.non_blocking(true, ec);
  raw.write_some(asio::buffer(answer), ec);
  raw.shutdown(tcp::socket::shutdown_both, ec);
  raw.close(ec);
}

void Server::closed(const std::shared_ptr<Connection>& connection) {
  std::lock_guard lock(connections_mutex_);
  if (connections_.erase(connection) == 0)
    return;  // stop() already let go of it
  auto it = per_address_.find(connection->address);
  if (it != per_address_.end() && --it->second == 0)
    per_address_.erase(it);
}

asio::awaitable<void> Server::serve(std::shared_ptr<Connection> connection) {
  beast::flat_buffer buffer;
  bool unread_body = false;  // the connection ends with part of a request body unread
  auto count_timeout = [this] {
    std::lock_guard lock(connections_mutex_);
    ++counts_.timed_out;
  };
  // Writes an answer decided on the head alone. The connection stays open only when the
  // request had no body and the answer allows it.
  auto answer_head = [&](Response response, bool& keep_alive) -> asio::awaitable<void> {
    response.set(bhttp::field::server, options_.server_name);
    response.prepare_payload();
    keep_alive = response.keep_alive();
    boost::system::error_code write_error;
    connection->stream.expires_after(options_.write_timeout);
    co_await bhttp::async_write(connection->stream, response,
                                asio::redirect_error(asio::use_awaitable, write_error));
    if (write_error)
      keep_alive = false;
  };
  for (;;) {
    boost::system::error_code ec;
    if (buffer.size() == 0) {
      // Between requests: the idle deadline, until the next request's first byte.
      connection->stream.expires_after(options_.idle_timeout);
      const std::size_t got = co_await connection->stream.async_read_some(
          buffer.prepare(kFirstRead), asio::redirect_error(asio::use_awaitable, ec));
      buffer.commit(got);
      if (ec)
        break;  // closed by the client, idle too long, or stop()
    }
    const auto request_deadline = std::chrono::steady_clock::now() + options_.request_timeout;
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(
        std::min<std::size_t>(options_.header_limit, std::numeric_limits<std::uint32_t>::max())));
    // The limit depends on the route, known once the head is parsed. Not boost::none:
    // Beast 1.74 takes any Content-Length for over an empty limit.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    connection->stream.expires_after(options_.header_timeout);
    co_await bhttp::async_read_header(connection->stream, buffer, parser,
                                      asio::redirect_error(asio::use_awaitable, ec));
    if (ec == bhttp::error::header_limit) {
      {
        std::lock_guard lock(connections_mutex_);
        ++counts_.oversized_heads;
      }
      // Nothing of the head can be trusted; answer as HTTP/1.1 and close.
      Request blank;
      bool ignored = false;
      co_await answer_head(
          head_refused(
              blank, Status::request_header_fields_too_large, "header_too_large",
              "the request head exceeds " + std::to_string(options_.header_limit) + " bytes"),
          ignored);
      unread_body = true;
      break;
    }
    if (ec) {
      if (ec == beast::error::timeout)
        count_timeout();
      break;  // closed, timed out or malformed: nothing to answer on this stream
    }
    if (parser.get().target().size() > options_.target_limit) {
      {
        std::lock_guard lock(connections_mutex_);
        ++counts_.oversized_heads;
      }
      bool ignored = false;
      co_await answer_head(head_refused(parser.get(), Status::uri_too_long, "target_too_long",
                                        "the request target exceeds " +
                                            std::to_string(options_.target_limit) + " bytes"),
                           ignored);
      unread_body = !parser.is_done();
      break;
    }

    Admission admission;
    bool route_failed = false;
    if (head_route_) {
      try {
        admission = head_route_(parser.get());
      } catch (...) {
        route_failed = true;
      }
    }
    if (admission.refusal && !route_failed) {
      // Refused on the head: no 100 Continue, the body is never invited nor read.
      Response response = std::move(*admission.refusal);
      if (!parser.is_done())
        response.keep_alive(false);
      bool keep_alive = false;
      co_await answer_head(std::move(response), keep_alive);
      if (!parser.is_done()) {
        unread_body = true;
        break;
      }
      if (!keep_alive)
        break;
      continue;
    }
    const bool streamed = admission.streamed;
    const std::size_t body_limit = admission.body_limit.value_or(options_.body_limit);
    if (route_failed) {
      Response response = make_error(parser.get(), Status::internal_server_error, "internal",
                                     "request routing failed");
      response.keep_alive(false);
      response.set(bhttp::field::server, options_.server_name);
      connection->stream.expires_after(options_.write_timeout);
      co_await bhttp::async_write(connection->stream, response,
                                  asio::redirect_error(asio::use_awaitable, ec));
      unread_body = !parser.is_done();
      break;
    }
    if (streamed) {
      unread_body = co_await serve_stream(connection, buffer, parser);
      break;
    }

    const auto length = parser.content_length();
    if (length && *length > body_limit) {
      // Refused on the head alone: no 100 Continue, the body is never invited.
      Response response = payload_too_large(parser.get(), body_limit);
      response.set(bhttp::field::server, options_.server_name);
      connection->stream.expires_after(options_.write_timeout);
      co_await bhttp::async_write(connection->stream, response,
                                  asio::redirect_error(asio::use_awaitable, ec));
      unread_body = true;
      break;
    }
    parser.body_limit(body_limit);  // no body octet parsed yet: still allowed
    if (!parser.is_done() && expects_continue(parser.get())) {
      ec = co_await write_continue(connection->stream, options_.write_timeout);
      if (ec)
        break;
    }
    connection->stream.expires_at(request_deadline);
    co_await bhttp::async_read(connection->stream, buffer, parser,
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec == bhttp::error::body_limit) {
      Response response = payload_too_large(parser.get(), body_limit);
      response.set(bhttp::field::server, options_.server_name);
      connection->stream.expires_after(options_.write_timeout);
      co_await bhttp::async_write(connection->stream, response,
                                  asio::redirect_error(asio::use_awaitable, ec));
      unread_body = true;
      break;
    }
    if (ec) {
      if (ec == beast::error::timeout)
        count_timeout();
      break;
    }
    Request request = parser.release();
    Reply reply;
    try {
      reply = co_await handler_(request);
    } catch (const std::exception& e) {
      reply = Reply{};
      reply.response = make_error(request, Status::internal_server_error, "internal", e.what());
    } catch (...) {
      reply = Reply{};
      reply.response =
          make_error(request, Status::internal_server_error, "internal", "unknown exception");
    }
    Response& response = reply.response;
    response.set(bhttp::field::server, options_.server_name);
    response.prepare_payload();
    if (reply.delivery == Delivery::kHang) {
      co_await hang(connection, reply.hang_for);
      break;
    }
    connection->stream.expires_after(options_.write_timeout);
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
    if (reply.delivery == Delivery::kPieces) {
      bhttp::response_serializer<bhttp::string_body> serializer(response);
      co_await bhttp::async_write_header(connection->stream, serializer,
                                         asio::redirect_error(asio::use_awaitable, ec));
      const std::string& body = response.body();
      const std::size_t step = std::max<std::size_t>(reply.piece_bytes, 1);
      asio::steady_timer gap(connection->stream.get_executor());
      for (std::size_t at = 0; !ec && at < body.size(); at += step) {
        if (at > 0 && reply.piece_gap.count() > 0) {
          gap.expires_after(reply.piece_gap);
          co_await gap.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        }
        connection->stream.expires_after(options_.write_timeout);
        co_await asio::async_write(connection->stream,
                                   asio::buffer(body.data() + at, std::min(step, body.size() - at)),
                                   asio::redirect_error(asio::use_awaitable, ec));
      }
      if (ec || !response.keep_alive())
        break;
      continue;
    }
    const bool keep_alive = response.keep_alive();
    co_await bhttp::async_write(connection->stream, response,
                                asio::redirect_error(asio::use_awaitable, ec));
    if (ec || !keep_alive)
      break;
  }
  if (unread_body) {
    co_await linger(connection->stream, std::min(options_.read_timeout, kLingerLimit));
  } else {
    boost::system::error_code ignored;
    connection->stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }
  closed(connection);
}

asio::awaitable<bool> Server::serve_stream(std::shared_ptr<Connection> connection,
                                           beast::flat_buffer& buffer,
                                           bhttp::request_parser<bhttp::string_body>& parser) {
  Exchange exchange(
      std::make_unique<Exchange::State>(connection->stream, buffer, options_, parser));
  std::string failure;
  try {
    co_await stream_handler_(exchange);
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  // A stream already begun is simply cut off: the client sees an incomplete body.
  if (!exchange.responded()) {
    if (failure.empty())
      failure = "the stream handler returned without responding";
    Response response =
        make_error(exchange.head(), Status::internal_server_error, "internal", failure);
    co_await exchange.respond(std::move(response));
  }
  co_return !exchange.body_done();
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
                    std::string_view raw_message, std::string_view raw_path) {
  // Messages and paths may quote what the client sent (an id from the URL): the body stays
  // valid UTF-8 JSON whatever those bytes were.
  const std::string message = codec::sanitize_text(raw_message);
  const std::string path = codec::sanitize_text(raw_path);
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

// `plus_is_space`: a query's '+' is a space (form encoding); a path's is itself.
std::string percent_decode(std::string_view text, bool plus_is_space = true) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (plus_is_space && text[i] == '+') {
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

std::string decode_path_segment(std::string_view segment) {
  return percent_decode(segment, false);
}

std::string percent_encode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') || u == '-' ||
        u == '.' || u == '_' || u == '~') {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    }
  }
  return out;
}

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
