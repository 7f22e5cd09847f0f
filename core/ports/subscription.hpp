#pragma once
// Port: a consumer-group subscription to the work topic (Kafka in production:
// adapters/kafka). Messages and partition assignments arrive through callbacks on the
// subscription's own thread (post them elsewhere); offsets are committed only when told.
// Tests fake it.
//
// Thread-safety: every member may be called from any thread.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/ports/publisher.hpp"

namespace agentfleet::ports {

struct InMessage {
  std::string topic;
  std::int32_t partition = 0;
  std::int64_t offset = 0;
  std::string key;
  std::string value;
  Headers headers;
};

// `message` as a dead letter for `dlq_topic`: the same key, value and headers, plus
// dlq-reason and where it came from (dlq-source-topic, -partition, -offset).
inline OutMessage dead_letter(const InMessage& message, const std::string& dlq_topic,
                              const std::string& reason) {
  OutMessage letter{dlq_topic, message.key, message.value, message.headers};
  letter.headers.emplace_back("dlq-reason", reason);
  letter.headers.emplace_back("dlq-source-topic", message.topic);
  letter.headers.emplace_back("dlq-source-partition", std::to_string(message.partition));
  letter.headers.emplace_back("dlq-source-offset", std::to_string(message.offset));
  return letter;
}

class Subscription {
 public:
  using MessageHandler = std::function<void(InMessage)>;
  // Partitions (topic, partition) assigned or revoked by a rebalance.
  using RebalanceHandler =
      std::function<void(bool assigned, const std::vector<std::pair<std::string, int>>&)>;

  virtual ~Subscription() = default;
  virtual void start(MessageHandler on_message, RebalanceHandler on_rebalance) = 0;
  // Stops fetching on every assigned partition without leaving the group, and again.
  virtual void pause() = 0;
  virtual void resume() = 0;
  // Commits `next_offset` (the offset of the next message to read), asynchronously.
  virtual void commit(const std::string& topic, std::int32_t partition,
                      std::int64_t next_offset) = 0;
  // Leaves the group and stops delivering (blocks for a round trip; call it off the io
  // thread). Idempotent.
  virtual void stop() = 0;
  // Messages not yet read on the assigned partitions, from what the subscription already
  // knows (no round trip): what a worker reports as its dispatch lag.
  virtual std::int64_t backlog() const = 0;
};

}  // namespace agentfleet::ports
