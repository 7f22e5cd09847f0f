#pragma once
// agentfleet-faultproxy's network side: a TCP proxy from 127.0.0.1 to one target, whose
// forwarding a control port changes at run time (control.hpp has the commands).
//
// Each accepted client gets its own connection to the target. Per connection and direction
// a reader moves bytes from one socket into a bounded queue (kMaxQueuedBytes; it stops
// reading while the queue is full, so a slow side pushes back) and a writer moves them out,
// asking the direction's DirectionShaper (shaper.hpp) when. While the mode is `blackhole`
// readers do not read at all (they wait for readability but leave the bytes in the kernel),
// writers write nothing, and new clients are accepted but held without an upstream
// connection; when the mode changes every waiting reader, writer and held client is woken.
// An end of stream from one side is passed on as a half-close once its queue is drained; an
// error on either side closes both with RST.
//
// Lifecycle: construct, open_listener (and open_control), start, run the io_context; stop()
// closes everything and io_context::run() then returns once the last coroutine has ended.
// Thread-safety: none; every member is used from the io_context's one thread.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tools/faultproxy/mode.hpp"

namespace agentfleet::faultproxy {

inline constexpr std::size_t kMaxConnections = 4096;
// Bytes read but not yet written, per direction of a connection. Each queued chunk also
// counts kChunkOverheadBytes, so a peer sending a byte at a time cannot queue a million
// chunks.
inline constexpr std::size_t kMaxQueuedBytes = 1 << 20;
inline constexpr std::size_t kChunkOverheadBytes = 64;
inline constexpr std::size_t kReadChunkBytes = 64 * 1024;
inline constexpr std::chrono::seconds kConnectTimeout{5};
inline constexpr std::size_t kMaxControlSessions = 16;
// A control connection that sends nothing for this long is closed.
inline constexpr std::chrono::minutes kControlIdle{10};

class ProxyConnection;

class FaultProxy {
 public:
  // `max_connections` is at most kMaxConnections (lower when the process may not open
  // enough files).
  FaultProxy(boost::asio::io_context& io, boost::asio::ip::tcp::endpoint target,
             std::size_t max_connections = kMaxConnections);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  // Bind 127.0.0.1:port (0 picks one) and return the port. Throw boost::system::system_error.
  std::uint16_t open_listener(std::uint16_t port);
  std::uint16_t open_control(std::uint16_t port);

  // Starts accepting on what was opened.
  void start();
  // Closes the ports, the control connections and every proxied connection (a normal
  // close), and cancels the mode timer.
  void stop();

  // Applies one control line (without its newline) and returns the reply line (without
  // newline); logs the command and any mode change on stderr.
  std::string handle_control_line(std::string_view line);

 private:
  friend class ProxyConnection;

  const Mode& mode() const { return state_.mode(); }
  bool blackholed() const { return state_.mode().kind == ModeKind::kBlackhole; }
  void count_bytes(bool up, std::size_t n);
  void forget(std::uint64_t id);
  void mode_changed(const std::string& from);
  void arm_mode_timer();
  std::size_t reset_all();
  ProxyCounters counters() const;

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::endpoint target_;
  std::size_t max_connections_;
  boost::asio::ip::tcp::acceptor listener_;
  boost::asio::ip::tcp::acceptor control_;
  boost::asio::steady_timer mode_timer_;
  FaultState state_;
  bool stopping_ = false;
  std::uint64_t next_id_ = 1;
  std::uint64_t accepted_ = 0;
  std::uint64_t bytes_up_ = 0;
  std::uint64_t bytes_down_ = 0;
  // Every read lands here first (one thread, synchronous non-blocking reads), and a chunk
  // keeps only what was read.
  std::vector<char> read_buffer_;
  std::unordered_map<std::uint64_t, std::shared_ptr<ProxyConnection>> connections_;
  std::unordered_map<std::uint64_t, std::shared_ptr<boost::asio::ip::tcp::socket>> sessions_;
};

}  // namespace agentfleet::faultproxy
