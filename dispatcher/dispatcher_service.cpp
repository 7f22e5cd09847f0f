#include "dispatcher/dispatcher_service.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/adapters/kafka/kafka.hpp"
#include "core/adapters/log.hpp"
#include "core/adapters/metrics/db_pool_metrics.hpp"
#include "core/adapters/metrics/dispatcher_metrics.hpp"
#include "core/adapters/pg/db_pool.hpp"
#include "core/adapters/pg/outbox_relay.hpp"
#include "core/adapters/pg/scheduler_session.hpp"
#include "dispatcher/api.hpp"
#include "dispatcher/scheduler.hpp"
#include "dispatcher/submit_ingest.hpp"
#include "dispatcher/task_feed.hpp"

namespace agentfleet::dispatcher {

namespace asio = boost::asio;

namespace {
// The relay: its own thread and connection (see pg::OutboxRelay). It publishes the dispatch
// messages the scheduler hands over as soon as they arrive (their rows are removed together,
// those published within kGatherHanded by one statement: at 25 tasks/s a statement and a
// commit a second instead of one a task), and looks for due rows at once
// when this replica's scheduler or API has committed some; otherwise again after
// relay_interval_ms when its last pass published rows (more may be coming), and, when it found
// nothing due, once the earliest row falls due or after relay_idle_ms (at most
// Scheduler::kHandoffS), whichever comes first: the rows nothing here wakes it for (a worker's
// fallback, due as long after it was written; a stopped replica's) are then published when
// due, and an idle fleet's relay asks once in relay_idle_ms.
// Thread-safety: wake(), hand() and stop() from any thread; run() on the relay's thread.
class Relay {
 public:
  // Well inside the hand-off (the rows are due kHandoffS after they were written).
  static constexpr auto kGatherHanded =
      std::chrono::milliseconds(std::min(1000, Scheduler::kHandoffS * 250));

  Relay(const config::Config& config, kafka::Producer& producer,
        metrics::DispatcherMetrics& metrics)
      : config_(config),
        producer_(producer),
        metrics_(metrics),
        handed_bound_(20 * static_cast<std::size_t>(config.dispatcher.relay_batch)),
        idle_wait_(
            std::max(1, std::min(config.dispatcher.relay_idle_ms, 1000 * Scheduler::kHandoffS))) {}

  // Outbox rows due now were committed.
  void wake() {
    {
      std::lock_guard lock(mutex_);
      due_ = true;
    }
    wake_.notify_one();
  }

  // Dispatch messages the scheduler hands over as its pass commits. Bounded: what does not
  // fit is published from its row once that falls due (Scheduler::kHandoffS later).
  void hand(std::vector<ports::OutboxMessage> messages) {
    {
      std::lock_guard lock(mutex_);
      if (handed_.size() + messages.size() > handed_bound_)
        return;
      for (ports::OutboxMessage& m : messages)
        handed_.push_back(std::move(m));
    }
    wake_.notify_one();
  }

  // Ends a wait in run() once `stopping` is set.
  void stop() { wake_.notify_all(); }

  void run(const std::atomic<bool>& stopping) {
    pg::OutboxRelay outbox(
        config_.postgres.url,
        config_.postgres.statement_timeout_ms + config_.kafka.delivery_timeout_ms,
        config_.postgres.connect_timeout_s, kGatherHanded);
    const pg::OutboxRelay::Send send = [&](std::vector<ports::OutMessage> messages) {
      return producer_.produce_and_wait(
          std::move(messages), std::chrono::milliseconds(config_.kafka.delivery_timeout_ms));
    };
    int failures = 0;
    // When the due rows are next looked for (at once: woken for them, or after a failure).
    auto look_at = std::chrono::steady_clock::now();
    while (!stopping) {
      std::vector<ports::OutboxMessage> batch;
      {
        std::lock_guard lock(mutex_);
        batch.swap(handed_);
      }
      if (!batch.empty()) {
        auto sent = outbox.publish_handed(std::move(batch), send);
        if (sent.ok())
          count(sent.value());
        else
          log::write("warn", "dispatcher", "relay: " + sent.error().message);
      }
      remove_published(outbox, false);
      if (std::chrono::steady_clock::now() >= look_at)
        look_at = look_for_due(outbox, send, failures);
      // Handed messages wake it without a look for due rows: those wait for their own wake,
      // or for look_at.
      std::unique_lock lock(mutex_);
      wake_.wait_until(lock, std::min(look_at, outbox.removal_due()), [&] {
        return stopping.load() || (failures == 0 && (due_ || !handed_.empty()));
      });
      if (due_ && failures == 0)
        look_at = std::chrono::steady_clock::now();
      due_ = false;
    }
    remove_published(outbox, true);
  }

 private:
  void count(const pg::RelayedBatch& sent) {
    for (const auto& [topic, published] : sent.by_topic)
      metrics_.outbox_published(topic, published);
  }

  // The rows of the handed messages published, once gathered long enough (`all`: now).
  static void remove_published(pg::OutboxRelay& outbox, bool all) {
    auto removed = outbox.remove_published(std::chrono::steady_clock::now(), all);
    if (!removed.ok())
      log::write("warn", "dispatcher",
                 "relay: the rows of published dispatch messages stay; they go again once due: " +
                     removed.error().message);
  }

  // One batch of due rows published; when to look again.
  std::chrono::steady_clock::time_point look_for_due(pg::OutboxRelay& outbox,
                                                     const pg::OutboxRelay::Send& send,
                                                     int& failures) {
    auto sent = outbox.once(config_.dispatcher.relay_batch, config_.kafka.topics.dispatch, send);
    const auto now = std::chrono::steady_clock::now();
    if (!sent.ok()) {
      // Back off on a failing store, up to 2 s, so an outage is not a busy loop and the
      // relay is back within seconds of the store.
      log::write("warn", "dispatcher", "relay: " + sent.error().message);
      return now + std::chrono::milliseconds(std::min(
                       2000, config_.dispatcher.relay_interval_ms << std::min(++failures, 7)));
    }
    failures = 0;
    const pg::RelayedBatch& relayed = sent.value();
    count(relayed);
    if (relayed.published >= config_.dispatcher.relay_batch)
      return now;  // more are due
    if (relayed.published > 0)
      return now + std::chrono::milliseconds(config_.dispatcher.relay_interval_ms);
    if (!relayed.next_due_in)
      return now + idle_wait_;  // the outbox is empty
    // Rows the broker refused, or due rows another relay holds: again in a second.
    if (relayed.undelivered > 0 || *relayed.next_due_in <= std::chrono::milliseconds(0))
      return now + std::min(idle_wait_, kLookAgain);
    return now + std::min(idle_wait_, *relayed.next_due_in);
  }

  const config::Config& config_;
  kafka::Producer& producer_;
  metrics::DispatcherMetrics& metrics_;
  // After a look whose due rows were refused by the broker or held by another relay.
  static constexpr std::chrono::milliseconds kLookAgain{1000};
  const std::size_t handed_bound_;
  const std::chrono::milliseconds idle_wait_;  // relay_idle_ms, at most kHandoffS
  std::mutex mutex_;
  std::condition_variable wake_;
  bool due_ = false;                          // guarded by mutex_
  std::vector<ports::OutboxMessage> handed_;  // guarded by mutex_
};
}  // namespace

int run_dispatcher(const config::Config& config, ConsoleFiles console) {
  asio::io_context io(1);
  pg::DbPool db(config.postgres.url, config.postgres.pool_size,
                config.postgres.statement_timeout_ms, config.postgres.connect_timeout_s);
  kafka::Producer producer(config.kafka);
  metrics::MetricsRegistry registry;
  metrics::DispatcherMetrics metrics(registry, config);
  metrics::DbPoolMetrics db_metrics(registry);
  db.set_queue_wait_observer([&](double seconds) { db_metrics.queue_wait(seconds); });
  registry.add_render_hook([&] { db_metrics.set_pool(db.in_use(), db.size()); });

  // The relay (below) is woken by the scheduler and the API when they commit outbox rows,
  // and handed the scheduler's dispatch messages.
  Relay relay(config, producer, metrics);
  const auto wake_relay = [&] { relay.wake(); };
  const auto hand_to_relay = [&](std::vector<ports::OutboxMessage> messages) {
    relay.hand(std::move(messages));
  };
  // The scheduler (active on one replica at a time) and the feed of results and progress
  // events that frees slots, answers long polls and streams events.
  pg::SchedulerSession scheduler_session(pg::SchedulerSessionOptions{
      config.postgres.url, config.postgres.statement_timeout_ms, config.postgres.connect_timeout_s,
      config.dispatcher.leader_silence_s});
  Scheduler scheduler(config, scheduler_session, metrics, limits::SteadyClock::instance(),
                      wake_relay, hand_to_relay);
  std::atomic<bool> stopping{false};
  CompletionRate completions(std::chrono::seconds(60), std::chrono::seconds(10), 180,
                             CompletionRate::Clock::now());
  TaskFeed feed(io, config,
                [&](const std::string& user, const std::string& task, std::int64_t tokens) {
                  completions.record(CompletionRate::Clock::now());
                  scheduler.task_ended(user, task, tokens);
                });
  // The scheduler hears of new work from the commits that made it (NOTIFY agentfleet_work:
  // a submission, a moved batch, a limits change), on whichever replica they were made: a
  // wake-up of its own here too would cost every submission a second pass.
  pg::ApiStore store(db);
  Api api(config, store, metrics, feed, console, &completions, wake_relay);

  // Submissions from upstream services over Kafka, validated and stored like the API's.
  SubmitIngest ingest(io, config, db, producer, metrics);

  // Bind first: a port in use is a start-up error reported before any thread runs.
  const config::HttpListen& listen = config.dispatcher.http;
  http::ServerOptions api_options{listen.host, static_cast<std::uint16_t>(listen.port)};
  api_options.max_connections = static_cast<std::size_t>(listen.max_connections);
  api_options.max_connections_per_address =
      static_cast<std::size_t>(listen.max_connections_per_address);
  api_options.idle_timeout = std::chrono::seconds(listen.idle_timeout_s);
  api_options.header_timeout = std::chrono::seconds(listen.header_timeout_s);
  api_options.request_timeout = std::chrono::seconds(listen.request_timeout_s);
  http::Server server(io.get_executor(), api_options,
                      [&](http::Request& request) { return api.handle(request); });
  // Every request is decided on its head (caller, route, body limit) before its body is read.
  server.set_head_route([&](const http::Request& head) { return api.admit(head); },
                        [&](http::Exchange& exchange) { return api.stream(exchange); });
  server.start();
  log::write("info", "dispatcher",
             "dispatcher listening on http://" + config.dispatcher.http.host + ":" +
                 std::to_string(server.port()));
  // metrics.port adds a listener with only the operations routes, for scrapers and probes
  // that must not reach the API; the API port then answers only /healthz of them (without
  // it, the API port serves all three).
  std::unique_ptr<http::Server> ops_server;
  if (config.metrics.port != 0) {
    // Scrapers and probes send no body and hold few connections.
    http::ServerOptions ops_options{config.metrics.host,
                                    static_cast<std::uint16_t>(config.metrics.port)};
    ops_options.body_limit = 4 * 1024;
    ops_options.max_connections = 64;
    ops_options.max_connections_per_address = 16;
    ops_server = std::make_unique<http::Server>(
        io.get_executor(), ops_options,
        [&](http::Request& request) { return api.handle_ops(request); });
    ops_server->start();
    log::write("info", "dispatcher",
               "metrics on http://" + config.metrics.host + ":" +
                   std::to_string(ops_server->port()) + "/metrics");
  }
  ingest.start();

  feed.start();
  scheduler.start();

  // Whether commits wait for a synchronous standby: read (and logged) at start, then at
  // each readiness probe; its gauge shows the last reading.
  registry.add_render_hook([&] {
    if (auto replication = store.replication().last())
      db_metrics.set_synchronous_replication(replication->synchronous);
  });
  asio::co_spawn(io, api.count_gauges_now(), asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto read = co_await store.check_replication();
        if (!read.ok())
          log::warn("dispatcher",
                    "postgres: replication not read at start: " + read.error().message);
      },
      asio::detached);

  std::thread relay_thread([&] { relay.run(stopping); });

  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (ec)
      return;
    log::write("info", "dispatcher", "stopping");
    stopping = true;
    server.stop();
    if (ops_server)
      ops_server->stop();
    api.stop();
    feed.stop();
    io.stop();
  });
  io.run();
  stopping = true;
  scheduler.stop();
  feed.stop();
  ingest.stop();
  relay.stop();
  relay_thread.join();
  // Coroutines still suspended (long polls, event streams, uploads) see the stop now and
  // finish while everything they use is alive; a frame left over would otherwise be
  // destroyed with the io_context, after the objects it points to.
  io.restart();
  io.run_for(std::chrono::seconds(3));
  return 0;
}

}  // namespace agentfleet::dispatcher
