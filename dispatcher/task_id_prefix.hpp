#pragma once
// Short task ids: the API takes, wherever a task id is in the path, a prefix of one of at
// least 8 characters (as `agentctl list` or a log shows the start of it), and answers for
// the one task of the caller's whose id begins so. Pure: the range of ids a prefix covers
// (searched on the primary key) and the choice among the tasks found there.
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentfleet::dispatcher {

// The fewest characters of a prefix: 8 hex digits leave a random (version 4) id one chance
// in four billion of sharing it with a given other.
inline constexpr std::size_t kMinTaskIdPrefix = 8;

// The first and last UUIDs that begin with `prefix`, in lower case; nullopt unless `prefix`
// is the start of a UUID's text (hex digits of either case, the dashes where a UUID has
// them) of kMinTaskIdPrefix to 35 characters.
struct TaskIdRange {
  std::string first;
  std::string last;
};
std::optional<TaskIdRange> task_id_range(std::string_view prefix);
// Whether `text` could begin a task id but is shorter than kMinTaskIdPrefix (hex digits
// only): the answer then says how many characters a prefix needs, not only that no task has
// that id.
bool too_short_task_id_prefix(std::string_view text);

// What a prefix stands for, of `candidates` (the tasks found in its range, in id order,
// each with `task_id` and `user_id`; those the caller may see: `visible(user_id)`): the one
// task, none, or several (the first few named, for the error).
struct TaskIdChoice {
  std::optional<std::string> task_id;  // exactly one
  std::vector<std::string> ambiguous;  // more than one: up to 5 of them, in id order
  std::size_t matches = 0;             // how many the caller may see
};
template <typename Candidates, typename Visible>
TaskIdChoice choose_task_id(const Candidates& candidates, Visible visible) {
  TaskIdChoice choice;
  std::vector<std::string> seen;
  for (const auto& c : candidates) {
    if (visible(c.user_id))
      seen.push_back(c.task_id);
  }
  choice.matches = seen.size();
  if (seen.size() == 1)
    choice.task_id = seen.front();
  else if (seen.size() > 1)
    choice.ambiguous.assign(seen.begin(), seen.begin() + std::min<std::size_t>(seen.size(), 5));
  return choice;
}

}  // namespace agentfleet::dispatcher
