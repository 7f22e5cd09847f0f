#pragma once
// A user's effective limits: the tier's defaults from configuration (the user's own tier
// when their override names a known one, else task_defaults.tier) with the user's
// overrides from Postgres applied field by field. Used by the scheduler every pass and by
// GET/PUT /v1/users/{id}/limits. Pure functions of their arguments; thread-safe.

#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "core/adapters/pg/submission_store.hpp"
#include "core/adapters/pg/usage_store.hpp"
#include "core/codec/task_codec.hpp"
#include "core/config/config.hpp"
#include "core/limits/fair_scheduler.hpp"

namespace agentfleet::dispatcher {

struct EffectiveLimits {
  std::string tier;  // the tier whose defaults apply
  int max_concurrency = 5;
  int requests_per_minute = 100;
  std::int64_t tokens_per_minute = 200000;
  int max_queued = 10000;
  std::int64_t monthly_budget_micros = 0;  // 0 = unlimited
  std::string tool_permission = "write";
  int weight = 1;

  limits::UserLimits for_scheduler() const;
};

EffectiveLimits effective_limits(const config::Config& config, const pg::UserOverrides& overrides);

// The queue limit for pg::insert_task (tier and max_queued from the user's overrides).
pg::QueueLimit queue_limit(const config::Config& config);
// The tiers' allowed_models, for insert_task.
pg::ModelCheck model_check(const config::Config& config);

// GET /v1/users/{id}/limits: {"user_id", "tier", "effective": {...}, "overrides": {...}}.
std::string limits_json(const std::string& user_id, const EffectiveLimits& effective,
                        const std::optional<pg::UserOverrides>& overrides);

// PUT /v1/users/{id}/limits body: an object of overrides (tier, max_concurrency,
// requests_per_minute, tokens_per_minute, max_queued, monthly_budget as a decimal string,
// tool_permission); a field that is absent or null has no override (the tier's value
// applies). Unknown fields, wrong types, an unknown tier or permission are refused with
// the JSON path.
std::variant<pg::UserOverrides, codec::SchemaViolation> parse_limits_body(
    const config::Config& config, const std::string& user_id, std::string_view body);

}  // namespace agentfleet::dispatcher
