#pragma once
// A worker's orderly stop (SIGTERM/SIGINT): no new work, the group left at once (so the
// partitions move to the other workers while this one drains), every run brought to its next
// checkpoint and its task handed back (or finished), within the grace period. Runs still
// waiting on a model or tool call when the grace runs out are handed back in one go by the
// lease keeper (fenced by attempt, so a late write of theirs stores nothing), which then
// retires the worker's incarnation: a drain never costs a task an attempt.
//
// Lifecycle: one run() per process. Thread-safety: the io thread.

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <functional>

#include "core/limits/clock.hpp"
#include "core/ports/run_store.hpp"
#include "worker/lease_keeper.hpp"
#include "worker/runs.hpp"

namespace agentfleet::worker {

struct DrainOptions {
  std::chrono::milliseconds grace{30000};
  std::chrono::milliseconds poll{20};  // how often it looks whether the runs have ended
};

struct DrainReport {
  std::size_t running_at_start = 0;
  std::size_t running_at_grace = 0;  // still waiting on a call when the grace ran out
  int handed_back = 0;               // by the lease keeper at the end
};

class Drain {
 public:
  // `stop_intake`: the consumer stops starting messages and leaves the group.
  Drain(Runs& runs, ports::RunStore& store, LeaseKeeper& keeper, const limits::Clock& clock,
        DrainOptions options, std::function<void()> stop_intake);

  boost::asio::awaitable<DrainReport> run();

 private:
  Runs& runs_;
  ports::RunStore& store_;
  LeaseKeeper& keeper_;
  const limits::Clock& clock_;
  DrainOptions options_;
  std::function<void()> stop_intake_;
};

}  // namespace agentfleet::worker
