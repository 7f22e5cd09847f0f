#pragma once
// Gauges that cost a round trip (a query, a broker request) are read when /metrics is
// scraped, not on a timer: a process nobody scrapes asks nothing for them. A scrape that finds the
// last reading older than `interval` (or none) claims the refresh and reads; the scrapes meanwhile,
// and those within `interval` of the last reading, serve what was read last. A refresh that failed
// is tried again by the next scrape.
//
// Usage: `if (auto claim = refresh.claim()) { ...read...; if (ok) claim.succeeded(); }`.
// Thread-safety: claim() may be called from any thread; a Claim belongs to its caller.

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "core/limits/clock.hpp"

namespace agentfleet::metrics {

class ScrapeRefresh {
  struct State;

 public:
  ScrapeRefresh(const limits::Clock& clock, std::chrono::seconds interval)
      : state_(std::make_shared<State>(clock, interval)) {}

  // The right to refresh, held by one caller at a time; given back when it is destroyed. It
  // keeps what it gives back to alive, so a claim may outlive its ScrapeRefresh (a reading
  // left suspended when its process stops).
  class Claim {
   public:
    Claim() = default;
    explicit Claim(std::shared_ptr<State> state) : state_(std::move(state)) {}
    Claim(Claim&& other) noexcept = default;
    Claim& operator=(Claim&&) = delete;
    ~Claim() {
      if (state_)
        state_->release(false);
    }
    explicit operator bool() const { return state_ != nullptr; }
    // The reading was taken: the next interval's scrapes serve it.
    void succeeded() {
      if (state_)
        std::exchange(state_, nullptr)->release(true);
    }

   private:
    std::shared_ptr<State> state_;
  };

  // A claim when the last reading is older than the interval (or there is none) and no
  // other caller holds one; an empty one otherwise.
  Claim claim() {
    std::lock_guard lock(state_->mutex);
    if (state_->running ||
        (state_->read_at && state_->clock.now() - *state_->read_at < state_->interval))
      return Claim();
    state_->running = true;
    return Claim(state_);
  }

 private:
  struct State {
    State(const limits::Clock& c, std::chrono::seconds i) : clock(c), interval(i) {}
    void release(bool read) {
      std::lock_guard lock(mutex);
      running = false;
      if (read)
        read_at = clock.now();
    }
    const limits::Clock& clock;
    const std::chrono::seconds interval;
    std::mutex mutex;
    bool running = false;
    std::optional<limits::Clock::time_point> read_at;
  };
  std::shared_ptr<State> state_;
};

}  // namespace agentfleet::metrics
