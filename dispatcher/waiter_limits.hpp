#pragma once
// How many event streams and long polls one dispatcher replica holds open, in all and per
// caller (an API key's name, or a gateway user): each waits on the task feed and costs a
// connection, a coroutine and reads of Postgres, so one caller cannot hold them all. A
// caller at its share is refused (the API answers 429), a replica at its total too (503),
// both with Retry-After; a 0 cap is no cap.
// Batch uploads too, as two kinds: a place of the replica's (kUpload, taken on the
// request's head) and one of the caller's (kCallerUpload, taken once the upload's caller is
// known, which for a key acting for any user may be its first line: upload_caller).
//
// Pure bookkeeping, no I/O; thread-safe. A Ticket holds one place until it is destroyed.

#include <array>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <variant>

namespace agentfleet::dispatcher {

enum class Waiter { kEventStream, kLongPoll, kUpload, kCallerUpload };

struct WaiterCaps {
  std::size_t per_caller = 0;
  std::size_t per_replica = 0;
};

class WaiterLimits {
 public:
  // `uploads`: per_replica caps kUpload, per_caller kCallerUpload.
  WaiterLimits(WaiterCaps streams, WaiterCaps long_polls, WaiterCaps uploads = {});
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
  Kind& of(Waiter kind) { return kinds_[static_cast<std::size_t>(kind)]; }
  const Kind& of(Waiter kind) const { return kinds_[static_cast<std::size_t>(kind)]; }
  void give_back(Waiter kind, const std::string& caller);

  mutable std::mutex mutex_;
  std::array<Kind, 4> kinds_;  // by Waiter
};

// Whose share of a replica's batch uploads an upload of `user_id` takes: a key that acts
// for the users it lists (or a gateway user) is one caller whatever the user; a key that
// acts for any user is one caller per user (an operator's or a gateway's key uploading for
// many tenants). Empty when that is not known yet (an any-user key, no user named).
std::string upload_caller(const std::string& key_name, bool any_user, const std::string& user_id);

}  // namespace agentfleet::dispatcher
