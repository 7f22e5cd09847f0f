// The Consumer's pause and resume across the group's rebalances, against librdkafka's mock
// cluster (the dev broker's engine), in process. The worker pauses its partitions at its
// in-flight limit and resumes below it; a rebalance may come in between at any time.
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/adapters/kafka/kafka.hpp"

namespace agentfleet::kafka {
namespace {

constexpr const char* kTopic = "dispatch";
using namespace std::chrono_literals;

// A one-broker mock cluster with one single-partition topic, owned by its own handle.
class MockCluster {
 public:
  MockCluster() {
    char errstr[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "0", errstr, sizeof(errstr));
    owner_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    cluster_ = rd_kafka_mock_cluster_new(owner_, 1);
    rd_kafka_mock_topic_create(cluster_, kTopic, 1, 1);
  }
  ~MockCluster() {
    rd_kafka_mock_cluster_destroy(cluster_);
    rd_kafka_destroy(owner_);
  }
  MockCluster(const MockCluster&) = delete;
  MockCluster& operator=(const MockCluster&) = delete;

  std::string bootstrap() const { return rd_kafka_mock_cluster_bootstraps(cluster_); }
  void set_down() { rd_kafka_mock_broker_set_down(cluster_, 1); }
  void set_up() { rd_kafka_mock_broker_set_up(cluster_, 1); }

 private:
  rd_kafka_t* owner_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
};

// What the consumer under test saw, for the test thread to wait on.
struct Seen {
  std::mutex mutex;
  std::condition_variable changed;
  int assignments = 0;
  int revocations = 0;
  int messages = 0;
  std::vector<std::string> values;  // of the messages, in the order they were read

  // A consumer's handlers that record here.
  Consumer::MessageHandler record_messages() {
    return [this](InMessage m) {
      std::lock_guard lock(mutex);
      values.push_back(std::move(m.value));
      ++messages;
      changed.notify_all();
    };
  }
  Consumer::RebalanceHandler record_rebalances() {
    return [this](bool assigned, const std::vector<std::pair<std::string, int>>&) {
      std::lock_guard lock(mutex);
      ++(assigned ? assignments : revocations);
      changed.notify_all();
    };
  }

  bool wait_for(const std::function<bool()>& done, std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, limit, done);
  }
};

config::KafkaConfig consumer_config(const MockCluster& cluster) {
  config::KafkaConfig config;
  config.bootstrap_servers = cluster.bootstrap();
  config.properties = {{"log_level", "0"}};
  // A short session, so that the broker's absence costs the consumer its assignment soon.
  config.consumer_properties = {{"session.timeout.ms", "6000"},
                                {"heartbeat.interval.ms", "500"},
                                {"fetch.wait.max.ms", "50"}};
  return config;
}

void produce_one(Producer& producer, const std::string& value) {
  std::vector<OutMessage> batch{OutMessage{kTopic, "k", value, {}}};
  for (const Status& s : producer.produce_and_wait(std::move(batch), 20s))
    ASSERT_TRUE(s.ok()) << s.error().message;
}

bool wait_until(const std::function<bool()>& done, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until)
      return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

TEST(KafkaConsumer, APartitionAssignedAfterAResumeWhileItHadNoneIsFetched) {
  MockCluster cluster;
  config::KafkaConfig config = consumer_config(cluster);
  Producer producer(config);
  Seen seen;
  Consumer consumer(config, "workers", {kTopic}, seen.record_messages(), seen.record_rebalances());
  consumer.start();
  ASSERT_TRUE(seen.wait_for([&] { return seen.assignments == 1; }, 60s)) << "never assigned";
  produce_one(producer, "first");
  ASSERT_TRUE(seen.wait_for([&] { return seen.messages == 1; }, 30s)) << "nothing fetched";

  // At its limit: paused, which librdkafka records on the partition.
  consumer.pause();
  ASSERT_TRUE(wait_until([&] { return consumer.paused(); }, 10s));

  // The broker goes away; the session times out and the assignment is lost.
  cluster.set_down();
  ASSERT_TRUE(seen.wait_for([&] { return seen.revocations >= 1; }, 60s))
      << "the assignment was not revoked";

  // Runs end while the consumer holds no partition: it resumes, with nothing to resume.
  consumer.resume();
  ASSERT_TRUE(wait_until([&] { return !consumer.paused(); }, 10s));

  // The broker is back and the group hands the partition to this consumer again: the
  // message sent now must be fetched, not held behind the pause of before the revoke.
  cluster.set_up();
  ASSERT_TRUE(seen.wait_for([&] { return seen.assignments >= 2; }, 60s)) << "never reassigned";
  produce_one(producer, "second");
  EXPECT_TRUE(seen.wait_for([&] { return seen.messages >= 2; }, 30s))
      << "the partition stayed paused after the new assignment";
  consumer.stop();
}

TEST(KafkaConsumer, APartitionReassignedWithNothingLeftToReadHasNoBacklog) {
  // The worker reports backlog() as its dispatch lag, and the scheduler sends a dispatch
  // again only once every worker reports none. A partition assigned anew (a rebalance) from
  // which nothing has been read since has no position: it starts at its committed offset,
  // and when that is its end, nothing is left (before: it counted as one unknown message
  // for as long as no new message came, holding back every lost dispatch of the fleet).
  MockCluster cluster;
  config::KafkaConfig config = consumer_config(cluster);
  Producer producer(config);
  Seen seen;
  std::unique_ptr<Consumer> consumer;
  consumer = std::make_unique<Consumer>(
      config, "workers", std::vector<std::string>{kTopic},
      [&](InMessage m) {
        consumer->commit(m.topic, m.partition, m.offset + 1);
        std::lock_guard lock(seen.mutex);
        ++seen.messages;
        seen.changed.notify_all();
      },
      seen.record_rebalances());
  consumer->start();
  ASSERT_TRUE(seen.wait_for([&] { return seen.assignments == 1; }, 60s)) << "never assigned";
  produce_one(producer, "first");
  ASSERT_TRUE(seen.wait_for([&] { return seen.messages == 1; }, 30s)) << "nothing fetched";
  EXPECT_TRUE(wait_until([&] { return consumer->backlog() == 0; }, 10s)) << "read and committed";

  // The broker goes away and comes back: the session times out, the partition is revoked
  // and assigned again, and no message arrives afterwards.
  cluster.set_down();
  ASSERT_TRUE(seen.wait_for([&] { return seen.revocations >= 1; }, 60s))
      << "the assignment was not revoked";
  cluster.set_up();
  ASSERT_TRUE(seen.wait_for([&] { return seen.assignments >= 2; }, 60s)) << "never reassigned";
  EXPECT_TRUE(wait_until([&] { return consumer->backlog() == 0; }, 20s))
      << "a reassigned partition with nothing left reports " << consumer->backlog();

  // A message sent now is counted until it is read, and read.
  produce_one(producer, "second");
  EXPECT_TRUE(seen.wait_for([&] { return seen.messages >= 2; }, 30s));
  EXPECT_TRUE(wait_until([&] { return consumer->backlog() == 0; }, 10s));
  consumer->stop();
}

TEST(KafkaConsumer, AnAssignmentStartsAtTheCommittedOffsetAndPausedWhenPausingIsWanted) {
  // The assignment reads the group's committed offsets itself and starts each partition at
  // its own (librdkafka drops a start that a pause overtakes: consumer_rebalance_cb). A
  // worker that is full when it joins must not fetch until it has room, and must then read
  // from where the group left off: neither what was read before nor nothing at all.
  MockCluster cluster;
  config::KafkaConfig config = consumer_config(cluster);
  Producer producer(config);
  {
    // An earlier member of the group read "old" and committed past it.
    produce_one(producer, "old");
    Seen earlier;
    std::unique_ptr<Consumer> first;
    first = std::make_unique<Consumer>(config, "workers", std::vector<std::string>{kTopic},
                                       [&](InMessage m) {
                                         first->commit(m.topic, m.partition, m.offset + 1);
                                         std::lock_guard lock(earlier.mutex);
                                         ++earlier.messages;
                                         earlier.changed.notify_all();
                                       });
    first->start();
    ASSERT_TRUE(earlier.wait_for([&] { return earlier.messages == 1; }, 60s)) << "never read";
    ASSERT_TRUE(wait_until([&] { return first->backlog() == 0; }, 10s)) << "not committed";
    first->stop();
  }
  produce_one(producer, "new");
  Seen seen;
  Consumer consumer(config, "workers", {kTopic}, seen.record_messages(), seen.record_rebalances());
  consumer.pause();  // full before it joins
  consumer.start();
  ASSERT_TRUE(seen.wait_for([&] { return seen.assignments == 1; }, 60s)) << "never assigned";
  EXPECT_FALSE(seen.wait_for([&] { return seen.messages > 0; }, 2s)) << "fetched while paused";
  consumer.resume();
  ASSERT_TRUE(seen.wait_for([&] { return seen.messages >= 1; }, 30s)) << "nothing fetched";
  {
    // One partition, read in order: had "old" been read again, it would have come first.
    std::lock_guard lock(seen.mutex);
    EXPECT_EQ(seen.values.front(), "new") << "from the committed offset";
  }
  consumer.stop();
}

TEST(KafkaConsumer, ALiveFeedWithNothingCommittedReadsOnlyWhatArrivesAfterItJoined) {
  // offset_reset "latest" (the dispatcher's feed of results and events): a partition the
  // group has committed nothing for starts at its end.
  MockCluster cluster;
  config::KafkaConfig config = consumer_config(cluster);
  Producer producer(config);
  produce_one(producer, "before");
  Seen seen;
  Consumer consumer(config, "feed", {kTopic}, seen.record_messages(), seen.record_rebalances(),
                    "latest");
  consumer.start();
  ASSERT_TRUE(seen.wait_for([&] { return seen.assignments == 1; }, 60s)) << "never assigned";
  // Where "the end" is gets resolved by a request of its own, so what is sent right after
  // the assignment may still count as before it: sent again until something arrives.
  for (int i = 0; i < 100 && !seen.wait_for([&] { return seen.messages >= 1; }, 300ms); ++i)
    produce_one(producer, "after");
  ASSERT_TRUE(seen.wait_for([&] { return seen.messages >= 1; }, 10s)) << "nothing fetched";
  {
    // One partition, read in order: had it started at the beginning, "before" came first.
    std::lock_guard lock(seen.mutex);
    EXPECT_EQ(seen.values.front(), "after");
  }
  consumer.stop();
}

}  // namespace
}  // namespace agentfleet::kafka
