#pragma once
// A YAML document as JSON, typed the way the configuration loader types it: plain scalars
// by the YAML 1.2 core schema (8080 is a number, true a boolean), quoted and block scalars
// as strings. For documents the project keeps in YAML and serves or checks as JSON (the
// API's contract, schemas/openapi.yaml). No environment references are replaced.
//
// Pure; thread-safe.

#include <rapidjson/document.h>

#include <string_view>

namespace agentfleet::config {

// Throws std::runtime_error (naming the JSON pointer) for YAML that does not parse, a
// mapping key that is not a plain string, a duplicate key, or a document nested more than
// 64 deep or holding more than 100,000 values.
rapidjson::Document yaml_text_to_json(std::string_view yaml);

}  // namespace agentfleet::config
