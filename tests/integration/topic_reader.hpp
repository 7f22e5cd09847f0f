#pragma once
// A reader of one of the fleet's Kafka topics from where it ended when the reader was made:
// what a test caused there (dead letters, progress events), each message with its key,
// value and headers. For the integration tests; bounded polls only.

#include <librdkafka/rdkafka.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tests/integration/fleet_client.hpp"

namespace agentfleet::test {

struct Letter {
  std::string key;
  std::string value;
  std::map<std::string, std::string> headers;
};

// Reads a topic from where it ended when the reader was made: what the cases caused.
class TopicReader {
 public:
  explicit TopicReader(std::string topic) : topic_(std::move(topic)) {
    char errstr[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", env()["AGENTFLEET_KAFKA_BOOTSTRAP"].c_str(),
                      errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "group.id", ("topic-reader-" + run_tag()).c_str(), errstr,
                      sizeof(errstr));
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof(errstr));
    rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    EXPECT_NE(rk_, nullptr) << errstr;
    if (!rk_)
      return;
    const rd_kafka_metadata_t* metadata = nullptr;
    rd_kafka_topic_t* handle = rd_kafka_topic_new(rk_, topic_.c_str(), nullptr);
    EXPECT_EQ(rd_kafka_metadata(rk_, 0, handle, &metadata, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    for (int t = 0; metadata && t < metadata->topic_cnt; ++t) {
      for (int p = 0; p < metadata->topics[t].partition_cnt; ++p) {
        const int partition = metadata->topics[t].partitions[p].id;
        std::int64_t low = 0, high = 0;
        rd_kafka_query_watermark_offsets(rk_, topic_.c_str(), partition, &low, &high, 10000);
        next_[partition] = high;
      }
    }
    if (metadata)
      rd_kafka_metadata_destroy(metadata);
    rd_kafka_topic_destroy(handle);
    rd_kafka_topic_partition_list_t* assignment = rd_kafka_topic_partition_list_new(8);
    for (const auto& [partition, offset] : next_)
      rd_kafka_topic_partition_list_add(assignment, topic_.c_str(), partition)->offset = offset;
    rd_kafka_assign(rk_, assignment);
    rd_kafka_topic_partition_list_destroy(assignment);
  }
  ~TopicReader() {
    if (rk_) {
      rd_kafka_consumer_close(rk_);
      rd_kafka_destroy(rk_);
    }
  }
  TopicReader(const TopicReader&) = delete;
  TopicReader& operator=(const TopicReader&) = delete;

  // Polls until `enough` says the letters read so far suffice, or `limit` passed.
  const std::vector<Letter>& read_until(
      const std::function<bool(const std::vector<Letter>&)>& enough,
      std::chrono::seconds limit = std::chrono::seconds(45)) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (rk_ && !enough(letters_) && std::chrono::steady_clock::now() < until) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_, 200);
      if (!m)
        continue;
      if (!m->err) {
        Letter letter;
        if (m->key)
          letter.key.assign(static_cast<const char*>(m->key), m->key_len);
        if (m->payload)
          letter.value.assign(static_cast<const char*>(m->payload), m->len);
        rd_kafka_headers_t* headers = nullptr;
        if (rd_kafka_message_headers(m, &headers) == RD_KAFKA_RESP_ERR_NO_ERROR) {
          const char* name = nullptr;
          const void* value = nullptr;
          std::size_t size = 0;
          for (std::size_t i = 0; !rd_kafka_header_get_all(headers, i, &name, &value, &size); ++i)
            letter.headers[name].assign(value ? static_cast<const char*>(value) : "", size);
        }
        letters_.push_back(std::move(letter));
      }
      rd_kafka_message_destroy(m);
    }
    return letters_;
  }

 private:
  std::string topic_;
  rd_kafka_t* rk_ = nullptr;
  std::map<int, std::int64_t> next_;
  std::vector<Letter> letters_;
};

}  // namespace agentfleet::test
