#pragma once
// A user's limits, one type wherever they appear: a tier of the configuration holds the
// defaults of its users (config::UserTierLimits::limits); a user's overrides in Postgres
// (UserLimitOverrides, table user_limits) replace single fields of their tier's; what results
// (with_overrides) is what the scheduler enforces (limits::FairScheduler), the API shows
// (GET /v1/users/{id}/limits) and a submission counts against (max_queued). Values and pure
// functions; thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace agentfleet {

// A tool's level, and the highest level a user's tasks may call: read < write < execute <
// admin.
enum class Permission { kRead, kWrite, kExecute, kAdmin };
std::string to_string(Permission p);
std::optional<Permission> parse_permission(std::string_view text);

struct UserLimits {
  int max_concurrency = 5;                  // tasks dispatched or running at once
  int requests_per_minute = 100;            // admissions a minute; 0 = unlimited
  std::int64_t tokens_per_minute = 200000;  // model tokens (input + output) a minute; 0 = unlimited
  int max_queued = 10000;                   // tasks queued at once; more are refused (429)
  std::int64_t monthly_budget_micros = 0;   // in the budget currency; 0 = unlimited
  int weight = 1;  // the tier's share of scarce capacity (round-robin weight), >= 1
  Permission tool_permission = Permission::kWrite;

  bool operator==(const UserLimits&) const = default;
};

// A user's overrides: each field set replaces the tier's; the tier named (empty: the
// default tier, task_defaults.tier) gives the rest. The weight is always the tier's.
struct UserLimitOverrides {
  std::string user_id;
  std::string tier;
  std::optional<int> max_concurrency;
  std::optional<int> requests_per_minute;
  std::optional<std::int64_t> tokens_per_minute;
  std::optional<int> max_queued;
  std::optional<std::int64_t> monthly_budget_micros;
  std::optional<Permission> tool_permission;

  bool operator==(const UserLimitOverrides&) const = default;
};

// `limits` (a tier's) with each field `overrides` sets replaced.
UserLimits with_overrides(UserLimits limits, const UserLimitOverrides& overrides);

}  // namespace agentfleet
