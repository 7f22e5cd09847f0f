#include "core/domain/user_limits.hpp"

namespace agentfleet {

std::string to_string(Permission p) {
  switch (p) {
    case Permission::kRead:
      return "read";
    case Permission::kWrite:
      return "write";
    case Permission::kExecute:
      return "execute";
    case Permission::kAdmin:
      return "admin";
  }
  return "read";
}

std::optional<Permission> parse_permission(std::string_view text) {
  if (text == "read")
    return Permission::kRead;
  if (text == "write")
    return Permission::kWrite;
  if (text == "execute")
    return Permission::kExecute;
  if (text == "admin")
    return Permission::kAdmin;
  return std::nullopt;
}

UserLimits with_overrides(UserLimits limits, const UserLimitOverrides& o) {
  limits.max_concurrency = o.max_concurrency.value_or(limits.max_concurrency);
  limits.requests_per_minute = o.requests_per_minute.value_or(limits.requests_per_minute);
  limits.tokens_per_minute = o.tokens_per_minute.value_or(limits.tokens_per_minute);
  limits.max_queued = o.max_queued.value_or(limits.max_queued);
  limits.monthly_budget_micros = o.monthly_budget_micros.value_or(limits.monthly_budget_micros);
  limits.tool_permission = o.tool_permission.value_or(limits.tool_permission);
  return limits;
}

}  // namespace agentfleet
