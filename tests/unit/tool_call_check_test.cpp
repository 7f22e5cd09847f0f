#include "tests/source_dir.hpp"

#include "core/codec/tool_call_check.hpp"

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <memory>
#include <optional>
#include <set>
#include <string>

#include "core/config/config.hpp"

namespace agentfleet::codec {
namespace {

std::optional<std::string> no_environment(const std::string&) {
  return std::nullopt;
}

// The argument schemas of the real registry (config/agentfleet.yaml).
class ToolCallCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = config::load_config_file(
        std::string(AGENTFLEET_SOURCE_DIR) + "/config/agentfleet.yaml", no_environment);
  }
  std::unique_ptr<CompiledSchema> schema_of(const std::string& tool) const {
    const config::ToolConfig* found = config_.find_tool(tool);
    EXPECT_NE(found, nullptr) << tool;
    rapidjson::Document doc;
    doc.Parse(found ? found->parameters_schema.c_str() : "{}");
    return std::make_unique<CompiledSchema>(doc);
  }

  config::Config config_;
  // A user at `read`: the read tools of the registry.
  const std::set<std::string> read_only_{"search_items", "get_event_groups"};
};

ToolCall call(std::string name, std::string arguments) {
  return ToolCall{"call_0_0", std::move(name), std::move(arguments)};
}

#define EXPECT_CONTAINS(haystack, needle)                          \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) \
      << "expected to find \"" << (needle) << "\" in \"" << (haystack) << "\""

TEST_F(ToolCallCheckTest, APermittedCallWithValidArgumentsPasses) {
  auto schema = schema_of("search_items");
  auto passes = [&](const std::string& arguments, const CompiledSchema* with) {
    auto refusal = check_tool_call(call("search_items", arguments), read_only_, with);
    EXPECT_FALSE(refusal.has_value()) << arguments << ": " << refusal->message;
  };
  passes(R"({"item_type":"event","date":"2026-02-08"})", schema.get());
  passes("{}", schema.get());
  passes(R"({"keyword":"会议","status":"todo","limit":50})", schema.get());
  // A tool without a schema takes any object.
  passes(R"({"anything":1})", nullptr);
}

TEST_F(ToolCallCheckTest, AToolAboveThePermissionLevelIsRefusedByName) {
  auto schema = schema_of("create_item");
  auto refusal = check_tool_call(
      call("create_item", R"({"item_type":"todo","title":"x","date":"2026-02-08"})"), read_only_,
      schema.get());
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->code, "permission_denied");
  EXPECT_CONTAINS(refusal->message, "'create_item'");
  EXPECT_CONTAINS(refusal->message, "permission level");
  // The observation the model reads: {"error":{"code","message"}}.
  rapidjson::Document error;
  error.Parse(refusal->error_json.c_str());
  ASSERT_TRUE(error.IsObject()) << refusal->error_json;
  EXPECT_STREQ(error["error"]["code"].GetString(), "permission_denied");
  EXPECT_EQ(error["error"]["message"].GetString(), refusal->message);
  // Permission is checked first: bad arguments to a refused tool still say permission.
  auto bad = check_tool_call(call("delete_item", "not json"), read_only_, nullptr);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->code, "permission_denied");
}

TEST_F(ToolCallCheckTest, ArgumentsThatAreNotAJsonObjectAreInvalid) {
  auto schema = schema_of("search_items");
  for (const char* arguments : {"", "not json", "{\"keyword\":", "[1,2]", "\"text\"", "42", "null",
                                "{\"keyword\":\"\xff\"}"}) {
    SCOPED_TRACE(arguments);
    auto refusal = check_tool_call(call("search_items", arguments), read_only_, schema.get());
    ASSERT_TRUE(refusal);
    EXPECT_EQ(refusal->code, "invalid_arguments");
    EXPECT_EQ(refusal->message, "arguments must be a JSON object");
    EXPECT_CONTAINS(refusal->error_json, "\"invalid_arguments\"");
  }
}

TEST_F(ToolCallCheckTest, ASchemaViolationNamesItsJsonPath) {
  const std::set<std::string> writer{"search_items", "create_item"};
  auto create = schema_of("create_item");
  auto missing = check_tool_call(call("create_item", R"({"item_type":"todo","date":"2026-02-08"})"),
                                 writer, create.get());
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->code, "invalid_arguments");
  EXPECT_EQ(missing->message, "arguments: missing required key 'title'");

  auto search = schema_of("search_items");
  auto wrong_enum =
      check_tool_call(call("search_items", R"({"item_type":"meeting"})"), writer, search.get());
  ASSERT_TRUE(wrong_enum);
  EXPECT_EQ(wrong_enum->code, "invalid_arguments");
  EXPECT_CONTAINS(wrong_enum->message, "/item_type: must be one of \"event\", \"todo\", \"any\"");
  EXPECT_CONTAINS(wrong_enum->message, "meeting");

  auto wrong_type = check_tool_call(call("search_items", R"({"limit":"5"})"), writer, search.get());
  ASSERT_TRUE(wrong_type);
  EXPECT_CONTAINS(wrong_type->message, "/limit: expected integer, got string");

  auto bad_date =
      check_tool_call(call("create_item", R"({"item_type":"todo","title":"x","date":"8 Feb"})"),
                      writer, create.get());
  ASSERT_TRUE(bad_date);
  EXPECT_CONTAINS(bad_date->message, "/date:");
  EXPECT_CONTAINS(bad_date->error_json, "/date:");
}

TEST_F(ToolCallCheckTest, IdentityCannotBeSmuggledInAsAnArgument) {
  // Identity travels in headers from the task; a schema with additionalProperties false
  // refuses an argument that tries to name another user.
  auto search = schema_of("search_items");
  for (const char* arguments :
       {R"({"keyword":"会议","user_id":"u2"})", R"({"user_id":"u2"})", R"({"X-User-ID":"u2"})"}) {
    SCOPED_TRACE(arguments);
    auto refusal = check_tool_call(call("search_items", arguments), read_only_, search.get());
    ASSERT_TRUE(refusal);
    EXPECT_EQ(refusal->code, "invalid_arguments");
    EXPECT_CONTAINS(refusal->message, "unknown key");
  }
  auto refusal =
      check_tool_call(call("search_items", R"({"user_id":"u2"})"), read_only_, search.get());
  ASSERT_TRUE(refusal);
  EXPECT_CONTAINS(refusal->message, "/user_id: unknown key 'user_id'");
}

}  // namespace
}  // namespace agentfleet::codec
