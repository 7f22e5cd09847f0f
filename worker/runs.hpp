#pragma once
// What the worker's long-lived jobs need of the task runner: the dispatch consumer claims
// and executes runs (committing a message's offset as soon as its claim has committed), the
// lease keeper cancels and fences them, the drain hands them back. TaskRunner implements it;
// the jobs' unit tests fake it.
//
// Thread-safety: called on the worker's io thread, except held() and running(), which are
// safe from any thread.

#include <boost/asio/awaitable.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/ports/liveness_store.hpp"

namespace agentfleet::worker {

// How a run (or its claim) ended. kReleased: handed back during a drain. kUnknownTask: no
// such task (a dead letter). kLeaseLost: another attempt owns the task, or the worker fenced
// itself; the run wrote nothing more.
enum class RunOutcome {
  kFinished,
  kSkipped,
  kLeaseLost,
  kStoreUnavailable,
  kReleased,
  kUnknownTask
};
std::string_view to_string(RunOutcome outcome);

// A claimed task whose run has not started yet. The runner keeps its state in a type of its
// own derived from it; the jobs only see which task and attempt it is.
struct ClaimedRun {
  virtual ~ClaimedRun() = default;
  std::string task_id;
  int attempt = 0;
};

struct ClaimResult {
  std::shared_ptr<ClaimedRun> run;            // set when the task was claimed
  RunOutcome outcome = RunOutcome::kSkipped;  // when it was not: kSkipped, kUnknownTask,
                                              // kStoreUnavailable
};

class Runs {
 public:
  virtual ~Runs() = default;
  // `user_id` and `traceparent` come from the dispatch message (its key and header).
  virtual boost::asio::awaitable<ClaimResult> claim(std::string task_id, std::string user_id,
                                                    std::string traceparent) = 0;
  virtual boost::asio::awaitable<RunOutcome> execute(std::shared_ptr<ClaimedRun> run) = 0;
  // (task_id, attempt) of every run going on.
  virtual std::vector<ports::HeldTask> held() const = 0;
  // The runs going on and the claims under way: a drain waits for both, since a claim that
  // commits while the worker stops makes a task this worker's that no run would hand back.
  virtual std::size_t running() const = 0;
  // Stops the run of `task_id` at once, ending it cancelled. Unknown ids are ignored.
  virtual void cancel(const std::string& task_id) = 0;
  // Stops every run at once without writing: the worker can no longer prove it owns their
  // tasks (its liveness lapsed). Later claims are refused until unfence().
  virtual void fence() = 0;
  virtual void unfence() = 0;
  // Every run (and every later one) stops at its next checkpoint and hands its task back.
  virtual void drain() = 0;
};

}  // namespace agentfleet::worker
