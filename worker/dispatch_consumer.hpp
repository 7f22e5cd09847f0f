#pragma once
// The worker's intake: reads the dispatch topic (ports::Subscription, a consumer group) and
// starts a run per message, taking only the work it can run now. At `limit()` runs in flight
// (the adaptive in-flight limit, capped by worker.max_in_flight) it pauses its partitions
// (staying in the group) and resumes as runs end; the work it does not take waits in the
// store's queue, where the scheduler admits no more than the fleet reports it can start.
//
// Offsets: a message's offset is committed once its claim has committed (Postgres, not the
// offset, holds the work from then on), not when its run ends; each partition's commits
// follow its lowest message whose claim is still under way (domain/offset_tracker). Bad
// input never blocks a partition: a message that is not a valid dispatch message, or names
// no task, goes to the dead-letter topic with its reason, and its offset moves on once the
// dead letter is stored. Messages fetched for partitions this worker no longer owns, or
// after a drain began, are left to the partitions' next owner.
//
// Lifecycle: start() subscribes; stop_consuming() pauses and leaves the group (on a thread of
// its own: leaving blocks for a round trip; the destructor joins it). Thread-safety: the
// subscription's callbacks are posted to the io thread; everything else runs there.

#include <boost/asio/any_io_executor.hpp>

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "core/adapters/metrics/worker_metrics.hpp"
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

  std::size_t in_flight() const { return in_flight_; }
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
  // The message's offset may be committed (its claim committed, or it was dead-lettered); or,
  // `handled` false, it stays uncommitted (read again after a restart or rebalance).
  void offset_done(const ports::InMessage& message, bool handled);
  void run_ended();
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
  std::size_t in_flight_ = 0;
  bool draining_ = false;
  bool fenced_ = false;
  bool paused_ = false;
  std::jthread leaving_;
};

}  // namespace agentfleet::worker
