#include "dispatcher/submit_ingest.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "core/adapters/log.hpp"
#include "core/adapters/pg/submission_store.hpp"
#include "core/codec/dead_letter.hpp"
#include "core/codec/otlp_trace.hpp"
#include "dispatcher/submission_rules.hpp"

namespace agentfleet::dispatcher {

namespace asio = boost::asio;

namespace {
std::string header_value(const kafka::Headers& headers, const std::string& name) {
  for (const auto& [key, value] : headers) {
    if (key == name)
      return value;
  }
  return {};
}
}  // namespace

SubmitIngest::SubmitIngest(asio::io_context& io, const config::Config& config, pg::DbPool& db,
                           kafka::Producer& producer, metrics::DispatcherMetrics& metrics)
    : io_(io),
      config_(config),
      store_(db),
      producer_(producer),
      metrics_(metrics),
      rules_(config) {}

void SubmitIngest::start() {
  consumer_ = std::make_unique<kafka::Consumer>(
      config_.kafka, config_.kafka.dispatcher_group,
      std::vector<std::string>{config_.kafka.topics.submit},
      [this](kafka::InMessage message) {
        asio::post(io_, [this, m = std::move(message)]() mutable { handle(std::move(m)); });
      },
      [this](bool assigned, const std::vector<std::pair<std::string, int>>& partitions) {
        asio::post(io_, [this, assigned, partitions] {
          for (const auto& [topic, partition] : partitions) {
            if (assigned) {
              owned_.insert({topic, partition});
            } else {
              owned_.erase({topic, partition});
              offsets_.forget({topic, partition});
            }
          }
        });
      });
  consumer_->start();
  log::write("info", "dispatcher", "consuming " + config_.kafka.topics.submit);
}

void SubmitIngest::stop() {
  stopping_ = true;
  if (consumer_)
    consumer_->stop();
}

void SubmitIngest::handle(kafka::InMessage message) {
  if (stopping_ || !owned_.count({message.topic, message.partition}))
    return;  // read again by the partition's owner
  offsets_.started({message.topic, message.partition}, message.offset);
  // Bounded: a flood on the topic (or a store that does not answer) waits in Kafka, not here.
  if (++in_flight_ >= kMaxInFlight && !paused_) {
    paused_ = true;
    consumer_->pause();
  }
  if (message.key.empty()) {
    asio::co_spawn(io_, ingest(std::move(message)), asio::detached);
    return;
  }
  // Concurrent inserts of one user's messages could store a later one first: a later
  // submission with the same idempotency key would then be the task, and the earlier one
  // its duplicate or conflict.
  auto& waiting = in_order_[message.key];
  waiting.push_back(std::move(message));
  if (waiting.size() == 1)
    asio::co_spawn(io_, ingest_in_order(waiting.front().key), asio::detached);
}

asio::awaitable<void> SubmitIngest::ingest_in_order(std::string key) {
  for (;;) {
    auto waiting = in_order_.find(key);
    if (waiting == in_order_.end())
      co_return;
    if (stopping_) {
      // Not started: left uncommitted, read again by the partition's next owner.
      in_order_.erase(waiting);
      co_return;
    }
    // A copy: the message stays first in line (later ones wait) until it is done.
    kafka::InMessage message = waiting->second.front();
    bool ingested = true;
    try {
      co_await ingest(message);
    } catch (const std::exception& e) {
      ingested = false;
      log::error("dispatcher",
                 "submission not ingested, left for the next read: " + std::string(e.what()));
    }
    if (!ingested)
      done(message, false);
    waiting = in_order_.find(key);
    waiting->second.pop_front();
    if (waiting->second.empty()) {
      in_order_.erase(waiting);
      co_return;
    }
  }
}

void SubmitIngest::done(const kafka::InMessage& message, bool handled) {
  --in_flight_;
  if (paused_ && in_flight_ <= kMaxInFlight * 9 / 10 && !stopping_) {
    paused_ = false;
    consumer_->resume();
  }
  if (!handled) {
    offsets_.forget_offset({message.topic, message.partition}, message.offset);
  } else if (auto commit = offsets_.finished({message.topic, message.partition}, message.offset)) {
    if (consumer_ && !stopping_)
      consumer_->commit(message.topic, message.partition, *commit);
  }
}

asio::awaitable<bool> SubmitIngest::dead_letter(const kafka::InMessage& message,
                                                const std::string& reason,
                                                const std::string& user_id,
                                                const std::string& task_id) {
  metrics_.task_submitted(metrics::SubmitSource::kTopic, metrics::SubmitOutcome::kRejected);
  const std::string traceparent = header_value(message.headers, "traceparent");
  log::TaskContext task;
  task.task_id = task_id;
  task.user_id = user_id;
  task.trace_id = log::trace_id_of(traceparent);
  log::warn("dispatcher", task, "dead letter: " + reason,
            {{"topic", message.topic},
             {"partition", std::to_string(message.partition)},
             {"offset", std::to_string(message.offset)}});
  kafka::OutMessage letter = kafka::dead_letter(message, config_.kafka.topics.dlq, reason);
  Status sent = co_await producer_.publish(std::move(letter));
  if (!sent.ok()) {
    log::error("dispatcher", task,
               "dead letter not published, message kept: " + sent.error().message);
  }
  co_return sent.ok();
}

asio::awaitable<void> SubmitIngest::ingest(kafka::InMessage message) {
  auto parsed = rules_.parse(message.value);
  if (auto* violation = std::get_if<codec::SchemaViolation>(&parsed)) {
    const bool sent = co_await dead_letter(
        message, "invalid submission at '" + violation->path + "': " + violation->message);
    done(message, sent);
    co_return;
  }
  auto& submission = std::get<codec::Submission>(parsed);
  if (auto problem = rules_.check(submission.spec)) {
    const bool sent = co_await dead_letter(
        message, "invalid submission at '" + problem->path + "': " + problem->message,
        submission.spec.user_id);
    done(message, sent);
    co_return;
  }
  pg::NewTask task =
      rules_.new_task(std::move(submission), header_value(message.headers, "traceparent"));
  SubmissionRules::key_by_origin(
      task.spec,
      codec::message_origin(message.headers, message.topic, message.partition, message.offset));
  const auto replayed_from =
      codec::parse_partition_offset(header_value(message.headers, "dlq-replayed-from"));
  bool created = false;  // by this message, in an earlier try of the loop below
  // A store outage, or a key held by a batch upload under way: tried again with backoff
  // (0.2 s, doubling to 2 s) for up to ten minutes, so the message is stored within seconds
  // of the store's return or the upload's end (later messages of its key wait behind it;
  // the consumer pauses once kMaxInFlight wait). Only then, or on shutdown, is it left
  // uncommitted for the next read.
  for (int attempt = 0;; ++attempt) {
    const pg::QueueLimit limit = rules_.queue_limit();
    const pg::ModelCheck models = rules_.model_check();
    auto inserted = co_await store_.insert_task(task, limit, false, models);
    const bool pending = inserted.ok() && inserted.value().outcome == pg::InsertOutcome::kPending;
    if (inserted.ok() && !pending) {
      const pg::InsertResult& result = inserted.value();
      if (result.outcome == pg::InsertOutcome::kQueueFull) {
        // Not held back: a full queue of one user must not stop the partition for others.
        // The dead letter can be replayed once the user's queue has room (dead_letter
        // counts the rejection).
        metrics_.throttled(metrics::ThrottleReason::kQueueFull, 1);
        const bool sent = co_await dead_letter(message,
                                               "queue_full: user '" + task.spec.user_id + "' has " +
                                                   std::to_string(result.room.queued) +
                                                   " tasks queued (max_queued " +
                                                   std::to_string(result.room.max_queued) + ")",
                                               task.spec.user_id);
        done(message, sent);
        co_return;
      }
      if (result.outcome == pg::InsertOutcome::kModelNotAllowed) {
        // Named, not a temporary in the co_await: GCC 12 destroys such temporaries twice.
        std::string why = "model_not_allowed: " + result.refusal;
        const bool sent = co_await dead_letter(message, std::move(why), task.spec.user_id);
        done(message, sent);
        co_return;
      }
      if (result.outcome == pg::InsertOutcome::kConflict) {
        const bool sent = co_await dead_letter(message,
                                               "idempotency_key '" + task.spec.idempotency_key +
                                                   "' was used with a different request for task " +
                                                   result.task_id,
                                               task.spec.user_id, result.task_id);
        done(message, sent);
        co_return;
      }
      created = created || result.outcome == pg::InsertOutcome::kCreated;
      if (replayed_from) {
        // Recorded before the message counts as handled: a failure tries the whole
        // submission again (its insert then finds the task this one made).
        const pg::ReplayRecord record{
            config_.kafka.topics.dlq, replayed_from->first, replayed_from->second, message.topic,
            message.partition,        message.offset,       result.task_id,        created};
        auto recorded = co_await store_.record_replay(record);
        if (!recorded.ok()) {
          if (!recorded.error().retryable() || attempt >= kStoreRetries || stopping_) {
            log::warn("dispatcher", "replayed dead letter not recorded, left for the next read: " +
                                        recorded.error().message);
            done(message, false);
            co_return;
          }
          co_await pause_before(attempt);
          continue;
        }
      }
      metrics_.task_submitted(
          metrics::SubmitSource::kTopic,
          created ? metrics::SubmitOutcome::kAccepted : metrics::SubmitOutcome::kDuplicate);
      if (created) {
        log::TaskContext context;
        context.task_id = result.task_id;
        context.user_id = task.spec.user_id;
        context.batch_id = task.spec.batch_id;
        context.trace_id = log::trace_id_of(task.traceparent);
        log::info("dispatcher", context, "accepted from the submit topic");
      }
      done(message, true);
      co_return;
    }
    // Its key held by a batch upload under way: whether it names a task is known once that
    // upload ends (within its deadline), so the message waits like a store outage.
    const std::string why = pending ? "its idempotency_key is held by batch '" +
                                          inserted.value().held_by_batch +
                                          "', whose upload is under way"
                                    : inserted.error().message;
    if ((!pending && !inserted.error().retryable()) || attempt >= kStoreRetries || stopping_) {
      log::TaskContext context;
      context.user_id = task.spec.user_id;
      context.trace_id = log::trace_id_of(task.traceparent);
      log::warn("dispatcher", context, "submission not stored, left for the next read: " + why,
                {{"topic", message.topic},
                 {"partition", std::to_string(message.partition)},
                 {"offset", std::to_string(message.offset)}});
      done(message, false);
      co_return;
    }
    if (attempt == 0) {
      log::warn("dispatcher", "submission not stored yet, trying again: " + why);
    }
    co_await pause_before(attempt);
  }
}

asio::awaitable<void> SubmitIngest::pause_before(int attempt) {
  asio::steady_timer pause(io_,
                           std::chrono::milliseconds(std::min(2000, 200 << std::min(attempt, 4))));
  boost::system::error_code ec;
  co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

}  // namespace agentfleet::dispatcher
