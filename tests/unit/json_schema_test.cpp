#include "core/codec/json_schema.hpp"

#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "core/codec/embedded.hpp"

namespace agentfleet::codec {
namespace {

rapidjson::Document parse(const std::string& json) {
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  EXPECT_FALSE(doc.HasParseError()) << json;
  return doc;
}

// A minimal valid tool definition, to be varied by each test.
std::string tool_json(const std::string& extra = "") {
  return R"({"name": "search_items", "description": "Search.", "url": "http://127.0.0.1:8091/x",
             "parameters": {"type": "object", "properties": {}})" +
         extra + "}";
}

std::optional<SchemaViolation> check_tool(const std::string& json) {
  return validate(parse(json), "tool_definition.schema.json");
}

TEST(JsonSchemaTest, EveryEmbeddedSchemaCompiles) {
  EXPECT_FALSE(embedded::schemas().empty());
  EXPECT_EQ(check_embedded_schemas(), "");
}

TEST(JsonSchemaTest, ValidDocumentPasses) {
  EXPECT_EQ(check_tool(tool_json()), std::nullopt);
  EXPECT_EQ(check_tool(tool_json(R"(, "timeout_s": 5, "permission": "admin", "idempotent": true)")),
            std::nullopt);
}

TEST(JsonSchemaTest, UnknownKeyNamesTheKeyAndPointsAtIt) {
  auto v = check_tool(tool_json(R"(, "timeoutt": 5)"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "/timeoutt");
  EXPECT_NE(v->message.find("unknown key 'timeoutt'"), std::string::npos) << v->message;
  EXPECT_NE(v->message.find("'timeout_s'"), std::string::npos) << v->message;
}

TEST(JsonSchemaTest, MissingRequiredKeyPointsAtTheObject) {
  auto v = check_tool(R"({"name": "x", "description": "d", "parameters": {"type": "object"}})");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "");
  EXPECT_EQ(v->message, "missing required key 'url'");
}

TEST(JsonSchemaTest, WrongTypeSaysWhatWasExpected) {
  auto v = check_tool(tool_json(R"(, "timeout_s": "5")"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "/timeout_s");
  EXPECT_EQ(v->message, "expected integer, got string");
}

TEST(JsonSchemaTest, EnumListsTheAllowedValues) {
  auto v = check_tool(tool_json(R"(, "permission": "root")"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "/permission");
  EXPECT_NE(v->message.find(R"(must be one of "read", "write", "execute", "admin")"),
            std::string::npos)
      << v->message;
  EXPECT_NE(v->message.find(R"("root")"), std::string::npos) << v->message;
}

TEST(JsonSchemaTest, RangeAndLengthAndPattern) {
  auto v = check_tool(tool_json(R"(, "timeout_s": 0)"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "/timeout_s");
  EXPECT_NE(v->message.find("must be >= 1"), std::string::npos) << v->message;

  v = check_tool(tool_json(R"(, "timeout_s": 100000)"));
  ASSERT_TRUE(v);
  EXPECT_NE(v->message.find("must be <= 3600"), std::string::npos) << v->message;

  v = check_tool(R"({"name": "bad name", "description": "d", "url": "http://h/x",
                     "parameters": {"type": "object"}})");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "/name");
  EXPECT_NE(v->message.find("does not match the pattern"), std::string::npos) << v->message;

  v = check_tool(R"({"name": "x", "description": "", "url": "http://h/x",
                     "parameters": {"type": "object"}})");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "/description");
  EXPECT_EQ(v->message, "must not be empty");
}

TEST(JsonSchemaTest, ParametersMustBeAnObjectSchema) {
  auto v = check_tool(R"({"name": "x", "description": "d", "url": "http://h/x",
                          "parameters": "none"})");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "/parameters");
  EXPECT_EQ(v->message, "expected object, got string");
}

TEST(JsonSchemaTest, RefToAnotherFileReportsPathsInTheOuterDocument) {
  // config.schema.json refers to tool_definition.schema.json for each tool.
  auto v = validate(parse(R"({"postgres": {"url": "x"}, "kafka": {"bootstrap_servers": "b"},
                              "models": [{"name": "m", "endpoints": [{"url": "http://h/x"}]}],
                              "tools": [)" +
                          tool_json() + "," + tool_json(R"(, "timeoutt": 1)") + "]}"),
                    "config.schema.json");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "/tools/1/timeoutt");
  EXPECT_NE(v->message.find("unknown key 'timeoutt'"), std::string::npos) << v->message;
}

TEST(JsonSchemaTest, ParseErrorGivesTheOffset) {
  rapidjson::Document out;
  auto v = validate_json_text(R"({"name": )", "tool_definition.schema.json", &out);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "");
  EXPECT_NE(v->message.find("offset 9"), std::string::npos) << v->message;

  EXPECT_EQ(validate_json_text(tool_json(), "tool_definition.schema.json", &out), std::nullopt);
  EXPECT_TRUE(out.IsObject());
  EXPECT_STREQ(out["name"].GetString(), "search_items");
}

TEST(JsonSchemaTest, UnknownSchemaFileIsAProgrammingError) {
  EXPECT_THROW(validate(parse("{}"), "no_such.schema.json"), std::invalid_argument);
}

TEST(JsonSchemaTest, CompiledSchemaValidatesToolArguments) {
  CompiledSchema schema(parse(R"({
    "type": "object", "additionalProperties": false, "required": ["id"],
    "properties": {
      "id": {"type": "string", "minLength": 1},
      "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
      "limit": {"type": "integer", "minimum": 1, "maximum": 50},
      "items": {"type": "array", "items": {"$ref": "#/definitions/item"}, "maxItems": 2}
    },
    "definitions": {"item": {"type": "object", "required": ["k"]}}
  })"));
  EXPECT_EQ(schema.validate(parse(R"({"id": "a", "date": "2026-02-08", "limit": 5})")),
            std::nullopt);

  auto v = schema.validate(parse(R"({"id": "a", "date": "Feb 8"})"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "/date");
  EXPECT_NE(v->message.find(R"("Feb 8" does not match the pattern)"), std::string::npos)
      << v->message;

  v = schema.validate(parse(R"({"id": "a", "limit": 51})"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "/limit");
  EXPECT_EQ(v->message, "must be <= 50 (got 51)");

  v = schema.validate(parse(R"({"id": "a", "items": [{"k": 1}, {}]})"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "/items/1");
  EXPECT_EQ(v->message, "missing required key 'k'");

  v = schema.validate(parse(R"({"id": "a", "items": [{"k": 1}, {"k": 2}, {"k": 3}]})"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "/items");
  EXPECT_EQ(v->message, "must have at most 2 items");

  v = schema.validate(parse(R"([])"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "");
  EXPECT_EQ(v->message, "expected object, got array");
}

TEST(JsonSchemaTest, PatternsAreEcmaScript) {
  CompiledSchema schema(parse(R"({"type": "string", "pattern": "^\\d{2}:\\d{2}$"})"));
  EXPECT_EQ(schema.validate(parse(R"("08:30")")), std::nullopt);
  auto v = schema.validate(parse(R"("8:30")"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->message, R"("8:30" does not match the pattern ^\d{2}:\d{2}$)");
}

TEST(JsonSchemaTest, SeveralMissingKeysAreAllNamed) {
  CompiledSchema schema(parse(R"({"type": "object", "required": ["a", "b", "c"]})"));
  auto v = schema.validate(parse(R"({"b": 1})"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->message, "missing required keys 'a', 'c'");
}

TEST(JsonSchemaTest, CompiledSchemaMayReferToEmbeddedFiles) {
  CompiledSchema schema(
      parse(R"({"type": "array", "items": {"$ref": "tool_definition.schema.json"}})"));
  auto v = schema.validate(parse("[" + tool_json() + R"(, {"name": 3}])"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "/1/name");
  EXPECT_EQ(v->message, "expected string, got integer");
}

TEST(JsonSchemaTest, BrokenSchemasAreRefusedInsteadOfAcceptingEverything) {
  EXPECT_THROW(CompiledSchema(parse(R"({"type": "string", "pattern": "^(\\d+$"})")),
               std::invalid_argument);
  EXPECT_THROW(CompiledSchema(parse(R"({"$ref": "missing.schema.json"})")), std::invalid_argument);
  EXPECT_THROW(CompiledSchema(parse(R"({"properties": {"a": {"$ref": "#/definitions/nope"}}})")),
               std::invalid_argument);
  EXPECT_THROW(CompiledSchema(parse(R"("string")")), std::invalid_argument);
  try {
    CompiledSchema(parse(R"({"properties": {"a": {"type": "string", "pattern": "[0-9"}}})"));
    FAIL() << "expected an exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("/properties/a"), std::string::npos) << e.what();
  }
}

TEST(JsonSchemaTest, HostileInstancesCannotExhaustTheStack) {
  CompiledSchema schema(parse(R"({
    "type": "object",
    "properties": {
      "date": {"anyOf": [{"type": "string", "pattern": "^[0-9]+$"}, {"type": "null"}]},
      "text": {"type": "string"}
    }
  })"));
  std::string huge(1'000'000, '7');
  auto v = schema.validate(parse(R"({"date": ")" + huge + R"("})"));
  ASSERT_TRUE(v);
  EXPECT_EQ(v->path, "/date");
  EXPECT_NE(v->message.find("too long"), std::string::npos) << v->message;
  // Long strings without a pattern are fine.
  EXPECT_EQ(schema.validate(parse(R"({"text": ")" + huge + R"("})")), std::nullopt);

  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  rapidjson::Document doc;
  v = validate_json_text(deep, "tool_definition.schema.json", &doc);
  ASSERT_TRUE(v);
  EXPECT_NE(v->message.find("nested more than 100 levels"), std::string::npos) << v->message;
  EXPECT_EQ(v->path.substr(0, 6), "/0/0/0");
}

TEST(JsonSchemaTest, ConcurrentFirstUseIsSafe) {
  std::vector<std::thread> threads;
  std::vector<int> failures(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&failures, t] {
      for (int i = 0; i < 50; ++i) {
        rapidjson::Document doc;
        doc.Parse(R"({"name": "x", "description": "d", "url": "http://h/x",
                      "parameters": {"type": "object"}, "oops": 1})");
        auto v = validate(doc, "tool_definition.schema.json");
        if (!v || v->path != "/oops") {
          ++failures[t];
        }
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  for (int f : failures) {
    EXPECT_EQ(f, 0);
  }
}

}  // namespace
}  // namespace agentfleet::codec
