#pragma once
// The submit topic: upstream services produce task submissions (the same JSON as the HTTP
// body, key = user_id) to kafka.topics.submit; the dispatcher validates each, stores it
// de-duplicated by (user_id, idempotency_key); its commit wakes the scheduler (NOTIFY). A
// submission without an idempotency key gets "kafka:<topic>:<partition>:<offset>", so a message
// read twice (after a restart or a rebalance) is still one task; a replayed dead letter gets the
// one of where it was first read (its dlq-origin header), so a letter replayed twice is one task
// too, and the replay is recorded with the task it made or found (pg::record_replay, which GET
// /v1/dead-letters shows). Bad messages (not JSON, schema, unknown model or tool, a key reused with
// another body) go to the dead-letter topic with the reason and their origin in headers; the
// partition moves on. A store outage is retried with backoff (at most 2 s apart) for up to ten
// minutes, so nothing is abandoned and the message is stored within seconds of the store's return;
// at most kMaxInFlight messages are under way at once (the consumer pauses beyond), so a flood or
// an outage waits in Kafka. A message still not stored is left uncommitted, so the group reads it
// again. Messages of one key (one user) are stored one after the other, in the order they were
// sent, so the first of two submissions with the same idempotency key is the task and the second
// the duplicate or the conflict; messages of different keys are stored concurrently.
//
// Lifecycle: start() after construction, stop() before the io_context goes away.
// Thread-safety: runs on the io_context's thread; librdkafka's poll thread only posts.

#include <boost/asio/io_context.hpp>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "core/adapters/kafka/kafka.hpp"
#include "core/adapters/metrics/dispatcher_metrics.hpp"
#include "core/adapters/pg/api_store.hpp"
#include "core/codec/task_codec.hpp"
#include "core/config/config.hpp"
#include "core/domain/offset_tracker.hpp"
#include "dispatcher/submission_rules.hpp"

namespace agentfleet::dispatcher {

class SubmitIngest {
 public:
  SubmitIngest(boost::asio::io_context& io, const config::Config& config, pg::DbPool& db,
               kafka::Producer& producer, metrics::DispatcherMetrics& metrics);
  void start();
  void stop();

 private:
  void handle(kafka::InMessage message);
  // Ingests the messages waiting under `key`, oldest first, until none is left.
  boost::asio::awaitable<void> ingest_in_order(std::string key);
  boost::asio::awaitable<void> ingest(kafka::InMessage message);
  // The pause before try `attempt` + 1 of a store write: 0.2 s, doubling to 2 s.
  boost::asio::awaitable<void> pause_before(int attempt);
  // `user_id` and `task_id` (an existing task the message conflicts with) for the log,
  // when known.
  boost::asio::awaitable<bool> dead_letter(const kafka::InMessage& message,
                                           const std::string& reason,
                                           const std::string& user_id = {},
                                           const std::string& task_id = {});
  void done(const kafka::InMessage& message, bool handled);

  boost::asio::io_context& io_;
  const config::Config& config_;
  pg::ApiStore store_;
  kafka::Producer& producer_;
  metrics::DispatcherMetrics& metrics_;
  SubmissionRules rules_;
  OffsetTracker offsets_;
  std::set<std::pair<std::string, int>> owned_;
  // Messages per key, the first one being ingested; a key is here while any are.
  std::map<std::string, std::deque<kafka::InMessage>> in_order_;
  bool stopping_ = false;
  static constexpr int kMaxInFlight = 1000;
  static constexpr int kStoreRetries = 300;  // about ten minutes at 2 s apart
  int in_flight_ = 0;
  bool paused_ = false;
  std::unique_ptr<kafka::Consumer> consumer_;
};

}  // namespace agentfleet::dispatcher
