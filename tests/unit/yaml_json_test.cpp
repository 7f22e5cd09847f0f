// config::yaml_text_to_json: YAML documents the project keeps (the API's contract) as JSON,
// typed as the configuration loader types them.
#include <gtest/gtest.h>

#include <stdexcept>

#include "core/config/yaml_json.hpp"

namespace agentfleet::config {
namespace {

TEST(YamlTextToJson, PlainScalarsAreTypedAndQuotedOnesStayText) {
  const auto doc = yaml_text_to_json(
      "port: 8080\nquoted: \"8080\"\nratio: 0.5\non: true\nnothing: ~\n"
      "list: [a, 2]\ntext: |\n  two\n  lines\n");
  ASSERT_TRUE(doc.IsObject());
  EXPECT_TRUE(doc["port"].IsInt64());
  EXPECT_EQ(doc["port"].GetInt64(), 8080);
  ASSERT_TRUE(doc["quoted"].IsString());
  EXPECT_STREQ(doc["quoted"].GetString(), "8080");
  EXPECT_DOUBLE_EQ(doc["ratio"].GetDouble(), 0.5);
  EXPECT_TRUE(doc["on"].IsTrue());
  EXPECT_TRUE(doc["nothing"].IsNull());
  ASSERT_TRUE(doc["list"].IsArray());
  EXPECT_STREQ(doc["list"][0].GetString(), "a");
  EXPECT_EQ(doc["list"][1].GetInt64(), 2);
  EXPECT_STREQ(doc["text"].GetString(), "two\nlines\n");
}

TEST(YamlTextToJson, ADuplicateKeyOrBrokenYamlIsRefusedSayingWhere) {
  try {
    yaml_text_to_json("a:\n  b: 1\n  b: 2\n");
    FAIL() << "a duplicate key was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/a/b"), std::string::npos) << e.what();
  }
  EXPECT_THROW(yaml_text_to_json("a: [1, 2\n"), std::runtime_error);
}

}  // namespace
}  // namespace agentfleet::config
