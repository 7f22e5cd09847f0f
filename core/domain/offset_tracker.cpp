#include "core/domain/offset_tracker.hpp"

#include <algorithm>

namespace agentfleet {

void OffsetTracker::started(const Partition& partition, std::int64_t offset) {
  State& state = partitions_[partition];
  state.running.insert(offset);
  state.next_unseen = std::max(state.next_unseen, offset + 1);
}

std::optional<std::int64_t> OffsetTracker::finished(const Partition& partition,
                                                    std::int64_t offset) {
  auto it = partitions_.find(partition);
  if (it == partitions_.end())
    return std::nullopt;  // revoked meanwhile
  State& state = it->second;
  if (state.running.erase(offset) == 0)
    return std::nullopt;
  const std::int64_t commit = state.running.empty() ? state.next_unseen : *state.running.begin();
  if (commit <= state.committed)
    return std::nullopt;
  state.committed = commit;
  return commit;
}

void OffsetTracker::forget_offset(const Partition& partition, std::int64_t offset) {
  auto it = partitions_.find(partition);
  if (it == partitions_.end())
    return;
  // Keeping it in `running` holds every later commit below it; count it apart so that
  // running() reports only work in progress.
  if (it->second.running.count(offset) && !it->second.abandoned.count(offset)) {
    it->second.abandoned.insert(offset);
  }
}

void OffsetTracker::forget(const Partition& partition) {
  partitions_.erase(partition);
}

std::size_t OffsetTracker::running() const {
  std::size_t total = 0;
  for (const auto& [partition, state] : partitions_)
    total += state.running.size() - state.abandoned.size();
  return total;
}

}  // namespace agentfleet
