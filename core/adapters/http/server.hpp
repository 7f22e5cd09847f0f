#pragma once
// A small HTTP/1.1 server on Boost.Beast with C++20 coroutines: one coroutine per
// connection, keep-alive, and bounds on what a client can make it hold: open connections
// in all and per client address, the size of a request head and target, a body limit per
// request, and deadlines for an idle connection, a head, a whole request and each write.
// An accept that fails (no descriptor left) is retried with backoff. The dispatcher's API
// and the simulators (llm-sim, tool-sim) are built on it.
//
// Each request's head is read first and handed to the HeadRoute, if one is set, before
// any body byte is read: it may refuse the request (the dispatcher authenticates here, so
// a caller without a key never makes the server read a body), send it to the
// StreamHandler, or give it a body limit of its own.
//
// Lifecycle: construct, optionally `set_stream_route()`, `start()` binds and begins
// accepting (throws on bind failure), `stop()` closes the listener and every open
// connection, streamed ones included. All work runs on the executor given at
// construction, each connection on its own strand; handlers may be called concurrently on
// a multi-threaded io_context, so they must guard any state they share.
//
// A handler returns a Response, written whole. A handler that needs to misbehave on
// purpose (the simulators' fault injection) returns a Reply instead, whose Delivery can
// cut the body short and close the connection, or answer nothing at all until the client
// gives up (bounded); other connections are served meanwhile either way.
//
// Streaming. If the head route streams a request (or a stream route's `wants_stream(head)`
// says yes), the body is not read: the StreamHandler gets an Exchange
// and reads the body in pieces (`read_body`, bounded by `stream_body_limit` instead of
// `body_limit`), then answers with one whole Response (`respond`) or a chunked stream
// (`begin`, `send`..., `end`) such as server-sent events or a JSON Lines download. A
// streamed exchange is the last one on its connection (its response says
// `Connection: close`). Otherwise the request is read whole and goes to the Handler.
//
// `Expect: 100-continue` is answered with `100 Continue` just before the body is read:
// for a whole request right after its head, for a streamed one at the first `read_body`
// (a handler that refuses on the head alone never invites the body).

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
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
  kPieces,    // the head, then the body `piece_bytes` at a time with `piece_gap` between writes
              // (a stream that arrives in pieces cut anywhere)
};

struct Reply {
  Response response;
  Delivery delivery = Delivery::kNormal;
  std::size_t truncate_at = 0;
  std::chrono::milliseconds hang_for{std::chrono::minutes(10)};
  std::size_t piece_bytes = 64;
  std::chrono::milliseconds piece_gap{1};
};
using ReplyHandler = std::function<boost::asio::awaitable<Reply>(Request&)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0 picks a free port; see Server::port()
  // A request read whole (Handler, ReplyHandler), unless its Admission names a limit.
  std::size_t body_limit = 8 * 1024 * 1024;
  std::chrono::seconds read_timeout{30};  // per read of a streamed body (Exchange::read_body)
  std::string server_name = "agentfleet";
  std::uint64_t stream_body_limit = std::uint64_t{2} * 1024 * 1024 * 1024;  // per Exchange
  std::chrono::seconds write_timeout{30};  // per write: a response, a head, one chunk

  // What one client may send and hold. A head over `header_limit` bytes (request line and
  // fields) is answered 431, a target over `target_limit` 414, both closing the connection.
  std::size_t header_limit = 16 * 1024;
  std::size_t target_limit = 8 * 1024;
  // A keep-alive connection waits this long for the first byte of its next request; from
  // that byte the head must be complete within `header_timeout`, and a request read whole,
  // head and body, within `request_timeout` (a deadline for the request, not for each read:
  // a client trickling a byte at a time is cut off all the same). The connection is then
  // closed without an answer.
  std::chrono::seconds idle_timeout{60};
  std::chrono::seconds header_timeout{10};
  std::chrono::seconds request_timeout{30};
  // Open connections at most, in all and from one client address (0: no cap). A connection
  // over a cap is answered at once, 503 (all) or 429 (one address) with `Retry-After:
  // retry_after`, and closed; a client that had already sent its request may see the
  // connection reset instead.
  std::size_t max_connections = 0;
  std::size_t max_connections_per_address = 0;
  std::chrono::seconds retry_after{1};
};

// What the server does with a request whose head was read, decided before any body byte is
// (a HeadRoute's answer).
struct Admission {
  // Answered at once, and the body never read (the connection then closes): a caller
  // without a key, a route that does not exist, a body over the route's limit.
  std::optional<Response> refusal;
  // To the StreamHandler, which reads the body itself.
  bool streamed = false;
  // The most body bytes of a request read whole; unset: ServerOptions::body_limit.
  std::optional<std::size_t> body_limit;
};
using HeadRoute = std::function<Admission(const Request& head)>;

// What a Server has refused and how many connections it holds, for metrics.
struct ServerCounts {
  std::size_t open = 0;               // connections open now
  std::uint64_t refused_total = 0;    // over max_connections
  std::uint64_t refused_address = 0;  // over max_connections_per_address
  std::uint64_t accept_failures = 0;  // failed accepts (no descriptor left, ...)
  std::uint64_t timed_out = 0;        // closed by the idle, header or request deadline
  std::uint64_t oversized_heads = 0;  // answered 431 or 414
};

// One request handed whole to a StreamHandler: the head is parsed, the body is not read
// yet; the handler reads it in pieces and writes the answer itself, either one whole
// Response or a chunked stream. The server owns it for the duration of the handler call
// only (do not keep a reference past it). Not thread-safe: it is used by the handler's
// coroutine alone (which runs on the connection's strand), one call at a time; no
// read_body or send may race another from a second coroutine, so events produced
// elsewhere must be handed to that coroutine (e.g. through a channel or a queue).
//
// Failures are values: read_body reports them through `ec`, the writes return false;
// after a failed write every further write returns false at once. Nothing here throws.
class Exchange {
 public:
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // Method, target, version and fields of the request; an empty body.
  const Request& head() const;

  // Appends up to `max` (> 0) more body bytes to `out` and returns how many; 0 once the
  // whole body was read (or when there is none). On failure returns 0, sets `ec` and
  // leaves `out` as it was: the peer went away or sent a malformed chunk, the read
  // deadline passed, or the body is over `stream_body_limit` (`ec` is then
  // boost::beast::http::error::body_limit; respond() with a 413 still works). The first
  // call answers a pending `Expect: 100-continue`, unless a response was already started.
  boost::asio::awaitable<std::size_t> read_body(std::string& out, std::size_t max,
                                                boost::system::error_code& ec);
  // The whole body was read.
  bool body_done() const;

  // A whole response (an error, or the answer after reading the body). Server and
  // `Connection: close` are set and the payload prepared. Only the first respond() or
  // begin() of an exchange writes anything; a later call returns false.
  boost::asio::awaitable<bool> respond(Response response);

  // A streamed response: the head of `head` (status, content type, extra fields; any
  // Content-Length is dropped) is sent with `Transfer-Encoding: chunked` and
  // `Connection: close`, and its body, if not empty, as the first chunk. Then each send()
  // writes one chunk (an empty `data` writes nothing) and end() the last chunk. Each
  // returns false once the client is gone, the write deadline passed or stop() was called:
  // the handler should stop then. A stream the handler leaves without end() is cut off,
  // which the client sees as an incomplete body (the way to report a failure mid-stream).
  // To an HTTP/1.0 client the body goes unchunked and ends when the connection closes.
  boost::asio::awaitable<bool> begin(Response head);
  boost::asio::awaitable<bool> send(std::string_view data);
  boost::asio::awaitable<bool> end();

  // respond() or begin() was called.
  bool responded() const;

 private:
  friend class Server;
  struct State;
  explicit Exchange(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};
using StreamHandler = std::function<boost::asio::awaitable<void>(Exchange&)>;
// Whether a request, by its head alone (the body is not read yet), goes to the
// StreamHandler. Called on every request, so it should be cheap; if it throws, the
// request is answered with 500 and its connection closed.
using StreamPredicate = std::function<bool(const Request& head)>;

class Server {
 public:
  Server(boost::asio::any_io_executor executor, ServerOptions options, Handler handler);
  Server(boost::asio::any_io_executor executor, ServerOptions options, ReplyHandler handler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Requests for which `wants_stream(head)` is true go to `handler` as an Exchange
  // instead of being read whole. Call before start(). If the handler returns without
  // responding the server answers 500; an exception from it is caught (500 if nothing
  // was sent yet, else the stream is cut off).
  void set_stream_route(StreamPredicate wants_stream, StreamHandler handler);
  // The general form: `route` decides on each request's head (after the server's own
  // limits passed) whether it is refused, streamed to `handler`, or read whole with a body
  // limit of its own. If it throws, the request is answered 500 and its connection closed.
  // Call before start(); replaces a stream route.
  void set_head_route(HeadRoute route, StreamHandler handler);

  void start();
  // Closes the listener and every connection, from any thread; idempotent. A streamed
  // exchange's pending read_body or send fails at once, and every later one too; a stream
  // handler waiting on something else (a timer, a queue of events) notices at its next
  // send, so one that may wait long should send a heartbeat now and then (for SSE, a
  // comment line ":\n\n" every few seconds), which also tells it when the client is gone.
  void stop();
  std::uint16_t port() const { return bound_port_; }
  ServerCounts counts() const;

 private:
  struct Connection;
  // Arms the next accept; the caller holds acceptor_mutex_.
  void accept_next();
  // Arms the next accept after `delay` (a failed accept); the caller holds acceptor_mutex_.
  void accept_after(std::chrono::milliseconds delay);
  // Starts serving a connection the listener accepted on `strand`, or refuses it when it
  // is over a cap.
  void accepted(boost::asio::any_io_executor strand, boost::asio::ip::tcp::socket socket);
  // Forgets a connection that ended.
  void closed(const std::shared_ptr<Connection>& connection);
  boost::asio::awaitable<void> serve(std::shared_ptr<Connection> connection);
  // Hands the request whose head `parser` holds to the stream handler; the connection
  // is closed afterwards. True when part of the request body was left unread.
  boost::asio::awaitable<bool> serve_stream(
      std::shared_ptr<Connection> connection, boost::beast::flat_buffer& buffer,
      boost::beast::http::request_parser<boost::beast::http::string_body>& parser);
  // Waits, reading and discarding, until the peer closes or `limit` passes.
  boost::asio::awaitable<void> hang(std::shared_ptr<Connection> connection,
                                    std::chrono::milliseconds limit);

  boost::asio::any_io_executor executor_;
  ServerOptions options_;
  ReplyHandler handler_;
  HeadRoute head_route_;
  StreamHandler stream_handler_;
  // The listener is touched only under acceptor_mutex_: the accept handler runs on the
  // io_context's threads and stop() may close it from any thread.
  std::mutex acceptor_mutex_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::uint16_t bound_port_ = 0;
  // Waits out the backoff after a failed accept (a process out of descriptors would
  // otherwise spin); under acceptor_mutex_.
  boost::asio::steady_timer accept_backoff_;
  std::chrono::milliseconds accept_delay_{0};
  mutable std::mutex connections_mutex_;
  std::set<std::shared_ptr<Connection>> connections_;
  std::map<std::string, std::size_t> per_address_;  // open connections by client address
  ServerCounts counts_;                             // `open` is connections_.size()
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
// One segment of a path (split at '/' first), percent-decoded ('+' stays '+'): an id with
// characters a URL cannot carry as they are arrives as the client encoded it.
std::string decode_path_segment(std::string_view segment);
// `text` percent-encoded for a path segment or a query value: every byte but the unreserved
// ones (RFC 3986: letters, digits, '-', '.', '_', '~').
std::string percent_encode(std::string_view text);

}  // namespace agentfleet::http
