#pragma once
// The small expression language of llm-sim scenarios: dotted paths into JSON values,
// `{{...}}` string templates and the `when` conditions of branches. Pure functions over
// RapidJSON values; no I/O. A parsed Template or Condition is immutable and may be used
// from any thread.
//
// Paths: segments separated by '.', each an object key or an array index:
// "r.items.0.id", "steps.0.1.item.title". A path that does not resolve gives nullptr.
//
// Placeholders: `{{PATH}}`, `{{count PATH}}` (length of an array, members of an object,
// 0 otherwise), `{{month_day PATH}}` ("2025-02-08" -> "2月8日", other text unchanged).
// Inside text a value renders as: string as is, number/bool as JSON, null or missing as
// "", object/array as compact JSON. A string that is exactly one placeholder renders as
// the JSON value itself (see Template::render_value), so ids and counts keep their type.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <rapidjson/document.h>

namespace agentfleet::llm_sim {

// A syntax error in a template or condition; the loader adds the file and location.
class TemplateError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Follows `path` from `root`; nullptr when a segment is missing or of the wrong kind.
const rapidjson::Value* resolve_path(const rapidjson::Value& root, std::string_view path);

// Where placeholders look values up: `primary` first, then `fallback` (used by
// options_from, whose format is relative to each element but may still name `today`).
struct Scope {
  const rapidjson::Value* primary = nullptr;
  const rapidjson::Value* fallback = nullptr;
  const rapidjson::Value* lookup(std::string_view path) const;
};

class Template {
 public:
  enum class Helper { kNone, kCount, kMonthDay };

  Template() = default;
  // Throws TemplateError on an unclosed `{{`, an empty or malformed placeholder, or an
  // unknown helper.
  static Template parse(std::string_view text);

  std::string render(const Scope& scope) const;
  // The value of a template that is exactly one placeholder (a copy of the JSON value;
  // null when missing; an integer for `count`), otherwise the rendered string.
  rapidjson::Value render_value(const Scope& scope,
                                rapidjson::Document::AllocatorType& allocator) const;

  // The paths its placeholders name, for validation at load time.
  std::vector<std::string> paths() const;
  const std::string& source() const { return source_; }

 private:
  struct Part {
    bool literal = true;
    std::string text;  // literal text, or the path of a placeholder
    Helper helper = Helper::kNone;
  };
  std::string source_;
  std::vector<Part> parts_;
};

// A `when` condition of a branch. `{error: true}` is stored as exists/missing of "r.error".
struct Condition {
  enum class Kind { kExists, kMissing, kCount };
  Kind kind = Kind::kExists;
  std::string path;
  std::optional<std::int64_t> eq;
  std::optional<std::int64_t> min;
  std::optional<std::int64_t> max;

  bool holds(const rapidjson::Value& context) const;
};

// Length of an array, member count of an object, 0 for anything else or nullptr.
std::int64_t count_of(const rapidjson::Value* value);

// True when `path` is a well-formed dotted path (non-empty segments of [A-Za-z0-9_-]).
bool is_valid_path(std::string_view path);

}  // namespace agentfleet::llm_sim
