// The configuration's declarative tables (core/config/config_fields.hpp) against its schema:
// every property a table reads is in schemas/config.schema.json with the type of the member
// it fills, and every property of an object the tables describe is read, by a table or by
// code of its own. A property added to the schema and to no table, or a table entry the
// schema does not have, fails here instead of being ignored or refused at load.
#include "core/config/config_fields.hpp"

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tests/unit/source_file.hpp"

namespace agentfleet::config {
namespace {

using test::read_source;

class Schemas {
 public:
  Schemas() {
    root_.Parse(read_source("schemas/config.schema.json").c_str());
    tool_.Parse(read_source("schemas/tool_definition.schema.json").c_str());
  }

  // The schema object at `object` ("/models/*/retry": "*" is an array's items), or null.
  const rapidjson::Value* object_at(const std::string& object) const {
    const rapidjson::Value* at = &root_;
    std::size_t start = 1;
    while (start <= object.size() && object.size() > 1) {
      const auto end = std::min(object.find('/', start), object.size());
      const std::string step = object.substr(start, end - start);
      at = resolve(at);
      if (step == "*") {
        if (!at->HasMember("items"))
          return nullptr;
        at = &(*at)["items"];
      } else {
        if (!at->HasMember("properties") || !(*at)["properties"].HasMember(step.c_str()))
          return nullptr;
        at = &(*at)["properties"][step.c_str()];
      }
      start = end + 1;
    }
    return resolve(at);
  }

  // What a "$ref" names: one of the schema's definitions, or tool_definition.schema.json.
  const rapidjson::Value* resolve(const rapidjson::Value* at) const {
    if (!at->IsObject() || !at->HasMember("$ref"))
      return at;
    const std::string ref = (*at)["$ref"].GetString();
    if (ref == "tool_definition.schema.json")
      return &tool_;
    constexpr std::string_view kDefinitions = "#/definitions/";
    if (ref.rfind(kDefinitions, 0) == 0 && root_.HasMember("definitions")) {
      const std::string name = ref.substr(kDefinitions.size());
      if (root_["definitions"].HasMember(name.c_str()))
        return resolve(&root_["definitions"][name.c_str()]);
    }
    return at;
  }

 private:
  rapidjson::Document root_;
  rapidjson::Document tool_;
};

bool has_type(const rapidjson::Value& property, const std::string& type) {
  if (!property.HasMember("type"))
    return false;
  const auto& t = property["type"];
  if (t.IsString())
    return type == t.GetString();
  for (const auto& each : t.GetArray()) {
    if (type == each.GetString())
      return true;
  }
  return false;
}

TEST(ConfigFields, EveryTablePropertyIsTheSchemasWithItsType) {
  const Schemas schemas;
  const auto described = described_fields();
  EXPECT_GT(described.size(), 120u) << "a table walk that found few would prove little";
  for (const DescribedField& field : described) {
    SCOPED_TRACE(field.object + "/" + field.name);
    const rapidjson::Value* object = schemas.object_at(field.object);
    ASSERT_NE(object, nullptr) << "the schema has no such object";
    ASSERT_TRUE(object->HasMember("properties"));
    ASSERT_TRUE((*object)["properties"].HasMember(field.name.c_str()))
        << "the schema has no such property";
    EXPECT_TRUE(
        has_type(*schemas.resolve(&(*object)["properties"][field.name.c_str()]), field.type))
        << "the schema's type is not the member's (" << field.type << ")";
  }
}

TEST(ConfigFields, EveryPropertyOfADescribedObjectIsRead) {
  const Schemas schemas;
  std::map<std::string, std::set<std::string>> read;  // object -> properties read
  for (const DescribedField& field : described_fields())
    read[field.object].insert(field.name);
  for (const DescribedField& field : hand_read_fields())
    read[field.object].insert(field.name);
  // A nested object or array of objects a table describes is read as such.
  for (const auto& [object, names] : std::map(read)) {
    const auto slash = object.rfind('/');
    if (slash == 0)
      continue;
    std::string parent = object.substr(0, slash);
    std::string name = object.substr(slash + 1);
    if (name == "*") {
      const auto up = parent.rfind('/');
      name = parent.substr(up + 1);
      parent = parent.substr(0, up);
    }
    read[parent.empty() ? "/" : parent].insert(name);
  }
  for (const auto& [object, names] : read) {
    if (object == "/" || object == "/telemetry")
      continue;  // the root's sections and telemetry's one, read by read_config
    SCOPED_TRACE(object);
    const rapidjson::Value* schema = schemas.object_at(object);
    ASSERT_NE(schema, nullptr);
    for (const auto& property : (*schema)["properties"].GetObject()) {
      EXPECT_TRUE(names.count(property.name.GetString()))
          << property.name.GetString() << " is in the schema and read by nothing";
    }
  }
}

}  // namespace
}  // namespace agentfleet::config
