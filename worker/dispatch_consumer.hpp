#pragma once
// The worker's intake: reads the dispatch topic (ports::Subscription, a consumer group) and
// starts a run per message, never more than `limit()` at once (the adaptive in-flight limit,
// capped by worker.max_in_flight). A message that arrives at the limit waits in a local
// queue, unclaimed, and starts when a run ends. The worker tells the scheduler it can take
// its limit and half again (capacity(); the half for tasks on their way to it), so what
// arrives beyond the limit is bounded by that slack; only when the runs and the waiting
// messages together reach the capacity does it pause its partitions (staying in the group),
// resuming a tenth below. Pausing is the exception, not the rhythm: a pause drops what the
// subscription fetched ahead and a resume fetches it again, hundreds of milliseconds with
// librdkafka, during which a worker at its limit would otherwise sit idle.
//
// Offsets: a message's offset is committed once its claim has committed (Postgres, not the
// offset, holds the work from then on), not when its run ends; each partition's commits
// follow its lowest message whose claim is still under way (domain/offset_tracker). Bad
// input never blocks a partition: a message that is not a valid dispatch message, or names
// no task, goes to the dead-letter topic with its reason, and its offset moves on once the
// dead letter is stored. A message whose `agentfleet-needs` header names what this version
// cannot do (codec::unmet_needs: a strategy or feature of a later version) is declined: left
// unclaimed, its offset moved on; the task stays dispatched and the scheduler dispatches it
// again after redispatch_after_s. Messages fetched for partitions this worker no longer
// owns, or after a drain began, are left to the partitions' next owner.
//
// Lifecycle: start() subscribes; stop_consuming() drops the waiting messages (unclaimed,
// uncommitted: the next owner runs them), pauses and leaves the group (on a thread of its
// own: leaving blocks for a round trip; the destructor joins it). While fenced, nothing new
// starts and the partitions are paused. Thread-safety: the
// subscription's callbacks are posted to the io thread; everything else runs there.

#include <boost/asio/any_io_executor.hpp>

#include <cstdint>
#include <deque>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/adapters/metrics/worker_metrics.hpp"
#include "core/codec/task_codec.hpp"
#include "core/domain/offset_tracker.hpp"
#include "core/ports/publisher.hpp"
#include "core/ports/subscription.hpp"
#include "worker/runs.hpp"

namespace agentfleet::worker {

struct DispatchConsumerOptions {
  std::string dlq_topic;
  int max_in_flight = 2000;  // the upper bound of the adaptive limit
};

class DispatchConsumer {
 public:
  // `limit`: how many runs may be in flight now (read whenever the count changes).
  DispatchConsumer(boost::asio::any_io_executor executor, ports::Subscription& subscription,
                   ports::Publisher& publisher, Runs& runs, metrics::WorkerMetrics& metrics,
                   DispatchConsumerOptions options, std::function<int()> limit);
  ~DispatchConsumer();
  DispatchConsumer(const DispatchConsumer&) = delete;
  DispatchConsumer& operator=(const DispatchConsumer&) = delete;

  void start();
  // A drain: no more messages are started; the group is left at once so the partitions move
  // to the other workers (uncommitted messages are read again there).
  void stop_consuming();
  // The lease keeper's fence: paused while up, whatever the count.
  void set_fenced(bool fenced);
  // The limit may have risen: resume if there is room now.
  void limit_changed();

  // What the worker can hold for a limit: the limit, and half again for the tasks on their
  // way to it (admitted, in the outbox, the relay and Kafka, not yet claimed), so that the
  // pipeline does not leave it idle. Reported to the scheduler as the worker's capacity.
  static int capacity(int limit) { return limit + (limit + 1) / 2; }

  std::size_t in_flight() const { return in_flight_; }
  // Messages received at the limit, waiting for a run to end.
  std::size_t waiting() const { return waiting_.size(); }
  bool paused() const { return paused_; }
  // Told whenever the count of runs in flight changes (the adaptive limit watches it).
  std::function<void(std::size_t)> on_in_flight;

  // The two entry points of the subscription's callbacks (posted to the io thread); public
  // so that tests can feed messages and assignments directly.
  void handle(ports::InMessage message);
  void rebalanced(bool assigned, const std::vector<std::pair<std::string, int>>& partitions);

 private:
  void dead_letter(const ports::InMessage& message, metrics::DeadLetterReason kind,
                   const std::string& reason, const std::string& task_id);
  // Leaves a message whose task needs what this version cannot do (`unmet`) unclaimed.
  void decline(const ports::InMessage& message, const codec::DispatchMessage& dispatch,
               const std::vector<std::string>& unmet);
  // The message's offset may be committed (its claim committed, or it was dead-lettered); or,
  // `handled` false, it stays uncommitted (read again after a restart or rebalance).
  void offset_done(const ports::InMessage& message, bool handled);
  void run_ended();
  // Starts waiting messages while there is room under the limit (and no fence).
  void start_waiting();
  void start(ports::InMessage message);
  void set_paused(bool paused);
  void update_pause();
  int effective_limit() const;

  boost::asio::any_io_executor executor_;
  ports::Subscription& subscription_;
  ports::Publisher& publisher_;
  Runs& runs_;
  metrics::WorkerMetrics& metrics_;
  DispatchConsumerOptions options_;
  std::function<int()> limit_;

  OffsetTracker offsets_;
  std::set<std::pair<std::string, int>> owned_;
  std::deque<ports::InMessage> waiting_;  // bounded: past capacity() the partitions pause
  std::size_t in_flight_ = 0;
  bool draining_ = false;
  bool fenced_ = false;
  bool paused_ = false;
  std::jthread leaving_;
};

}  // namespace agentfleet::worker
