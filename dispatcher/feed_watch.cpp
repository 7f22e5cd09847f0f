#include "dispatcher/feed_watch.hpp"

#include <algorithm>

namespace agentfleet::dispatcher {

bool SeqGaps::observe(int attempt, int seq) {
  if (!seen_) {
    seen_ = true;
    attempt_ = attempt;
    next_seq_ = static_cast<long long>(seq) + 1;
    return false;
  }
  if (attempt < attempt_)
    return false;  // a late event of an attempt that has ended
  if (attempt > attempt_) {
    attempt_ = attempt;
    next_seq_ = static_cast<long long>(seq) + 1;
    return seq != 0;
  }
  if (seq < next_seq_)
    return false;  // seen already
  const bool missed = seq > next_seq_;
  next_seq_ = static_cast<long long>(seq) + 1;
  return missed;
}

RereadSchedule::RereadSchedule(TimePoint now, RereadOptions options)
    : options_(options),
      last_read_(now),
      due_(now + options.first_quiet),
      quiet_(options.first_quiet),
      gap_spacing_(options.first_gap_spacing) {}

void RereadSchedule::gap(TimePoint now) {
  gap_pending_ = true;
  due_ = std::min(due_, std::max(now, last_read_ + gap_spacing_));
}

void RereadSchedule::read(TimePoint now, bool changed) {
  last_read_ = now;
  if (gap_pending_) {
    gap_spacing_ = std::min(gap_spacing_ * 2, options_.max_gap_spacing);
    gap_pending_ = false;
  } else {
    // A quiet read: the gaps have stopped, so the next one is answered promptly again.
    gap_spacing_ = options_.first_gap_spacing;
  }
  quiet_ = changed ? options_.first_quiet : std::min(quiet_ * 2, options_.max_quiet);
  due_ = now + quiet_;
}

}  // namespace agentfleet::dispatcher
