#pragma once
// The Postgres pool's metrics, for either process: connections in use, pool size, and how
// long jobs wait for a pool thread. The composition root connects them to pg::DbPool
// (its in_use()/size() in a render hook, its queue-wait observer).
//
// Lifecycle: construct after the MetricsRegistry; one per registry. Thread-safety: every
// method may be called from any thread.

#include <memory>

#include "core/adapters/metrics/metrics_registry.hpp"

namespace agentfleet::metrics {

class DbPoolMetrics {
 public:
  explicit DbPoolMetrics(MetricsRegistry& registry);
  ~DbPoolMetrics();
  DbPoolMetrics(const DbPoolMetrics&) = delete;
  DbPoolMetrics& operator=(const DbPoolMetrics&) = delete;

  void set_pool(int in_use, int size);
  // 1 while the process's commits wait for a synchronous standby (pg::ReplicationWatch).
  void set_synchronous_replication(bool synchronous);
  // Time a Postgres job waited for a pool thread.
  void queue_wait(double seconds);

 private:
  struct Families;
  std::unique_ptr<Families> f_;
};

}  // namespace agentfleet::metrics
