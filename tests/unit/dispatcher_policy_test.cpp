// The dispatcher's pure pieces: who a request acts as (Authenticator), a user's effective
// limits (tier defaults + overrides), and the limits API's body.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "core/config/config.hpp"
#include "dispatcher/api.hpp"
#include "dispatcher/auth.hpp"
#include "dispatcher/user_limits.hpp"

namespace agentfleet::dispatcher {
namespace {

namespace bhttp = boost::beast::http;

config::Config config_with(const std::string& extra) {
  return config::load_config_text(R"(
postgres: {url: x}
kafka: {bootstrap_servers: b}
models: [{name: m1, endpoints: [{url: "http://h/x"}]}]
billing:
  prices:
    - {model: m1, effective_from: "2026-01-01", input_per_million: "1"}
task_defaults: {tier: standard}
tiers:
  - {tier: standard, max_concurrency: 5, requests_per_minute: 100, tokens_per_minute: 200000,
     max_queued: 10000, monthly_budget: "0", weight: 2}
  - {tier: free, max_concurrency: 1, requests_per_minute: 10, monthly_budget: "2.5",
     tool_permission: read}
)" + extra,
                                  "test.yaml");
}

http::Request request_with(std::initializer_list<std::pair<std::string, std::string>> fields) {
  http::Request request{bhttp::verb::get, "/v1/tasks", 11};
  for (const auto& [name, value] : fields)
    request.insert(name, value);  // a name given twice is sent twice
  return request;
}

TEST(DispatcherAuth, ApiKeysAreMatchedByTheirHashAndActOnlyForTheirUsers) {
  const auto config =
      config_with("auth:\n  api_keys:\n    - {name: ops, sha256: " + sha256_hex("admin-secret") +
                  ", admin: true}\n    - {name: svc, sha256: " + sha256_hex("svc-secret") +
                  ", users: [alice]}\n");
  Authenticator auth(config.auth);
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

  auto admin = auth.authenticate(request_with({{"Authorization", "Bearer admin-secret"}}));
  ASSERT_TRUE(std::holds_alternative<Caller>(admin));
  EXPECT_TRUE(std::get<Caller>(admin).admin);
  EXPECT_TRUE(std::get<Caller>(admin).may_act_for("anyone"));

  auto service = auth.authenticate(request_with({{"X-API-Key", "svc-secret"}}));
  ASSERT_TRUE(std::holds_alternative<Caller>(service));
  EXPECT_EQ(std::get<Caller>(service).name, "svc");
  EXPECT_FALSE(std::get<Caller>(service).admin);
  EXPECT_TRUE(std::get<Caller>(service).may_act_for("alice"));
  EXPECT_FALSE(std::get<Caller>(service).may_act_for("bob"));

  // The scheme is case-insensitive; a wrong or missing key is refused without echoing it.
  EXPECT_TRUE(std::holds_alternative<Caller>(
      auth.authenticate(request_with({{"Authorization", "bearer svc-secret"}}))));
  auto wrong = auth.authenticate(request_with({{"Authorization", "Bearer svc-secreT"}}));
  ASSERT_TRUE(std::holds_alternative<AuthFailure>(wrong));
  EXPECT_EQ(std::get<AuthFailure>(wrong).message.find("svc-secreT"), std::string::npos);
  EXPECT_TRUE(std::holds_alternative<AuthFailure>(auth.authenticate(request_with({}))));
  EXPECT_TRUE(std::holds_alternative<AuthFailure>(
      auth.authenticate(request_with({{"Authorization", "Basic c3ZjOnNlY3JldA=="}}))));
}

TEST(DispatcherAuth, AKeyForAnyUserIsNotAnAdmin) {
  const auto config = config_with(
      "auth:\n  api_keys:\n    - {name: up, sha256: " + sha256_hex("k") + ", users: [\"*\"]}\n");
  Authenticator auth(config.auth);
  auto caller = auth.authenticate(request_with({{"Authorization", "Bearer k"}}));
  ASSERT_TRUE(std::holds_alternative<Caller>(caller));
  EXPECT_TRUE(std::get<Caller>(caller).may_act_for("whoever"));
  EXPECT_FALSE(std::get<Caller>(caller).admin);
}

TEST(DispatcherAuth, GatewayModeTrustsItsHeadersFromTheGatewayAloneAndNoneModeLetsEveryoneIn) {
  const auto gateway = config_with(
      "auth: {mode: gateway, user_header: X-Caller, gateway_keys: [{name: edge, sha256: " +
      sha256_hex("gw-secret") + "}]}\n");
  Authenticator auth(gateway.auth);
  const std::pair<std::string, std::string> proof{"X-Gateway-Key", "gw-secret"};
  auto user = auth.authenticate(request_with({proof, {"X-Caller", "carol"}}));
  ASSERT_TRUE(std::holds_alternative<Caller>(user));
  EXPECT_TRUE(std::get<Caller>(user).may_act_for("carol"));
  EXPECT_FALSE(std::get<Caller>(user).may_act_for("dave"));
  EXPECT_FALSE(std::get<Caller>(user).admin);
  auto admin = auth.authenticate(request_with({proof, {"X-Admin", "true"}}));
  ASSERT_TRUE(std::holds_alternative<Caller>(admin));
  EXPECT_TRUE(std::get<Caller>(admin).admin);
  EXPECT_TRUE(std::holds_alternative<AuthFailure>(auth.authenticate(request_with({proof}))));
  // Identity headers from anyone but the gateway are not believed.
  for (const auto& request :
       {request_with({{"X-Caller", "carol"}}), request_with({{"X-Admin", "true"}}),
        request_with({{"X-Gateway-Key", "guess"}, {"X-Caller", "carol"}}),
        request_with({{"X-Gateway-Key", ""}, {"X-Admin", "true"}})}) {
    const auto refused = auth.authenticate(request);
    ASSERT_TRUE(std::holds_alternative<AuthFailure>(refused));
    EXPECT_NE(std::get<AuthFailure>(refused).message.find("did not come through the gateway"),
              std::string::npos);
  }
  // Two of a header that names the caller: refused, not the first one believed.
  for (const auto& request :
       {request_with({proof, {"X-Caller", "carol"}, {"X-Caller", "admin-user"}}),
        request_with({proof, {"X-Caller", "carol"}, {"X-Admin", "false"}, {"X-Admin", "true"}}),
        request_with({proof, proof, {"X-Caller", "carol"}})}) {
    const auto refused = auth.authenticate(request);
    ASSERT_TRUE(std::holds_alternative<AuthFailure>(refused));
    EXPECT_NE(std::get<AuthFailure>(refused).message.find("more than one"), std::string::npos);
  }

  const auto open = config_with("auth: {mode: none}\n");
  Authenticator none(open.auth);
  auto anyone = none.authenticate(request_with({}));
  ASSERT_TRUE(std::holds_alternative<Caller>(anyone));
  EXPECT_TRUE(std::get<Caller>(anyone).may_act_for("x"));
}

TEST(DispatcherAuth, TwoKeysInOneRequestAreRefused) {
  const auto config =
      config_with("auth:\n  api_keys:\n    - {name: ops, sha256: " + sha256_hex("admin-secret") +
                  ", admin: true}\n");
  Authenticator auth(config.auth);
  for (const auto& request :
       {request_with({{"Authorization", "Bearer admin-secret"}, {"Authorization", "Bearer other"}}),
        request_with({{"X-API-Key", "admin-secret"}, {"X-API-Key", "x"}})}) {
    const auto refused = auth.authenticate(request);
    ASSERT_TRUE(std::holds_alternative<AuthFailure>(refused));
    EXPECT_NE(std::get<AuthFailure>(refused).message.find("more than one key"), std::string::npos);
  }
}

TEST(DispatcherAuth, WithoutAnAuthSectionEveryRequestIsRefused) {
  const auto config = config_with("");
  Authenticator auth(config.auth);
  EXPECT_TRUE(std::holds_alternative<AuthFailure>(
      auth.authenticate(request_with({{"Authorization", "Bearer anything"}}))));
}

TEST(UserLimits, TierDefaultsWithTheUsersOverridesFieldByField) {
  const auto config = config_with("");
  ports::UserOverrides none;
  auto standard = effective_limits(config, none);
  EXPECT_EQ(standard.tier, "standard");
  EXPECT_EQ(standard.limits.max_concurrency, 5);
  EXPECT_EQ(standard.limits.weight, 2);
  EXPECT_EQ(standard.limits.monthly_budget_micros, 0);

  ports::UserOverrides free_user;
  free_user.tier = "free";
  free_user.requests_per_minute = 60;
  auto free_limits = effective_limits(config, free_user);
  EXPECT_EQ(free_limits.tier, "free");
  EXPECT_EQ(free_limits.limits.max_concurrency, 1);       // the tier's
  EXPECT_EQ(free_limits.limits.requests_per_minute, 60);  // the override
  EXPECT_EQ(free_limits.limits.monthly_budget_micros, 2500000);
  EXPECT_EQ(free_limits.limits.tool_permission, Permission::kRead);
  EXPECT_EQ(free_limits.limits, config.limits_for(free_user)) << "what the scheduler applies";

  // A tier the configuration no longer has falls back to the default tier.
  ports::UserOverrides gone;
  gone.tier = "platinum";
  EXPECT_EQ(effective_limits(config, gone).tier, "standard");

  // The queue limit used at submission follows the same rules.
  EXPECT_EQ(queue_limit(config)("free", std::nullopt), 10000);
  EXPECT_EQ(queue_limit(config)("", 7), 7);
}

TEST(UserLimits, TheLimitsBodyIsCheckedFieldByFieldWithItsPath) {
  const auto config = config_with("");
  auto ok = parse_limits_body(
      config, "alice",
      R"({"tier":"free","max_concurrency":3,"tokens_per_minute":5000000000,"monthly_budget":"12.5","tool_permission":"execute","max_queued":null})");
  ASSERT_TRUE(std::holds_alternative<ports::UserOverrides>(ok));
  const auto& o = std::get<ports::UserOverrides>(ok);
  EXPECT_EQ(o.user_id, "alice");
  EXPECT_EQ(o.tier, "free");
  EXPECT_EQ(o.max_concurrency, 3);
  EXPECT_EQ(o.tokens_per_minute, 5000000000);
  EXPECT_EQ(o.monthly_budget_micros, 12500000);
  EXPECT_EQ(o.tool_permission, Permission::kExecute);
  EXPECT_FALSE(o.max_queued.has_value());
  EXPECT_FALSE(o.requests_per_minute.has_value());

  auto path_of = [&](const std::string& body) {
    auto parsed = parse_limits_body(config, "alice", body);
    return std::holds_alternative<codec::SchemaViolation>(parsed)
               ? std::get<codec::SchemaViolation>(parsed).path
               : std::string("accepted");
  };
  EXPECT_EQ(path_of("{"), "/");
  EXPECT_EQ(path_of("[]"), "/");
  EXPECT_EQ(path_of(R"({"max_concurrency":0})"), "/max_concurrency");
  EXPECT_EQ(path_of(R"({"max_concurrency":-2})"), "/max_concurrency");
  EXPECT_EQ(path_of(R"({"max_concurrency":"5"})"), "/max_concurrency");
  EXPECT_EQ(path_of(R"({"requests_per_minute":1.5})"), "/requests_per_minute");
  EXPECT_EQ(path_of(R"({"max_queued":99999999999})"), "/max_queued");
  EXPECT_EQ(path_of(R"({"monthly_budget":10})"), "/monthly_budget");
  EXPECT_EQ(path_of(R"({"monthly_budget":"1.0000001"})"), "/monthly_budget");
  EXPECT_EQ(path_of(R"({"monthly_budget":"-1"})"), "/monthly_budget");
  EXPECT_EQ(path_of(R"({"tier":"platinum"})"), "/tier");
  EXPECT_EQ(path_of(R"({"tool_permission":"root"})"), "/tool_permission");
  EXPECT_EQ(path_of(R"({"max_concurency":3})"), "/max_concurency");
  EXPECT_EQ(path_of(R"({"a/b":1})"), "/a~1b");
  EXPECT_EQ(path_of("{}"), "accepted");  // no overrides: every limit from the tier
}

TEST(UserLimits, TheLimitsJsonShowsEffectiveValuesAndOnlyTheOverridesSet) {
  const auto config = config_with("");
  ports::UserOverrides o;
  o.user_id = "alice";
  o.max_concurrency = 9;
  const std::string json = limits_json("alice", effective_limits(config, o), o);
  EXPECT_NE(json.find(R"("effective":{"max_concurrency":9,"requests_per_minute":100)"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("overrides":{"max_concurrency":9})"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("monthly_budget":"0.000000")"), std::string::npos) << json;
}

TEST(ApiPaths, SegmentsArePercentDecodedAndEmptyOnesDropped) {
  using Parts = std::vector<std::string>;
  EXPECT_EQ(path_segments("/v1/users/a%20b/usage"), (Parts{"v1", "users", "a b", "usage"}));
  EXPECT_EQ(path_segments("//v1///tasks/"), (Parts{"v1", "tasks"}));
  EXPECT_EQ(path_segments("/"), Parts{});
  EXPECT_EQ(path_segments(""), Parts{});
  // A decoded slash stays inside its segment; it never makes a route of its own.
  EXPECT_EQ(path_segments("/v1/users/a%2Fb/limits"), (Parts{"v1", "users", "a/b", "limits"}));
  // Whatever bytes a client encodes come out as they are, for id_problem to judge.
  EXPECT_EQ(path_segments("/v1/users/%FF%0D%0A"), (Parts{"v1", "users", "\xff\r\n"}));
}

TEST(ApiPaths, AnIdIsOneToMaxCharactersOfUtf8WithoutControlCharacters) {
  EXPECT_EQ(id_problem("alice", kMaxUserIdChars), std::nullopt);
  EXPECT_EQ(id_problem("用户-42", kMaxUserIdChars), std::nullopt);
  // Characters, not bytes: 128 three-byte characters are a valid user id, 129 are not.
  std::string han;
  for (int i = 0; i < 128; ++i)
    han += "用";
  EXPECT_EQ(id_problem(han, kMaxUserIdChars), std::nullopt);
  EXPECT_EQ(id_problem(han + "用", kMaxUserIdChars), "must be at most 128 characters");
  EXPECT_EQ(id_problem("", kMaxUserIdChars), "must not be empty");
  EXPECT_EQ(id_problem("a\xff"
                       "b",
                       kMaxUserIdChars),
            "must be valid UTF-8 without NUL characters");
  EXPECT_EQ(id_problem(std::string("a\0b", 3), kMaxUserIdChars),
            "must be valid UTF-8 without NUL characters");
  EXPECT_EQ(id_problem("a\r\nX-Injected: 1", kMaxBatchIdBytes),
            "must not contain control characters");
  EXPECT_EQ(id_problem("tab\there", kMaxBatchIdBytes), "must not contain control characters");
  EXPECT_EQ(id_problem("del\x7f", kMaxBatchIdBytes), "must not contain control characters");
}

}  // namespace
}  // namespace agentfleet::dispatcher
