#pragma once
// A batch's progress for `batch submit`: its counts (GET /v1/batches/{id}), the rate at
// which its tasks end (over the last minute of samples) and the time left at that rate,
// the progress line and the final summary line. Pure: the caller passes the times in.
// Not thread-safe (ProgressMeter: one per follow loop).

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace agentfleet::agentctl {

struct BatchCounts {
  std::string batch_id;
  std::int64_t total = 0;  // tasks accepted
  std::int64_t queued = 0;
  std::int64_t dispatched = 0;
  std::int64_t running = 0;
  std::int64_t succeeded = 0;
  std::int64_t failed = 0;
  std::int64_t timed_out = 0;
  std::int64_t cancelled = 0;
  std::int64_t ended = 0;
  bool batch_cancelled = false;
  // Per result type: a task can succeed with an `error` result (it told the user it could
  // not do the job).
  std::int64_t action_completed = 0;
  std::int64_t need_clarification = 0;
  std::int64_t error_results = 0;
  // Why its queued tasks wait (the API's waiting_reason); empty when none is queued.
  std::string waiting_reason;

  bool finished() const { return ended >= total; }
  // Ended but not succeeded.
  std::int64_t unsuccessful() const { return failed + timed_out + cancelled; }
};

// nullopt when `json` is not a batch.
std::optional<BatchCounts> parse_batch_counts(std::string_view json);

// Tasks ended per second over a sliding window of samples.
class ProgressMeter {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ProgressMeter(std::chrono::seconds window = std::chrono::seconds(60))
      : window_(window) {}
  void add(Clock::time_point at, std::int64_t ended);
  // Tasks per second; nullopt until two samples span some time.
  std::optional<double> rate() const;
  // Seconds until `remaining` more tasks end at the current rate; nullopt when unknown
  // (no rate yet, or nothing ends).
  std::optional<double> eta_s(std::int64_t remaining) const;

 private:
  std::chrono::seconds window_;
  std::deque<std::pair<Clock::time_point, std::int64_t>> samples_;
};

// "45s", "3m05s", "2h07m"; "0s" for less than a second.
std::string format_duration(double seconds);

// A bar of `width` cells: "[#####.....]".
std::string progress_bar(std::int64_t done, std::int64_t total, int width);

// "[##..................] 12%  accepted 1000  queued 800 (tokens_per_minute)  running 80
// done 110  failed 10  12.5/s  ETA 1m10s" on one line (the queued tasks' waiting reason in
// brackets; running counts dispatched ones too; failed counts failed, timed_out and
// cancelled). While queued tasks are held by a rate limit or the budget, no ETA: "ETA -
// (held by tokens_per_minute)".
std::string format_progress_line(const BatchCounts& counts, std::optional<double> rate,
                                 std::optional<double> eta_s);

// "batch B ended: 1000 of 1000 tasks in 1m20s: succeeded 990, failed 5, timed_out 3,
// cancelled 2; results: action_completed 900, need_clarification 10, error 85"
// ("batch B cancelled: ..." for a cancelled batch).
std::string format_batch_summary(const BatchCounts& counts, double elapsed_s);

}  // namespace agentfleet::agentctl
