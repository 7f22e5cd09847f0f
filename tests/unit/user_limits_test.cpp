// A user's limits, one type (core/domain/user_limits.hpp): what a user's overrides replace of
// their tier's, and a permission's names. The tiers' limits as the configuration gives them,
// and the API's view, are in config_test.cpp and dispatcher_policy_test.cpp.

#include "core/domain/user_limits.hpp"

#include <gtest/gtest.h>

#include "core/config/config.hpp"

namespace agentfleet {
namespace {

TEST(UserLimitsType, AnOverrideReplacesItsFieldAndNoOther) {
  UserLimits tier;
  tier.max_concurrency = 3;
  tier.tokens_per_minute = 50000;
  tier.monthly_budget_micros = 2'500'000;
  tier.weight = 4;
  tier.tool_permission = Permission::kRead;
  EXPECT_EQ(with_overrides(tier, UserLimitOverrides{}), tier) << "no override: the tier's";

  UserLimitOverrides own;
  own.max_queued = 7;
  own.monthly_budget_micros = 0;  // unlimited, though the tier has a budget
  own.tool_permission = Permission::kExecute;
  const UserLimits applied = with_overrides(tier, own);
  EXPECT_EQ(applied.max_queued, 7);
  EXPECT_EQ(applied.monthly_budget_micros, 0);
  EXPECT_EQ(applied.tool_permission, Permission::kExecute);
  EXPECT_EQ(applied.max_concurrency, 3);
  EXPECT_EQ(applied.tokens_per_minute, 50000);
  EXPECT_EQ(applied.weight, 4) << "the weight is always the tier's";
}

TEST(UserLimitsType, OneDefaultEverywhere) {
  // The built-in limits of a user whose tier is not configured are those a tier that names
  // nothing gets: tokens_per_minute 200000 in both (it was 0 in the scheduler's own type).
  const config::Config config = config::load_config_text(R"(
postgres: {url: x}
kafka: {bootstrap_servers: b}
models: [{name: m, endpoints: [{url: "http://h/x"}]}]
billing: {prices: [{model: m, effective_from: "2026-01-01", input_per_million: "1"}]}
task_defaults: {tier: plain}
tiers: [{tier: plain}]
)",
                                                         "limits.yaml");
  ASSERT_NE(config.find_tier("plain"), nullptr);
  EXPECT_EQ(config.find_tier("plain")->limits, UserLimits{});
  EXPECT_EQ(UserLimits{}.tokens_per_minute, 200000);
  EXPECT_EQ(config.limits_for(UserLimitOverrides{}), UserLimits{}) << "task_defaults.tier";
}

TEST(UserLimitsType, APermissionReadsBackFromItsName) {
  for (Permission p :
       {Permission::kRead, Permission::kWrite, Permission::kExecute, Permission::kAdmin})
    EXPECT_EQ(parse_permission(to_string(p)), p);
  EXPECT_FALSE(parse_permission("root"));
  EXPECT_FALSE(parse_permission(""));
  EXPECT_FALSE(parse_permission("Read"));
}

}  // namespace
}  // namespace agentfleet
