// The configuration's defaults have two homes: the `default` of each property in
// schemas/config.schema.json (what operators read) and the initializers of the structs in
// core/config/config.hpp (what the programs use). This test holds them together: for every
// property with a schema default, in every object the schema describes (the items of
// `models`, `tiers`, price windows and API keys too), a configuration that states that
// default explicitly must load exactly as one that leaves it out.

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <functional>
#include <string>
#include <vector>

#include "core/config/config.hpp"
#include "tests/unit/source_file.hpp"

namespace agentfleet::config {
namespace {

using test::read_source;

// The least a configuration needs, as JSON (which YAML reads as it is), with one model, one
// price window, one tier and one API key so that their items' defaults are checked too (an
// auth section needs a key).
constexpr const char* kMinimal = R"({
  "postgres": {"url": "x"},
  "kafka": {"bootstrap_servers": "b"},
  "models": [{"name": "m1", "endpoints": [{"url": "http://h/x"}]}],
  "billing": {"prices": [{"model": "m1", "effective_from": "2026-01-01",
                          "input_per_million": "1", "windows": [{"from": "00:00", "to": "08:00",
                                                       "multiplier": "0.5"}]}]},
  "tiers": [{"tier": "standard"}],
  "auth": {"api_keys": [{"name": "k", "users": ["u1"],
           "sha256": "0000000000000000000000000000000000000000000000000000000000000000"}]}
})";

std::string text_of(const rapidjson::Value& value) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  value.Accept(w);
  return std::string(buffer.GetString(), buffer.GetSize());
}

struct Stated {
  std::string path;    // "/dispatcher/port", "/tiers/0/weight"
  std::string config;  // the minimal configuration with that default stated
};

// Every schema default not stated in `value`, each stated alone in a copy of `root`. Objects
// the configuration leaves out are walked as empty ones.
void collect(const rapidjson::Value& schema, rapidjson::Value& value, rapidjson::Document& root,
             const std::string& path, std::vector<Stated>& out) {
  auto& alloc = root.GetAllocator();
  if (schema.HasMember("properties") && value.IsObject()) {
    for (const auto& property : schema["properties"].GetObject()) {
      const std::string name = property.name.GetString();
      const rapidjson::Value& sub = property.value;
      const std::string at = path + "/" + name;
      if (sub.HasMember("default") && !value.HasMember(name.c_str())) {
        value.AddMember(rapidjson::Value(name.c_str(), alloc),
                        rapidjson::Value(sub["default"], alloc), alloc);
        out.push_back({at, text_of(root)});
        value.RemoveMember(name.c_str());
      }
      if (sub.HasMember("properties") && !value.HasMember(name.c_str())) {
        value.AddMember(rapidjson::Value(name.c_str(), alloc),
                        rapidjson::Value(rapidjson::kObjectType), alloc);
        collect(sub, value[name.c_str()], root, at, out);
        value.RemoveMember(name.c_str());
      } else if (value.HasMember(name.c_str())) {
        collect(sub, value[name.c_str()], root, at, out);
      }
    }
  }
  if (schema.HasMember("items") && value.IsArray()) {
    for (rapidjson::SizeType i = 0; i < value.Size(); ++i)
      collect(schema["items"], value[i], root, path + "/" + std::to_string(i), out);
  }
}

TEST(ConfigDefaults, EverySchemaDefaultIsTheDefaultTheProgramsUse) {
  rapidjson::Document schema;
  schema.Parse(read_source("schemas/config.schema.json").c_str());
  ASSERT_FALSE(schema.HasParseError());
  rapidjson::Document minimal;
  minimal.Parse(kMinimal);
  ASSERT_FALSE(minimal.HasParseError());
  const Config baseline = load_config_text(kMinimal, "defaults.yaml");

  std::vector<Stated> stated;
  collect(schema, minimal, minimal, "", stated);
  // The schema has over a hundred defaults; a walk that found few would prove little.
  EXPECT_GT(stated.size(), 100u);
  for (const Stated& s : stated) {
    try {
      EXPECT_TRUE(load_config_text(s.config, "defaults.yaml") == baseline)
          << s.path << ": the schema's default is not the struct's";
    } catch (const ConfigError& e) {
      ADD_FAILURE() << s.path << ": the schema's default is refused: " << e.what();
    }
  }
}

}  // namespace
}  // namespace agentfleet::config
