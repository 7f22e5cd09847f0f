#pragma once
// A user's limits as the API shows and takes them (GET/PUT /v1/users/{id}/limits): the tier
// whose defaults apply with the limits that result (config::Config::limits_for: the tier's
// UserLimits with the user's overrides from Postgres, field by field; the scheduler applies
// the same), and the overrides a PUT sets. Pure functions of their arguments; thread-safe.

#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "core/codec/task_codec.hpp"
#include "core/config/config.hpp"
#include "core/domain/user_limits.hpp"
#include "core/ports/api_store.hpp"

namespace agentfleet::dispatcher {

struct EffectiveLimits {
  std::string tier;  // the tier whose defaults apply
  UserLimits limits;  // what applies
};

EffectiveLimits effective_limits(const config::Config& config,
                                 const ports::UserOverrides& overrides);

// The queue limit for ApiStore::insert_task (tier and max_queued from the user's overrides).
ports::QueueLimit queue_limit(const config::Config& config);
// The tiers' allowed_models, for insert_task.
ports::ModelCheck model_check(const config::Config& config);

// GET /v1/users/{id}/limits: {"user_id", "tier", "effective": {...}, "overrides": {...}}.
std::string limits_json(const std::string& user_id, const EffectiveLimits& effective,
                        const std::optional<ports::UserOverrides>& overrides);

// PUT /v1/users/{id}/limits body: an object of overrides (tier, max_concurrency,
// requests_per_minute, tokens_per_minute, max_queued, monthly_budget as a decimal string,
// tool_permission); a field that is absent or null has no override (the tier's value
// applies). Unknown fields, wrong types, an unknown tier or permission are refused with
// the JSON path.
std::variant<ports::UserOverrides, codec::SchemaViolation> parse_limits_body(
    const config::Config& config, const std::string& user_id, std::string_view body);

}  // namespace agentfleet::dispatcher
