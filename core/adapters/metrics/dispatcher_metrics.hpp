#pragma once
// The dispatcher's metrics, as named methods: submissions, API requests, scheduler
// admissions, throttles and passes, recovery, the outbox, the tasks by live status and
// whether this replica holds the scheduler lock. Label values are enums, names from
// configuration (topics), or route templates the API chooses ("/v1/tasks/{id}", never a
// raw path). No method takes a user id.
//
// Lifecycle: construct after the MetricsRegistry and keep both alive while the API and
// the scheduler run. Thread-safety: every method may be called from any thread.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/adapters/metrics/metrics_registry.hpp"
#include "core/config/config.hpp"
#include "core/domain/task.hpp"

namespace agentfleet::metrics {

enum class SubmitSource { kHttp, kTopic };
enum class SubmitOutcome { kAccepted, kDuplicate, kRejected };
enum class ThrottleReason { kConcurrency, kRpm, kTpm, kBudget, kQueueFull, kFleetCapacity };
enum class RecoveryReason { kLeaseExpired, kRedispatch };
enum class SchedulerEnd { kScheduleTimeout, kQuotaExceeded, kDeadline };
enum class WaitKind { kLongPoll, kEventStream };

std::string_view to_string(SubmitSource source);
std::string_view to_string(SubmitOutcome outcome);
std::string_view to_string(ThrottleReason reason);
std::string_view to_string(RecoveryReason reason);
std::string_view to_string(SchedulerEnd reason);
std::string_view to_string(WaitKind kind);

class DispatcherMetrics {
 public:
  DispatcherMetrics(MetricsRegistry& registry, const config::Config& config);
  ~DispatcherMetrics();
  DispatcherMetrics(const DispatcherMetrics&) = delete;
  DispatcherMetrics& operator=(const DispatcherMetrics&) = delete;

  MetricsRegistry& registry() { return registry_; }

  void task_submitted(SubmitSource source, SubmitOutcome outcome);
  // `route` is a template from a fixed set the caller owns, e.g. "/v1/tasks/{id}".
  void http_request(std::string_view route, int code, double seconds);

  void admitted(Priority priority, std::int64_t tasks);
  void throttled(ThrottleReason reason, std::int64_t tasks);
  void scheduler_pass(double seconds);
  void recovered(RecoveryReason reason, std::int64_t tasks);
  // Tasks recovery gave up on (ended failed after dispatcher.max_attempts).
  void recovery_exhausted(std::int64_t tasks);
  // 1 while this replica ran the last scheduler pass (holds the advisory lock).
  void set_leader(bool leader);

  void set_outbox_backlog(std::int64_t rows);
  void outbox_published(std::string_view topic, std::int64_t messages);
  // From a periodic count of the live statuses (queued, dispatched, running).
  void set_tasks(TaskStatus status, std::int64_t tasks);
  // Queued tasks by priority, from the same periodic count.
  void set_queue_depth(Priority priority, std::int64_t tasks);
  // Submission to first dispatch, observed by the scheduler for each task it admits.
  void queue_wait(Priority priority, double seconds);
  // Queued tasks the scheduler ended (queue timeout, budget spent).
  void scheduler_ended(SchedulerEnd reason, std::int64_t tasks);
  // Model calls left in flight by a worker that stopped, billed by the scheduler.
  void calls_settled(std::int64_t calls);
  // Long polls and event streams open on this replica.
  void wait_opened(WaitKind kind);
  void wait_closed(WaitKind kind);
  // A long poll or event stream read Postgres again (after its first read).
  void waiter_reread(WaitKind kind);

 private:
  struct Families;
  MetricsRegistry& registry_;
  std::unique_ptr<Families> f_;
};

}  // namespace agentfleet::metrics
