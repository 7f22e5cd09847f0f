#include "dispatcher/batch_names.hpp"

namespace agentfleet::dispatcher {

std::string batch_owner_to_find(const Caller& caller, std::string_view requested_user) {
  if (!requested_user.empty())
    return std::string(requested_user);
  if (!caller.admin && !caller.any_user && caller.users.size() == 1)
    return caller.users.front();
  return {};
}

}  // namespace agentfleet::dispatcher
