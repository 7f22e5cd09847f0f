// The Kafka side: `tail` of the results topic, `dlq list` and `dlq replay`. Consumers join
// a consumer group of their own (a random id) and never commit, so they leave no offsets
// behind and never take partitions from the fleet's groups.
#include <chrono>
#include <memory>

#include "core/adapters/kafka/kafka.hpp"
#include "core/adapters/kafka/topic_reader.hpp"
#include "core/codec/json_text.hpp"
#include "tools/agentctl/commands.hpp"
#include "tools/agentctl/dead_letters.hpp"
#include "tools/agentctl/json_fields.hpp"
#include "tools/agentctl/outcomes.hpp"
#include "tools/agentctl/views.hpp"

namespace agentfleet::agentctl {

namespace {
using Clock = std::chrono::steady_clock;

config::KafkaConfig kafka_config(const Settings& s) {
  config::KafkaConfig c;
  c.bootstrap_servers = s.kafka_bootstrap;
  c.client_id = "agentctl";
  // The secret ones were registered with the logger by load_settings.
  c.properties = s.kafka_properties;
  // Only agentctl's own failures are told (one line each); librdkafka's retries are not.
  c.properties.emplace("log_level", "2");
  // Quick group joins and fetches; a paused terminal may hold the poll thread.
  return kafka::reader_config(std::move(c));
}

std::string group_id(const std::string& what) {
  return "agentctl-" + what + "-" + new_uuid();
}

// A consumer of one topic of agentctl's own group feeding an inbox. Stopping (explicitly
// or on destruction) closes the inbox first. Not movable: the consumer's callbacks hold
// the inbox.
class Feed {
 public:
  Feed(const Settings& s, const std::string& what, const std::string& topic,
       const std::string& offset_reset) {
    try {
      consumer_ = std::make_unique<kafka::Consumer>(
          kafka_config(s), group_id(what), std::vector<std::string>{topic},
          [this](kafka::InMessage m) { inbox_.push(std::move(m)); },
          [this](bool assigned, const std::vector<std::pair<std::string, int>>&) {
            inbox_.on_rebalance(assigned);
          },
          offset_reset);
      consumer_->start();
    } catch (const config::ConfigError& e) {
      throw UsageError(std::string("Kafka: ") + e.what());
    }
  }
  ~Feed() { stop(); }
  Feed(const Feed&) = delete;
  Feed& operator=(const Feed&) = delete;

  // Ends polling and leaves the group; messages already in the inbox stay there.
  void stop() {
    inbox_.close();
    if (consumer_)
      consumer_->stop();
  }
  kafka::Inbox& inbox() { return inbox_; }
  kafka::Consumer& consumer() { return *consumer_; }

 private:
  kafka::Inbox inbox_;
  std::unique_ptr<kafka::Consumer> consumer_;
};

// Every dead letter matching `filter`, from the oldest to the end of the topic as it was
// when the reading caught up (at most `max_count`; 0: all). CommandFailure (7) when the
// end was not reached, or not known to be reached, within `timeout`.
std::vector<DeadLetter> read_dead_letters(const Settings& s, const DeadLetterFilter& filter,
                                          std::size_t max_count, std::chrono::seconds timeout) {
  std::vector<DeadLetter> letters;
  Status read = ok_status();
  try {
    read = kafka::read_dead_letters(
        kafka_config(s), group_id("dlq"), s.topics.dlq,
        [&](DeadLetter d) {
          if (filter.matches(d))
            letters.push_back(std::move(d));
          return max_count == 0 || letters.size() < max_count;
        },
        timeout);
  } catch (const config::ConfigError& e) {
    throw UsageError(std::string("Kafka: ") + e.what());
  }
  if (!read.ok())
    throw CommandFailure(kExitUnavailable, read.error().message + "; nothing was listed or sent");
  return letters;
}

DeadLetterFilter filter_of(const Invocation& inv) {
  DeadLetterFilter f;
  f.source_topic = inv.value("--topic-filter");
  f.reason_contains = inv.value("--reason");
  f.key = inv.value("--key");
  return f;
}
}  // namespace

int cmd_tail_results(Context& ctx) {
  const Invocation& inv = ctx.inv;
  const std::string user = inv.value("--user");
  const std::int64_t count = inv.integer("--count", 0, 1, 100000000);
  const std::int64_t idle_s = inv.integer("--timeout-s", 0, 1, 30 * 86400);
  const bool from_beginning = inv.has("--from-beginning");
  const std::string& topic = ctx.settings.topics.results;
  Feed feed(ctx.settings, "tail", topic, from_beginning ? "earliest" : "latest");
  const auto started = Clock::now();
  auto last = started;
  std::int64_t shown = 0;
  bool told_assigned = false;
  bool told_waiting = false;
  for (;;) {
    bool assigned = false;
    const auto batch = feed.inbox().take(std::chrono::milliseconds(200), assigned);
    if (assigned && !told_assigned) {
      note("following " + topic + " at " + ctx.settings.kafka_bootstrap +
           (from_beginning ? " from the oldest result" : " (new results)"));
      told_assigned = true;
    }
    if (!assigned && !told_waiting && Clock::now() - started > std::chrono::seconds(20)) {
      note("not joined to " + topic + " after 20 s; is Kafka reachable at " +
           ctx.settings.kafka_bootstrap + "?");
      told_waiting = true;
    }
    // --timeout-s counts the time without a result it prints. Reading through the topic from
    // the beginning is not idle, though: a --user filter may pass many results before its
    // first. Following new results, other users' do not keep it waiting.
    if (from_beginning && !batch.empty())
      last = Clock::now();
    for (const auto& m : batch) {
      rapidjson::Document doc;
      const bool parsed = codec::parse_json(doc, m.value);
      if (!user.empty() && (parsed ? json::str(doc, "user_id") : m.key) != user)
        continue;
      last = Clock::now();
      if (ctx.settings.json) {
        print(m.value + "\n");
      } else {
        const std::string line = format_result_event(m.value);
        print(line.empty() ? "(not a result event at " + std::to_string(m.partition) + ":" +
                                 std::to_string(m.offset) + ")\n"
                           : line);
      }
      if (count > 0 && ++shown >= count)
        return kExitOk;
    }
    if (idle_s > 0 && Clock::now() - last >= std::chrono::seconds(idle_s)) {
      feed.stop();
      const std::string never_joined = "never joined " + topic + " at " +
                                       ctx.settings.kafka_bootstrap + " (is Kafka reachable?)";
      if (count > 0) {
        throw CommandFailure(kExitUnavailable,
                             std::to_string(shown) + " of " + std::to_string(count) +
                                 " results, then nothing for " + std::to_string(idle_s) + " s" +
                                 (told_assigned ? std::string() : "; " + never_joined));
      }
      // Nothing arrived because nothing was read: not the quiet topic the caller waited for.
      if (!told_assigned)
        throw CommandFailure(kExitUnavailable,
                             "within " + std::to_string(idle_s) + " s: " + never_joined);
      return kExitOk;
    }
  }
}

int cmd_dlq_list(Context& ctx) {
  const Invocation& inv = ctx.inv;
  const auto count = static_cast<std::size_t>(inv.integer("--count", 0, 1, 10000000));
  const std::chrono::seconds timeout(inv.integer("--timeout-s", 30, 1, 3600));
  const auto letters = read_dead_letters(ctx.settings, filter_of(inv), count, timeout);
  std::string out;
  if (!ctx.settings.json && !letters.empty())
    out = dead_letters_header();
  for (const auto& d : letters)
    out += ctx.settings.json ? dead_letter_json(d) + "\n" : format_dead_letter(d);
  print(out);
  if (!ctx.settings.json)
    note(std::to_string(letters.size()) + " dead letters in " + ctx.settings.topics.dlq);
  return kExitOk;
}

int cmd_dlq_replay(Context& ctx) {
  const Invocation& inv = ctx.inv;
  DeadLetterFilter filter = filter_of(inv);
  for (const auto& text : inv.values("--offset")) {
    auto at = parse_partition_offset(text);
    if (!at)
      throw UsageError("--offset needs PARTITION:OFFSET such as 0:17, not '" + text + "'");
    filter.offsets.push_back(*at);
  }
  if (filter.offsets.empty() == !inv.has("--all"))
    throw UsageError("dlq replay needs --offset P:O (one or more) or --all, not both");
  const bool dry_run = inv.has("--dry-run");
  const std::chrono::seconds timeout(inv.integer("--timeout-s", 30, 1, 3600));
  const auto letters = read_dead_letters(ctx.settings, filter, 0, timeout);
  for (const auto& [partition, offset] : filter.offsets) {
    bool found = false;
    for (const auto& d : letters)
      found = found || (d.partition == partition && d.offset == offset);
    if (!found) {
      throw CommandFailure(kExitNotFound, "no dead letter at " + std::to_string(partition) + ":" +
                                              std::to_string(offset) + " in " +
                                              ctx.settings.topics.dlq +
                                              " (matching the filters); nothing was sent");
    }
  }
  std::vector<std::pair<const DeadLetter*, ReplayMessage>> replays;
  int unreplayable = 0;
  for (const auto& d : letters) {
    auto message = replay_of(d);
    if (!message) {
      note("cannot replay " + std::to_string(d.partition) + ":" + std::to_string(d.offset) +
           ": it has no dlq-source-topic header");
      ++unreplayable;
      continue;
    }
    replays.emplace_back(&d, std::move(*message));
  }
  std::vector<Status> sent(replays.size(), ok_status());
  if (!dry_run && !replays.empty()) {
    std::vector<ReplayMessage> out;
    for (const auto& [d, m] : replays)
      out.push_back(m);
    try {
      sent = kafka::send_replays(kafka_config(ctx.settings), out, timeout);
    } catch (const config::ConfigError& e) {
      throw UsageError(std::string("Kafka: ") + e.what());
    }
  }
  int failed = 0;
  for (std::size_t i = 0; i < replays.size(); ++i) {
    const auto& [d, m] = replays[i];
    if (!sent[i].ok()) {
      ++failed;
      note("sending " + std::to_string(d->partition) + ":" + std::to_string(d->offset) + " to " +
           m.topic + " failed: " + sent[i].error().message);
      continue;
    }
    if (ctx.settings.json) {
      print("{\"partition\":" + std::to_string(d->partition) +
            ",\"offset\":" + std::to_string(d->offset) + ",\"topic\":" + json::quoted(m.topic) +
            ",\"key\":" + json::quoted(codec::sanitize_text(m.key)) +
            ",\"dry_run\":" + (dry_run ? "true" : "false") + "}\n");
    } else {
      print(format_replay(*d, m, dry_run) + "\n");
    }
  }
  if (!ctx.settings.json) {
    note(std::to_string(replays.size() - static_cast<std::size_t>(failed)) +
         (dry_run ? " dead letters would be sent" : " dead letters sent") +
         (failed ? ", " + std::to_string(failed) + " failed" : std::string()));
  }
  if (failed > 0)
    return kExitUnavailable;
  return unreplayable > 0 ? kExitRejected : kExitOk;
}

}  // namespace agentfleet::agentctl
