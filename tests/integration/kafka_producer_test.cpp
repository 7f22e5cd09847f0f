// The Producer's promise to its callers: a delivery reported as ok is in the partition's
// log, at an offset the broker returned. Run against librdkafka's mock cluster (the dev
// broker's engine), in process, with Produce requests failing while others are in flight.
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/adapters/kafka/kafka.hpp"

namespace agentfleet::kafka {
namespace {

constexpr const char* kTopic = "deliveries";

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
  void fail_next_produce(rd_kafka_resp_err_t error, int count) {
    std::vector<rd_kafka_resp_err_t> errors(static_cast<std::size_t>(count), error);
    rd_kafka_mock_push_request_errors_array(cluster_, 0 /* Produce */, errors.size(),
                                            errors.data());
  }

  // Every value in partition 0, read from the beginning to the end of the log.
  std::set<std::string> values() const {
    char errstr[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap().c_str(), errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "enable.partition.eof", "true", errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "group.id", "reader", errstr, sizeof(errstr));
    rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(parts, kTopic, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_assign(rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    std::set<std::string> out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 200);
      if (m == nullptr)
        continue;
      const bool eof = m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF;
      if (!m->err)
        out.emplace(static_cast<const char*>(m->payload), m->len);
      rd_kafka_message_destroy(m);
      if (eof)
        break;
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return out;
  }

 private:
  rd_kafka_t* owner_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
};

TEST(KafkaProducer, EveryDeliveryReportedOkIsInTheLogWhileProduceRequestsFail) {
  MockCluster cluster;
  config::KafkaConfig config;
  config.bootstrap_servers = cluster.bootstrap();
  config.delivery_timeout_ms = 20000;
  // One message a request and no wait: several requests in flight when one fails, the
  // case where librdkafka may acknowledge the failed one by a later one's success.
  config.properties = {{"linger.ms", "0"}, {"batch.num.messages", "1"}, {"log_level", "0"}};
  Producer producer(config);

  std::vector<OutMessage> messages;
  constexpr int kRounds = 30;
  constexpr int kPerRound = 20;
  std::vector<Status> statuses;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<OutMessage> batch;
    for (int i = 0; i < kPerRound; ++i) {
      batch.push_back(OutMessage{kTopic, "k", "m-" + std::to_string(round * kPerRound + i), {}});
    }
    cluster.fail_next_produce(RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, 1 + round % 3);
    for (Status& s : producer.produce_and_wait(std::move(batch), std::chrono::seconds(25)))
      statuses.push_back(std::move(s));
  }
  const std::set<std::string> in_log = cluster.values();

  int ok = 0;
  for (int i = 0; i < kRounds * kPerRound; ++i) {
    const Status& status = statuses[static_cast<std::size_t>(i)];
    if (!status.ok()) {
      // Not confirmed is not lost: the caller keeps its fallback and publishes again.
      EXPECT_TRUE(status.error().retryable()) << "m-" << i << ": " << status.error().message;
      continue;
    }
    ++ok;
    EXPECT_TRUE(in_log.count("m-" + std::to_string(i)))
        << "m-" << i << " was reported delivered but is not in the log";
  }
  // Failed requests are retried within the delivery timeout: most are confirmed.
  EXPECT_GT(ok, kRounds * kPerRound / 2);
}

}  // namespace
}  // namespace agentfleet::kafka
