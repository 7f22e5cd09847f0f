#include "core/adapters/kafka/kafka.hpp"

#include <librdkafka/rdkafka.h>

#include "core/adapters/log.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string_view>

namespace agentfleet::kafka {

Error map_kafka_error(int code, const std::string& context) {
  const auto err = static_cast<rd_kafka_resp_err_t>(code);
  std::string message = context + ": " + rd_kafka_err2str(err);
  switch (err) {
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
      return Error{ErrorKind::kTimeout, message};
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
      return Error{ErrorKind::kInvalid, message};
    case RD_KAFKA_RESP_ERR__FATAL:
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
      return Error{ErrorKind::kFatal, message};
    default:
      return Error{ErrorKind::kTransient, message};
  }
}

namespace {
void set_or_throw(rd_kafka_conf_t* conf, const std::string& name, const std::string& value) {
  char errstr[512];
  if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), errstr, sizeof(errstr)) !=
      RD_KAFKA_CONF_OK) {
    rd_kafka_conf_destroy(conf);
    throw config::ConfigError("kafka property " + name + ": " + errstr);
  }
}

rd_kafka_conf_t* base_conf(const config::KafkaConfig& config) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  set_or_throw(conf, "bootstrap.servers", config.bootstrap_servers);
  set_or_throw(conf, "client.id", config.client_id);
  for (const auto& [name, value] : config.properties)
    set_or_throw(conf, name, value);
  return conf;
}

rd_kafka_headers_t* make_headers(const Headers& headers) {
  if (headers.empty())
    return nullptr;
  rd_kafka_headers_t* out = rd_kafka_headers_new(headers.size());
  for (const auto& [name, value] : headers) {
    rd_kafka_header_add(out, name.data(), static_cast<ssize_t>(name.size()), value.data(),
                        static_cast<ssize_t>(value.size()));
  }
  return out;
}

struct Delivery {
  Producer::DeliveryCallback callback;
};

void delivery_report(rd_kafka_t*, const rd_kafka_message_t* message, void*) {
  std::unique_ptr<Delivery> delivery(static_cast<Delivery*>(message->_private));
  if (!delivery)
    return;
  Status status = message->err ? Status(map_kafka_error(message->err, "delivery")) : ok_status();
  if (!message->err && message->offset < 0) {
    // Success without an offset: librdkafka's idempotent producer counts a failed request's
    // messages as written when a later request to the partition succeeds, trusting the
    // broker to refuse sequences out of order. The dev broker (librdkafka's mock cluster)
    // does not refuse them, so such a message may be missing from the log. Callers keep
    // their fallback (an outbox row, an uncommitted offset) and publish again; with a real
    // broker that is an identical duplicate, which readers de-duplicate.
    const std::string where = std::string(rd_kafka_topic_name(message->rkt)) + " [" +
                              std::to_string(message->partition) + "]";
    log::write("warn", "kafka",
               "delivery to " + where + " acknowledged without an offset: not confirmed");
    status = Error{ErrorKind::kTransient,
                   "delivery to " + where +
                       ": acknowledged without an offset (after a failed request), not confirmed"};
  }
  try {
    delivery->callback(std::move(status));
  } catch (...) {
    // A callback must not throw into librdkafka; there is nobody left to tell.
  }
}

// librdkafka's own lines (syslog levels; debug ones only when the `debug` property asks),
// from its threads, as JSON lines like every other; never its default stderr printer.
void log_cb(const rd_kafka_t* rk, int level, const char* facility, const char* buf) {
  const char* severity = level <= 3 ? "error" : level == 4 ? "warn" : level <= 6 ? "info" : "debug";
  log::write(severity, "kafka", buf,
             {{"facility", facility}, {"client", rk != nullptr ? rd_kafka_name(rk) : ""}});
}
}  // namespace

Producer::Producer(const config::KafkaConfig& config) {
  rd_kafka_conf_t* conf = base_conf(config);
  set_or_throw(conf, "acks", "all");
  set_or_throw(conf, "enable.idempotence", "true");
  set_or_throw(conf, "linger.ms", "2");
  set_or_throw(conf, "message.timeout.ms", std::to_string(config.delivery_timeout_ms));
  rd_kafka_conf_set_dr_msg_cb(conf, delivery_report);
  rd_kafka_conf_set_log_cb(conf, log_cb);
  char errstr[512];
  rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
  if (!rk_) {
    rd_kafka_conf_destroy(conf);
    throw config::ConfigError(std::string("kafka producer: ") + errstr);
  }
  poller_ = std::thread([this] { poll_loop(); });
}

Producer::~Producer() {
  flush(std::chrono::seconds(5));
  stop_ = true;
  if (poller_.joinable())
    poller_.join();
  // Reports still pending are delivered (as failures) by rd_kafka_destroy's purge.
  rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  rd_kafka_poll(rk_, 0);
  rd_kafka_destroy(rk_);
}

void Producer::poll_loop() {
  while (!stop_)
    rd_kafka_poll(rk_, 100);
}

void Producer::produce(OutMessage message, DeliveryCallback on_delivery) {
  auto delivery = std::make_unique<Delivery>(Delivery{std::move(on_delivery)});
  rd_kafka_headers_t* headers = make_headers(message.headers);
  const rd_kafka_resp_err_t err =
      rd_kafka_producev(rk_, RD_KAFKA_V_TOPIC(message.topic.c_str()),
                        RD_KAFKA_V_KEY(message.key.data(), message.key.size()),
                        RD_KAFKA_V_VALUE(message.value.data(), message.value.size()),
                        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(headers),
                        RD_KAFKA_V_OPAQUE(delivery.get()), RD_KAFKA_V_END);
  if (err) {
    if (headers)
      rd_kafka_headers_destroy(headers);
    delivery->callback(map_kafka_error(err, "produce to " + message.topic));
    return;
  }
  delivery.release();  // owned by the delivery report now
}

std::vector<Status> Producer::produce_and_wait(std::vector<OutMessage> messages,
                                               std::chrono::milliseconds timeout) {
  struct Wait {
    std::mutex mutex;
    std::condition_variable done;
    std::vector<std::optional<Status>> results;
    std::size_t pending = 0;
  };
  auto wait = std::make_shared<Wait>();
  wait->results.resize(messages.size());
  wait->pending = messages.size();
  for (std::size_t i = 0; i < messages.size(); ++i) {
    produce(std::move(messages[i]), [wait, i](Status status) {
      std::lock_guard lock(wait->mutex);
      wait->results[i] = std::move(status);
      if (--wait->pending == 0)
        wait->done.notify_all();
    });
  }
  std::unique_lock lock(wait->mutex);
  wait->done.wait_for(lock, timeout, [&] { return wait->pending == 0; });
  std::vector<Status> out;
  out.reserve(wait->results.size());
  for (auto& result : wait->results) {
    out.push_back(result ? *result
                         : Status(Error{ErrorKind::kTimeout, "delivery not confirmed in time"}));
  }
  return out;
}

bool Producer::flush(std::chrono::milliseconds timeout) {
  return rd_kafka_flush(rk_, static_cast<int>(timeout.count())) == RD_KAFKA_RESP_ERR_NO_ERROR;
}

void consumer_rebalance_cb(rd_kafka_t* rk, int err, void* partitions_ptr, void* opaque) {
  auto* self = static_cast<Consumer*>(opaque);
  auto* partitions = static_cast<rd_kafka_topic_partition_list_t*>(partitions_ptr);
  std::vector<std::pair<std::string, int>> list;
  for (int i = 0; i < partitions->cnt; ++i) {
    list.emplace_back(partitions->elems[i].topic, partitions->elems[i].partition);
  }
  const bool assigned = err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS;
  {
    std::lock_guard lock(self->starts_mutex_);
    self->starts_.clear();
  }
  if (assigned) {
    // librdkafka (2.0.2, and later versions alike) starts a partition assigned without an
    // offset only once its committed offset has been fetched, after rd_kafka_assign has
    // returned, and takes the start's version number before it queues it. A pause or resume
    // of the partition whose version is taken in between (ours, below or from the poll loop)
    // makes the start "outdated": it is dropped, nothing starts it again, and the partition
    // never fetches (confluentinc/librdkafka#2190, #5591; in a CI run 360 dispatches of one
    // partition waited behind a worker for ten minutes). So the committed offsets are
    // fetched here and the partitions assigned at them, at the reset policy's end where
    // none is committed: their starts are queued inside rd_kafka_assign, before any pause.
    const bool known = rd_kafka_committed(rk, partitions, Consumer::kCommittedTimeoutMs) ==
                       RD_KAFKA_RESP_ERR_NO_ERROR;
    {
      std::lock_guard lock(self->starts_mutex_);
      for (int i = 0; i < partitions->cnt; ++i) {
        auto& p = partitions->elems[i];
        if (known && p.err == RD_KAFKA_RESP_ERR_NO_ERROR && p.offset >= 0)
          self->starts_[{p.topic, p.partition}] = p.offset;
        else if (known && p.err == RD_KAFKA_RESP_ERR_NO_ERROR)
          p.offset = self->reset_offset_;  // nothing committed
        else
          p.offset = RD_KAFKA_OFFSET_INVALID;  // unknown: librdkafka asks again itself
      }
    }
    if (!known)
      log::write("warn", "kafka", "the assignment's committed offsets were not known in time");
    self->learn_starts_ = !known;
    rd_kafka_assign(rk, partitions);
    // Paused now when pausing is wanted; never resumed here: a resume takes a version number
    // too, and the pause flag a partition kept from before its revoke was cleared then.
    const bool pause = self->want_pause_;
    if (pause)
      rd_kafka_pause_partitions(rk, partitions);
    self->paused_ = pause;
  } else {
    // librdkafka keeps a partition's pause flag across a revoke and a new assignment: a
    // partition paused before it was revoked would come back paused, even when the consumer
    // resumed while it held no partition (and so resumed none). It is cleared here, while the
    // partitions are still started (no start to race with), and set again on assignment
    // when pausing is wanted then.
    self->learn_starts_ = false;
    rd_kafka_resume_partitions(rk, partitions);
    rd_kafka_assign(rk, nullptr);
  }
  if (self->on_rebalance_) {
    try {
      self->on_rebalance_(assigned, list);
    } catch (...) {
    }
  }
}

namespace {
// Commits are asynchronous; a failed one is retried by the next commit of the partition,
// but it must not go unseen.
void commit_report(rd_kafka_t*, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t* offsets,
                   void*) {
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR || err == RD_KAFKA_RESP_ERR__NO_OFFSET)
    return;
  std::string where;
  for (int i = 0; offsets && i < offsets->cnt; ++i) {
    where += std::string(i ? ", " : "") + offsets->elems[i].topic + "/" +
             std::to_string(offsets->elems[i].partition);
  }
  log::warn("kafka", std::string("offset commit failed: ") + rd_kafka_err2str(err),
            {{"partitions", where}});
}

void rebalance_trampoline(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                          rd_kafka_topic_partition_list_t* partitions, void* opaque) {
  consumer_rebalance_cb(rk, err, partitions, opaque);
}
}  // namespace

Consumer::Consumer(const config::KafkaConfig& config, std::string group_id,
                   std::vector<std::string> topics, MessageHandler on_message,
                   RebalanceHandler on_rebalance, std::string offset_reset)
    : topics_(std::move(topics)),
      on_message_(std::move(on_message)),
      on_rebalance_(std::move(on_rebalance)) {
  rd_kafka_conf_t* conf = base_conf(config);
  for (const auto& [name, value] : config.consumer_properties)
    set_or_throw(conf, name, value);
  set_or_throw(conf, "group.id", group_id);
  set_or_throw(conf, "enable.auto.commit", "false");
  set_or_throw(conf, "enable.auto.offset.store", "false");
  set_or_throw(conf, "auto.offset.reset", offset_reset);
  reset_offset_ = offset_reset == "earliest" ? RD_KAFKA_OFFSET_BEGINNING : RD_KAFKA_OFFSET_END;
  set_or_throw(conf, "enable.partition.eof", "false");
  rd_kafka_conf_set_rebalance_cb(conf, rebalance_trampoline);
  rd_kafka_conf_set_offset_commit_cb(conf, commit_report);
  rd_kafka_conf_set_opaque(conf, this);
  rd_kafka_conf_set_log_cb(conf, log_cb);
  char errstr[512];
  rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
  if (!rk_) {
    rd_kafka_conf_destroy(conf);
    throw config::ConfigError(std::string("kafka consumer: ") + errstr);
  }
  rd_kafka_poll_set_consumer(rk_);
}

Consumer::~Consumer() {
  stop();
  rd_kafka_destroy(rk_);
}

void Consumer::start() {
  rd_kafka_topic_partition_list_t* subscription =
      rd_kafka_topic_partition_list_new(static_cast<int>(topics_.size()));
  for (const auto& topic : topics_) {
    rd_kafka_topic_partition_list_add(subscription, topic.c_str(), RD_KAFKA_PARTITION_UA);
  }
  const rd_kafka_resp_err_t err = rd_kafka_subscribe(rk_, subscription);
  rd_kafka_topic_partition_list_destroy(subscription);
  if (err)
    throw config::ConfigError(std::string("kafka subscribe: ") + rd_kafka_err2str(err));
  poller_ = std::thread([this] { poll_loop(); });
}

void Consumer::stop() {
  if (stop_.exchange(true))
    return;
  if (poller_.joinable())
    poller_.join();
  // rd_kafka_consumer_close waits for the group leave without a bound, which never comes
  // when the broker is gone; close through a queue instead and give it ten seconds.
  rd_kafka_queue_t* queue = rd_kafka_queue_new(rk_);
  if (rd_kafka_error_t* error = rd_kafka_consumer_close_queue(rk_, queue)) {
    log::warn("kafka", std::string("consumer close: ") + rd_kafka_error_string(error));
    rd_kafka_error_destroy(error);
  } else {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!rd_kafka_consumer_closed(rk_) && std::chrono::steady_clock::now() < until) {
      if (rd_kafka_event_t* event = rd_kafka_queue_poll(queue, 100)) {
        if (rd_kafka_event_type(event) == RD_KAFKA_EVENT_REBALANCE) {
          rd_kafka_assign(rk_, nullptr);
        }
        rd_kafka_event_destroy(event);
      }
    }
  }
  rd_kafka_queue_destroy(queue);
}

void Consumer::poll_loop() {
  while (!stop_) {
    // Where the new assignment starts: one round trip to the group's coordinator after each
    // assignment (2 s at most; tried again on the next turns when it fails, 3 times in all).
    if (learn_starts_.exchange(false)) {
      rd_kafka_topic_partition_list_t* assigned = nullptr;
      if (rd_kafka_assignment(rk_, &assigned) == RD_KAFKA_RESP_ERR_NO_ERROR && assigned) {
        if (assigned->cnt > 0 &&
            rd_kafka_committed(rk_, assigned, 2000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
          std::lock_guard lock(starts_mutex_);
          for (int i = 0; i < assigned->cnt; ++i) {
            const auto& p = assigned->elems[i];
            if (p.err == RD_KAFKA_RESP_ERR_NO_ERROR && p.offset >= 0)
              starts_[{p.topic, p.partition}] = p.offset;
          }
          start_tries_ = 0;
        } else if (assigned->cnt > 0 && ++start_tries_ < 3) {
          learn_starts_ = true;
        } else {
          start_tries_ = 0;
        }
        rd_kafka_topic_partition_list_destroy(assigned);
      }
    }
    // Pausing and resuming happen here, on the poll thread, where the assignment is known.
    const bool want = want_pause_;
    if (want != paused_) {
      rd_kafka_topic_partition_list_t* assigned = nullptr;
      if (rd_kafka_assignment(rk_, &assigned) == RD_KAFKA_RESP_ERR_NO_ERROR && assigned) {
        if (want) {
          rd_kafka_pause_partitions(rk_, assigned);
        } else {
          rd_kafka_resume_partitions(rk_, assigned);
        }
        rd_kafka_topic_partition_list_destroy(assigned);
      }
      paused_ = want;
    }
    rd_kafka_message_t* message = rd_kafka_consumer_poll(rk_, 100);
    if (!message)
      continue;
    if (message->err) {
      // Transport errors are retried inside librdkafka; they are reported, not fatal.
      if (message->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        log_cb(rk_, 4, "consume", rd_kafka_message_errstr(message));
      }
      rd_kafka_message_destroy(message);
      continue;
    }
    InMessage in;
    in.topic = rd_kafka_topic_name(message->rkt);
    in.partition = message->partition;
    in.offset = message->offset;
    if (message->key)
      in.key.assign(static_cast<const char*>(message->key), message->key_len);
    if (message->payload) {
      in.value.assign(static_cast<const char*>(message->payload), message->len);
    }
    rd_kafka_headers_t* headers = nullptr;
    if (rd_kafka_message_headers(message, &headers) == RD_KAFKA_RESP_ERR_NO_ERROR && headers) {
      const char* name = nullptr;
      const void* value = nullptr;
      size_t size = 0;
      for (size_t i = 0;
           rd_kafka_header_get_all(headers, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
           ++i) {
        in.headers.emplace_back(
            name, value ? std::string(static_cast<const char*>(value), size) : std::string());
      }
    }
    rd_kafka_message_destroy(message);
    try {
      on_message_(std::move(in));
    } catch (...) {
      // The handler owns its errors; nothing may unwind through the poll loop.
    }
  }
}

void Consumer::commit(const std::string& topic, std::int32_t partition, std::int64_t next_offset) {
  rd_kafka_topic_partition_list_t* offsets = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(offsets, topic.c_str(), partition)->offset = next_offset;
  rd_kafka_commit(rk_, offsets, 1);
  rd_kafka_topic_partition_list_destroy(offsets);
}

void Consumer::pause() {
  want_pause_ = true;
}

std::vector<std::pair<std::string, std::int64_t>> Consumer::lag(std::chrono::milliseconds timeout) {
  return measure_lag(timeout).by_topic;
}

bool Consumer::LagReport::caught_up() const {
  if (assigned == 0 || unmeasured > 0)
    return false;
  return std::all_of(by_topic.begin(), by_topic.end(),
                     [](const auto& topic_lag) { return topic_lag.second == 0; });
}

Consumer::LagReport Consumer::measure_lag(std::chrono::milliseconds timeout) {
  LagReport report;
  auto& by_topic = report.by_topic;
  for (const auto& topic : topics_)
    by_topic.emplace_back(topic, 0);
  rd_kafka_topic_partition_list_t* assigned = nullptr;
  if (rd_kafka_assignment(rk_, &assigned) != RD_KAFKA_RESP_ERR_NO_ERROR || !assigned)
    return report;
  report.assigned = assigned->cnt;
  const int timeout_ms = static_cast<int>(timeout.count());
  rd_kafka_position(rk_, assigned);
  // Partitions this consumer has read nothing from yet: their committed offset instead.
  rd_kafka_topic_partition_list_t* unread = rd_kafka_topic_partition_list_new(0);
  for (int i = 0; i < assigned->cnt; ++i) {
    if (assigned->elems[i].offset < 0) {
      rd_kafka_topic_partition_list_add(unread, assigned->elems[i].topic,
                                        assigned->elems[i].partition);
    }
  }
  // When the broker does not answer, such partitions are skipped below.
  const bool committed_known =
      unread->cnt > 0 && rd_kafka_committed(rk_, unread, timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR;
  for (int i = 0; i < assigned->cnt; ++i) {
    const auto& p = assigned->elems[i];
    std::int64_t position = p.offset;
    bool known = position >= 0;
    if (!known && committed_known) {
      for (int j = 0; j < unread->cnt; ++j) {
        if (unread->elems[j].partition == p.partition &&
            std::string_view(unread->elems[j].topic) == p.topic) {
          position = unread->elems[j].offset;
          known = true;  // a negative offset here: nothing committed yet
        }
      }
    }
    if (!known) {
      ++report.unmeasured;
      continue;
    }
    int64_t low = 0;
    int64_t high = 0;
    if (rd_kafka_query_watermark_offsets(rk_, p.topic, p.partition, &low, &high, timeout_ms) !=
        RD_KAFKA_RESP_ERR_NO_ERROR) {
      ++report.unmeasured;
      continue;
    }
    // Nothing committed: the group starts at the earliest message (auto.offset.reset).
    const std::int64_t from = position >= 0 ? position : low;
    for (auto& [topic, sum] : by_topic) {
      if (topic == p.topic)
        sum += std::max<std::int64_t>(0, high - from);
    }
  }
  rd_kafka_topic_partition_list_destroy(unread);
  rd_kafka_topic_partition_list_destroy(assigned);
  return report;
}
void Consumer::resume() {
  want_pause_ = false;
}

std::int64_t Consumer::backlog() const {
  rd_kafka_topic_partition_list_t* assigned = nullptr;
  if (rd_kafka_assignment(rk_, &assigned) != RD_KAFKA_RESP_ERR_NO_ERROR || !assigned)
    return 0;
  rd_kafka_position(rk_, assigned);
  std::int64_t total = 0;
  for (int i = 0; i < assigned->cnt; ++i) {
    const auto& p = assigned->elems[i];
    int64_t low = 0;
    int64_t high = 0;
    // The watermarks the last fetch brought (no round trip). A partition without a position
    // (nothing read since it was assigned) starts at its committed offset; one whose start or
    // watermarks are not known yet counts as one waiting message: unknown is not "nothing
    // left".
    std::int64_t from = p.offset;
    if (from < 0) {
      std::lock_guard lock(starts_mutex_);
      auto start = starts_.find({p.topic, p.partition});
      from = start == starts_.end() ? -1 : start->second;
    }
    if (from < 0 ||
        rd_kafka_get_watermark_offsets(rk_, p.topic, p.partition, &low, &high) !=
            RD_KAFKA_RESP_ERR_NO_ERROR ||
        high < 0) {
      total += 1;
      continue;
    }
    total += std::max<std::int64_t>(0, high - from);
  }
  rd_kafka_topic_partition_list_destroy(assigned);
  return total;
}

ConsumerSubscription::ConsumerSubscription(const config::KafkaConfig& config, std::string group_id,
                                           std::vector<std::string> topics)
    : config_(config), group_id_(std::move(group_id)), topics_(std::move(topics)) {}

ConsumerSubscription::~ConsumerSubscription() = default;

void ConsumerSubscription::start(MessageHandler on_message, RebalanceHandler on_rebalance) {
  consumer_ = std::make_unique<Consumer>(config_, group_id_, topics_, std::move(on_message),
                                         std::move(on_rebalance));
  consumer_->start();
  published_.store(consumer_.get(), std::memory_order_release);
}

}  // namespace agentfleet::kafka
