#include "tests/source_dir.hpp"

#include "core/config/config.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "core/react/prompt.hpp"

namespace agentfleet::config {
namespace {

const std::string kDefaultFile = std::string(AGENTFLEET_SOURCE_DIR) + "/config/agentfleet.yaml";
const std::string kProductionFile =
    std::string(AGENTFLEET_SOURCE_DIR) + "/config/production.example.yaml";

// EnvLookup is a plain function pointer, so the fake environment is a static map that each
// test sets up through the fixture.
std::map<std::string, std::string>& fake_env() {
  static std::map<std::string, std::string> env;
  return env;
}

std::optional<std::string> fake_lookup(const std::string& name) {
  auto it = fake_env().find(name);
  if (it == fake_env().end()) {
    return std::nullopt;
  }
  return it->second;
}

// The smallest valid configuration but for the price every model needs; the billing
// tests append their own `billing:` to it.
const std::string kUnpriced = R"(
postgres:
  url: postgresql://localhost/agentfleet
kafka:
  bootstrap_servers: 127.0.0.1:9092
models:
  - name: m1
    endpoints:
      - url: http://127.0.0.1:8090/v1/chat/completions
)";

// The smallest valid configuration; tests append to it (models last, so a test can add one).
const std::string kMinimal = R"(
billing:
  prices:
    - {model: m1, effective_from: "2026-01-01", input_per_million: "1"}
)" + kUnpriced;

const std::string kTool = R"(
  - name: t1
    description: A tool.
    url: http://127.0.0.1:8091/tools/t1
    parameters:
      type: object
      properties: {}
)";

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { fake_env().clear(); }
  void TearDown() override { fake_env().clear(); }

  static Config load(const std::string& yaml) {
    return load_config_text(yaml, "test.yaml", fake_lookup);
  }

  // The message of the ConfigError that loading `yaml` throws.
  static std::string error_of(const std::string& yaml) {
    try {
      load(yaml);
    } catch (const ConfigError& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected a ConfigError for:\n" << yaml;
    return "";
  }
};

#define EXPECT_CONTAINS(haystack, needle)                          \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) \
      << "expected to find \"" << (needle) << "\" in \"" << (haystack) << "\""

TEST_F(ConfigTest, DefaultFileLoadsWithExpectedValues) {
  Config c = load_config_file(kDefaultFile, fake_lookup);
  EXPECT_EQ(c.source, kDefaultFile);
  EXPECT_EQ(c.postgres.url, "postgresql://postgres@127.0.0.1:5432/agentfleet");
  EXPECT_EQ(c.postgres.pool_size, 8);
  EXPECT_EQ(c.kafka.bootstrap_servers, "127.0.0.1:9092");
  EXPECT_EQ(c.kafka.topics.dispatch, "agent.tasks.dispatch");
  EXPECT_TRUE(c.kafka.properties.empty());
  EXPECT_EQ(c.dispatcher.http.port, 8080);
  EXPECT_EQ(c.dispatcher.max_text_chars, 5000);
  EXPECT_EQ(c.worker.id, "");
  EXPECT_EQ(c.worker.max_tool_calls_per_step, 5);
  EXPECT_EQ(c.worker.trace_result_chars, 500);
  EXPECT_EQ(c.metrics.port, 0);
  EXPECT_EQ(c.metrics.refresh_interval_s, 5);

  EXPECT_EQ(c.task_defaults.model, "sim-model");
  EXPECT_EQ(c.task_defaults.timeout_s, 30);
  EXPECT_EQ(c.task_defaults.max_steps, 10);

  ASSERT_EQ(c.models.size(), 4u);
  const ModelConfig* model = c.find_model("sim-model");
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->protocol, "function_calling");
  EXPECT_FALSE(model->stream);
  // The same simulator asked for streamed answers.
  const ModelConfig* streamed = c.find_model("sim-stream-model");
  ASSERT_NE(streamed, nullptr);
  EXPECT_TRUE(streamed->stream);
  EXPECT_EQ(streamed->provider_model, "sim-model");
  EXPECT_EQ(model->call_timeout_s, 60);
  ASSERT_EQ(model->endpoints.size(), 1u);
  EXPECT_EQ(model->endpoints[0].url, "http://127.0.0.1:8090/v1/chat/completions");
  EXPECT_EQ(model->endpoints[0].api_key, "");
  EXPECT_EQ(c.find_model("nope"), nullptr);
  // The same simulator in the react_json protocol, on the same endpoint.
  const ModelConfig* react_model = c.find_model("sim-react-model");
  ASSERT_NE(react_model, nullptr);
  EXPECT_EQ(react_model->protocol, "react_json");
  EXPECT_EQ(react_model->provider_model, "sim-model");
  ASSERT_EQ(react_model->endpoints.size(), 1u);
  EXPECT_EQ(react_model->endpoints[0].url, model->endpoints[0].url);
  // And as a thinking model that needs each tool-calling turn's reasoning back.
  EXPECT_EQ(model->reasoning_echo, ReasoningEcho::kNone);
  const ModelConfig* thinking = c.find_model("sim-thinking-model");
  ASSERT_NE(thinking, nullptr);
  EXPECT_EQ(thinking->reasoning_echo, ReasoningEcho::kToolTurns);
  EXPECT_EQ(thinking->provider_model, "sim-model");

  ASSERT_EQ(c.billing.prices.size(), 4u);
  EXPECT_EQ(c.billing.prices[1].model, "sim-react-model");
  const PriceConfig& price = c.billing.prices[0];
  EXPECT_EQ(price.model, "sim-model");
  EXPECT_EQ(price.currency, "CNY");
  EXPECT_EQ(price.effective_from, "2026-01-01");
  EXPECT_EQ(price.input_per_million, "2.00");
  EXPECT_EQ(price.cached_input_per_million, "0.50");
  EXPECT_EQ(price.output_per_million, "8.00");
  ASSERT_EQ(price.windows.size(), 1u);
  EXPECT_EQ(price.windows[0].from, "00:30");
  EXPECT_EQ(price.windows[0].to, "08:30");
  EXPECT_EQ(price.windows[0].multiplier, "0.5");

  ASSERT_EQ(c.tiers.size(), 5u);
  EXPECT_EQ(c.tiers[0].tier, "free");
  EXPECT_EQ(c.tiers[0].limits.max_concurrency, 2);
  EXPECT_EQ(c.tiers[0].limits.requests_per_minute, 20);
  EXPECT_EQ(c.tiers[1].tier, "standard");
  EXPECT_EQ(c.tiers[1].limits.max_concurrency, 5);
  EXPECT_EQ(c.tiers[1].limits.requests_per_minute, 100);
  EXPECT_EQ(c.tiers[2].tier, "batch");
  EXPECT_EQ(c.tiers[2].limits.max_concurrency, 10);
  EXPECT_EQ(c.tiers[2].limits.requests_per_minute, 600);
  EXPECT_EQ(c.tiers[3].tier, "readonly");
  EXPECT_EQ(c.tiers[3].limits.tool_permission, Permission::kRead);
  EXPECT_EQ(c.tiers[4].tier, "trial");
  EXPECT_EQ(c.tiers[4].allowed_models, std::vector<std::string>{"sim-model"});
  EXPECT_EQ(c.tiers[2].limits.tokens_per_minute, 2000000);
  EXPECT_EQ(c.tiers[3].limits.tokens_per_minute, 200000);  // default
  EXPECT_EQ(c.tiers[3].limits.monthly_budget_micros, 0);
  EXPECT_EQ(c.tiers[3].limits.weight, 1);  // default
  EXPECT_EQ(c.tiers[1].limits.weight, 2);

  // The development keys, by hash only.
  EXPECT_EQ(c.auth.mode, "api_keys");
  ASSERT_EQ(c.auth.api_keys.size(), 3u);
  EXPECT_TRUE(c.auth.api_keys[0].admin);
  EXPECT_EQ(c.auth.api_keys[1].users, std::vector<std::string>{"u1"});
  EXPECT_EQ(c.dispatcher.batch_share_percent, 20);
  EXPECT_EQ(c.dispatcher.max_batch_lines, 1000000);

  ASSERT_EQ(c.tools.size(), 6u);
  const char* const names[] = {"search_items", "create_item",   "update_item",
                               "delete_item",  "complete_todo", "get_event_groups"};
  for (const char* name : names) {
    const ToolConfig* tool = c.find_tool(name);
    ASSERT_NE(tool, nullptr) << name;
    EXPECT_EQ(tool->url, std::string("http://127.0.0.1:8091/tools/") + name);
    EXPECT_EQ(tool->timeout_s, 60);
    rapidjson::Document params;
    params.Parse(tool->parameters_schema.c_str());
    ASSERT_FALSE(params.HasParseError()) << name;
    EXPECT_STREQ(params["type"].GetString(), "object") << name;
  }
  const ToolConfig* search = c.find_tool("search_items");
  EXPECT_EQ(search->permission, Permission::kRead);
  EXPECT_TRUE(search->idempotent);
  const ToolConfig* create = c.find_tool("create_item");
  EXPECT_EQ(create->permission, Permission::kWrite);
  EXPECT_FALSE(create->idempotent);
  rapidjson::Document create_params;
  create_params.Parse(create->parameters_schema.c_str());
  ASSERT_TRUE(create_params["required"].IsArray());
  EXPECT_EQ(create_params["required"].Size(), 3u);
  EXPECT_EQ(create_params["properties"]["time_segment"]["enum"].Size(), 7u);
  EXPECT_EQ(c.find_tool("nope"), nullptr);

  EXPECT_EQ(c.react.markers.fallback, "action_completed");
  EXPECT_EQ(c.react.markers.action_completed, std::vector<std::string>{"✅"});
  // The prompt comes from config/system-prompt.zh.md, the same text as the built-in one.
  EXPECT_EQ(c.react.system_prompt_file, "system-prompt.zh.md");
  EXPECT_EQ(c.react.system_prompt, react::builtin_system_prompt());
  EXPECT_EQ(c.react.tool_result_context_chars, 4000);
}

TEST_F(ConfigTest, DefaultFileTakesOverridesFromTheEnvironment) {
  fake_env() = {{"AGENTFLEET_DISPATCHER_PORT", "18080"},
                {"AGENTFLEET_WORKER_ID", "worker-7"},
                {"LLM_SIM_PORT", "19090"},
                {"LLM_API_KEY", "sk-test"},
                {"TOOL_SIM_URL", "http://tools:9000"},
                {"AGENTFLEET_METRICS_PORT", "9464"}};
  Config c = load_config_file(kDefaultFile, fake_lookup);
  EXPECT_EQ(c.dispatcher.http.port, 18080);
  EXPECT_EQ(c.worker.id, "worker-7");
  EXPECT_EQ(c.models[0].endpoints[0].url, "http://127.0.0.1:19090/v1/chat/completions");
  EXPECT_EQ(c.models[0].endpoints[0].api_key, "sk-test");
  EXPECT_EQ(c.find_tool("delete_item")->url, "http://tools:9000/tools/delete_item");
  EXPECT_EQ(c.metrics.port, 9464);
}

TEST_F(ConfigTest, ProductionExampleLoadsWithItsEnvironment) {
  fake_env() = {{"AGENTFLEET_PG_URL", "postgresql://agentfleet@pg:5432/agentfleet"},
                {"KAFKA_BOOTSTRAP_SERVERS", "b1:9093,b2:9093"},
                {"KAFKA_USERNAME", "svc-agentfleet"},
                {"KAFKA_PASSWORD", "s3cret: with # odd chars"},
                {"DEEPSEEK_API_KEY", "sk-deepseek"},
                {"LLM_GATEWAY_URL", "https://llm-gw.internal"},
                {"LLM_GATEWAY_API_KEY", "sk-gateway"},
                {"TOOLS_BASE_URL", "https://tools.internal"},
                {"TOOLS_SERVICE_TOKEN", "tok-tools"},
                {"AGENTFLEET_ADMIN_KEY_SHA256", std::string(64, 'a')},
                {"AGENTFLEET_ORDERS_KEY_SHA256", std::string(64, 'b')}};
  Config c = load_config_file(kProductionFile, fake_lookup);
  ASSERT_EQ(c.auth.api_keys.size(), 2u);
  EXPECT_EQ(c.auth.api_keys[1].users, std::vector<std::string>{"*"});
  const ToolConfig* search = c.find_tool("search_items");
  ASSERT_NE(search, nullptr);
  EXPECT_EQ(search->method, "POST");
  ASSERT_EQ(search->headers.size(), 1u);
  EXPECT_EQ(search->headers[0].first, "Authorization");
  EXPECT_EQ(search->headers[0].second, "Bearer tok-tools");
  ASSERT_NE(c.find_tier("free"), nullptr);
  EXPECT_EQ(c.find_tier("free")->limits.tool_permission, Permission::kRead);
  EXPECT_EQ(c.find_tier("standard")->limits.tool_permission, Permission::kWrite);
  EXPECT_EQ(c.task_defaults.tier, "standard");
  EXPECT_EQ(c.postgres.url, "postgresql://agentfleet@pg:5432/agentfleet");
  EXPECT_EQ(c.kafka.bootstrap_servers, "b1:9093,b2:9093");
  EXPECT_EQ(c.kafka.properties.at("security.protocol"), "SASL_SSL");
  EXPECT_EQ(c.kafka.properties.at("sasl.username"), "svc-agentfleet");
  EXPECT_EQ(c.kafka.properties.at("sasl.password"), "s3cret: with # odd chars");
  EXPECT_EQ(c.kafka.properties.at("enable.idempotence"), "true");
  EXPECT_EQ(c.worker.id, "");
  ASSERT_EQ(c.models.size(), 2u);
  EXPECT_EQ(c.task_defaults.model, "deepseek-chat");
  const ModelConfig* deepseek = c.find_model("deepseek-chat");
  ASSERT_NE(deepseek, nullptr);
  EXPECT_EQ(deepseek->reasoning_echo, ReasoningEcho::kToolTurns);
  ASSERT_EQ(deepseek->endpoints.size(), 2u);
  EXPECT_EQ(deepseek->endpoints[0].url, "https://api.deepseek.com/chat/completions");
  EXPECT_EQ(deepseek->endpoints[0].api_key, "sk-deepseek");
  EXPECT_EQ(deepseek->endpoints[1].url, "https://llm-gw.internal/v1/chat/completions");
  EXPECT_EQ(deepseek->endpoints[1].api_key, "sk-gateway");
  EXPECT_EQ(deepseek->endpoints[0].name, "deepseek");
  EXPECT_EQ(deepseek->endpoints[0].requests_per_minute, 500);
  EXPECT_EQ(deepseek->endpoints[0].tokens_per_minute, 1000000);
  EXPECT_EQ(deepseek->endpoints[1].name, "gateway");
  EXPECT_EQ(deepseek->endpoints[1].tokens_per_minute, 400000);
  EXPECT_EQ(deepseek->retry.base_ms, 250);
  EXPECT_EQ(deepseek->circuit_breaker.failure_threshold, 5);
  EXPECT_EQ(deepseek->quota_cooloff_s, 300);
  const ModelConfig* mini = c.find_model("gpt-4o-mini");
  ASSERT_NE(mini, nullptr);
  EXPECT_EQ(mini->provider_model, "gpt-4o-mini");  // the name when not given
  EXPECT_EQ(c.billing.prices.size(), 2u);
  EXPECT_EQ(c.billing.prices[1].currency, "USD");
  EXPECT_EQ(c.tools.size(), 6u);
  EXPECT_EQ(c.find_tool("create_item")->url, "https://tools.internal/tools/create_item");
  EXPECT_EQ(c.metrics.port, 9464);
  EXPECT_EQ(c.react.system_prompt, react::builtin_system_prompt());
  EXPECT_EQ(c.metrics.refresh_interval_s, 15);

  // Without its environment it names the first missing variable.
  fake_env().erase("KAFKA_PASSWORD");
  try {
    load_config_file(kProductionFile, fake_lookup);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_CONTAINS(e.what(), kProductionFile +
                                  ": /kafka/properties/sasl.password: "
                                  "environment variable KAFKA_PASSWORD is not set "
                                  "(line ");
  }
}

TEST_F(ConfigTest, MinimalConfigGetsTheDefaults) {
  Config c = load(kMinimal);
  EXPECT_EQ(c.source, "test.yaml");
  EXPECT_EQ(c.postgres.pool_size, 8);
  EXPECT_EQ(c.kafka.client_id, "agentfleet");
  EXPECT_EQ(c.kafka.topics.results, "agent.tasks.results");
  EXPECT_EQ(c.kafka.delivery_timeout_ms, 30000);
  EXPECT_EQ(c.dispatcher.http.host, "127.0.0.1");
  EXPECT_EQ(c.dispatcher.http.port, 8080);
  EXPECT_EQ(c.worker.lease_s, 30);
  EXPECT_EQ(c.task_defaults.model, "m1");  // the first model
  EXPECT_EQ(c.task_defaults.priority, "interactive");
  EXPECT_EQ(c.models[0].provider_model, "m1");
  EXPECT_EQ(c.models[0].max_retries, 3);
  EXPECT_EQ(c.models[0].retry.base_ms, 250);
  EXPECT_EQ(c.models[0].retry.max_ms, 20000);
  EXPECT_EQ(c.models[0].circuit_breaker.failure_threshold, 5);
  EXPECT_EQ(c.models[0].circuit_breaker.open_s, 30);
  EXPECT_EQ(c.models[0].quota_cooloff_s, 300);
  EXPECT_EQ(c.models[0].endpoints[0].name, "127.0.0.1");  // the URL's host
  EXPECT_EQ(c.models[0].endpoints[0].requests_per_minute, 0);
  EXPECT_EQ(c.models[0].endpoints[0].tokens_per_minute, 0);
  EXPECT_TRUE(c.tools.empty());
  EXPECT_TRUE(c.tiers.empty());
  EXPECT_EQ(c.billing.time_zone, "Asia/Shanghai");
  EXPECT_EQ(c.react.markers.error, std::vector<std::string>{"❌"});
  EXPECT_TRUE(c.react.system_prompt.empty());  // the built-in prompt
  EXPECT_EQ(c.react.tool_result_context_chars, 4000);
  EXPECT_EQ(c.metrics.port, 0);
  EXPECT_EQ(c.metrics.refresh_interval_s, 15);
}

TEST_F(ConfigTest, MetricsRefreshIntervalIsPositive) {
  EXPECT_EQ(load(kMinimal + "metrics:\n  refresh_interval_s: 2\n").metrics.refresh_interval_s, 2);
  EXPECT_CONTAINS(error_of(kMinimal + "metrics:\n  refresh_interval_s: 0\n"),
                  "/metrics/refresh_interval_s");
}

TEST_F(ConfigTest, UnknownKeyIsRefusedWithItsPath) {
  std::string msg = error_of(R"(
postgres: {url: x}
kafka:
  bootstrap_servers: b
  topicz:
    results: r
models: [{name: m, endpoints: [{url: "http://h/x"}]}]
)");
  EXPECT_CONTAINS(msg, "test.yaml: /kafka/topicz: unknown key 'topicz'");
  EXPECT_CONTAINS(msg, "(line 5)");
}

TEST_F(ConfigTest, UnknownKeyInsideAToolIsRefusedWithItsPath) {
  std::string msg = error_of(kMinimal + "tools:" + kTool + kTool + "    timeoutt: 5\n");
  // The duplicate name would also be wrong, but the schema runs first.
  EXPECT_CONTAINS(msg, "/tools/1/timeoutt: unknown key 'timeoutt'");
}

TEST_F(ConfigTest, WrongTypeIsRefusedWithItsPath) {
  std::string msg = error_of(R"(
postgres: {url: x, pool_size: many}
kafka: {bootstrap_servers: b}
models: [{name: m, endpoints: [{url: "http://h/x"}]}]
)");
  EXPECT_CONTAINS(msg, "test.yaml: /postgres/pool_size: expected integer, got string");

  msg = error_of(kMinimal + "dispatcher:\n  http:\n    port: \"8080\"\n");
  EXPECT_CONTAINS(msg, "/dispatcher/http/port: expected integer, got string");

  msg = error_of(kMinimal + "dispatcher:\n  http:\n    port: 70000\n");
  EXPECT_CONTAINS(msg, "/dispatcher/http/port: must be <= 65535");
}

TEST_F(ConfigTest, MissingRequiredKeyIsNamed) {
  std::string msg = error_of(R"(
postgres: {url: x}
kafka: {client_id: c}
models: [{name: m, endpoints: [{url: "http://h/x"}]}]
)");
  EXPECT_CONTAINS(msg, "test.yaml: /kafka: missing required key 'bootstrap_servers'");
}

TEST_F(ConfigTest, UnsetVariableIsAnErrorNamingIt) {
  try {
    interpolate("first line\nuses ${NOT_SET_ANYWHERE}\n", fake_lookup);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "environment variable NOT_SET_ANYWHERE is not set (line 2)");
  }
}

TEST_F(ConfigTest, UnsetVariableErrorNamesTheVariablePathAndLine) {
  const std::string text = R"(postgres:
  url: postgresql://localhost/agentfleet
metrics:
  host: ${METRICS_HOST}
)";
  EXPECT_EQ(error_of(text),
            "test.yaml: /metrics/host: environment variable METRICS_HOST is not set (line 4)");
  // A value on the line after its key, and a line inside a block scalar.
  EXPECT_EQ(error_of("metrics:\n  host:\n    ${METRICS_HOST}\n"),
            "test.yaml: /metrics/host: environment variable METRICS_HOST is not set (line 3)");
  EXPECT_EQ(error_of("react:\n  system_prompt: |\n    You are helpful.\n    Today: ${TODAY}\n"),
            "test.yaml: /react/system_prompt: environment variable TODAY is not set (line 4)");
  EXPECT_EQ(error_of("worker:\n  id: \"${WORKER-ID}\"\n"),
            "test.yaml: /worker/id: invalid reference '${WORKER-ID}': expected ${NAME} or "
            "${NAME:-default}; write $${ for a literal ${ (line 2)");
  EXPECT_EQ(error_of("models:\n  - name: m1\n    provider_model: ${MODEL\n"),
            "test.yaml: /models/0/provider_model: unterminated '${' (write $${ for a literal ${) "
            "(line 3)");
  // Folded and multi-line plain scalars join their lines; the line is still the source's.
  EXPECT_EQ(error_of("react:\n  system_prompt: >\n    You are helpful.\n\n    Be brief.\n"
                     "    Today: ${TODAY}\n"),
            "test.yaml: /react/system_prompt: environment variable TODAY is not set (line 6)");
  EXPECT_EQ(error_of("react:\n  system_prompt: You are\n    helpful.\n\n    Today is ${TODAY}\n"),
            "test.yaml: /react/system_prompt: environment variable TODAY is not set (line 5)");
}

TEST_F(ConfigTest, InterpolationDefaultsAndLiterals) {
  fake_env() = {{"SET", "value"}, {"EMPTY", ""}};
  EXPECT_EQ(interpolate("${SET} ${SET:-other}", fake_lookup), "value value");
  EXPECT_EQ(interpolate("${UNSET:-fallback} ${EMPTY:-fallback}", fake_lookup), "fallback fallback");
  EXPECT_EQ(interpolate("[${UNSET:-}]", fake_lookup), "[]");
  EXPECT_EQ(interpolate("[${EMPTY}]", fake_lookup), "[]");
  EXPECT_EQ(interpolate("url: http://h:${UNSET:-80}/x", fake_lookup), "url: http://h:80/x");
  EXPECT_EQ(interpolate("a: $${SET} and $$ and $x", fake_lookup), "a: ${SET} and $$ and $x");
  // One string, whatever it holds: a '#' starts no comment here (comments are skipped by
  // the loader, which substitutes values only).
  EXPECT_THROW(interpolate("# mentions ${UNSET}", fake_lookup), ConfigError);
  EXPECT_THROW(interpolate("x: ${UNTERMINATED", fake_lookup), ConfigError);
  EXPECT_THROW(interpolate("x: ${BAD-NAME}", fake_lookup), ConfigError);
  EXPECT_THROW(interpolate("x: ${}", fake_lookup), ConfigError);
}

TEST_F(ConfigTest, SecretsAreSubstitutedIntoValuesVerbatim) {
  // Each of these broke or changed the configuration when it was substituted into the text.
  const std::vector<std::string> secrets = {
      "p#a: *x\"y\\z",   "s3cret #not-a-comment", "user: admin", "*alias", "&anchor",
      "say \"hi\" \\o/", "line one\nline two",    "{[,]}",       "- item", "!tag",
      "'single'",        "@at `tick` %pct",       "  padded  "};
  for (const std::string& secret : secrets) {
    SCOPED_TRACE(secret);
    fake_env() = {{"SECRET", secret}};
    const std::string text = R"(
postgres:
  url: ${SECRET}
kafka:
  bootstrap_servers: 127.0.0.1:9092
  properties:
    sasl.password: "${SECRET}"
    sasl.username: '${SECRET}'
billing:
  prices:
    - {model: m1, effective_from: "2026-01-01", input_per_million: "1"}
models:
  - name: m1
    endpoints:
      - url: http://127.0.0.1:8090/v1/chat/completions
        api_key: "Bearer ${SECRET}" # a comment; ${SECRET} here is not substituted
react:
  system_prompt: |
    before
    ${SECRET}
)";
    Config c = load(text);
    EXPECT_EQ(c.postgres.url, secret);
    EXPECT_EQ(c.kafka.properties.at("sasl.password"), secret);
    EXPECT_EQ(c.kafka.properties.at("sasl.username"), secret);
    EXPECT_EQ(c.models.at(0).endpoints.at(0).api_key, "Bearer " + secret);
    EXPECT_EQ(c.react.system_prompt, "before\n" + secret + "\n");
  }
}

TEST_F(ConfigTest, PlainReferencesAreTypedQuotedOnesStayStrings) {
  EXPECT_EQ(load(kMinimal + "task_defaults:\n  timeout_s: ${T:-60}\n").task_defaults.timeout_s, 60);
  fake_env() = {{"T", "60"}, {"B", "true"}};
  EXPECT_EQ(load(kMinimal + "task_defaults:\n  timeout_s: ${T}\n").task_defaults.timeout_s, 60);
  EXPECT_CONTAINS(error_of(kMinimal + "task_defaults:\n  timeout_s: \"${T}\"\n"),
                  "test.yaml: /task_defaults/timeout_s: expected integer, got string");
  EXPECT_EQ(load(kMinimal + "worker:\n  id: \"${T}\"\n").worker.id, "60");
  EXPECT_CONTAINS(error_of(kMinimal + "worker:\n  id: ${T}\n"),
                  "/worker/id: expected string, got integer");
  EXPECT_CONTAINS(error_of(kMinimal + "worker:\n  id: ${B}\n"),
                  "/worker/id: expected string, got boolean");
  EXPECT_EQ(load(kMinimal + "worker:\n  id: \"${B}\"\n").worker.id, "true");
  // An empty plain value is null, like an empty `timeout_s:`; quoted it is "".
  EXPECT_CONTAINS(error_of(kMinimal + "task_defaults:\n  timeout_s: ${UNSET:-}\n"),
                  "/task_defaults/timeout_s: expected integer, got null");
  EXPECT_EQ(load(kMinimal + "worker:\n  id: \"${UNSET:-}\"\n").worker.id, "");
  // A value that plain typing would change (a leading zero, hex, an exponent, a '+', a
  // capitalised boolean) stays the text it is: Helm's toYaml writes ${SECRET} unquoted.
  for (const std::string secret : {"007", "0x10", "0o17", "1e3", "+5", "1.50", "True", "-0"}) {
    fake_env() = {{"P", secret}};
    Config c = load(kMinimal + "worker:\n  id: ${P}\n");
    EXPECT_EQ(c.worker.id, secret);
  }
  fake_env() = {{"P", "42"}};
  EXPECT_EQ(load(kMinimal + "task_defaults:\n  timeout_s: ${P}\n").task_defaults.timeout_s, 42);
}

TEST_F(ConfigTest, CommentsAndKeysAreNotSubstituted) {
  Config c = load(kMinimal +
                  "# set ${UNSET_IN_A_COMMENT} to change this\n"
                  "worker:\n"
                  "  id: w-1  # or ${UNSET_AFTER_A_VALUE}, or even ${UNTERMINATED\n"
                  "    # an indented ${UNSET_TOO}\n");
  EXPECT_EQ(c.worker.id, "w-1");
  fake_env() = {{"KEY", "host"}};
  EXPECT_CONTAINS(error_of(kMinimal + "metrics:\n  ${KEY}: 0.0.0.0\n"),
                  "/metrics/${KEY}: unknown key '${KEY}'");
}

TEST_F(ConfigTest, UnquotedReferenceInAFlowCollectionIsExplained) {
  fake_env() = {{"PORT", "9999"}};
  EXPECT_CONTAINS(error_of(kMinimal + "dispatcher: {http: {port: ${PORT}}}\n"),
                  "quote it, or write the collection in block style");
  EXPECT_EQ(load(kMinimal + "worker: {id: \"${PORT}\"}\n").worker.id, "9999");
}

TEST_F(ConfigTest, LiteralDollarBraceSurvivesIntoValues) {
  Config c = load(kMinimal + "react:\n  system_prompt: \"Use $${name} here\"\n");
  EXPECT_EQ(c.react.system_prompt, "Use ${name} here");
  c = load(kMinimal + "worker:\n  id: $${HOSTNAME}\n");
  EXPECT_EQ(c.worker.id, "${HOSTNAME}");
  // A variable's value is not substituted again.
  fake_env() = {{"OUTER", "${INNER} and $${"}};
  EXPECT_EQ(load(kMinimal + "worker:\n  id: ${OUTER}\n").worker.id, "${INNER} and $${");
}

TEST_F(ConfigTest, InterpolatedIntegerIsAnInteger) {
  fake_env() = {{"PORT", "9999"}};
  Config c = load(kMinimal +
                  "dispatcher:\n  http:\n    port: ${PORT}\n"
                  "metrics:\n  port: ${METRICS_PORT:-9100}\n");
  EXPECT_EQ(c.dispatcher.http.port, 9999);
  EXPECT_EQ(c.metrics.port, 9100);

  fake_env() = {{"PORT", "eighty"}};
  EXPECT_CONTAINS(error_of(kMinimal + "dispatcher:\n  http:\n    port: ${PORT}\n"),
                  "/dispatcher/http/port: expected integer, got string");
}

TEST_F(ConfigTest, ScalarsFollowTheYamlCoreSchema) {
  // Unquoted true is a boolean, so a string field refuses it; quoted it is a string.
  EXPECT_CONTAINS(error_of(kMinimal + "worker:\n  id: true\n"),
                  "/worker/id: expected string, got boolean");
  EXPECT_EQ(load(kMinimal + "worker:\n  id: \"true\"\n").worker.id, "true");
  EXPECT_EQ(load(kMinimal + "worker:\n  id: 'w-1'\n").worker.id, "w-1");
  // yes/no are plain strings in YAML 1.2.
  EXPECT_EQ(load(kMinimal + "worker:\n  id: yes\n").worker.id, "yes");
  // A number where a string is expected is refused rather than silently converted.
  EXPECT_CONTAINS(error_of(kMinimal + "worker:\n  id: 12345\n"),
                  "/worker/id: expected string, got integer");
  EXPECT_EQ(load(kMinimal + "worker:\n  id: \"12345\"\n").worker.id, "12345");
  // A float where an integer is expected.
  EXPECT_CONTAINS(error_of(kMinimal + "worker:\n  lease_s: 1.5\n"),
                  "/worker/lease_s: expected integer, got number");
  // Hex integers are integers.
  EXPECT_EQ(load(kMinimal + "worker:\n  lease_s: 0x40\n").worker.lease_s, 64);
  // An empty value is null, which a string field refuses.
  EXPECT_CONTAINS(error_of(kMinimal + "worker:\n  id:\n"), "/worker/id: expected string, got null");
}

TEST_F(ConfigTest, PricesMustBeQuotedDecimalStrings) {
  const std::string price = R"(
billing:
  prices:
    - model: m1
      effective_from: "2026-01-01"
      input_per_million: )";
  EXPECT_CONTAINS(error_of(kUnpriced + price + "2.00\n"),
                  "/billing/prices/0/input_per_million: expected string, got number");
  EXPECT_CONTAINS(error_of(kUnpriced + price + "\"2,00\"\n"),
                  "/billing/prices/0/input_per_million: \"2,00\" does not match the pattern");
  EXPECT_EQ(load(kUnpriced + price + "\"2.00\"\n").billing.prices[0].input_per_million, "2.00");
}

TEST_F(ConfigTest, BudgetsAreKeptInOneCurrencyAndEveryOtherNeedsARate) {
  // The budget currency is the first price's unless given.
  EXPECT_EQ(load(kMinimal).billing.budget_currency, "CNY");
  const std::string in_dollars = kUnpriced + R"(
billing:
  prices:
    - {model: m1, currency: USD, effective_from: "2026-01-01", input_per_million: "1"}
)";
  EXPECT_EQ(load(in_dollars).billing.budget_currency, "USD");
  // A price in a currency the budgets cannot count would make that model free.
  EXPECT_CONTAINS(error_of(in_dollars + "  budget_currency: CNY\n"),
                  "/billing/prices/0/currency: prices in USD need billing.exchange_rates.USD");
  const Config c = load(in_dollars + "  budget_currency: CNY\n  exchange_rates: {USD: \"7.2\"}\n");
  EXPECT_EQ(c.billing.budget_currency, "CNY");
  const billing::Exchange exchange = budget_exchange(c.billing);
  EXPECT_EQ(exchange.target(), "CNY");
  EXPECT_EQ(exchange.to_target(1'000'000, "USD"), 7'200'000);
  EXPECT_CONTAINS(error_of(in_dollars + "  budget_currency: CNY\n  exchange_rates: {USD: \"0\"}\n"),
                  "/billing/exchange_rates/USD: '0' is not a rate");
  EXPECT_CONTAINS(error_of(in_dollars + "  exchange_rates: {USD: \"1\"}\n"),
                  "/billing/exchange_rates/USD: the budget currency needs no rate");
  EXPECT_CONTAINS(error_of(in_dollars + "  budget_currency: usd\n"), "/billing/budget_currency");
  EXPECT_CONTAINS(error_of(in_dollars + "  exchange_rates: {usd: \"1\"}\n"),
                  "/billing/exchange_rates");
}

TEST_F(ConfigTest, ATierMayAllowSomeModelsOnly) {
  const std::string two_models = kUnpriced + R"(
  - name: m2
    endpoints:
      - url: http://127.0.0.1:8090/v1/chat/completions
)";
  const std::string priced = two_models + R"(billing:
  prices:
    - {model: m1, effective_from: "2026-01-01", input_per_million: "1"}
    - {model: m2, effective_from: "2026-01-01", input_per_million: "1"}
task_defaults: {tier: standard}
)";
  const Config c = load(priced + R"(tiers:
  - {tier: standard}
  - {tier: trial, allowed_models: [m2]}
)");
  EXPECT_EQ(c.find_tier("trial")->allowed_models, std::vector<std::string>{"m2"});
  EXPECT_EQ(c.model_refusal("trial", "m2"), "");
  EXPECT_EQ(c.model_refusal("trial", "m1"),
            "model 'm1' is not allowed for tier 'trial' (allowed: m2)");
  EXPECT_EQ(c.model_refusal("", "m1"), "") << "the default tier allows every model";
  EXPECT_EQ(c.model_refusal("no-such-tier", "m1"), "") << "an unknown tier is the default";
  EXPECT_CONTAINS(error_of(priced + "tiers:\n  - {tier: standard, allowed_models: [m3]}\n"),
                  "/tiers/0/allowed_models/0: unknown model 'm3' (not in models)");
}

TEST_F(ConfigTest, EveryModelNeedsAPrice) {
  EXPECT_CONTAINS(error_of(kUnpriced), "/models/0/name: model 'm1' has no price in billing.prices");
}

TEST_F(ConfigTest, SemanticChecksOnPrices) {
  EXPECT_CONTAINS(error_of(kUnpriced + R"(
billing:
  prices:
    - {model: other, effective_from: "2026-01-01"}
)"),
                  "/billing/prices/0/model: unknown model 'other'");
  EXPECT_CONTAINS(error_of(kUnpriced + R"(
billing:
  prices:
    - {model: m1, effective_from: "2026-02-30"}
)"),
                  "/billing/prices/0/effective_from: '2026-02-30' is neither a YYYY-MM-DD date "
                  "nor an instant");
  EXPECT_CONTAINS(error_of(kUnpriced + R"(
billing:
  prices:
    - {model: m1, effective_from: "2026-01-01"}
    - {model: m1, effective_from: "2026-01-01"}
)"),
                  "/billing/prices/1/effective_from: model 'm1' already has a price");
  EXPECT_CONTAINS(error_of(kUnpriced + R"(
billing:
  prices:
    - model: m1
      effective_from: "2026-01-01"
      windows: [{from: "25:00", to: "08:00", multiplier: "0.5"}]
)"),
                  "/billing/prices/0/windows/0/from: \"25:00\" does not match the pattern");
  EXPECT_CONTAINS(error_of(kUnpriced + R"(
billing:
  prices:
    - model: m1
      effective_from: "2026-01-01"
      windows: [{from: "08:00", to: "08:00", multiplier: "0.5"}]
)"),
                  "/billing/prices/0/windows/0/to: a window must not be empty");
  // The same instant written two ways is one price twice.
  EXPECT_CONTAINS(error_of(kUnpriced + R"(
billing:
  time_zone: Asia/Shanghai
  prices:
    - {model: m1, effective_from: "2026-01-01"}
    - {model: m1, effective_from: "2025-12-31T16:00:00Z"}
)"),
                  "/billing/prices/1/effective_from: model 'm1' already has a price from that "
                  "instant (2026-01-01)");
  EXPECT_CONTAINS(error_of(kUnpriced + R"(
billing:
  prices:
    - {model: m1, effective_from: "2026-01-01T25:00+08:00"}
)"),
                  "/billing/prices/0/effective_from: '2026-01-01T25:00+08:00' is neither");
  EXPECT_CONTAINS(
      error_of(kUnpriced + R"(
billing:
  prices:
    - {model: m1, effective_from: "2026-01-01T08:00"}
)"),
      "/billing/prices/0/effective_from: \"2026-01-01T08:00\" does not match the pattern")
      << "an instant without its offset is ambiguous";
  EXPECT_CONTAINS(error_of(kUnpriced + R"(
billing:
  prices:
    - {model: m1, effective_from: "2026-01-01", time_zone: Mars/Olympus_Mons}
)"),
                  "/billing/prices/0/time_zone: unknown time zone 'Mars/Olympus_Mons'");
  EXPECT_CONTAINS(error_of(kUnpriced + R"(
billing:
  time_zone: Moon/Tranquility
  prices:
    - {model: m1, effective_from: "2026-01-01"}
)"),
                  "/billing/time_zone: unknown time zone 'Moon/Tranquility'");
  EXPECT_CONTAINS(error_of(kUnpriced + R"(
billing:
  prices:
    - model: m1
      effective_from: "2026-01-01"
      windows: [{from: "00:00", to: "24:00", multiplier: "0.5", days: [sat, weekend]}]
)"),
                  "/billing/prices/0/windows/0/days/1:");
  EXPECT_CONTAINS(error_of(kUnpriced + R"(
billing:
  prices:
    - model: m1
      effective_from: "2026-01-01"
      windows: [{from: "00:00", to: "24:00", multiplier: "0.5", days: []}]
)"),
                  "/billing/prices/0/windows/0/days:");
  EXPECT_CONTAINS(error_of(kUnpriced + R"(
billing:
  holidays: ["2026-10-01", "2026-02-30"]
  prices:
    - {model: m1, effective_from: "2026-01-01"}
)"),
                  "/billing/holidays/1: '2026-02-30' is not a valid YYYY-MM-DD date");
  // A year the wall clock cannot count to (found by config_fuzz: it overflowed).
  EXPECT_CONTAINS(error_of(kUnpriced + R"(
billing:
  prices:
    - {model: m1, effective_from: "1013-01-01", input_per_million: "1"}
)"),
                  "/billing/prices/0/effective_from: '1013-01-01' is neither a YYYY-MM-DD date");
  EXPECT_CONTAINS(error_of(kUnpriced + R"(
billing:
  holidays: ["9999-12-31"]
  prices:
    - {model: m1, effective_from: "2026-01-01"}
)"),
                  "'9999-12-31' is not a valid YYYY-MM-DD date from 1970 to 2200");
  EXPECT_CONTAINS(error_of(kUnpriced + R"(
billing:
  prices:
    - {model: m1, effective_from: "2026-01-01", input_per_million: "0.0000001"}
)"),
                  "/billing/prices/0/input_per_million: '0.0000001' is not a price");
  Config c = load(kUnpriced + R"(
billing:
  prices:
    - model: m1
      effective_from: "2024-02-29"
      windows: [{from: "22:00", to: "24:00", multiplier: "0.8"}, {from: "23:00", to: "07:00", multiplier: "0.5"}]
)");
  EXPECT_EQ(c.billing.prices[0].windows.size(), 2u);
  EXPECT_EQ(c.billing.prices[0].currency, "CNY");
}

TEST_F(ConfigTest, ToolParametersMustBeAnObjectSchema) {
  std::string bad = R"(
tools:
  - name: t1
    description: A tool.
    url: http://127.0.0.1:8091/tools/t1
    parameters: [a, b]
)";
  EXPECT_CONTAINS(error_of(kMinimal + bad), "/tools/0/parameters: expected object, got array");

  std::string no_type = R"(
tools:
  - name: t1
    description: A tool.
    url: http://127.0.0.1:8091/tools/t1
    parameters: {properties: {}}
)";
  EXPECT_CONTAINS(error_of(kMinimal + no_type), "/tools/0/parameters: missing required key 'type'");

  std::string bad_pattern = R"(
tools:
  - name: t1
    description: A tool.
    url: http://127.0.0.1:8091/tools/t1
    parameters:
      type: object
      properties:
        d: {type: string, pattern: '^(\d+$'}
)";
  std::string msg = error_of(kMinimal + bad_pattern);
  EXPECT_CONTAINS(msg, "/tools/0/parameters: ");
  EXPECT_CONTAINS(msg, "/properties/d");
  EXPECT_CONTAINS(msg, "is not a valid regular expression");
}

TEST_F(ConfigTest, DuplicateNamesAreRefused) {
  EXPECT_CONTAINS(error_of(kMinimal + "tools:" + kTool + kTool),
                  "/tools/1/name: duplicate tool name 't1' (also /tools/0)");
  EXPECT_CONTAINS(error_of(kMinimal + "  - name: m1\n    endpoints: [{url: \"http://h/y\"}]\n"),
                  "/models/1/name: duplicate model name 'm1' (also /models/0)");
  EXPECT_CONTAINS(error_of(kMinimal + "tiers: [{tier: free}, {tier: free}]\n"),
                  "/tiers/1/tier: duplicate tier 'free'");
  EXPECT_CONTAINS(error_of(kMinimal + "worker:\n  id: a\n  id: b\n"),
                  "/worker/id: duplicate key 'id'");
}

TEST_F(ConfigTest, ModelEndpointsLimitsAndRetryPolicyAreRead) {
  const std::string text = R"(
postgres:
  url: postgresql://localhost/agentfleet
kafka:
  bootstrap_servers: 127.0.0.1:9092
billing:
  prices:
    - {model: m1, effective_from: "2026-01-01"}
models:
  - name: m1
    endpoints:
      - {name: primary, url: "https://a.example.com:8443/v1/chat/completions",
         requests_per_minute: 60, tokens_per_minute: 90000}
      - {url: "https://b.example.com/v1/chat/completions"}
      - {url: "https://b.example.com/other/chat/completions"}
      - {url: "http://[::1]:8090/v1/chat/completions"}
    max_retries: 5
    retry: {base_ms: 100, max_ms: 5000}
    circuit_breaker: {failure_threshold: 2, open_s: 10}
    quota_cooloff_s: 60
)";
  Config c = load(text);
  const ModelConfig& m = c.models.at(0);
  ASSERT_EQ(m.endpoints.size(), 4u);
  EXPECT_EQ(m.endpoints[0].name, "primary");
  EXPECT_EQ(m.endpoints[0].requests_per_minute, 60);
  EXPECT_EQ(m.endpoints[0].tokens_per_minute, 90000);
  EXPECT_EQ(m.endpoints[1].name, "b.example.com");
  EXPECT_EQ(m.endpoints[2].name, "b.example.com#2");  // unnamed twins stay distinct
  EXPECT_EQ(m.endpoints[3].name, "::1");
  EXPECT_EQ(m.max_retries, 5);
  EXPECT_EQ(m.retry.base_ms, 100);
  EXPECT_EQ(m.retry.max_ms, 5000);
  EXPECT_EQ(m.circuit_breaker.failure_threshold, 2);
  EXPECT_EQ(m.circuit_breaker.open_s, 10);
  EXPECT_EQ(m.quota_cooloff_s, 60);

  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  EXPECT_CONTAINS(error_of(with("max_ms: 5000", "max_ms: 50")),
                  "/models/0/retry/max_ms: must be at least base_ms (100)");
  EXPECT_CONTAINS(error_of(with("{url: \"https://b.example.com/v1/chat/completions\"}",
                                "{name: primary, url: \"https://b.example.com/v1\"}")),
                  "/models/0/endpoints/1/name: duplicate endpoint name 'primary'");
  EXPECT_CONTAINS(error_of(with("tokens_per_minute: 90000", "tokens_per_minute: -1")),
                  "/models/0/endpoints/0/tokens_per_minute");
  EXPECT_CONTAINS(error_of(with("open_s: 10", "open_s: 10, half_open: 1")),
                  "/models/0/circuit_breaker");
}

TEST_F(ConfigTest, ModelNeedsAnEndpoint) {
  std::string msg = error_of(R"(
postgres: {url: x}
kafka: {bootstrap_servers: b}
models:
  - name: m
    endpoints: []
)");
  EXPECT_CONTAINS(msg, "test.yaml: /models/0/endpoints: must not be empty");

  msg = error_of(R"(
postgres: {url: x}
kafka: {bootstrap_servers: b}
models: []
)");
  EXPECT_CONTAINS(msg, "/models: must not be empty");
}

TEST_F(ConfigTest, ReasoningEchoIsNoneToolTurnsOrAll) {
  const std::string model = R"(
postgres: {url: x}
kafka: {bootstrap_servers: b}
models:
  - name: m
    endpoints: [{name: e, url: "http://h/v1/chat/completions"}]
)";
  EXPECT_CONTAINS(error_of(model + "    reasoning_echo: sometimes\n"),
                  "test.yaml: /models/0/reasoning_echo");
}

TEST_F(ConfigTest, DefaultModelMustExist) {
  EXPECT_CONTAINS(error_of(kMinimal + "task_defaults: {model: gpt-9}\n"),
                  "/task_defaults/model: unknown model 'gpt-9'");
}

TEST_F(ConfigTest, AuthKeysAreHashesAndEachNamesWhoItActsFor) {
  const std::string hash(64, 'c');
  // No auth section: closed (api_keys with no key, so every API request is refused).
  Config closed = load(kMinimal);
  EXPECT_EQ(closed.auth.mode, "api_keys");
  EXPECT_TRUE(closed.auth.api_keys.empty());
  Config keys = load(kMinimal + "auth:\n  api_keys:\n    - {name: ops, sha256: " + hash +
                     ", admin: true}\n    - {name: svc, sha256: " + std::string(64, 'd') +
                     ", users: [u1, u2]}\n");
  ASSERT_EQ(keys.auth.api_keys.size(), 2u);
  EXPECT_TRUE(keys.auth.api_keys[0].admin);
  EXPECT_EQ(keys.auth.api_keys[1].users, (std::vector<std::string>{"u1", "u2"}));
  const Config gateway = load(kMinimal +
                              "auth: {mode: gateway, user_header: X-Caller, gateway_keys: [{name: "
                              "edge, sha256: " +
                              hash + "}]}\n");
  EXPECT_EQ(gateway.auth.user_header, "X-Caller");
  ASSERT_EQ(gateway.auth.gateway_keys.size(), 1u);
  EXPECT_EQ(gateway.auth.gateway_keys[0].name, "edge");
  EXPECT_EQ(gateway.auth.gateway_key_header, "X-Gateway-Key");
  // Gateway mode without a gateway secret would believe anyone's identity headers.
  EXPECT_CONTAINS(error_of(kMinimal + "auth: {mode: gateway, user_header: X-Caller}\n"),
                  "/auth/gateway_keys");
  EXPECT_CONTAINS(error_of(kMinimal + "auth:\n  api_keys:\n    - {name: k, sha256: secret}\n"),
                  "/auth/api_keys/0/sha256");
  EXPECT_CONTAINS(error_of(kMinimal + "auth:\n  api_keys:\n    - {name: k, sha256: " +
                           std::string(64, 'A') + ", admin: true}\n"),
                  "/auth/api_keys/0/sha256");
  EXPECT_CONTAINS(
      error_of(kMinimal + "auth:\n  api_keys:\n    - {name: k, sha256: " + hash + "}\n"),
      "/auth/api_keys/0/users: a key that is not admin must name the users");
  EXPECT_CONTAINS(error_of(kMinimal + "auth:\n  api_keys:\n    - {name: a, sha256: " + hash +
                           ", admin: true}\n    - {name: b, sha256: " + hash + ", admin: true}\n"),
                  "/auth/api_keys/1/sha256: the same key is configured as 'a'");
  EXPECT_CONTAINS(error_of(kMinimal + "auth: {mode: api_keys}\n"),
                  "/auth/api_keys: auth.mode api_keys needs at least one key");
  EXPECT_CONTAINS(error_of(kMinimal + "auth: {mode: open}\n"), "/auth/mode");
}

TEST_F(ConfigTest, SchedulerSettingsAndTierWeights) {
  Config c = load(kMinimal +
                  "dispatcher: {max_active_tasks: 500, batch_share_percent: 35, "
                  "task_token_estimate: 900, leader_retry_ms: 250}\n"
                  "tiers: [{tier: standard, weight: 3}]\n");
  EXPECT_EQ(c.dispatcher.max_active_tasks, 500);
  EXPECT_EQ(c.dispatcher.batch_share_percent, 35);
  EXPECT_EQ(c.dispatcher.task_token_estimate, 900);
  EXPECT_EQ(c.dispatcher.leader_retry_ms, 250);
  EXPECT_EQ(c.tiers[0].limits.weight, 3);
  EXPECT_CONTAINS(error_of(kMinimal + "dispatcher: {batch_share_percent: 101}\n"),
                  "/dispatcher/batch_share_percent");
  EXPECT_CONTAINS(error_of(kMinimal + "tiers: [{tier: standard, weight: 0}]\n"), "/tiers/0/weight");
}

TEST_F(ConfigTest, TheSchedulersLongestWaitKeepsItsSessionWithinTheLeaderSilence) {
  Config c = load(kMinimal + "dispatcher: {scheduler_idle_ms: 2000, relay_idle_ms: 300}\n");
  EXPECT_EQ(c.dispatcher.scheduler_idle_ms, 2000);
  EXPECT_EQ(c.dispatcher.relay_idle_ms, 300);
  EXPECT_CONTAINS(
      error_of(kMinimal + "dispatcher: {scheduler_idle_ms: 6000, leader_silence_s: 10}\n"),
      "/dispatcher/leader_silence_s: must be more than twice");
  EXPECT_CONTAINS(error_of(kMinimal + "dispatcher: {scheduler_idle_ms: 5}\n"),
                  "/dispatcher/scheduler_idle_ms");
}

TEST_F(ConfigTest, HeartbeatMustBeShorterThanTheLease) {
  EXPECT_CONTAINS(error_of(kMinimal + "worker: {lease_s: 10, heartbeat_s: 10}\n"),
                  "/worker/heartbeat_s: must be less than lease_s");
}

TEST_F(ConfigTest, TopicsMustBeDistinct) {
  EXPECT_CONTAINS(error_of(R"(
postgres: {url: x}
kafka: {bootstrap_servers: b, topics: {results: same, events: same}}
models: [{name: m, endpoints: [{url: "http://h/x"}]}]
)"),
                  "/kafka/topics/events: topic 'same' is also the results topic");
}

TEST_F(ConfigTest, PermissionParsing) {
  EXPECT_EQ(parse_permission("read"), Permission::kRead);
  EXPECT_EQ(parse_permission("write"), Permission::kWrite);
  EXPECT_EQ(parse_permission("execute"), Permission::kExecute);
  EXPECT_EQ(parse_permission("admin"), Permission::kAdmin);
  EXPECT_EQ(parse_permission("Admin"), std::nullopt);
  EXPECT_EQ(parse_permission(""), std::nullopt);
  for (Permission p :
       {Permission::kRead, Permission::kWrite, Permission::kExecute, Permission::kAdmin}) {
    EXPECT_EQ(parse_permission(to_string(p)), p);
  }
  Config c = load(kMinimal + "tools:" + kTool + "    permission: execute\n");
  EXPECT_EQ(c.tools[0].permission, Permission::kExecute);
  EXPECT_EQ(load(kMinimal + "tools:" + kTool).tools[0].permission, Permission::kRead);
  EXPECT_CONTAINS(
      error_of(kMinimal + "tools:" + kTool + "    permission: sudo\n"),
      "/tools/0/permission: must be one of \"read\", \"write\", \"execute\", \"admin\"");
}

TEST_F(ConfigTest, BadYamlAndMissingFilesAreConfigErrors) {
  EXPECT_CONTAINS(error_of("postgres: [unclosed\n"), "test.yaml: invalid YAML: line");
  EXPECT_CONTAINS(error_of(""), "test.yaml: (root): expected object, got null");
  try {
    load_config_file("/nonexistent/agentfleet.yaml", fake_lookup);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_CONTAINS(e.what(), "/nonexistent/agentfleet.yaml: cannot open");
  }
}

TEST_F(ConfigTest, ToolMethodAndServiceHeaders) {
  fake_env() = {{"TOKEN", "s3cret"}};
  Config c = load(kMinimal + "tools:" + kTool +
                  "    method: GET\n    headers: {Authorization: \"Bearer ${TOKEN}\"}\n");
  EXPECT_EQ(c.tools[0].method, "GET");
  ASSERT_EQ(c.tools[0].headers.size(), 1u);
  EXPECT_EQ(c.tools[0].headers[0].second, "Bearer s3cret");
  EXPECT_EQ(load(kMinimal + "tools:" + kTool).tools[0].method, "POST");
  EXPECT_CONTAINS(error_of(kMinimal + "tools:" + kTool + "    method: DELETE\n"),
                  "/tools/0/method");
  // Identity headers come from the task, never from configuration.
  EXPECT_CONTAINS(error_of(kMinimal + "tools:" + kTool + "    headers: {X-User-ID: admin}\n"),
                  "/tools/0/headers/X-User-ID: header 'X-User-ID' is set by the worker");
  EXPECT_CONTAINS(error_of(kMinimal + "tools:" + kTool + "    headers: {x-task-attempt: \"9\"}\n"),
                  "/tools/0/headers/x-task-attempt: header 'x-task-attempt' is set by the worker");
}

TEST_F(ConfigTest, TierToolPermissionAndDefaultTier) {
  Config c =
      load(kMinimal + "tiers:\n  - {tier: standard}\n  - {tier: ro, tool_permission: read}\n");
  EXPECT_EQ(c.find_tier("standard")->limits.tool_permission, Permission::kWrite);
  EXPECT_EQ(c.find_tier("ro")->limits.tool_permission, Permission::kRead);
  EXPECT_EQ(c.task_defaults.tier, "standard");
  EXPECT_EQ(c.tool_permission_for("", ""), Permission::kWrite);
  EXPECT_EQ(c.tool_permission_for("ro", ""), Permission::kRead);
  EXPECT_EQ(c.tool_permission_for("no-such-tier", ""), Permission::kWrite);
  EXPECT_EQ(c.tool_permission_for("ro", "admin"), Permission::kAdmin);
  EXPECT_CONTAINS(error_of(kMinimal + "tiers:\n  - {tier: standard, tool_permission: root}\n"),
                  "/tiers/0/tool_permission");
  EXPECT_CONTAINS(
      error_of(kMinimal + "task_defaults: {tier: gold}\ntiers:\n  - {tier: standard}\n"),
      "/task_defaults/tier: unknown tier 'gold'");
}

// A folder of its own under the test temp dir, emptied first.
std::filesystem::path scratch_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

TEST_F(ConfigTest, SystemPromptFileIsReadRelativeToTheConfigFolder) {
  const auto dir = scratch_dir("agentfleet_prompt_relative");
  write_file(dir / "prompts" / "p.md", "现在是 {{current_time}}。\n\n");
  Config c = load_config_text(kMinimal + "react:\n  system_prompt_file: prompts/p.md\n",
                              (dir / "fleet.yaml").string(), fake_lookup);
  EXPECT_EQ(c.react.system_prompt, "现在是 {{current_time}}。");  // trailing newlines dropped
  EXPECT_EQ(c.react.system_prompt_file, "prompts/p.md");

  const auto absolute = dir / "abs.md";
  write_file(absolute, "absolute prompt");
  Config d =
      load_config_text(kMinimal + "react:\n  system_prompt_file: " + absolute.string() + "\n",
                       "elsewhere/fleet.yaml", fake_lookup);
  EXPECT_EQ(d.react.system_prompt, "absolute prompt");
}

TEST_F(ConfigTest, WithoutPromptOrFileTheBuiltInPromptIsSelected) {
  Config c = load(kMinimal);
  EXPECT_TRUE(c.react.system_prompt.empty());
  EXPECT_TRUE(c.react.system_prompt_file.empty());
  EXPECT_EQ(c.react.tool_result_context_chars, 4000);
  Config inline_prompt = load(kMinimal + "react:\n  system_prompt: inline\n");
  EXPECT_EQ(inline_prompt.react.system_prompt, "inline");
}

TEST_F(ConfigTest, SystemPromptFileProblemsAreClearErrors) {
  const auto dir = scratch_dir("agentfleet_prompt_errors");
  write_file(dir / "empty.md", "\n \n");
  write_file(dir / "ok.md", "prompt");
  auto error_at = [&](const std::string& react_yaml) {
    try {
      load_config_text(kMinimal + "react:\n" + react_yaml, (dir / "fleet.yaml").string(),
                       fake_lookup);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << "expected a ConfigError for:\n" << react_yaml;
    return std::string();
  };
  std::string msg = error_at("  system_prompt_file: missing.md\n");
  EXPECT_CONTAINS(msg, "/react/system_prompt_file: cannot open '");
  EXPECT_CONTAINS(msg, "missing.md");
  EXPECT_CONTAINS(error_at("  system_prompt_file: empty.md\n"), "empty.md' is empty");
  msg = error_at("  system_prompt: inline\n  system_prompt_file: ok.md\n");
  EXPECT_CONTAINS(msg,
                  "/react/system_prompt_file: give system_prompt or system_prompt_file, not both");
  EXPECT_CONTAINS(msg, "(line");
}

TEST_F(ConfigTest, ToolResultContextChars) {
  EXPECT_EQ(
      load(kMinimal + "react:\n  tool_result_context_chars: 0\n").react.tool_result_context_chars,
      0);
  EXPECT_EQ(load(kMinimal + "react:\n  tool_result_context_chars: 1200\n")
                .react.tool_result_context_chars,
            1200);
  EXPECT_CONTAINS(error_of(kMinimal + "react:\n  tool_result_context_chars: -1\n"),
                  "/react/tool_result_context_chars");
}

TEST_F(ConfigTest, AliasesThatExpandPastTheValueLimitAreRefused) {
  // Each alias is copied where it is used: eight levels of ten aliases are 10^8 values from
  // 450 bytes (tests/fuzz/regressions/config_fuzz/alias-expansion-bomb.yaml).
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level < 8; ++level) {
    bomb += "a" + std::to_string(level) + ": &a" + std::to_string(level) + " [";
    for (int i = 0; i < 10; ++i)
      bomb += (i ? ", *a" : "*a") + std::to_string(level - 1);
    bomb += "]\n";
  }
  EXPECT_CONTAINS(error_of(bomb), "values once its aliases are expanded");
  // An alias used the ordinary way still works.
  const Config c = load(kMinimal + "worker: {lease_s: &n 40, max_in_flight: *n}\n");
  EXPECT_EQ(c.worker.lease_s, 40);
  EXPECT_EQ(c.worker.max_in_flight, 40);
}

TEST_F(ConfigTest, PromptFileMatchesTheBuiltInPrompt) {
  std::ifstream in(std::string(AGENTFLEET_SOURCE_DIR) + "/config/system-prompt.zh.md",
                   std::ios::binary);
  ASSERT_TRUE(in);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  EXPECT_EQ(text, react::builtin_system_prompt())
      << "config/system-prompt.zh.md and the built-in prompt (core/react/prompt.cpp) differ";
}

}  // namespace
}  // namespace agentfleet::config
