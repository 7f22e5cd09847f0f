#pragma once
// The worker's LivenessStore on Postgres: its row in `workers` (migration 8), renewed on a
// DbPool of its own (one connection and thread, a short statement timeout), so that a
// heartbeat never queues behind the task writes; the cancellations of its tasks come back on
// the same round trip.
//
// Lifecycle: lives as long as the worker's io_context. Thread-safety: called on the io thread;
// the statements run on the pool's thread.

#include "core/adapters/pg/db_pool.hpp"
#include "core/ports/liveness_store.hpp"

namespace agentfleet::pg {

class LivenessStore final : public ports::LivenessStore {
 public:
  explicit LivenessStore(DbPool& pool) : pool_(pool) {}

  boost::asio::awaitable<Result<std::int64_t>> register_worker(std::string worker_id,
                                                               ports::WorkerReport report) override;
  boost::asio::awaitable<Result<ports::Heartbeat>> beat(ports::WorkerReport report) override;
  boost::asio::awaitable<Result<int>> hand_back(std::int64_t incarnation,
                                                std::vector<ports::HeldTask> tasks) override;
  boost::asio::awaitable<Status> retire(std::int64_t incarnation) override;

 private:
  DbPool& pool_;
};

}  // namespace agentfleet::pg
