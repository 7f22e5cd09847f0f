#pragma once
// How many tasks one worker runs at once, adapted to what its database round trips show
// (in the spirit of TCP Vegas and Netflix's concurrency-limits). Every durable write of a
// run (claim, checkpoint, end) is a sample: the time from asking for the write to having
// it committed, queueing included. The samples are judged a window at a time:
//
// - congested: the window's p90 round trip exceeds max(target, tolerance × the quiet round
//   trip), or writes failed; the limit backs off multiplicatively (× backoff);
// - otherwise, when the limit was what held the worker back (in flight reached
//   `busy_share` of the limit during the window), it grows: doubling until the first
//   congestion (slow start, so a quiet fleet reaches thousands in flight within seconds),
//   then by `increase` of itself per window;
// - a window in which the limit did not bind leaves it alone.
//
// The quiet round trip is the lowest median of the last `quiet_memory` uncongested windows
// whose median was within the target, so it follows the database when it gets slower or
// faster for good, but a worker that starts on a congested database does not take that
// congestion for its baseline (the target alone judges until a quiet window is seen). A
// database slower than the target even when quiet needs a larger target.
//
// Time comes from the caller (`now`), never from a clock inside: the tests drive it.
// Thread-compatible: one instance, used from one thread (the worker's io thread).

#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>

namespace agentfleet::limits {

struct ConcurrencyLimitOptions {
  int initial = 64;
  int min = 4;
  int max = 2000;
  std::chrono::microseconds target{std::chrono::milliseconds(100)};
  double tolerance = 3.0;
  double backoff = 0.8;
  double increase = 0.1;
  double busy_share = 0.9;
  std::chrono::milliseconds window{250};
  int min_samples = 8;     // a window closes only once it has this many (or after 4 windows)
  int quiet_memory = 120;  // windows the quiet round trip is remembered
};

class ConcurrencyLimit {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  explicit ConcurrencyLimit(ConcurrencyLimitOptions options, time_point now);

  // One write's round trip ended at `now`; `ok` false when it failed (a store error: the
  // database is struggling, whatever the latency).
  void sample(std::chrono::microseconds round_trip, bool ok, time_point now);
  // The tasks in flight now (called whenever the count changes): whether the limit binds.
  void in_flight(int running, time_point now);

  int limit() const { return limit_; }
  // The quiet round trip (zero until the first window closed).
  std::chrono::microseconds quiet_round_trip() const;
  bool slow_start() const { return slow_start_; }

  struct Counters {
    std::uint64_t windows = 0;
    std::uint64_t backoffs = 0;
    std::uint64_t increases = 0;
  };
  const Counters& counters() const { return counters_; }

 private:
  void close_window_if_due(time_point now);

  ConcurrencyLimitOptions options_;
  int limit_;
  bool slow_start_ = true;
  time_point window_start_;
  std::vector<std::int64_t> samples_us_;  // this window's round trips
  bool failed_ = false;
  int running_ = 0;
  int most_in_flight_ = 0;               // this window's
  std::deque<std::int64_t> medians_us_;  // of the last quiet_memory windows
  Counters counters_;
};

}  // namespace agentfleet::limits
