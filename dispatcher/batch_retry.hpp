#pragma once
// POST /v1/batches/{id}/retry: "retry the failed ones" of a batch. Each task of the batch that
// failed (failed, timed_out, or succeeded with an error result) is retried as
// POST /v1/tasks/{id}/retry retries it, under the idempotency key kBatchRetryKeyPrefix + its
// id: asking again (a lost answer, a second click, another operator) makes no second retry
// but finds the first. A slice of up to `limit` failed tasks after `after` is retried per
// request; the answer's next_after asks for the next slice, null once the batch has no more.
// A refusal that would refuse every next retry as well (the user's queue is full, the store
// did not answer) stops the slice there, and the answer says so; a task that cannot be
// retried (its model is gone) is counted by its error code and the slice goes on.
//
// The tally of one slice: pure, one per request.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace agentfleet::dispatcher {

inline constexpr std::string_view kBatchRetryKeyPrefix = "batch-retry:";

class BatchRetryTally {
 public:
  // The answer to the retry of `task_id`: its HTTP status and body. False: stop the slice
  // (that task is left for the next request).
  bool add(const std::string& task_id, int status, std::string_view body);
  // The slice read fewer failed tasks than it asked for: nothing follows it.
  void reached_end() { end_ = true; }

  std::int64_t retried() const { return retried_; }
  std::int64_t already() const { return already_; }
  // {"retried", "already_retried", "not_retried": {code: n}, "stopped": null or
  //  {"code", "message"}, "next_after": the last task id handled, or null at the end}.
  std::string json() const;

 private:
  std::int64_t retried_ = 0;
  std::int64_t already_ = 0;
  std::map<std::string, std::int64_t> not_retried_;
  std::optional<std::pair<std::string, std::string>> stopped_;
  std::string last_;  // the last task id handled
  bool end_ = false;
};

}  // namespace agentfleet::dispatcher
