#include "core/adapters/pg/call_watchdog.hpp"

#include <sys/socket.h>

#include <algorithm>

namespace agentfleet::pg {

CallWatchdog::CallWatchdog() : thread_([this] { loop(); }) {}

CallWatchdog::~CallWatchdog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

CallWatchdog::Armed::~Armed() {
  if (owner_ != nullptr)
    owner_->disarm(id_);
}

bool CallWatchdog::Armed::fired() const {
  return owner_ != nullptr && owner_->fired(id_);
}

CallWatchdog::Armed CallWatchdog::arm(int socket, Clock::time_point deadline) {
  if (socket < 0)
    return Armed(nullptr, 0);
  std::uint64_t id = 0;
  bool earliest = false;
  {
    std::lock_guard lock(mutex_);
    id = next_id_++;
    earliest = std::none_of(armed_.begin(), armed_.end(),
                            [&](const auto& e) { return e.second.deadline <= deadline; });
    armed_.emplace(id, Entry{socket, deadline, false});
  }
  if (earliest)
    wake_.notify_all();
  return Armed(this, id);
}

void CallWatchdog::disarm(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  armed_.erase(id);
}

bool CallWatchdog::fired(std::uint64_t id) const {
  std::lock_guard lock(mutex_);
  auto it = armed_.find(id);
  return it != armed_.end() && it->second.fired;
}

std::uint64_t CallWatchdog::fired_total() const {
  std::lock_guard lock(mutex_);
  return fired_total_;
}

void CallWatchdog::loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    auto next = Clock::time_point::max();
    for (auto& [id, entry] : armed_) {
      if (entry.fired)
        continue;
      if (entry.deadline <= Clock::now()) {
        // The call is still waiting on this socket (it is disarmed before the socket
        // closes): shutting it down makes the blocked read or write fail at once.
        ::shutdown(entry.socket, SHUT_RDWR);
        entry.fired = true;
        ++fired_total_;
      } else {
        next = std::min(next, entry.deadline);
      }
    }
    if (next == Clock::time_point::max())
      wake_.wait(lock);
    else
      wake_.wait_until(lock, next);
  }
}

}  // namespace agentfleet::pg
