#pragma once
// Gauges that cost a round trip (a query, a broker request) are read when /metrics is
// scraped, not on a timer: a process nobody scrapes asks nothing for them. A scrape that finds the last reading older
// than `interval` (or none) claims the refresh and reads; the scrapes meanwhile, and those
// within `interval` of the last reading, serve what was read last. A refresh that failed is
// tried again by the next scrape.
//
// Usage: `if (auto claim = refresh.claim()) { ...read...; if (ok) claim.succeeded(); }`.
// Thread-safety: claim() may be called from any thread; a Claim belongs to its caller.

#include <chrono>
#include <mutex>
#include <optional>
#include <utility>

#include "core/limits/clock.hpp"

namespace agentfleet::metrics {

class ScrapeRefresh {
 public:
  ScrapeRefresh(const limits::Clock& clock, std::chrono::seconds interval)
      : clock_(clock), interval_(interval) {}

  // The right to refresh, held by one caller at a time; given back when it is destroyed.
  class Claim {
   public:
    Claim() = default;
    explicit Claim(ScrapeRefresh* owner) : owner_(owner) {}
    Claim(Claim&& other) noexcept : owner_(std::exchange(other.owner_, nullptr)) {}
    Claim& operator=(Claim&&) = delete;
    ~Claim() {
      if (owner_ != nullptr)
        owner_->release(false);
    }
    explicit operator bool() const { return owner_ != nullptr; }
    // The reading was taken: the next interval's scrapes serve it.
    void succeeded() {
      if (owner_ != nullptr)
        std::exchange(owner_, nullptr)->release(true);
    }

   private:
    ScrapeRefresh* owner_ = nullptr;
  };

  // A claim when the last reading is older than the interval (or there is none) and no
  // other caller holds one; an empty one otherwise.
  Claim claim() {
    std::lock_guard lock(mutex_);
    if (running_ || (read_at_ && clock_.now() - *read_at_ < interval_))
      return Claim();
    running_ = true;
    return Claim(this);
  }

 private:
  void release(bool read) {
    std::lock_guard lock(mutex_);
    running_ = false;
    if (read)
      read_at_ = clock_.now();
  }

  const limits::Clock& clock_;
  const std::chrono::seconds interval_;
  std::mutex mutex_;
  bool running_ = false;
  std::optional<limits::Clock::time_point> read_at_;
};

}  // namespace agentfleet::metrics
