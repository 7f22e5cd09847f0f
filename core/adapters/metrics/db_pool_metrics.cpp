#include "core/adapters/metrics/db_pool_metrics.hpp"

#include "core/adapters/metrics/buckets.hpp"
#include "core/adapters/metrics/families.hpp"

namespace agentfleet::metrics {

struct DbPoolMetrics::Families {
  explicit Families(prometheus::Registry& r)
      : in_use(detail::gauge(r, "agentfleet_db_pool_connections_in_use",
                             "Postgres pool connections running a job now.")
                   .Add({})),
        size(detail::gauge(r, "agentfleet_db_pool_connections",
                           "Size of the Postgres pool (connections and threads).")
                 .Add({})),
        queue_wait(detail::histogram(r, "agentfleet_db_queue_wait_seconds",
                                     "Time a Postgres job waited for a pool thread.")
                       .Add({}, buckets::kDbQueueWait)),
        synchronous(detail::gauge(r, "agentfleet_postgres_synchronous_replication",
                                  "1 while this process's commits wait for a synchronous "
                                  "standby, as its last readiness check read it.")
                        .Add({})) {}

  prometheus::Gauge& in_use;
  prometheus::Gauge& size;
  prometheus::Histogram& queue_wait;
  prometheus::Gauge& synchronous;
};

DbPoolMetrics::DbPoolMetrics(MetricsRegistry& registry)
    : f_(std::make_unique<Families>(registry.prometheus_registry())) {}

DbPoolMetrics::~DbPoolMetrics() = default;

void DbPoolMetrics::set_pool(int in_use, int size) {
  f_->in_use.Set(in_use);
  f_->size.Set(size);
}

void DbPoolMetrics::set_synchronous_replication(bool synchronous) {
  f_->synchronous.Set(synchronous ? 1 : 0);
}

void DbPoolMetrics::queue_wait(double seconds) {
  f_->queue_wait.Observe(seconds);
}

}  // namespace agentfleet::metrics
