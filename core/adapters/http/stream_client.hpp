#pragma once
// An HTTP/1.1 client call whose bodies do not sit whole in memory: a request body produced
// piece by piece (an upload of a large file, sent with `Transfer-Encoding: chunked`) and a
// response body handed to the caller as it arrives (server-sent events, a JSON Lines
// download). Implemented in client.cpp next to `fetch`, with the same connection code:
// resolve, connect, TLS with SNI and verification, failures as ClientErrorKind values.
//
// Deadlines: `request.deadline` bounds the whole exchange; `idle_timeout`, when set, also
// bounds each single read or write (a stream that stays open for an hour but must show
// a heartbeat every so often), except the wait for the answer once a `body_source` body
// was sent whole: the server may act on the body before answering (store a batch), so
// only the deadline bounds that wait. A failure mid-body is reported with what was
// received so far already handed to the sink.
//
// Each call opens its own connection and closes it afterwards (no pool, no retry: a
// streamed body cannot be sent twice). Thread-safety: calls are independent; the
// callbacks run on the calling coroutine's executor, one at a time.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "core/adapters/http/client.hpp"

namespace agentfleet::http {

// Appends the next piece of a request body to `out` (which is empty on each call) and
// returns true; an empty piece ends the body. False abandons the call (a file that could
// not be read): it ends with kProtocol and the connection is closed, so the server sees
// an incomplete body.
using BodySource = std::function<bool(std::string& out)>;

// Receives the body of a 2xx response piece by piece as it arrives; false stops reading
// (the call then ends without error, its connection closed).
using BodySink = std::function<bool(std::string_view piece)>;

struct StreamOptions {
  BodySource body_source;                     // empty: `request.body` is sent whole
  BodySink on_body;                           // empty: the body is kept in `response.body`
  std::chrono::milliseconds idle_timeout{0};  // > 0: the longest any one read or write may take
  // A body kept in `response.body` (an answer that is not 2xx, which the sink never sees,
  // or any answer when there is no sink) is kept up to this many bytes: a longer non-2xx
  // body is cut there (its start is the error shape to read), a longer 2xx body ends the
  // call with kProtocol "body over limit".
  std::size_t body_limit = 1024 * 1024;
};

// One exchange. The response's status and headers are those of the server's answer; with
// a sink, `body` is empty for a 2xx answer. When the server answers before the whole
// request body was sent (a refusal on the head), the upload stops and that answer is
// returned.
boost::asio::awaitable<ClientResponse> fetch_stream(boost::asio::any_io_executor executor,
                                                    ClientRequest request, StreamOptions options);

}  // namespace agentfleet::http
