#pragma once
// How a waiter on the task feed (an event stream, a long poll) knows when to read Postgres.
// The feed (task_feed.hpp) brings a task's progress and its result as they happen; the row
// is the truth. A waiter reads the row when it starts, when the task's result arrives, and
// otherwise only when the feed may have missed something (a gap) or, as a safety net for
// what no gap shows (a message that reached no replica yet), after a quiet interval that
// doubles each time the row had nothing new.
//
// Pure bookkeeping on time points the caller passes in; no I/O, not thread-safe (a waiter
// owns its own).

#include <chrono>

namespace agentfleet::dispatcher {

// Progress events carry `seq`, their order within the task's attempt (from 0). A waiter
// that sees a number skipped within an attempt, or an attempt after the first it saw that
// does not start at 0, has missed events. The first event seen sets the base (a waiter
// joins mid-run); a number seen again (a producer's retry) or a stale attempt is no gap.
class SeqGaps {
 public:
  // Records an event; true when events before it were missed.
  bool observe(int attempt, int seq);

 private:
  bool seen_ = false;
  int attempt_ = 0;
  long long next_seq_ = 0;  // wide: a forged seq of INT_MAX must not overflow
};

struct RereadOptions {
  // The quiet interval before the first safety re-read, and its ceiling as it doubles.
  std::chrono::milliseconds first_quiet{std::chrono::seconds(5)};
  std::chrono::milliseconds max_quiet{std::chrono::seconds(60)};
  // Re-reads for gaps are at least this far apart, doubling while gaps keep coming, up to
  // the ceiling (a feed that has lost its partitions reports a gap at every look).
  std::chrono::milliseconds first_gap_spacing{std::chrono::milliseconds(250)};
  std::chrono::milliseconds max_gap_spacing{std::chrono::seconds(8)};
};

class RereadSchedule {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // `now`: when the waiter read the row first.
  RereadSchedule(TimePoint now, RereadOptions options = {});

  // The feed reported a gap (or the task's result): re-read as soon as the spacing allows.
  void gap(TimePoint now);
  // When the next re-read is due.
  TimePoint due() const { return due_; }
  bool is_due(TimePoint now) const { return now >= due_; }
  // The row was read at `now`; `changed`: it said something the feed had not (the waiter
  // then looks sooner again).
  void read(TimePoint now, bool changed);

 private:
  RereadOptions options_;
  TimePoint last_read_;
  TimePoint due_;
  std::chrono::milliseconds quiet_;
  std::chrono::milliseconds gap_spacing_;
  bool gap_pending_ = false;
};

}  // namespace agentfleet::dispatcher
