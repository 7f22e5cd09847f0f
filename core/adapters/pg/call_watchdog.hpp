#pragma once
// A client-side deadline for blocking libpq calls. statement_timeout is the server's: when the
// server never receives the statement (a half-open connection, a network that swallows
// packets while something on the path still acknowledges them), nothing ever answers and the
// caller would wait forever. An armed call that outlives its deadline gets its connection's
// socket shut down, so libpq fails the call at once with a broken connection; the caller
// drops the connection and opens a new one.
//
// Lifecycle: one thread per watchdog, stopped by the destructor. Thread-safety: arm() and
// the Armed guards may be used from any thread. The socket must stay open while armed (the
// guard is released before the connection is closed or reopened).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>

namespace agentfleet::pg {

class CallWatchdog {
 public:
  using Clock = std::chrono::steady_clock;

  CallWatchdog();
  ~CallWatchdog();
  CallWatchdog(const CallWatchdog&) = delete;
  CallWatchdog& operator=(const CallWatchdog&) = delete;

  // Disarms on destruction. `fired()` says whether the deadline cut the call.
  class Armed {
   public:
    Armed(CallWatchdog* owner, std::uint64_t id) : owner_(owner), id_(id) {}
    Armed(Armed&& other) noexcept : owner_(other.owner_), id_(other.id_) { other.owner_ = nullptr; }
    Armed& operator=(Armed&&) = delete;
    Armed(const Armed&) = delete;
    ~Armed();
    bool fired() const;

   private:
    CallWatchdog* owner_;
    std::uint64_t id_;
  };

  // Shuts `socket` down (both ways) unless disarmed before `deadline`. A negative socket
  // arms nothing.
  Armed arm(int socket, Clock::time_point deadline);
  std::uint64_t fired_total() const;

 private:
  struct Entry {
    int socket = -1;
    Clock::time_point deadline;
    bool fired = false;
  };
  void loop();
  void disarm(std::uint64_t id);
  bool fired(std::uint64_t id) const;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::uint64_t, Entry> armed_;
  std::uint64_t next_id_ = 1;
  std::uint64_t fired_total_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace agentfleet::pg
