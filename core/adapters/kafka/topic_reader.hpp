#pragma once
// Short-lived readers of a topic outside the fleet's groups: `agentctl tail` and `dlq`,
// and the dispatcher's /v1/dead-letters (reading the dead-letter topic whole, and sending
// replays). A reader joins a consumer group of its own (the
// caller's `group_id`, a fresh one per read) and never commits, so it leaves no offsets
// behind and never takes partitions from the fleet's groups. Messages wait for the caller
// in an Inbox: a slow caller holds the consumer's poll thread, not memory. Blocking: call
// it off the I/O threads.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "core/codec/dead_letter.hpp"
#include "core/config/config.hpp"
#include "core/domain/error.hpp"
#include "core/ports/subscription.hpp"

namespace agentfleet::kafka {

// Messages handed over by a consumer's poll thread (push, on_rebalance) to a reader (take),
// at most kCapacity at a time: a full inbox holds the poll thread until the reader takes
// some, so a slow reader (a paused terminal, a long topic) bounds the memory. close()
// releases a held poll thread for good, so stopping the consumer never waits on a reader
// that is gone; close it before stopping the consumer. Thread-safe.
class Inbox {
 public:
  static constexpr std::size_t kCapacity = 10000;

  void push(ports::InMessage m);
  void on_rebalance(bool now_assigned);
  // Every message waiting (after waiting up to `wait` for one); `now_assigned`: whether
  // partitions are assigned now.
  std::deque<ports::InMessage> take(std::chrono::milliseconds wait, bool& now_assigned);
  void close();

 private:
  std::mutex mutex_;
  std::condition_variable changed_;  // messages arrived, or the assignment changed
  std::condition_variable room_;     // messages taken, or closed
  std::deque<ports::InMessage> messages_;
  bool assigned_ = false;
  bool closed_ = false;
};

// `config` with the properties a short-lived reader wants where the caller set none: quick
// group joins (the minimum session a broker allows by default) and fetches, and a poll
// interval long enough for a reader whose caller is slow (the group is the reader's alone,
// so a held poll thread must not count as a consumer gone).
config::KafkaConfig reader_config(config::KafkaConfig config);

// Hands every dead letter of `topic`, from the oldest to the end of the topic as it was when
// the reading caught up, to `on_letter` in order; `on_letter` returns false to stop early.
// The end is known to be reached when the broker says, twice in a row and for every
// assigned partition, that nothing is left. kTimeout with the reason when the group was
// not joined, or the end not known to be reached, within `timeout`; kCancelled soon after
// `*stop` turns true (checked every 200 ms; null: never); a config::ConfigError escapes
// when librdkafka refuses a property.
Status read_dead_letters(const config::KafkaConfig& config, const std::string& group_id,
                         const std::string& topic,
                         const std::function<bool(codec::DeadLetter)>& on_letter,
                         std::chrono::milliseconds timeout,
                         const std::atomic<bool>* stop = nullptr);

// Sends `messages` and waits up to `timeout` for each delivery: one Status per message, in
// order.
std::vector<Status> send_replays(const config::KafkaConfig& config,
                                 const std::vector<codec::ReplayMessage>& messages,
                                 std::chrono::milliseconds timeout);

}  // namespace agentfleet::kafka
