#include "core/adapters/kafka/topic_reader.hpp"

#include "core/adapters/kafka/kafka.hpp"

namespace agentfleet::kafka {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

void Inbox::push(InMessage m) {
  std::unique_lock lock(mutex_);
  room_.wait(lock, [&] { return messages_.size() < kCapacity || closed_; });
  messages_.push_back(std::move(m));
  changed_.notify_all();
}

void Inbox::on_rebalance(bool now_assigned) {
  std::lock_guard lock(mutex_);
  assigned_ = now_assigned;
  changed_.notify_all();
}

std::deque<InMessage> Inbox::take(std::chrono::milliseconds wait, bool& now_assigned) {
  std::deque<InMessage> taken;
  {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, wait, [&] { return !messages_.empty(); });
    taken.swap(messages_);
    now_assigned = assigned_;
  }
  room_.notify_all();
  return taken;
}

void Inbox::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  room_.notify_all();
}

config::KafkaConfig reader_config(config::KafkaConfig c) {
  for (const auto& [name, value] :
       {std::pair<const char*, const char*>{"session.timeout.ms", "6000"},
        {"heartbeat.interval.ms", "1000"},
        {"fetch.wait.max.ms", "100"},
        {"max.poll.interval.ms", "86400000"}}) {
    if (!c.properties.count(name) && !c.consumer_properties.count(name))
      c.consumer_properties.emplace(name, value);
  }
  return c;
}

Status read_dead_letters(const config::KafkaConfig& config, const std::string& group_id,
                         const std::string& topic,
                         const std::function<bool(codec::DeadLetter)>& on_letter,
                         std::chrono::milliseconds timeout, const std::atomic<bool>* stop) {
  Inbox inbox;
  Consumer consumer(
      reader_config(config), group_id, std::vector<std::string>{topic},
      [&inbox](InMessage m) { inbox.push(std::move(m)); },
      [&inbox](bool assigned, const std::vector<std::pair<std::string, int>>&) {
        inbox.on_rebalance(assigned);
      },
      "earliest");
  // Stops polling before the inbox goes, whichever way this returns.
  struct Stop {
    Inbox& inbox;
    Consumer& consumer;
    ~Stop() {
      inbox.close();
      consumer.stop();
    }
  } stopper{inbox, consumer};
  consumer.start();

  const auto deadline = Clock::now() + timeout;
  const auto seconds = std::to_string(
      std::chrono::duration_cast<std::chrono::seconds>(timeout + std::chrono::milliseconds(999))
          .count());
  bool assigned = false;
  bool wanted_more = true;
  const auto stopped = [stop] { return stop != nullptr && stop->load(); };
  const Error stopped_error{ErrorKind::kCancelled,
                            "the read of the dead-letter topic " + topic + " was stopped"};
  auto take = [&](std::chrono::milliseconds wait) {
    for (auto& m : inbox.take(wait, assigned)) {
      if (!wanted_more)
        break;
      wanted_more = on_letter(codec::read_dead_letter(m.partition, m.offset, std::move(m.key),
                                                      std::move(m.value), std::move(m.headers)));
    }
  };
  while (!assigned) {
    if (stopped())
      return stopped_error;
    if (Clock::now() >= deadline) {
      return Error{ErrorKind::kTimeout, "could not join the dead-letter topic " + topic + " at " +
                                            config.bootstrap_servers + " within " + seconds +
                                            " s (is Kafka reachable?)"};
    }
    take(std::chrono::milliseconds(200));
  }
  int caught_up = 0;
  Consumer::LagReport lag;
  while (caught_up < 2 && wanted_more) {
    if (stopped())
      return stopped_error;
    if (Clock::now() >= deadline) {
      std::int64_t left = 0;
      for (const auto& [t, n] : lag.by_topic)
        left += n;
      const std::string why = lag.assigned == 0 ? "no partition of it is assigned"
                              : lag.unmeasured > 0
                                  ? "the broker did not say how far " +
                                        std::to_string(lag.unmeasured) + " of its " +
                                        std::to_string(lag.assigned) + " partitions go"
                                  : std::to_string(left) + " messages were left";
      return Error{ErrorKind::kTimeout,
                   "the dead-letter topic " + topic + " at " + config.bootstrap_servers +
                       " was not read to its end within " + seconds + " s (" + why + ")"};
    }
    take(std::chrono::milliseconds(200));
    lag = consumer.measure_lag(std::chrono::seconds(2));
    caught_up = lag.caught_up() ? caught_up + 1 : 0;
    take(std::chrono::milliseconds(0));
  }
  // The poll thread has handed over everything it read (close() first: a full inbox would
  // hold it).
  inbox.close();
  consumer.stop();
  take(std::chrono::milliseconds(0));
  return ok_status();
}

std::vector<Status> send_replays(const config::KafkaConfig& config,
                                 const std::vector<codec::ReplayMessage>& messages,
                                 std::chrono::milliseconds timeout) {
  if (messages.empty())
    return {};
  std::vector<OutMessage> out;
  out.reserve(messages.size());
  for (const auto& m : messages)
    out.push_back(OutMessage{m.topic, m.key, m.value, m.headers});
  Producer producer(config);
  return producer.produce_and_wait(std::move(out), timeout);
}

}  // namespace agentfleet::kafka
