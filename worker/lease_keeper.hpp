#pragma once
// The worker's liveness: one incarnation row in the store, renewed every `renew_every` on a
// connection of its own (ports::LivenessStore), whatever the number of tasks held. Every
// `tick` it also reads the cancellations of its running tasks, and reports what the worker
// can take whenever that changed materially (admission by capacity). A worker that runs
// nothing and has nothing to hand back asks nothing between renewals.
//
// Self-fencing: when the last renewal that succeeded was sent more than `lease - margin`
// ago, the worker can no longer prove it owns its tasks (recovery may give them to another
// worker the moment the lease lapses): every run stops at once without writing (Runs::fence)
// and the consumer pauses. Once the store answers again, the keeper hands back what the
// fenced runs held — a task still this incarnation's goes back to the queue, one already
// taken over keeps its new owner, and neither counts as a crashed attempt — registers a new
// incarnation and lifts the fence. Tasks a run abandoned on a store error are handed back the
// same way at the next beat that succeeds.
//
// A beat in flight never holds up the next tick's fence check: a call that hangs (a
// blackholed connection, until the store's own deadline breaks it) only delays the renewal.
//
// Lifecycle: start() registers the first incarnation (retrying with backoff) and starts the
// loop; stop() ends it; finish() (after a drain) hands back what is left and deregisters.
// Thread-safety: everything on the io thread (the executor given).

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/limits/clock.hpp"
#include "core/ports/liveness_store.hpp"
#include "worker/runs.hpp"

namespace agentfleet::worker {

struct LeaseKeeperOptions {
  std::chrono::milliseconds tick{500};  // cancellations are read this often
  std::chrono::milliseconds renew_every{10000};
  std::chrono::milliseconds lease{30000};
  std::chrono::milliseconds margin{5000};  // fence this long before the lease would lapse
};

// What the worker reports about itself at a beat (capacity, running, lag, draining).
using ReportSource = std::function<ports::WorkerReport()>;

class LeaseKeeper {
 public:
  LeaseKeeper(boost::asio::any_io_executor executor, ports::LivenessStore& store, Runs& runs,
              const limits::Clock& clock, LeaseKeeperOptions options, std::string worker_id,
              ReportSource report);
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Registers the first incarnation (retrying, with backoff up to 5 s, until it succeeds or
  // stop()) and starts the loop. False when stopped before it could register.
  boost::asio::awaitable<bool> start();
  // start() without the loop (tests drive step() themselves).
  boost::asio::awaitable<bool> register_first();
  void stop();
  // Hands back `remaining` (the runs a drain could not bring to a checkpoint) and the
  // abandoned tasks, then deregisters. Call after stop().
  boost::asio::awaitable<int> finish(std::vector<ports::HeldTask> remaining);

  // One tick: the fence check, then (unless a store call is still under way) a beat, or
  // while fenced the hand-back and a new incarnation, run in the background. The loop calls
  // it every `tick`; tests call it directly.
  boost::asio::awaitable<void> step();

  bool fenced() const { return fenced_; }
  std::int64_t incarnation() const { return incarnation_; }
  // A run stopped holding a task it neither ended nor handed back (Runs' abandoned handler),
  // held by the task's incarnation when it names one, else by the current incarnation.
  void abandoned(ports::HeldTask task);

  // Told when the fence goes up (true) or down (false): the consumer pauses and resumes.
  std::function<void(bool)> on_fence;
  // Told of each new incarnation (the run store claims under it; 0 while fenced).
  std::function<void(std::int64_t)> on_incarnation;
  // Told how many tasks each hand-back returned to the queue.
  std::function<void(int)> on_handed_back;

  struct Counters {
    std::uint64_t beats = 0;
    std::uint64_t beat_failures = 0;
    std::uint64_t fences = 0;
    std::uint64_t incarnations = 0;
    std::uint64_t handed_back = 0;
  };
  const Counters& counters() const { return counters_; }

 private:
  boost::asio::awaitable<void> loop();
  boost::asio::awaitable<void> beat();
  boost::asio::awaitable<void> reincarnate();
  // Hands back what `incarnation` left (its entries of to_hand_back_); false on a store error.
  boost::asio::awaitable<bool> hand_back_pending(std::int64_t incarnation);
  // hand_back_pending for every incarnation with entries, the oldest first; false on the
  // first store error.
  boost::asio::awaitable<bool> hand_back_every();
  void raise_fence(const char* why);
  bool report_due(const ports::WorkerReport& report, limits::Clock::time_point now) const;

  boost::asio::any_io_executor executor_;
  ports::LivenessStore& store_;
  Runs& runs_;
  const limits::Clock& clock_;
  LeaseKeeperOptions options_;
  std::string worker_id_;
  ReportSource report_;

  std::int64_t incarnation_ = 0;
  bool fenced_ = false;
  bool stopped_ = false;
  bool beating_ = false;
  limits::Clock::time_point renewed_at_{};  // when the last renewal that held was sent
  ports::WorkerReport reported_;            // what the last renewal said
  std::vector<std::pair<std::int64_t, ports::HeldTask>> to_hand_back_;  // (incarnation, task)
  std::shared_ptr<boost::asio::steady_timer> timer_;
  Counters counters_;
};

}  // namespace agentfleet::worker
