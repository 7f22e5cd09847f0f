#pragma once
// When the proxy may deliver bytes it has read: the policy behind `latency`, `bandwidth`
// and `blackhole`, for one direction of one connection.
//
// The proxy queues each chunk it reads with the time it read it. Before writing the chunk
// at the head of the queue it asks its DirectionShaper, with the mode in force and a clock
// reading, how many of the chunk's bytes may go now and, when none may, when to ask again:
//   pass, refuse   all of them, now
//   latency MS     all of them once `now >= read_at + MS` (added delay, not less throughput:
//                  later chunks wait in the queue meanwhile, in order)
//   bandwidth R    a token bucket of rate R bytes/s holding at most burst_bytes(R) (1/20 s
//                  worth, 1 byte .. 1 MiB), full when the mode starts; a chunk goes in
//                  slices of at most the burst, each once the bucket holds it
//   blackhole      none, until the mode changes (no retry time)
// Bytes granted are taken from the bucket at once: the caller must write exactly them.
//
// Time comes from the caller; nothing here reads a clock. Lifecycle: one per direction of a
// connection, for the connection's life; a new mode generation restarts its bucket.
// Thread-safety: none; one owner (the proxy's io_context thread).

#include <cstddef>
#include <cstdint>
#include <optional>

#include "tools/faultproxy/mode.hpp"

namespace agentfleet::faultproxy {

// What the head chunk may do now.
struct Admission {
  std::size_t bytes = 0;              // write this many of its bytes now (0: none yet)
  std::optional<TimePoint> retry_at;  // bytes == 0: ask again then; nullopt: when the mode changes
};

// The token bucket's capacity for a rate: 1/20 s worth, at least 1 byte, at most 1 MiB.
std::size_t burst_bytes(std::int64_t bytes_per_s);

class DirectionShaper {
 public:
  // The head chunk has `bytes` bytes left (> 0) and was read at `read_at`.
  Admission admit(const Mode& mode, TimePoint read_at, std::size_t bytes, TimePoint now);

 private:
  std::optional<std::uint64_t> generation_;  // the bandwidth mode the bucket belongs to
  double level_ = 0;                         // bytes in the bucket
  TimePoint last_{};                         // last refill
};

}  // namespace agentfleet::faultproxy
