#pragma once
// Port: a worker's liveness in the store. A worker process registers an incarnation (one
// row of its own) and renews its lease there; a running task is owned by the incarnation
// that claimed it while that incarnation's lease holds (and by its attempt): the cost of
// staying alive does not grow with the tasks a worker holds. The same round trip reports
// what the worker can take (its in-flight limit, for admission by capacity) and brings back
// the cancellations of its tasks. The Postgres adapter (adapters/pg/liveness_store) runs it
// on a connection of its own with a short statement timeout; tests fake it.
//
// Thread-safety: called from the worker's io thread; resumes on the caller's executor.

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/domain/error.hpp"

namespace agentfleet::ports {

struct WorkerReport {
  std::int64_t incarnation = 0;
  bool renew = false;  // extend the lease by lease_s (else only report and read)
  int lease_s = 30;
  int capacity = 0;  // tasks it would run at once now (its adaptive limit; 0 while draining)
  int running = 0;   // tasks it runs now
  std::int64_t dispatch_lag = 0;  // dispatch messages on its partitions not yet read or claimed
  bool draining = false;
};

struct Heartbeat {
  // False when the incarnation's lease had already lapsed (or its row is gone): its tasks may
  // have been taken over, it owns nothing any more, and must register anew.
  bool alive = false;
  std::vector<std::string> cancelled;  // its running tasks whose cancellation was asked for
};

struct HeldTask {
  std::string task_id;
  int attempt = 0;
  // The incarnation it was claimed under when that is known to differ from the worker's
  // current one (a claim answered after a fence); 0: the current incarnation.
  std::int64_t incarnation = 0;
};

class LivenessStore {
 public:
  virtual ~LivenessStore() = default;
  // A new incarnation of `worker_id`, its lease starting now.
  virtual boost::asio::awaitable<Result<std::int64_t>> register_worker(std::string worker_id,
                                                                       WorkerReport report) = 0;
  virtual boost::asio::awaitable<Result<Heartbeat>> beat(WorkerReport report) = 0;
  // Tasks `incarnation` held and no longer runs (a run that stopped on a store error, or all
  // of them when the worker fenced itself): each still its own goes back to the queue; each
  // already taken over after its lease lapsed keeps its new owner. Either way the attempt is
  // not counted as a lost one (the worker did not crash). Returns how many it handed back.
  virtual boost::asio::awaitable<Result<int>> hand_back(std::int64_t incarnation,
                                                        std::vector<HeldTask> tasks) = 0;
  // The worker stops: its lease ends now and it takes nothing more. Tasks it still holds (a
  // hand-back that failed) are recovered at once; the row itself goes once it holds none.
  virtual boost::asio::awaitable<Status> retire(std::int64_t incarnation) = 0;
};

}  // namespace agentfleet::ports
