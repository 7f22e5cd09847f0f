#pragma once
// How many event streams and long polls one dispatcher replica holds open, in all and per
// caller (an API key's name, or a gateway user): each waits on the task feed and costs a
// connection, a coroutine and reads of Postgres, so one caller cannot hold them all. A
// caller at its share is refused (the API answers 429), a replica at its total too (503),
// both with Retry-After; a 0 cap is no cap.
//
// Pure bookkeeping, no I/O; thread-safe. A Ticket holds one place until it is destroyed.

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <variant>

namespace agentfleet::dispatcher {

enum class Waiter { kEventStream, kLongPoll };

struct WaiterCaps {
  std::size_t per_caller = 0;
  std::size_t per_replica = 0;
};

class WaiterLimits {
 public:
  WaiterLimits(WaiterCaps streams, WaiterCaps long_polls);
  WaiterLimits(const WaiterLimits&) = delete;
  WaiterLimits& operator=(const WaiterLimits&) = delete;

  // One place held; given back when destroyed. Movable.
  class Ticket {
   public:
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket();

   private:
    friend class WaiterLimits;
    Ticket(WaiterLimits* limits, Waiter kind, std::string caller);
    void release();
    WaiterLimits* limits_ = nullptr;
    Waiter kind_ = Waiter::kEventStream;
    std::string caller_;
  };

  enum class Refusal {
    kCaller,   // the caller holds its share of this kind
    kReplica,  // the replica holds its total of this kind
  };

  std::variant<Ticket, Refusal> acquire(Waiter kind, const std::string& caller);

  std::size_t held(Waiter kind) const;
  std::size_t held(Waiter kind, const std::string& caller) const;

 private:
  struct Kind {
    WaiterCaps caps;
    std::size_t total = 0;
    std::map<std::string, std::size_t> by_caller;  // only callers holding places
  };
  Kind& of(Waiter kind) { return kind == Waiter::kEventStream ? streams_ : long_polls_; }
  const Kind& of(Waiter kind) const {
    return kind == Waiter::kEventStream ? streams_ : long_polls_;
  }
  void give_back(Waiter kind, const std::string& caller);

  mutable std::mutex mutex_;
  Kind streams_;
  Kind long_polls_;
};

}  // namespace agentfleet::dispatcher
