#pragma once
// Which offset of a partition may be committed while messages finish out of order: the
// lowest offset still running, or one past the highest seen when none runs. Committing
// that never skips a message that has not finished. Pure; not thread-safe (the caller
// serializes access).

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace agentfleet {

class OffsetTracker {
 public:
  using Partition = std::pair<std::string, std::int32_t>;

  void started(const Partition& partition, std::int64_t offset);
  // Returns the offset to commit now, if it moved forward.
  std::optional<std::int64_t> finished(const Partition& partition, std::int64_t offset);
  // A message given up without being handled: no longer running, but commits stay behind
  // it (its offset is never passed), so it is read again after a restart or rebalance.
  void forget_offset(const Partition& partition, std::int64_t offset);
  // A revoked partition is forgotten: its messages will be read again by its new owner.
  void forget(const Partition& partition);
  std::size_t running() const;

 private:
  struct State {
    std::set<std::int64_t> running;
    std::set<std::int64_t> abandoned;  // subset of running that will never finish
    std::int64_t next_unseen = 0;      // one past the highest offset started
    std::int64_t committed = -1;
  };
  std::map<Partition, State> partitions_;
};

}  // namespace agentfleet
