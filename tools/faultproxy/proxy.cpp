#include "tools/faultproxy/proxy.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <cstdio>
#include <deque>
#include <vector>

#include "tools/faultproxy/shaper.hpp"

namespace agentfleet::faultproxy {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr auto kAcceptRetry = std::chrono::milliseconds(100);

void log_line(const std::string& text) {
  std::fprintf(stderr, "faultproxy: %s\n", text.c_str());
}

// Closes with RST: SO_LINGER {on, 0 s} makes close() abort the connection.
void close_with_reset(tcp::socket& socket) {
  if (!socket.is_open()) {
    return;
  }
  error_code ignored;
  socket.set_option(asio::socket_base::linger(true, 0), ignored);
  socket.close(ignored);
}

// Wakes whoever waits on `timer` (a timer used as a condition: they re-check their state).
void wake(asio::steady_timer& timer) {
  timer.cancel();
}

// Waits on `timer` until `at` or until woken.
asio::awaitable<void> sleep_until(asio::steady_timer& timer, TimePoint at) {
  timer.expires_at(at);
  error_code ignored;
  co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
}

}  // namespace

// One client and its upstream connection: four coroutines (a reader and a writer per
// direction) that share the connection through shared_ptr and end when it is closed.
// Lifecycle: created by the accept loop and registered in FaultProxy::connections_; closed
// (normally when both directions have ended, with RST on an error or `reset`), which
// unregisters it. Thread-safety: none; the io_context's thread only.
class ProxyConnection : public std::enable_shared_from_this<ProxyConnection> {
 public:
  ProxyConnection(FaultProxy& proxy, tcp::socket client, std::uint64_t id)
      : proxy_(proxy),
        id_(id),
        client_(std::move(client)),
        upstream_(client_.get_executor()),
        up_(client_.get_executor(), true),
        down_(client_.get_executor(), false) {}

  void start() {
    asio::co_spawn(
        client_.get_executor(), [self = shared_from_this()] { return self->run(); },
        asio::detached);
  }

  // The mode changed: every waiting coroutine looks again.
  void wake_all() {
    for (Direction* d : {&up_, &down_}) {
      wake(d->reader_wake);
      wake(d->writer_wake);
    }
  }

  // Both sides closed with RST.
  void abort() { close(true); }
  // Both sides closed normally (FIN).
  void close_normally() { close(false); }

 private:
  struct Chunk {
    std::vector<char> data;
    std::size_t offset = 0;  // bytes of data already written
    TimePoint read_at;
  };

  struct Direction {
    Direction(const asio::any_io_executor& ex, bool is_up)
        : up(is_up), reader_wake(ex), writer_wake(ex) {}
    bool up;  // client -> target
    std::deque<Chunk> queue;
    std::size_t queued = 0;  // unwritten bytes, plus kChunkOverheadBytes per chunk
    bool eof = false;        // the reading side sent FIN
    bool done = false;       // the FIN was passed on
    DirectionShaper shaper;
    asio::steady_timer reader_wake;
    asio::steady_timer writer_wake;
  };

  // The pumps below are spawned by lambdas holding a shared_ptr to the connection, which
  // keeps it alive while they run.
  asio::awaitable<void> run() {
    auto self = shared_from_this();
    // While blackholed a new client is held: accepted, but not connected upstream.
    while (!closed_ && proxy_.blackholed()) {
      co_await sleep_until(up_.reader_wake, TimePoint::max());
    }
    if (closed_) {
      co_return;
    }
    asio::steady_timer deadline(client_.get_executor());
    deadline.expires_after(kConnectTimeout);
    deadline.async_wait([self](const error_code& ec) {
      if (!ec) {
        error_code ignored;
        self->upstream_.cancel(ignored);
      }
    });
    error_code ec;
    co_await upstream_.async_connect(proxy_.target_, asio::redirect_error(asio::use_awaitable, ec));
    deadline.cancel();
    if (closed_) {
      co_return;
    }
    if (ec) {
      log_line("connection " + std::to_string(id_) + ": cannot connect to the target: " +
               (ec == asio::error::operation_aborted ? std::string("timed out") : ec.message()));
      abort();
      co_return;
    }
    for (tcp::socket* s : {&client_, &upstream_}) {
      error_code ignored;
      s->non_blocking(true, ignored);
      s->set_option(tcp::no_delay(true), ignored);
    }
    auto ex = client_.get_executor();
    asio::co_spawn(
        ex, [self] { return self->read_pump(self->client_, self->up_); }, asio::detached);
    asio::co_spawn(
        ex, [self] { return self->read_pump(self->upstream_, self->down_); }, asio::detached);
    asio::co_spawn(
        ex, [self] { return self->write_pump(self->upstream_, self->up_); }, asio::detached);
    asio::co_spawn(
        ex, [self] { return self->write_pump(self->client_, self->down_); }, asio::detached);
  }

  static bool has_room(const Direction& d) {
    return d.queued + kChunkOverheadBytes < kMaxQueuedBytes;
  }

  asio::awaitable<void> read_pump(tcp::socket& from, Direction& d) {
    while (!closed_) {
      if (proxy_.blackholed() || !has_room(d)) {
        co_await sleep_until(d.reader_wake, TimePoint::max());
        continue;
      }
      // Readable first, read second: a blackhole that starts meanwhile leaves the bytes
      // (and any FIN or RST) unread in the kernel.
      error_code ec;
      co_await from.async_wait(tcp::socket::wait_read,
                               asio::redirect_error(asio::use_awaitable, ec));
      if (closed_) {
        co_return;
      }
      if (ec) {
        abort();
        co_return;
      }
      if (proxy_.blackholed() || !has_room(d)) {
        continue;
      }
      const std::size_t room =
          std::min(proxy_.read_buffer_.size(), kMaxQueuedBytes - kChunkOverheadBytes - d.queued);
      const std::size_t n = from.read_some(asio::buffer(proxy_.read_buffer_.data(), room), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again ||
          ec == asio::error::interrupted) {
        continue;
      }
      if (ec == asio::error::eof) {
        d.eof = true;
        wake(d.writer_wake);
        co_return;
      }
      if (ec) {
        abort();
        co_return;
      }
      Chunk chunk;
      chunk.data.assign(proxy_.read_buffer_.begin(),
                        proxy_.read_buffer_.begin() + static_cast<std::ptrdiff_t>(n));
      chunk.read_at = Clock::now();
      d.queued += n + kChunkOverheadBytes;
      d.queue.push_back(std::move(chunk));
      wake(d.writer_wake);
    }
  }

  asio::awaitable<void> write_pump(tcp::socket& to, Direction& d) {
    while (!closed_) {
      if (d.queue.empty()) {
        if (d.eof) {
          error_code ignored;
          to.shutdown(tcp::socket::shutdown_send, ignored);
          d.done = true;
          if (up_.done && down_.done) {
            close_normally();
          }
          co_return;
        }
        co_await sleep_until(d.writer_wake, TimePoint::max());
        continue;
      }
      Chunk& head = d.queue.front();
      const TimePoint now = Clock::now();
      const Admission admission =
          d.shaper.admit(proxy_.mode(), head.read_at, head.data.size() - head.offset, now);
      if (admission.bytes == 0) {
        co_await sleep_until(d.writer_wake, admission.retry_at.value_or(TimePoint::max()));
        continue;
      }
      error_code ec;
      const std::size_t n = co_await asio::async_write(
          to, asio::buffer(head.data.data() + head.offset, admission.bytes),
          asio::redirect_error(asio::use_awaitable, ec));
      if (closed_) {
        co_return;
      }
      if (ec) {
        abort();
        co_return;
      }
      proxy_.count_bytes(d.up, n);
      head.offset += n;
      d.queued -= n;
      if (head.offset == head.data.size()) {
        d.queue.pop_front();
        d.queued -= kChunkOverheadBytes;
      }
      wake(d.reader_wake);
    }
  }

  void close(bool with_reset) {
    if (closed_) {
      return;
    }
    closed_ = true;
    for (tcp::socket* s : {&client_, &upstream_}) {
      if (with_reset) {
        close_with_reset(*s);
      } else if (s->is_open()) {
        error_code ignored;
        s->close(ignored);
      }
    }
    wake_all();
    proxy_.forget(id_);
  }

  FaultProxy& proxy_;
  std::uint64_t id_;
  tcp::socket client_;
  tcp::socket upstream_;
  Direction up_;
  Direction down_;
  bool closed_ = false;
};

FaultProxy::FaultProxy(asio::io_context& io, tcp::endpoint target, std::size_t max_connections)
    : io_(io),
      target_(std::move(target)),
      max_connections_(std::min(max_connections, kMaxConnections)),
      listener_(io),
      control_(io),
      mode_timer_(io),
      read_buffer_(kReadChunkBytes) {}

FaultProxy::~FaultProxy() = default;

namespace {

std::uint16_t bind_loopback(tcp::acceptor& acceptor, std::uint16_t port) {
  const tcp::endpoint endpoint(asio::ip::address_v4::loopback(), port);
  acceptor.open(endpoint.protocol());
  acceptor.set_option(tcp::acceptor::reuse_address(true));
  acceptor.bind(endpoint);
  acceptor.listen(asio::socket_base::max_listen_connections);
  return acceptor.local_endpoint().port();
}

}  // namespace

std::uint16_t FaultProxy::open_listener(std::uint16_t port) {
  return bind_loopback(listener_, port);
}

std::uint16_t FaultProxy::open_control(std::uint16_t port) {
  return bind_loopback(control_, port);
}

void FaultProxy::start() {
  if (listener_.is_open()) {
    asio::co_spawn(
        io_,
        [this]() -> asio::awaitable<void> {
          asio::steady_timer pause(io_);
          while (!stopping_) {
            tcp::socket client(io_);
            error_code ec;
            co_await listener_.async_accept(client, asio::redirect_error(asio::use_awaitable, ec));
            if (stopping_) {
              co_return;
            }
            if (ec) {
              // Out of file descriptors, say: wait a little rather than spin.
              log_line("accept: " + ec.message());
              co_await sleep_until(pause, Clock::now() + kAcceptRetry);
              continue;
            }
            ++accepted_;
            if (state_.mode().kind == ModeKind::kRefuse) {
              close_with_reset(client);
              continue;
            }
            if (connections_.size() >= max_connections_) {
              log_line("connection limit (" + std::to_string(max_connections_) +
                       ") reached: closing a new connection");
              close_with_reset(client);
              continue;
            }
            const std::uint64_t id = next_id_++;
            auto connection = std::make_shared<ProxyConnection>(*this, std::move(client), id);
            connections_.emplace(id, connection);
            connection->start();
          }
        },
        asio::detached);
  }
  if (control_.is_open()) {
    asio::co_spawn(
        io_,
        [this]() -> asio::awaitable<void> {
          while (!stopping_) {
            auto socket = std::make_shared<tcp::socket>(io_);
            error_code ec;
            co_await control_.async_accept(*socket, asio::redirect_error(asio::use_awaitable, ec));
            if (stopping_) {
              co_return;
            }
            if (ec) {
              continue;
            }
            const std::uint64_t id = next_id_++;
            if (sessions_.size() >= kMaxControlSessions) {
              const std::string busy = "error too many control connections (at most " +
                                       std::to_string(kMaxControlSessions) + "); closing\n";
              error_code ignored;
              asio::write(*socket, asio::buffer(busy), ignored);
              socket->close(ignored);
              continue;
            }
            sessions_.emplace(id, socket);
            asio::co_spawn(
                io_,
                [this, socket, id]() -> asio::awaitable<void> {
                  asio::steady_timer idle(io_);
                  auto touch = [&] {
                    idle.expires_after(kControlIdle);
                    idle.async_wait([socket](const error_code& e) {
                      if (!e) {
                        error_code ignored;
                        socket->close(ignored);
                      }
                    });
                  };
                  std::string buffer;
                  // A line, its newline and a '\r' before it.
                  const std::size_t max_buffer = kMaxControlLine + 2;
                  for (;;) {
                    touch();
                    error_code e;
                    const std::size_t n = co_await asio::async_read_until(
                        *socket, asio::dynamic_buffer(buffer, max_buffer), '\n',
                        asio::redirect_error(asio::use_awaitable, e));
                    if (e) {
                      if (e == asio::error::not_found) {
                        const std::string too_long = "error line longer than " +
                                                     std::to_string(kMaxControlLine) +
                                                     " bytes; closing\n";
                        log_line("control: a line longer than " + std::to_string(kMaxControlLine) +
                                 " bytes; closing");
                        error_code ignored;
                        co_await asio::async_write(
                            *socket, asio::buffer(too_long),
                            asio::redirect_error(asio::use_awaitable, ignored));
                        // Closing with the rest of the line unread would send RST, and the
                        // client could lose the reply: read what has arrived (bounded).
                        socket->non_blocking(true, ignored);
                        char scratch[4096];
                        for (int i = 0; i < 16 && !ignored; ++i) {
                          socket->read_some(asio::buffer(scratch), ignored);
                        }
                        socket->shutdown(tcp::socket::shutdown_send, ignored);
                      }
                      break;
                    }
                    std::string line = buffer.substr(0, n - 1);
                    buffer.erase(0, n);
                    if (!line.empty() && line.back() == '\r') {
                      line.pop_back();
                    }
                    const std::string reply = handle_control_line(line) + "\n";
                    co_await asio::async_write(*socket, asio::buffer(reply),
                                               asio::redirect_error(asio::use_awaitable, e));
                    if (e) {
                      break;
                    }
                  }
                  idle.cancel();
                  error_code ignored;
                  socket->close(ignored);
                  sessions_.erase(id);
                },
                asio::detached);
          }
        },
        asio::detached);
  }
}

void FaultProxy::stop() {
  if (stopping_) {
    return;
  }
  stopping_ = true;
  error_code ignored;
  listener_.close(ignored);
  control_.close(ignored);
  mode_timer_.cancel();
  for (auto& [id, socket] : sessions_) {
    socket->close(ignored);
  }
  std::vector<std::shared_ptr<ProxyConnection>> open;
  for (auto& [id, connection] : connections_) {
    open.push_back(connection);
  }
  for (auto& connection : open) {
    connection->close_normally();
  }
}

std::string FaultProxy::handle_control_line(std::string_view line) {
  const ParsedCommand parsed = parse_control_command(line);
  std::string reply;
  if (!parsed.command) {
    reply = "error " + parsed.error;
  } else if (std::holds_alternative<HelpCommand>(*parsed.command)) {
    reply = std::string("ok ") + kControlHelp;
  } else if (std::holds_alternative<StatusCommand>(*parsed.command)) {
    reply = "ok " + status_text(state_.mode(), counters(), Clock::now());
  } else if (std::holds_alternative<ResetCommand>(*parsed.command)) {
    const std::size_t n = reset_all();
    reply = "ok reset " + std::to_string(n) + " connections; mode=" + mode_name(state_.mode());
  } else {
    const std::string before = mode_name(state_.mode());
    reply = "ok " + state_.apply(*parsed.command, Clock::now());
    mode_changed(before);
  }
  std::string shown(line.substr(0, 80));
  log_line("control: " + shown + " -> " + reply);
  return reply;
}

void FaultProxy::mode_changed(const std::string& from) {
  const Mode& mode = state_.mode();
  std::string text = "mode " + from + " -> " + mode_name(mode);
  if (mode.until) {
    text += " for " +
            std::to_string(
                std::chrono::ceil<std::chrono::seconds>(*mode.until - Clock::now()).count()) +
            " s";
  }
  log_line(text);
  arm_mode_timer();
  for (auto& [id, connection] : connections_) {
    connection->wake_all();
  }
}

void FaultProxy::arm_mode_timer() {
  const Mode& mode = state_.mode();
  if (!mode.until) {
    mode_timer_.cancel();
    return;
  }
  mode_timer_.expires_at(*mode.until);
  mode_timer_.async_wait([this, generation = mode.generation](const error_code& ec) {
    if (ec || stopping_ || state_.mode().generation != generation) {
      return;
    }
    const std::string before = mode_name(state_.mode());
    if (state_.expire(Clock::now())) {
      log_line("time is up for " + before);
      mode_changed(before);
    }
  });
}

std::size_t FaultProxy::reset_all() {
  std::vector<std::shared_ptr<ProxyConnection>> open;
  for (auto& [id, connection] : connections_) {
    open.push_back(connection);
  }
  for (auto& connection : open) {
    connection->abort();
  }
  return open.size();
}

void FaultProxy::count_bytes(bool up, std::size_t n) {
  (up ? bytes_up_ : bytes_down_) += n;
}

void FaultProxy::forget(std::uint64_t id) {
  connections_.erase(id);
}

ProxyCounters FaultProxy::counters() const {
  return {connections_.size(), accepted_, bytes_up_, bytes_down_};
}

}  // namespace agentfleet::faultproxy
