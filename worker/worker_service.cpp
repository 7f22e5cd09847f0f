#include "worker/worker_service.hpp"

#include <unistd.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdio>
#include <mutex>
#include <set>
#include <thread>

#include "core/adapters/http/model_client.hpp"
#include "core/adapters/http/tool_client.hpp"
#include "core/adapters/kafka/kafka.hpp"
#include "core/adapters/log.hpp"
#include "core/adapters/metrics/db_pool_metrics.hpp"
#include "core/adapters/metrics/worker_metrics.hpp"
#include "core/adapters/pg/db_pool.hpp"
#include "core/adapters/pg/task_store.hpp"
#include "core/codec/task_codec.hpp"
#include "core/domain/offset_tracker.hpp"
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

std::string header_value(const kafka::Headers& headers, const std::string& name) {
  for (const auto& [key, value] : headers) {
    if (key == name)
      return value;
  }
  return {};
}
}  // namespace

int run_worker(const config::Config& config) {
  const std::string worker_id = config.worker.id.empty() ? default_worker_id() : config.worker.id;
  asio::io_context io(1);
  pg::DbPool db(config.postgres.url, config.worker.db_threads, config.postgres.statement_timeout_ms,
                config.postgres.connect_timeout_s);
  metrics::MetricsRegistry registry;
  metrics::WorkerMetrics worker_metrics(registry, config);
  metrics::DbPoolMetrics db_metrics(registry);
  db.set_queue_wait_observer([&](double seconds) { db_metrics.queue_wait(seconds); });
  registry.add_render_hook([&] { db_metrics.set_pool(db.in_use(), db.size()); });
  kafka::Producer producer(config.kafka);
  http::OpenAiModelClient model(io.get_executor(), config.models);
  http::HttpToolClient tools(io.get_executor(), config.tools);
  // Every HTTP attempt at a model endpoint is counted; retries by the failure retried.
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
  // Task writes are group-committed; one pool thread stays free for heartbeats and polls.
  pg::WriteBatcher writes(db, std::max(1, config.worker.db_threads - 1), 500);
  TaskRunner runner(config, worker_id, model, tools, producer, worker_metrics, writes);

  OffsetTracker offsets;                        // touched only on the io thread
  std::set<std::pair<std::string, int>> owned;  // assigned partitions; io thread only
  std::size_t in_flight = 0;
  bool draining = false;
  std::unique_ptr<kafka::Consumer> consumer;

  // `handled` false keeps the message's offset uncommitted (and the partition's commits
  // behind it), so the group reads it again after a restart or rebalance.
  auto on_done = [&](const kafka::InMessage& message, bool handled) {
    --in_flight;
    worker_metrics.set_in_flight(in_flight);
    if (!handled) {
      offsets.forget_offset({message.topic, message.partition}, message.offset);
    } else if (auto commit = offsets.finished({message.topic, message.partition}, message.offset);
               commit && !draining) {
      // Not while draining: the consumer has left the group (the next owner reads the
      // messages again and skips their tasks, ended or leased here).
      consumer->commit(message.topic, message.partition, *commit);
    }
    if (!draining && in_flight < static_cast<std::size_t>(config.worker.max_in_flight)) {
      consumer->resume();
      worker_metrics.set_paused(false);
    }
  };

  // Bad input never blocks a partition: it goes to the dead-letter topic with the reason
  // and where it came from; the offset moves on once the dead letter is stored.
  // `task_id` is empty when the message names none that could be read.
  auto dead_letter = [&](const kafka::InMessage& message, metrics::DeadLetterReason kind,
                         const std::string& reason, const std::string& task_id) {
    worker_metrics.dead_letter(kind);
    const std::string traceparent = header_value(message.headers, "traceparent");
    log::TaskContext task{task_id, message.key};
    task.trace_id = log::trace_id_of(traceparent);
    log::warn("worker", task, "dead letter: " + reason,
              {{"topic", message.topic},
               {"partition", std::to_string(message.partition)},
               {"offset", std::to_string(message.offset)}});
    asio::co_spawn(
        io,
        [&, message,
         letter = kafka::dead_letter(message, config.kafka.topics.dlq,
                                     reason)]() mutable -> asio::awaitable<void> {
          Status sent = co_await producer.publish(std::move(letter));
          if (!sent.ok()) {
            log::error("worker",
                       "dead letter not published, message kept: " + sent.error().message);
          }
          on_done(message, sent.ok());
        },
        [&, message](std::exception_ptr error) {
          if (error)
            on_done(message, false);
        });
  };

  auto handle = [&](kafka::InMessage message) {
    // Messages fetched before the drain began, or before their partition was revoked, are
    // left unstarted and uncommitted: the partition's next owner runs them.
    if (draining || !owned.count({message.topic, message.partition}))
      return;
    ++in_flight;
    worker_metrics.set_in_flight(in_flight);
    offsets.started({message.topic, message.partition}, message.offset);
    if (in_flight >= static_cast<std::size_t>(config.worker.max_in_flight)) {
      consumer->pause();
      worker_metrics.set_paused(true);
    }
    auto parsed = codec::parse_dispatch_message(message.value);
    if (auto* violation = std::get_if<codec::SchemaViolation>(&parsed)) {
      // The codec reports unparsable text at the root with "invalid JSON".
      const bool not_json =
          violation->path.empty() && violation->message.rfind("invalid JSON", 0) == 0;
      dead_letter(
          message,
          not_json ? metrics::DeadLetterReason::kNotJson : metrics::DeadLetterReason::kSchema,
          "invalid dispatch message at '" + violation->path + "': " + violation->message, "");
      return;
    }
    const auto& dispatch = std::get<codec::DispatchMessage>(parsed);
    asio::co_spawn(
        io,
        runner.run(dispatch.task_id, dispatch.user_id,
                   header_value(message.headers, "traceparent")),
        [&, message, task_id = dispatch.task_id](std::exception_ptr error, RunOutcome outcome) {
          if (error)
            outcome = RunOutcome::kStoreUnavailable;
          if (outcome == RunOutcome::kUnknownTask) {
            dead_letter(message, metrics::DeadLetterReason::kUnknownTask, "unknown task " + task_id,
                        task_id);
            return;
          }
          if (outcome == RunOutcome::kStoreUnavailable) {
            // The task stays leased (or dispatched); lease recovery runs it again.
            const std::string traceparent = header_value(message.headers, "traceparent");
            log::TaskContext task{task_id, message.key};
            task.trace_id = log::trace_id_of(traceparent);
            log::warn("worker", task, "left for lease recovery");
          }
          if (outcome == RunOutcome::kLeaseLost)
            worker_metrics.lease_lost();
          on_done(message, true);
        });
  };

  consumer = std::make_unique<kafka::Consumer>(
      config.kafka, config.kafka.worker_group,
      std::vector<std::string>{config.kafka.topics.dispatch},
      [&](kafka::InMessage message) {
        asio::post(io, [&, m = std::move(message)]() mutable { handle(std::move(m)); });
      },
      [&](bool assigned, const std::vector<std::pair<std::string, int>>& partitions) {
        // Posted like the messages, so the io thread sees assignments and messages in the
        // order the consumer delivered them.
        asio::post(io, [&, assigned, partitions] {
          for (const auto& [topic, partition] : partitions) {
            if (assigned) {
              owned.insert({topic, partition});
            } else {
              owned.erase({topic, partition});
              offsets.forget({topic, partition});
            }
          }
        });
      });

  // Heartbeats: one statement extends every lease this worker holds and reports lost
  // leases and cancellations; between heartbeats a cheap read looks for cancellations, so
  // a cancelled task stops within cancel_poll_ms even in the middle of a model call.
  bool stopped = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        asio::steady_timer timer(io);
        const auto heartbeat = std::chrono::seconds(config.worker.heartbeat_s);
        auto next_heartbeat = std::chrono::steady_clock::now() + heartbeat;
        while (!stopped) {
          timer.expires_after(std::chrono::milliseconds(config.worker.cancel_poll_ms));
          boost::system::error_code ec;
          co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
          auto held = runner.held_leases();
          if (held.empty())
            continue;
          if (std::chrono::steady_clock::now() < next_heartbeat) {
            std::vector<std::string> ids;
            for (const auto& [task_id, attempt] : held)
              ids.push_back(task_id);
            auto cancelled =
                co_await db.run([&](pqxx::connection& c) { return pg::cancel_requested(c, ids); });
            if (cancelled.ok()) {
              for (const auto& task_id : cancelled.value())
                runner.cancel(task_id);
            }
            continue;
          }
          next_heartbeat = std::chrono::steady_clock::now() + heartbeat;
          auto extended = co_await db.run([&](pqxx::connection& c) {
            return pg::extend_leases(c, worker_id, held, config.worker.lease_s);
          });
          if (!extended.ok()) {
            log::warn("worker", "lease heartbeat failed: " + extended.error().message);
            continue;
          }
          const pg::LeaseCheck& check = extended.value();
          if (check.held.size() < held.size()) {
            // Those tasks were taken over: their runs stop now, without writing. Runs that
            // ended (or were writing their end) while the statement ran are not counted.
            std::set<std::string> still(check.held.begin(), check.held.end());
            int lost = 0;
            for (const auto& [task_id, attempt] : held) {
              if (!still.count(task_id) && runner.lease_lost(task_id, attempt))
                ++lost;
            }
            if (lost > 0)
              log::warn("worker", std::to_string(lost) + " leases were no longer ours");
          }
          for (const auto& task_id : check.cancelled)
            runner.cancel(task_id);
        }
      },
      asio::detached);

  // Drain: stop consuming and leave the group, let every run reach its next checkpoint and
  // hand its task back (or finish), within the grace period; then flush.
  // The group is left at once, not at exit: the scheduler dispatches a handed-back task
  // again right away, to its user's partition, and new work keeps arriving there; while this
  // worker held its partitions, all of that waited for the drain to end (up to the grace
  // period) and a rebalance after it. Leaving blocks (a round trip to the coordinator, at
  // most 10 s), so it runs on a thread of its own, joined before the consumer goes away
  // (a jthread: also when an exception unwinds this function).
  std::jthread leaving;
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (ec)
      return;
    draining = true;
    log::write("info", "worker", "draining: " + std::to_string(in_flight) + " tasks in flight");
    consumer->pause();
    leaving = std::jthread([&consumer] { consumer->stop(); });
    runner.drain();
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          asio::steady_timer timer(io);
          const auto until = std::chrono::steady_clock::now() +
                             std::chrono::seconds(config.worker.shutdown_grace_s);
          while ((in_flight > 0 || runner.removing_outbox_rows()) &&
                 std::chrono::steady_clock::now() < until) {
            timer.expires_after(std::chrono::milliseconds(20));
            boost::system::error_code wait_ec;
            co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, wait_ec));
          }
          // Runs still waiting on a model or tool call when the grace ran out: hand their
          // tasks back now (fenced by attempt, so a late write of theirs stores nothing),
          // rather than let the leases expire and count as lost attempts.
          if (auto held = runner.held_leases(); !held.empty()) {
            auto released = co_await db.run(
                [&](pqxx::connection& c) { return pg::release_tasks(c, worker_id, held); });
            log::write("warn", "worker",
                       "grace period over: handed back " +
                           std::to_string(released.ok() ? released.value() : 0) + " of " +
                           std::to_string(held.size()) + " running tasks" +
                           (released.ok() ? "" : " (" + released.error().message + ")"));
          }
          stopped = true;
          io.stop();
        },
        asio::detached);
  });

  consumer->start();
  log::write("info", "worker",
             "worker " + worker_id + " consuming " + config.kafka.topics.dispatch);
  // /metrics, /healthz, /readyz on their own port; consumer lag refreshed off the io thread.
  std::unique_ptr<OpsEndpoint> ops;
  if (config.metrics.port != 0) {
    ops = std::make_unique<OpsEndpoint>(
        io.get_executor(),
        OpsEndpointOptions{config.metrics.host, static_cast<std::uint16_t>(config.metrics.port),
                           std::chrono::seconds(config.metrics.refresh_interval_s)},
        registry,
        [&]() -> asio::awaitable<Readiness> {
          Readiness readiness;
          if (draining) {
            readiness.reason = "draining";
            co_return readiness;
          }
          auto ping = co_await db.run([](pqxx::connection& c) {
            pqxx::nontransaction tx(c);
            tx.exec1("SELECT 1");
            return true;
          });
          readiness.ready = ping.ok();
          if (!ping.ok())
            readiness.reason = "postgres unreachable: " + ping.error().message;
          co_return readiness;
        },
        [&] {
          for (const auto& [topic, lag] : consumer->lag(std::chrono::seconds(2)))
            worker_metrics.set_consumer_lag(topic, lag);
        });
    ops->start();
  }
  io.run();
  if (ops)
    ops->stop();
  const bool flushed = producer.flush(std::chrono::seconds(10));
  if (leaving.joinable())
    leaving.join();
  consumer->stop();
  // Postgres work still queued finishes before the runner and the clients it uses go away.
  db.join();
  const pg::WriteBatcher::Stats batches = writes.stats();
  log::write("info", "worker",
             "task writes " + std::to_string(batches.writes) + " in " +
                 std::to_string(batches.batches) + " commits (largest " +
                 std::to_string(batches.largest) + ")");
  const http::ModelClientCounters& calls = model.counters();
  log::write("info", "worker",
             "model calls " + std::to_string(calls.calls) + " (failed " +
                 std::to_string(calls.calls_failed) + "), HTTP attempts " +
                 std::to_string(calls.attempts) + ", retries " + std::to_string(calls.retries) +
                 ", failovers " + std::to_string(calls.failovers) + ", waits for room " +
                 std::to_string(calls.waits_for_room));
  log::write("info", "worker",
             "stopped with " + std::to_string(in_flight) + " tasks in flight" +
                 (in_flight > 0 ? " (their leases expire and recovery resumes them)" : "") +
                 (flushed ? "" : "; some produced messages were not confirmed"));
  return 0;
}

}  // namespace agentfleet::worker
