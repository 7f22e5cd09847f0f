#pragma once
// JSON Schema (draft-04) validation for everything the project accepts at run time: API
// bodies, Kafka messages, the configuration, tool arguments. Schemas are the embedded
// `schemas/*.json` files (see embedded.hpp) or, for tool parameters, schemas compiled from a
// value at run time. A schema may `$ref` an embedded file by its name, e.g.
// {"$ref": "tool_definition.schema.json"} or "tool_definition.schema.json#/definitions/x".
//
// Violations are values carrying the JSON pointer of the offending instance value and a
// message a person can act on ("unknown key 'foo'", "expected string, got integer",
// "missing required key 'url'"). Only the first violation is reported.
//
// Thread-safety: embedded schemas are compiled once, on first use, under a lock, and are
// immutable afterwards; `validate` may be called from any thread. A CompiledSchema is
// immutable; its `validate` may be called from any thread.
//
// Regular expressions (`pattern`, `patternProperties`) are ECMAScript (std::regex), as
// JSON Schema specifies: \d works. A schema whose regex does not compile, or whose `$ref`
// does not resolve, is rejected when it is compiled instead of being silently ignored.
//
// Limits, so hostile input cannot exhaust the stack: an instance nested more than 100
// levels deep is a violation, and so is a string longer than 4096 bytes where a `pattern`
// applies (std::regex recurses per character).

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <rapidjson/document.h>

namespace agentfleet::codec {

struct SchemaViolation {
  std::string path;     // JSON pointer of the offending value in the instance, "" for the root
  std::string message;  // human-readable, e.g. "unknown key 'foo'"
};

// Validates `doc` against the embedded schema file `schema_file` (e.g.
// "task_submission.schema.json"). Returns nullopt when valid. Schemas are compiled once and
// cached (thread-safe). Throws std::invalid_argument when `schema_file` is not embedded or
// is itself broken: a programming error, caught by the unit tests, never by input.
std::optional<SchemaViolation> validate(const rapidjson::Value& doc, std::string_view schema_file);

// Parses JSON text then validates; a parse error gives path "" and a message with the byte
// offset. When `out` is given the parsed document is left there (also when invalid).
// Parses JSON text (iteratively, UTF-8 checked) into `doc`: the violation (path "") when it
// is not JSON. validate_json_text() is this, then validate().
std::optional<SchemaViolation> parse_json_text(std::string_view json, rapidjson::Document& doc);

std::optional<SchemaViolation> validate_json_text(std::string_view json,
                                                  std::string_view schema_file,
                                                  rapidjson::Document* out = nullptr);

// A schema compiled at run time from a JSON value, e.g. a tool's `parameters`.
class CompiledSchema {
 public:
  // Copies `schema` and compiles it. Throws std::invalid_argument naming the schema
  // pointer when `schema` is not an object, a `$ref` cannot be resolved, or a pattern uses
  // syntax the validator does not support.
  explicit CompiledSchema(const rapidjson::Value& schema);
  ~CompiledSchema();
  CompiledSchema(CompiledSchema&&) noexcept;
  CompiledSchema& operator=(CompiledSchema&&) noexcept;
  CompiledSchema(const CompiledSchema&) = delete;
  CompiledSchema& operator=(const CompiledSchema&) = delete;

  std::optional<SchemaViolation> validate(const rapidjson::Value& doc) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One reference token of a JSON pointer (RFC 6901): '~' -> "~0", '/' -> "~1".
std::string json_pointer_token(std::string_view token);

// Lists every embedded schema file that fails to parse or compile, as
// "file: problem" lines; empty when all are usable. For tests and startup checks.
std::string check_embedded_schemas();

}  // namespace agentfleet::codec
