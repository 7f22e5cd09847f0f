#include "dispatcher/dispatcher_service.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <thread>

#include "core/adapters/kafka/kafka.hpp"
#include "core/adapters/log.hpp"
#include "core/adapters/pg/db_pool.hpp"
#include "core/adapters/pg/task_store.hpp"
#include "dispatcher/api.hpp"

namespace agentfleet::dispatcher {

namespace asio = boost::asio;

namespace {
// Publishes due outbox rows and deletes the ones the broker confirmed, holding their row
// locks meanwhile. Runs on its own thread with its own connection: a batch is one
// transaction that spans the broker round trip. Returns rows published, or -1 on error.
int relay_once(pqxx::connection& c, kafka::Producer& producer, int batch, int timeout_ms) {
  pqxx::work tx(c);
  auto rows = tx.exec_params(
      "SELECT id, topic, message_key, payload, coalesce(traceparent, '') FROM outbox "
      "WHERE publish_after <= now() ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
      batch);
  if (rows.empty())
    return 0;
  std::vector<kafka::OutMessage> messages;
  std::vector<std::int64_t> ids;
  for (const auto& row : rows) {
    kafka::OutMessage m{
        row[1].as<std::string>(), row[2].as<std::string>(), row[3].as<std::string>(), {}};
    if (const auto tp = row[4].as<std::string>(); !tp.empty())
      m.headers.emplace_back("traceparent", tp);
    messages.push_back(std::move(m));
    ids.push_back(row[0].as<std::int64_t>());
  }
  auto results =
      producer.produce_and_wait(std::move(messages), std::chrono::milliseconds(timeout_ms));
  std::string delivered = "{";
  int count = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok())
      continue;
    if (count++)
      delivered += ",";
    delivered += std::to_string(ids[i]);
  }
  delivered += "}";
  if (count)
    tx.exec_params0("DELETE FROM outbox WHERE id = ANY($1::bigint[])", delivered);
  tx.commit();
  return count;
}
}  // namespace

int run_dispatcher(const config::Config& config) {
  asio::io_context io(1);
  pg::DbPool db(config.postgres.url, config.postgres.pool_size,
                config.postgres.statement_timeout_ms, config.postgres.connect_timeout_s);
  kafka::Producer producer(config.kafka);

  // The scheduler wakes on its interval, or at once when a task arrives.
  asio::steady_timer scheduler_wake(io);
  std::atomic<bool> stopping{false};
  Api api(config, db, [&] { asio::post(io, [&] { scheduler_wake.cancel(); }); });

  // Bind first: a port in use is a start-up error reported before any thread runs.
  http::Server server(io.get_executor(),
                      http::ServerOptions{config.dispatcher.http.host,
                                          static_cast<std::uint16_t>(config.dispatcher.http.port)},
                      [&](http::Request& request) { return api.handle(request); });
  server.start();
  log::write("info", "dispatcher",
             "dispatcher listening on http://" + config.dispatcher.http.host + ":" +
                 std::to_string(server.port()));
  std::printf("listening on http://%s:%u\n", config.dispatcher.http.host.c_str(), server.port());
  std::fflush(stdout);

  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        const pg::SchedulerPass pass{config.kafka.topics.dispatch, config.kafka.topics.results,
                                     config.dispatcher.scheduler_batch,
                                     config.dispatcher.redispatch_after_s,
                                     config.dispatcher.max_attempts};
        int failures = 0;
        while (!stopping) {
          auto admitted =
              co_await db.run([&](pqxx::connection& c) { return pg::schedule_queued(c, pass); });
          int wait_ms = config.dispatcher.scheduler_interval_ms;
          if (!admitted.ok()) {
            // Back off on a failing store, up to 5 s, so an outage is not a busy loop.
            wait_ms = std::min(5000, wait_ms << std::min(++failures, 7));
            log::write("warn", "dispatcher", "scheduler: " + admitted.error().message);
          } else {
            failures = 0;
            // A full batch means more may be waiting: go again without sleeping.
            if (admitted.value() >= config.dispatcher.scheduler_batch)
              continue;
          }
          scheduler_wake.expires_after(std::chrono::milliseconds(wait_ms));
          boost::system::error_code ec;
          co_await scheduler_wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        }
      },
      asio::detached);

  // The relay: its own thread and connection (see relay_once).
  std::mutex relay_mutex;
  std::condition_variable relay_stop;
  std::thread relay([&] {
    pg::DbPool relay_db(config.postgres.url, 1,
                        config.postgres.statement_timeout_ms + config.kafka.delivery_timeout_ms,
                        config.postgres.connect_timeout_s);
    int failures = 0;
    while (!stopping) {
      auto sent = relay_db.run_blocking([&](pqxx::connection& c) {
        return relay_once(c, producer, config.dispatcher.relay_batch,
                          config.kafka.delivery_timeout_ms);
      });
      int wait_ms = config.dispatcher.relay_interval_ms;
      if (!sent.ok()) {
        // Back off on a failing store, up to 5 s, so an outage is not a busy loop.
        wait_ms = std::min(5000, config.dispatcher.relay_interval_ms << std::min(++failures, 7));
        log::write("warn", "dispatcher", "relay: " + sent.error().message);
      } else {
        failures = 0;
        if (sent.value() >= config.dispatcher.relay_batch)
          continue;
      }
      std::unique_lock lock(relay_mutex);
      relay_stop.wait_for(lock, std::chrono::milliseconds(wait_ms),
                          [&] { return stopping.load(); });
    }
  });

  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (ec)
      return;
    log::write("info", "dispatcher", "stopping");
    stopping = true;
    server.stop();
    scheduler_wake.cancel();
    io.stop();
  });
  io.run();
  stopping = true;
  relay_stop.notify_all();
  relay.join();
  return 0;
}

}  // namespace agentfleet::dispatcher
