#pragma once
// Batch ids are each user's (migration 0030): two users may each have a batch "nightly". A
// batch route's {id} is a name, and stands for the one batch of that name among the users
// the caller acts for. Pure: whose batches to look for, and the choice among those found.
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dispatcher/auth.hpp"

namespace agentfleet::dispatcher {

// Whose batch of a name a route looks for: the user its ?user_id= names, else the caller's
// one user when it acts for exactly one, else any user's (empty: each found is then checked
// with may_act_for).
std::string batch_owner_to_find(const Caller& caller, std::string_view requested_user);

// What a name stands for, of `found` (the batches of that name read, each with `user_id`,
// at most as many as were asked for: `complete` when fewer came, so none was left out): the
// one batch of a user the caller may act for, none, or several (their users, for the error).
template <typename Batch>
struct BatchChoice {
  std::optional<Batch> batch;      // exactly one
  std::vector<std::string> users;  // more than one: up to 5 of their users, oldest batch first
  bool more = false;               // more than `users` name, or some may not have been read
};
template <typename Batch, typename Visible>
BatchChoice<Batch> choose_batch(const std::vector<Batch>& found, bool complete, Visible visible) {
  BatchChoice<Batch> choice;
  std::vector<const Batch*> seen;
  for (const Batch& b : found) {
    if (visible(b.user_id))
      seen.push_back(&b);
  }
  if (seen.size() == 1 && complete) {
    choice.batch = *seen.front();
    return choice;
  }
  // Several, or one of a list cut short (another of the caller's may lie beyond it).
  if (seen.size() > 1 || (!complete && !found.empty())) {
    for (std::size_t i = 0; i < std::min<std::size_t>(seen.size(), 5); ++i)
      choice.users.push_back(seen[i]->user_id);
    choice.more = seen.size() > 5 || !complete;
  }
  return choice;
}

}  // namespace agentfleet::dispatcher
