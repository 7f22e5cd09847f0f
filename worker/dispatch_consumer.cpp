#include "worker/dispatch_consumer.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>

#include <algorithm>

#include "core/adapters/log.hpp"
#include "core/codec/task_codec.hpp"

namespace agentfleet::worker {

namespace asio = boost::asio;

namespace {
std::string header_value(const ports::Headers& headers, const std::string& name) {
  for (const auto& [key, value] : headers) {
    if (key == name)
      return value;
  }
  return {};
}
}  // namespace

DispatchConsumer::DispatchConsumer(asio::any_io_executor executor,
                                   ports::Subscription& subscription, ports::Publisher& publisher,
                                   Runs& runs, metrics::WorkerMetrics& metrics,
                                   DispatchConsumerOptions options, std::function<int()> limit)
    : executor_(std::move(executor)),
      subscription_(subscription),
      publisher_(publisher),
      runs_(runs),
      metrics_(metrics),
      options_(std::move(options)),
      limit_(std::move(limit)) {}

DispatchConsumer::~DispatchConsumer() = default;  // joins a leave still under way

void DispatchConsumer::start() {
  subscription_.start(
      [this](ports::InMessage message) {
        asio::post(executor_, [this, m = std::move(message)]() mutable { handle(std::move(m)); });
      },
      [this](bool assigned, const std::vector<std::pair<std::string, int>>& partitions) {
        // Posted like the messages, so the io thread sees assignments and messages in the
        // order the subscription delivered them.
        asio::post(executor_, [this, assigned, partitions] { rebalanced(assigned, partitions); });
      });
}

void DispatchConsumer::rebalanced(bool assigned,
                                  const std::vector<std::pair<std::string, int>>& partitions) {
  for (const auto& [topic, partition] : partitions) {
    if (assigned) {
      owned_.insert({topic, partition});
    } else {
      owned_.erase({topic, partition});
      offsets_.forget({topic, partition});
    }
  }
  if (!assigned) {
    // Waiting messages of revoked partitions are the next owner's (even should the partition
    // come back here: it is read again from its committed offset).
    std::erase_if(waiting_, [this](const ports::InMessage& m) {
      return !owned_.count({m.topic, m.partition});
    });
    update_pause();
  }
}

int DispatchConsumer::effective_limit() const {
  const int adaptive = limit_ ? limit_() : options_.max_in_flight;
  return std::max(1, std::min(adaptive, options_.max_in_flight));
}

void DispatchConsumer::set_paused(bool paused) {
  if (paused == paused_)
    return;
  paused_ = paused;
  if (paused)
    subscription_.pause();
  else
    subscription_.resume();
  metrics_.set_paused(paused);
}

void DispatchConsumer::update_pause() {
  if (draining_)
    return;  // paused for good
  const int held_limit = capacity(effective_limit());
  const auto held = static_cast<int>(in_flight_ + waiting_.size());
  // Resumed a tenth below the capacity, not one below it: each pause drops what the
  // subscription had fetched ahead, so toggling at every run's end would cost a fetch each.
  if (fenced_ || held >= held_limit)
    set_paused(true);
  else if (held <= held_limit - std::max(1, held_limit / 10))
    set_paused(false);
}

void DispatchConsumer::start_waiting() {
  while (!waiting_.empty() && !fenced_ && !draining_ &&
         static_cast<int>(in_flight_) < effective_limit()) {
    ports::InMessage next = std::move(waiting_.front());
    waiting_.pop_front();
    // A partition revoked while its message waited: left to the partition's next owner.
    if (owned_.count({next.topic, next.partition}))
      start(std::move(next));
  }
}

void DispatchConsumer::set_fenced(bool fenced) {
  fenced_ = fenced;
  start_waiting();
  update_pause();
}

void DispatchConsumer::limit_changed() {
  start_waiting();
  update_pause();
}

void DispatchConsumer::stop_consuming() {
  if (draining_)
    return;
  draining_ = true;
  waiting_.clear();
  set_paused(true);
  leaving_ = std::jthread([this] { subscription_.stop(); });
}

void DispatchConsumer::offset_done(const ports::InMessage& message, bool handled) {
  if (!handled) {
    offsets_.forget_offset({message.topic, message.partition}, message.offset);
  } else if (auto commit = offsets_.finished({message.topic, message.partition}, message.offset);
             commit && !draining_ && owned_.count({message.topic, message.partition})) {
    // Not while draining: the group has been left (the next owner reads the messages again
    // and skips their tasks, ended or owned here).
    subscription_.commit(message.topic, message.partition, *commit);
  }
}

void DispatchConsumer::run_ended() {
  --in_flight_;
  metrics_.set_in_flight(in_flight_);
  if (on_in_flight)
    on_in_flight(in_flight_);
  start_waiting();
  update_pause();
}

void DispatchConsumer::dead_letter(const ports::InMessage& message, metrics::DeadLetterReason kind,
                                   const std::string& reason, const std::string& task_id) {
  metrics_.dead_letter(kind);
  const std::string traceparent = header_value(message.headers, "traceparent");
  log::TaskContext task{task_id, message.key};
  task.trace_id = log::trace_id_of(traceparent);
  log::warn("worker", task, "dead letter: " + reason,
            {{"topic", message.topic},
             {"partition", std::to_string(message.partition)},
             {"offset", std::to_string(message.offset)}});
  asio::co_spawn(
      executor_,
      [this, message, letter = ports::dead_letter(message, options_.dlq_topic, reason)]() mutable
      -> asio::awaitable<void> {
        Status sent = co_await publisher_.publish(std::move(letter));
        if (!sent.ok())
          log::error("worker", "dead letter not published, message kept: " + sent.error().message);
        offset_done(message, sent.ok());
        run_ended();
      },
      [this, message](std::exception_ptr error) {
        if (error) {
          offset_done(message, false);
          run_ended();
        }
      });
}

void DispatchConsumer::decline(const ports::InMessage& message,
                               const codec::DispatchMessage& dispatch,
                               const std::vector<std::string>& unmet) {
  // Left unclaimed, so it stays dispatched in the store: the scheduler dispatches it again
  // after redispatch_after_s, by when a rolling upgrade has usually put a worker that can
  // run it on the partition. Running it without what it needs would run it differently
  // (a plan_only task as a ReAct task with tools); a dead letter would lose it.
  metrics_.dispatch_declined();
  std::string needs;
  for (const std::string& need : unmet)
    needs += (needs.empty() ? "" : " ") + need;
  const std::string traceparent = header_value(message.headers, "traceparent");
  log::TaskContext task{dispatch.task_id, dispatch.user_id};
  task.trace_id = log::trace_id_of(traceparent);
  log::warn("worker", task,
            "declined: the task needs what this worker version cannot do (" + needs +
                "); left dispatched for the scheduler to dispatch again",
            {{"needs", needs}});
  offset_done(message, true);
  run_ended();
}

void DispatchConsumer::handle(ports::InMessage message) {
  // Messages fetched before the drain began, or before their partition was revoked, are
  // left unstarted and uncommitted: the partition's next owner runs them.
  if (draining_ || !owned_.count({message.topic, message.partition}))
    return;
  offsets_.started({message.topic, message.partition}, message.offset);
  if (fenced_ || static_cast<int>(in_flight_) >= effective_limit() || !waiting_.empty())
    waiting_.push_back(std::move(message));
  else
    start(std::move(message));
  update_pause();
}

void DispatchConsumer::start(ports::InMessage message) {
  ++in_flight_;
  metrics_.set_in_flight(in_flight_);
  if (on_in_flight)
    on_in_flight(in_flight_);
  auto parsed = codec::parse_dispatch_message(message.value);
  if (auto* violation = std::get_if<codec::SchemaViolation>(&parsed)) {
    // The codec reports unparsable text at the root with "invalid JSON".
    const bool not_json =
        violation->path.empty() && violation->message.rfind("invalid JSON", 0) == 0;
    dead_letter(message,
                not_json ? metrics::DeadLetterReason::kNotJson : metrics::DeadLetterReason::kSchema,
                "invalid dispatch message at '" + violation->path + "': " + violation->message, "");
    return;
  }
  const auto& dispatch = std::get<codec::DispatchMessage>(parsed);
  if (const std::vector<std::string> unmet =
          codec::unmet_needs(header_value(message.headers, std::string(codec::kNeedsHeader)));
      !unmet.empty()) {
    decline(message, dispatch, unmet);
    return;
  }
  asio::co_spawn(
      executor_,
      [this, message, task_id = dispatch.task_id,
       user_id = dispatch.user_id]() mutable -> asio::awaitable<void> {
        bool offset_marked = false;
        try {
          const std::string traceparent = header_value(message.headers, "traceparent");
          ClaimResult claimed = co_await runs_.claim(task_id, user_id, traceparent);
          if (!claimed.run && claimed.outcome == RunOutcome::kUnknownTask) {
            dead_letter(message, metrics::DeadLetterReason::kUnknownTask, "unknown task " + task_id,
                        task_id);
            co_return;
          }
          if (!claimed.run && claimed.outcome == RunOutcome::kStoreUnavailable) {
            // Dispatched, unclaimed: the scheduler dispatches it again once it is known lost.
            log::TaskContext task{task_id, message.key};
            task.trace_id = log::trace_id_of(traceparent);
            log::warn("worker", task, "not claimed: the store did not answer");
          }
          // From here the store holds the work: the offset moves on.
          offset_marked = true;
          offset_done(message, true);
          if (claimed.run) {
            const RunOutcome outcome = co_await runs_.execute(std::move(claimed.run));
            if (outcome == RunOutcome::kLeaseLost)
              metrics_.lease_lost();
          }
        } catch (const std::exception& e) {
          log::error("worker", std::string("a run ended with an exception: ") + e.what());
          if (!offset_marked)
            offset_done(message, false);
        }
        run_ended();
      },
      asio::detached);
}

}  // namespace agentfleet::worker
