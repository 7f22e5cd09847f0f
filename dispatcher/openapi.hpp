#pragma once
// The API's contract: schemas/openapi.yaml, built into the binary. Served as JSON at
// GET /v1/openapi.json with every JSON Schema file it names (schemas/*.json, e.g.
// "task_submission.schema.json") copied under components.schemas and its $refs pointed
// there, so the document stands alone for a client generator or a validator.
//
// Thread-safe: the JSON is built once, on first use.

#include <rapidjson/document.h>

#include <string>
#include <string_view>

namespace agentfleet::dispatcher {

// schemas/openapi.yaml as written.
std::string_view openapi_yaml();

// The document as served (compact JSON). Throws std::runtime_error when the embedded
// document or a schema it names cannot be read: a defect of the build, which the unit
// tests catch.
const std::string& openapi_json();

// The served document, parsed (for tests and for checking answers against it).
rapidjson::Document openapi_document();

}  // namespace agentfleet::dispatcher
