#pragma once
// The configuration's declarative description: each object of config.schema.json that the
// reader fills property by property has one table (core/config/config_fields.cpp) naming each
// property, its JSON type and the member it goes into. The reader of that object is the
// table walked once; defaults are the members' initializers (config_defaults_test holds them
// equal to the schema's) and the ranges and patterns are the schema's, checked before any
// table is read. described_fields() lists the tables so that a test holds them equal to the
// schema: every property a table names is in the schema with that type, and every property
// the schema has is in a table or read by hand (hand_read_fields()).
#include <string>
#include <vector>

namespace agentfleet::config {

struct DescribedField {
  std::string object;  // the JSON pointer of its object in the schema's terms: "/dispatcher",
                       // "/models/*" (each item), "/models/*/retry"
  std::string name;    // "port"
  std::string type;    // the JSON type: string, integer, number, boolean, array
};

// Every property a table reads.
std::vector<DescribedField> described_fields();
// The properties of the tables' objects read by code of their own (maps, enums, JSON Schema
// values, whole arrays of objects): {object, name}, type empty.
std::vector<DescribedField> hand_read_fields();

}  // namespace agentfleet::config
