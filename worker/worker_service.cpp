#include "worker/worker_service.hpp"

#include <unistd.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/signal_set.hpp>

#include <cstdio>
#include <thread>

#include "core/adapters/http/model_client.hpp"
#include "core/adapters/http/tool_client.hpp"
#include "core/adapters/kafka/kafka.hpp"
#include "core/adapters/log.hpp"
#include "core/adapters/metrics/db_pool_metrics.hpp"
#include "core/adapters/metrics/trace_export_metrics.hpp"
#include "core/adapters/metrics/worker_metrics.hpp"
#include "core/adapters/otlp/otlp_http_sink.hpp"
#include "core/adapters/otlp/span_exporter.hpp"
#include "core/adapters/pg/db_pool.hpp"
#include "core/adapters/pg/liveness_store.hpp"
#include "core/adapters/pg/replication.hpp"
#include "core/adapters/pg/run_store.hpp"
#include "core/adapters/pg/trace_source.hpp"
#include "core/adapters/pg/write_batcher.hpp"
#include "core/domain/build_info.hpp"
#include "core/limits/concurrency_limit.hpp"
#include "worker/dispatch_consumer.hpp"
#include "worker/drain.hpp"
#include "worker/lease_keeper.hpp"
#include "worker/measured_run_store.hpp"
#include "worker/ops_endpoint.hpp"
#include "worker/task_runner.hpp"

namespace agentfleet::worker {

namespace asio = boost::asio;

namespace {
std::string default_worker_id() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + "-" + std::to_string(getpid());
}

metrics::ModelOutcome to_metrics(http::ModelOutcome outcome) {
  switch (outcome) {
    case http::ModelOutcome::kOk:
      return metrics::ModelOutcome::kOk;
    case http::ModelOutcome::kRateLimited:
      return metrics::ModelOutcome::kRateLimited;
    case http::ModelOutcome::kServerError:
      return metrics::ModelOutcome::kServerError;
    case http::ModelOutcome::kTimeout:
      return metrics::ModelOutcome::kTimeout;
    case http::ModelOutcome::kConnectError:
      return metrics::ModelOutcome::kConnectionError;
    case http::ModelOutcome::kBadResponse:
      return metrics::ModelOutcome::kInvalidResponse;
    case http::ModelOutcome::kRejected:
      return metrics::ModelOutcome::kClientError;
    case http::ModelOutcome::kQuotaExhausted:
      return metrics::ModelOutcome::kQuotaExhausted;
    case http::ModelOutcome::kCircuitOpen:
      return metrics::ModelOutcome::kCircuitOpen;
    case http::ModelOutcome::kThrottled:
      return metrics::ModelOutcome::kThrottled;
  }
  return metrics::ModelOutcome::kServerError;
}

limits::ConcurrencyLimitOptions limit_options(const config::WorkerConfig& w) {
  limits::ConcurrencyLimitOptions o;
  o.max = w.max_in_flight;
  o.min = std::min(w.in_flight_min, w.max_in_flight);
  o.initial = std::clamp(w.in_flight_initial, o.min, o.max);
  o.target = std::chrono::milliseconds(w.round_trip_target_ms);
  return o;
}

// The trace exporter and what it reads and sends through (telemetry.otlp).
struct TraceExport {
  TraceExport(const config::Config& config, const std::string& worker_id,
              metrics::MetricsRegistry& registry)
      : source(config.postgres.url, config.postgres.statement_timeout_ms,
               config.postgres.connect_timeout_s),
        sink(config.telemetry.otlp.endpoint,
             {config.telemetry.otlp.headers.begin(), config.telemetry.otlp.headers.end()}),
        exporter(source, sink, options_of(config.telemetry.otlp, worker_id)),
        metrics(registry) {
    registry.add_render_hook([this] { metrics.set(exporter.stats(), exporter.queued()); });
  }

  static otlp::SpanExporterOptions options_of(const config::OtlpConfig& c,
                                              const std::string& worker_id) {
    otlp::SpanExporterOptions o;
    o.queue_tasks = static_cast<std::size_t>(c.queue_tasks);
    o.batch_spans = static_cast<std::size_t>(c.batch_spans);
    o.flush_interval = std::chrono::milliseconds(c.flush_interval_ms);
    o.timeout = std::chrono::milliseconds(c.timeout_ms);
    o.max_attempts = c.max_attempts;
    o.spans.max_attribute_chars = static_cast<std::size_t>(c.max_attribute_chars);
    o.version = std::string(build_info().version);
    o.resource = {{"service.name", c.service_name},
                  {"service.version", o.version},
                  {"service.instance.id", worker_id}};
    return o;
  }

  pg::TraceSource source;
  otlp::OtlpHttpSink sink;
  otlp::SpanExporter exporter;
  metrics::TraceExportMetrics metrics;
};

LeaseKeeperOptions keeper_options(const config::WorkerConfig& w) {
  LeaseKeeperOptions o;
  o.tick = std::chrono::milliseconds(w.cancel_poll_ms);
  o.renew_every = std::chrono::seconds(w.heartbeat_s);
  o.lease = std::chrono::seconds(w.lease_s);
  // Fenced well before recovery may take the tasks over: a fifth of the lease, at least a
  // second (and never more than the time between the last renewal and the lapse).
  o.margin = std::min(std::chrono::milliseconds(std::max(1000, w.lease_s * 200)),
                      std::chrono::milliseconds((w.lease_s - w.heartbeat_s) * 1000 / 2));
  return o;
}

// Every HTTP attempt at a model endpoint is counted; retries by the failure retried.
void count_model_attempts(http::OpenAiModelClient& model, metrics::WorkerMetrics& worker_metrics) {
  model.set_observer([&worker_metrics](const http::ModelAttempt& attempt) {
    const metrics::ModelOutcome outcome = to_metrics(attempt.outcome);
    if (attempt.http_status != 0 || attempt.outcome == http::ModelOutcome::kTimeout ||
        attempt.outcome == http::ModelOutcome::kConnectError) {
      worker_metrics.model_request(attempt.model, attempt.endpoint, outcome,
                                   std::chrono::duration<double>(attempt.latency).count());
    }
    if (attempt.retry_follows)
      worker_metrics.model_retry(attempt.model, outcome);
  });
}

// Each ended task's trace to the OpenTelemetry collector, from a thread of its own; none
// when telemetry.otlp names no endpoint.
std::unique_ptr<TraceExport> start_traces(const config::Config& config,
                                          const std::string& worker_id,
                                          metrics::MetricsRegistry& registry, TaskRunner& runner) {
  if (config.telemetry.otlp.endpoint.empty())
    return nullptr;
  auto traces = std::make_unique<TraceExport>(config, worker_id, registry);
  runner.set_ended_handler(
      [exporter = &traces->exporter](const std::string& task_id, const std::string& traceparent) {
        if (!traceparent.empty())
          exporter->offer(task_id, traceparent);
      });
  traces->exporter.start();
  log::write(
      "info", "worker",
      "exporting task traces to " + otlp::OtlpHttpSink::traces_url(config.telemetry.otlp.endpoint));
  return traces;
}

// What the worker did, said as it stops: its task writes and commits, its in-flight limit,
// its model calls, the tasks it still held.
void log_stopped(const pg::WriteBatcher::Stats& batches, const limits::ConcurrencyLimit& limit,
                 const http::ModelClientCounters& calls, std::size_t left, bool flushed) {
  log::write("info", "worker",
             "task writes " + std::to_string(batches.writes) + " in " +
                 std::to_string(batches.batches) + " commits (largest " +
                 std::to_string(batches.largest) + "); in-flight limit " +
                 std::to_string(limit.limit()) + " (" + std::to_string(limit.counters().backoffs) +
                 " back-offs)");
  log::write("info", "worker",
             "model calls " + std::to_string(calls.calls) + " (failed " +
                 std::to_string(calls.calls_failed) + "), HTTP attempts " +
                 std::to_string(calls.attempts) + ", retries " + std::to_string(calls.retries) +
                 ", failovers " + std::to_string(calls.failovers) + ", waits for room " +
                 std::to_string(calls.waits_for_room));
  log::write("info", "worker",
             "stopped with " + std::to_string(left) + " tasks in flight" +
                 (left > 0 ? " (handed back, or recovered once the liveness lapses)" : "") +
                 (flushed ? "" : "; some produced messages were not confirmed"));
}

// The ops endpoint (none when metrics.port is 0): ready while the worker holds its liveness,
// is not draining and reaches Postgres (and, when the configuration requires it, its commits
// wait for a synchronous standby). Whether they do is read (and logged) at start either way,
// then at each readiness probe; the gauge shows the last reading.
std::unique_ptr<OpsEndpoint> start_ops(asio::any_io_executor executor, const config::Config& config,
                                       metrics::MetricsRegistry& registry,
                                       metrics::WorkerMetrics& worker_metrics,
                                       metrics::DbPoolMetrics& db_metrics,
                                       kafka::ConsumerSubscription& subscription, pg::DbPool& db,
                                       LeaseKeeper& keeper, const bool& draining) {
  auto replication = std::make_shared<pg::ReplicationWatch>("worker");
  registry.add_render_hook([replication, &db_metrics] {
    if (auto last = replication->last())
      db_metrics.set_synchronous_replication(last->synchronous);
  });
  asio::co_spawn(
      executor,
      [replication, &db]() -> asio::awaitable<void> {
        auto read = co_await replication->check(db);
        if (!read.ok())
          log::warn("worker", "postgres: replication not read at start: " + read.error().message);
      },
      asio::detached);
  if (config.metrics.port == 0)
    return nullptr;
  auto ops = std::make_unique<OpsEndpoint>(
      executor,
      OpsEndpointOptions{config.metrics.host, static_cast<std::uint16_t>(config.metrics.port),
                         std::chrono::seconds(config.metrics.refresh_interval_s)},
      registry,
      [&draining, &keeper, &db, replication, &config]() -> asio::awaitable<Readiness> {
        Readiness readiness;
        if (draining) {
          readiness.reason = "draining";
          co_return readiness;
        }
        if (keeper.fenced()) {
          readiness.reason = "fenced: its liveness could not be renewed";
          co_return readiness;
        }
        // Reading the replication settings is the ping: Postgres answers.
        auto read = co_await replication->check(db);
        if (!read.ok()) {
          readiness.reason = "postgres unreachable: " + read.error().message;
          co_return readiness;
        }
        if (auto refusal = pg::replication_refusal(
                read.value(), config.postgres.require_synchronous_replication)) {
          readiness.reason = *refusal;
          co_return readiness;
        }
        readiness.ready = true;
        readiness.body = pg::ready_json(read.value());
        co_return readiness;
      },
      [&subscription, &worker_metrics] {
        if (kafka::Consumer* c = subscription.consumer()) {
          for (const auto& [topic, lag] : c->lag(std::chrono::seconds(2)))
            worker_metrics.set_consumer_lag(topic, lag);
        }
      });
  ops->start();
  return ops;
}

// The drain a stop signal starts; the io context stops when it is done.
asio::awaitable<void> drain_then_stop(Drain& drain, asio::io_context& io) {
  co_await drain.run();
  io.stop();
}

// Once the worker holds its liveness (and unless it is draining by then), its consumer starts.
asio::awaitable<void> start_consuming(LeaseKeeper& keeper, DispatchConsumer& consumer,
                                      const bool& draining, const std::string& worker_id,
                                      const config::Config& config) {
  const bool registered = co_await keeper.start();
  if (!registered || draining)
    co_return;
  consumer.start();
  log::write("info", "worker",
             "worker " + worker_id + " consuming " + config.kafka.topics.dispatch);
}
}  // namespace

int run_worker(const config::Config& config) {
  const std::string worker_id = config.worker.id.empty() ? default_worker_id() : config.worker.id;
  const limits::Clock& clock = limits::SteadyClock::instance();
  asio::io_context io(1);
  // Task writes go through the write batcher on this pool; the lease keeper has a pool (one
  // connection) of its own, so a heartbeat never waits behind a batch of checkpoints. Both
  // keep generic plans (pg::PlanCache).
  pg::DbPool db(config.postgres.url, config.worker.db_threads, config.postgres.statement_timeout_ms,
                config.postgres.connect_timeout_s, pg::PlanCache::kGeneric);
  pg::DbPool liveness_db(config.postgres.url, 1, config.worker.heartbeat_timeout_ms,
                         config.postgres.connect_timeout_s, pg::PlanCache::kGeneric);
  metrics::MetricsRegistry registry;
  metrics::WorkerMetrics worker_metrics(registry, config);
  metrics::DbPoolMetrics db_metrics(registry);
  db.set_queue_wait_observer([&](double seconds) { db_metrics.queue_wait(seconds); });
  registry.add_render_hook([&] { db_metrics.set_pool(db.in_use(), db.size()); });
  kafka::Producer producer(config.kafka);
  kafka::ProducerPublisher publisher(producer);
  http::OpenAiModelClient model(io.get_executor(), config.models);
  http::HttpToolClient tools(io.get_executor(), config.tools);
  count_model_attempts(model, worker_metrics);

  // Claims, checkpoints and ends are group-committed; each round trip (queueing included)
  // is a sample of the adaptive in-flight limit.
  pg::WriteBatcher writes(db, config.worker.db_threads, 500);
  pg::RunStore store(
      io.get_executor(), writes,
      pg::RunStoreOptions{worker_id, config.worker.lease_s, config.dispatcher.max_attempts,
                          config.kafka.topics.results});
  limits::ConcurrencyLimit limit(limit_options(config.worker), clock.now());
  std::unique_ptr<DispatchConsumer> consumer;
  auto publish_limit = [&] {
    worker_metrics.set_in_flight_limit(
        limit.limit(), std::chrono::duration<double>(limit.quiet_round_trip()).count());
  };
  MeasuredRunStore measured(store, clock, [&](std::chrono::microseconds round_trip, bool ok) {
    const int before = limit.limit();
    limit.sample(round_trip, ok, clock.now());
    if (limit.limit() != before) {
      publish_limit();
      if (consumer)
        consumer->limit_changed();
    }
  });
  publish_limit();
  TaskRunner runner(config, worker_id, model, tools, measured, publisher, worker_metrics, clock);

  kafka::ConsumerSubscription subscription(config.kafka, config.kafka.worker_group,
                                           {config.kafka.topics.dispatch});
  consumer = std::make_unique<DispatchConsumer>(
      io.get_executor(), subscription, publisher, runner, worker_metrics,
      DispatchConsumerOptions{config.kafka.topics.dlq, config.worker.max_in_flight},
      [&] { return limit.limit(); });
  consumer->on_in_flight = [&](std::size_t running) {
    const int before = limit.limit();
    limit.in_flight(static_cast<int>(running), clock.now());
    if (limit.limit() != before)
      publish_limit();
  };

  bool draining = false;
  pg::LivenessStore liveness(liveness_db);
  LeaseKeeper keeper(io.get_executor(), liveness, runner, clock, keeper_options(config.worker),
                     worker_id, [&] {
                       ports::WorkerReport report;
                       report.capacity = draining ? 0 : DispatchConsumer::capacity(limit.limit());
                       report.running = static_cast<int>(runner.running());
                       // Read but not yet claimed counts as unread: the scheduler sends
                       // a dispatch again only once nothing is left on the way to a claim.
                       report.dispatch_lag =
                           subscription.backlog() + static_cast<std::int64_t>(consumer->waiting());
                       report.draining = draining;
                       return report;
                     });
  keeper.on_incarnation = [&](std::int64_t incarnation) { store.set_incarnation(incarnation); };
  keeper.on_fence = [&](bool fenced) {
    if (fenced)
      worker_metrics.fenced();
    consumer->set_fenced(fenced);
  };
  keeper.on_handed_back = [&](int tasks) { worker_metrics.handed_back(tasks); };
  runner.set_abandoned_handler([&](ports::HeldTask task) { keeper.abandoned(std::move(task)); });

  std::unique_ptr<TraceExport> traces = start_traces(config, worker_id, registry, runner);

  // SIGTERM or SIGINT: drain (stop consuming and leave the group at once, let runs reach a
  // checkpoint and hand their tasks back within the grace period, hand back the rest, retire
  // the incarnation), then stop.
  Drain drain(runner, measured, keeper, clock,
              DrainOptions{std::chrono::seconds(config.worker.shutdown_grace_s)},
              [&] { consumer->stop_consuming(); });
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (ec)
      return;
    draining = true;
    asio::co_spawn(io, drain_then_stop(drain, io), asio::detached);
  });

  // Consuming starts once the worker holds its liveness: nothing is claimed before.
  asio::co_spawn(io, start_consuming(keeper, *consumer, draining, worker_id, config),
                 asio::detached);

  // /metrics, /healthz, /readyz on their own port; consumer lag refreshed off the io thread.
  std::unique_ptr<OpsEndpoint> ops = start_ops(io.get_executor(), config, registry, worker_metrics,
                                               db_metrics, subscription, db, keeper, draining);
  io.run();
  if (ops)
    ops->stop();
  const bool flushed = producer.flush(std::chrono::seconds(10));
  consumer.reset();  // joins a group leave still under way
  subscription.stop();
  if (traces)
    traces->exporter.stop(std::chrono::milliseconds(config.telemetry.otlp.timeout_ms));
  // Postgres work still queued finishes before the runner and the clients it uses go away.
  db.join();
  liveness_db.join();
  log_stopped(writes.stats(), limit, model.counters(), runner.running(), flushed);
  return 0;
}

}  // namespace agentfleet::worker
