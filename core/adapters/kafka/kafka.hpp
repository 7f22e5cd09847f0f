#pragma once
// librdkafka behind RAII holders. A Producer with delivery reports as callbacks, a
// blocking batch wait, or a coroutine; a Consumer polled on its own thread that hands
// each message to a callback and commits offsets only when told to. librdkafka's error
// codes are mapped to Error values in one function; no exception crosses a librdkafka
// callback.
//
// Thread-safety: every public member may be called from any thread. Callbacks run on
// the object's own poll thread and must be quick (post work elsewhere).

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/config/config.hpp"
#include "core/domain/error.hpp"
#include "core/ports/publisher.hpp"
#include "core/ports/subscription.hpp"

struct rd_kafka_s;
struct rd_kafka_conf_s;

namespace agentfleet::kafka {

using Headers = ports::Headers;
using OutMessage = ports::OutMessage;

using InMessage = ports::InMessage;
using ports::dead_letter;

Error map_kafka_error(int rd_kafka_resp_err, const std::string& context);

// Configuration shared by producers and consumers: bootstrap servers, client id and the
// pass-through properties. Throws config::ConfigError naming a property librdkafka refused.
struct ConfHolder;

class Producer {
 public:
  using DeliveryCallback = std::function<void(Status)>;

  explicit Producer(const config::KafkaConfig& config);
  ~Producer();  // flushes for up to 5 s, then stops
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

  // Enqueues; `on_delivery` runs exactly once on the poll thread with the outcome.
  void produce(OutMessage message, DeliveryCallback on_delivery);
  // Enqueues all and waits for every report or the timeout (then kTimeout for the rest).
  std::vector<Status> produce_and_wait(std::vector<OutMessage> messages,
                                       std::chrono::milliseconds timeout);
  // Coroutine form; resumes on the awaiting coroutine's executor.
  template <typename CompletionToken = boost::asio::use_awaitable_t<>>
  auto publish(OutMessage message, CompletionToken&& token = {}) {
    return boost::asio::async_initiate<CompletionToken, void(Status)>(
        [this](auto handler, OutMessage m) {
          auto executor = boost::asio::get_associated_executor(handler);
          auto shared = std::make_shared<decltype(handler)>(std::move(handler));
          produce(std::move(m), [executor, shared](Status status) {
            boost::asio::post(executor, [shared, status = std::move(status)]() mutable {
              (*shared)(std::move(status));
            });
          });
        },
        token, std::move(message));
  }
  bool flush(std::chrono::milliseconds timeout);

 private:
  void poll_loop();
  rd_kafka_s* rk_ = nullptr;
  std::atomic<bool> stop_{false};
  std::thread poller_;
};

// The Producer as the task runner's Publisher port.
class ProducerPublisher final : public ports::Publisher {
 public:
  explicit ProducerPublisher(Producer& producer) : producer_(producer) {}
  boost::asio::awaitable<Status> publish(OutMessage message) override {
    co_return co_await producer_.publish(std::move(message));
  }
  void post(OutMessage message) override {
    producer_.produce(std::move(message), [](Status) {});
  }

 private:
  Producer& producer_;
};

class Consumer {
 public:
  using MessageHandler = std::function<void(InMessage)>;
  // Partitions (topic, partition) assigned or revoked by a rebalance.
  using RebalanceHandler =
      std::function<void(bool assigned, const std::vector<std::pair<std::string, int>>&)>;

  // `offset_reset` applies where the group has no committed offset: "earliest" (the work
  // consumers: read everything) or "latest" (a live feed: only what arrives from now).
  Consumer(const config::KafkaConfig& config, std::string group_id, std::vector<std::string> topics,
           MessageHandler on_message, RebalanceHandler on_rebalance = {},
           std::string offset_reset = "earliest");
  ~Consumer();
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

  void start();
  // Stops polling and leaves the group (commits nothing more).
  void stop();
  // Commits `next_offset` (the offset of the next message to read) asynchronously.
  void commit(const std::string& topic, std::int32_t partition, std::int64_t next_offset);
  // Stops or restarts fetching on every assigned partition without leaving the group.
  void pause();
  void resume();
  // Whether fetching is paused now: pause() and resume() take effect on the poll thread.
  bool paused() const { return paused_; }
  // Messages not yet read per subscribed topic, summed over the assigned partitions: the
  // broker's high watermark minus this consumer's position (or its committed offset when
  // it has read nothing yet). Asks the broker, up to `timeout` per round trip: call it off
  // the I/O threads. A partition the broker does not answer for counts as 0.
  std::vector<std::pair<std::string, std::int64_t>> lag(std::chrono::milliseconds timeout);

  // The same measurement, saying how much of it is known: a reader that must know it has
  // reached the end needs every assigned partition answered.
  struct LagReport {
    std::vector<std::pair<std::string, std::int64_t>> by_topic;  // as lag()
    int assigned = 0;    // partitions assigned to this consumer
    int unmeasured = 0;  // of those, the ones the broker did not answer for
    // Nothing left to read, and that is known: partitions are assigned, every one answered
    // and none has a message left.
    bool caught_up() const;
  };
  LagReport measure_lag(std::chrono::milliseconds timeout);
  // Messages not yet read on the assigned partitions, from the watermarks the last fetches
  // brought (no round trip; a partition not fetched yet counts 1).
  std::int64_t backlog() const;

 private:
  void poll_loop();
  friend void consumer_rebalance_cb(rd_kafka_s*, int, void*, void*);
  rd_kafka_s* rk_ = nullptr;
  std::vector<std::string> topics_;
  MessageHandler on_message_;
  RebalanceHandler on_rebalance_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> paused_{false};
  std::atomic<bool> want_pause_{false};
  // The committed offsets of the partitions assigned last, read by the assignment itself
  // (or, when that read failed, on the poll thread after it: learn_starts_): where a
  // partition with no position yet (nothing read from it since the assignment) starts, so
  // that backlog() knows it has nothing left instead of counting it as one unknown message
  // for as long as no message arrives.
  std::atomic<bool> learn_starts_{false};
  // Where a partition the group has committed nothing for starts (auto.offset.reset), as
  // a librdkafka logical offset.
  std::int64_t reset_offset_ = 0;
  // How long an assignment waits for its committed offsets (see consumer_rebalance_cb).
  static constexpr int kCommittedTimeoutMs = 5000;
  int start_tries_ = 0;  // of the assignment's committed offsets (poll thread only)
  mutable std::mutex starts_mutex_;
  std::map<std::pair<std::string, int>, std::int64_t> starts_;  // guarded by starts_mutex_
  std::thread poller_;
};

// A Consumer as the worker's Subscription port: created (and subscribed) by start().
class ConsumerSubscription final : public ports::Subscription {
 public:
  ConsumerSubscription(const config::KafkaConfig& config, std::string group_id,
                       std::vector<std::string> topics);
  ~ConsumerSubscription() override;

  void start(MessageHandler on_message, RebalanceHandler on_rebalance) override;
  void pause() override {
    if (consumer_)
      consumer_->pause();
  }
  void resume() override {
    if (consumer_)
      consumer_->resume();
  }
  void commit(const std::string& topic, std::int32_t partition, std::int64_t next_offset) override {
    if (consumer_)
      consumer_->commit(topic, partition, next_offset);
  }
  void stop() override {
    if (consumer_)
      consumer_->stop();
  }
  std::int64_t backlog() const override { return consumer_ ? consumer_->backlog() : 0; }
  // The consumer itself once start() has returned, for its lag figures; null before. Safe
  // to call from another thread (the ops endpoint's refresh): the pointer is published
  // only after the consumer is built.
  Consumer* consumer() { return published_.load(std::memory_order_acquire); }

 private:
  const config::KafkaConfig& config_;
  std::string group_id_;
  std::vector<std::string> topics_;
  std::unique_ptr<Consumer> consumer_;
  std::atomic<Consumer*> published_{nullptr};
};

}  // namespace agentfleet::kafka
