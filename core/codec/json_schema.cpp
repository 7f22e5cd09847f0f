// GCC 12 reports a false -Wmaybe-uninitialized inside libstdc++'s <regex> (std::function
// in the NFA states) when optimizing; it must be silenced before any header pulls it in.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "core/codec/json_schema.hpp"
#include "core/codec/json_text.hpp"

#include <algorithm>
#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <regex>

// std::regex (ECMAScript, the dialect JSON Schema specifies, so \d works) instead of
// RapidJSON 1.1's own engine, whose compiled regexes keep their search state inside and so
// cannot be shared between threads. The schema types below are instantiated with an
// allocator type private to this file, so these settings cannot clash with another
// translation unit that includes rapidjson/schema.h with the defaults.
// (RapidJSON 1.1 reads these oddly: defining USE_INTERNALREGEX at all turns the internal
// engine off, and defining USE_STDREGEX at all turns std::regex off; so define only one.)
#define RAPIDJSON_SCHEMA_USE_INTERNALREGEX 0
#include <rapidjson/error/en.h>
#include <rapidjson/pointer.h>
#include <rapidjson/schema.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "core/codec/embedded.hpp"

namespace agentfleet::codec {
namespace {

using rapidjson::SizeType;
using rapidjson::Value;

struct SchemaAllocator : rapidjson::CrtAllocator {};
using SchemaDocument = rapidjson::GenericSchemaDocument<Value, SchemaAllocator>;
using SchemaValidator = rapidjson::GenericSchemaValidator<SchemaDocument>;
using RemoteProvider = rapidjson::IGenericRemoteSchemaDocumentProvider<SchemaDocument>;

// One compiled schema with the JSON it came from. `sources` maps the names of the files it
// reaches through `$ref` to their JSON, so a failure can be traced back to the schema text
// (RapidJSON 1.1 reports no usable schema pointer for schemas in another file).
struct CompiledUnit {
  std::string name;
  rapidjson::Document source;
  std::map<std::string, const Value*, std::less<>> sources;
  std::unique_ptr<SchemaDocument> compiled;
};

std::string json_text(const Value& v) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> writer(sb);
  v.Accept(writer);
  return std::string(sb.GetString(), sb.GetSize());
}

template <typename Pointer>
std::string pointer_text(const Pointer& p) {
  rapidjson::StringBuffer sb;
  p.Stringify(sb);
  return std::string(sb.GetString(), sb.GetSize());
}

std::string_view as_view(const Value& v) {
  return {v.GetString(), v.GetStringLength()};
}

bool regex_supported(const Value& pattern) {
  try {
    std::regex re(pattern.GetString(), pattern.GetStringLength(), std::regex_constants::ECMAScript);
    return true;
  } catch (const std::regex_error&) {
    return false;
  }
}

// The compiled embedded schemas, by file name. Compilation holds the lock exclusively;
// RapidJSON calls back into GetRemoteDocument while it compiles, on the same thread, with
// the lock already held. Units are never removed, so references to them stay valid.
class SchemaRegistry final : public RemoteProvider {
 public:
  static SchemaRegistry& instance() {
    static SchemaRegistry registry;
    return registry;
  }

  const CompiledUnit& embedded(std::string_view name) {
    {
      std::shared_lock lock(mu_);
      if (auto it = units_.find(name); it != units_.end()) {
        return *it->second;
      }
    }
    std::unique_lock lock(mu_);
    return compile_embedded_locked(name);
  }

  // Compiles a schema that is not an embedded file into `unit` (name used in messages).
  void compile_inline(CompiledUnit& unit) {
    std::unique_lock lock(mu_);
    std::vector<const CompiledUnit*> deps;
    prescan(unit, unit.source, "", deps);
    finish(unit, deps);
  }

  const SchemaDocument* GetRemoteDocument(const char* uri, SizeType length) override {
    // RapidJSON 1.1 passes a length one short of the file name; the $ref string itself is
    // NUL-terminated, so read the name up to '#' or the end instead.
    (void)length;
    std::string_view ref(uri);
    std::string_view file = ref.substr(0, ref.find('#'));
    auto it = units_.find(file);
    return it == units_.end() ? nullptr : it->second->compiled.get();
  }

 private:
  SchemaRegistry() = default;

  const CompiledUnit& compile_embedded_locked(std::string_view name) {
    if (auto it = units_.find(name); it != units_.end()) {
      return *it->second;
    }
    if (compiling_.count(std::string(name)) != 0) {
      throw std::invalid_argument("schema " + std::string(name) +
                                  ": circular $ref between schema files");
    }
    const auto& files = agentfleet::embedded::schemas();
    auto file = std::find_if(files.begin(), files.end(),
                             [&](const auto& entry) { return entry.first == name; });
    if (file == files.end()) {
      throw std::invalid_argument("unknown schema file '" + std::string(name) + "'");
    }
    auto unit = std::make_unique<CompiledUnit>();
    unit->name = std::string(name);
    unit->source.Parse(file->second.data(), file->second.size());
    if (unit->source.HasParseError()) {
      throw std::invalid_argument("schema " + unit->name + ": invalid JSON at offset " +
                                  std::to_string(unit->source.GetErrorOffset()) + ": " +
                                  rapidjson::GetParseError_En(unit->source.GetParseError()));
    }
    if (!unit->source.IsObject()) {
      throw std::invalid_argument("schema " + unit->name + ": the root must be an object");
    }
    compiling_.insert(unit->name);
    std::vector<const CompiledUnit*> deps;
    try {
      prescan(*unit, unit->source, "", deps);
    } catch (...) {
      compiling_.erase(unit->name);
      throw;
    }
    compiling_.erase(unit->name);
    finish(*unit, deps);
    auto [it, inserted] = units_.emplace(unit->name, std::move(unit));
    (void)inserted;
    return *it->second;
  }

  void finish(CompiledUnit& unit, const std::vector<const CompiledUnit*>& deps) {
    unit.sources.emplace(unit.name, &unit.source);
    for (const CompiledUnit* dep : deps) {
      unit.sources.insert(dep->sources.begin(), dep->sources.end());
    }
    unit.compiled = std::make_unique<SchemaDocument>(unit.source, this);
  }

  // RapidJSON silently ignores a `$ref` it cannot resolve and a pattern its regex engine
  // cannot parse, which would accept anything; refuse such schemas instead. Also compiles
  // the files a `$ref` names, so they are ready when RapidJSON asks for them.
  void prescan(const CompiledUnit& unit, const Value& v, const std::string& where,
               std::vector<const CompiledUnit*>& deps) {
    if (v.IsArray()) {
      for (SizeType i = 0; i < v.Size(); ++i) {
        prescan(unit, v[i], where + "/" + std::to_string(i), deps);
      }
      return;
    }
    if (!v.IsObject()) {
      return;
    }
    auto fail = [&](const std::string& what) {
      throw std::invalid_argument("schema " + unit.name + ": " + (where.empty() ? "/" : where) +
                                  ": " + what);
    };
    if (auto ref = v.FindMember("$ref"); ref != v.MemberEnd() && ref->value.IsString()) {
      std::string_view text = as_view(ref->value);
      std::size_t hash = text.find('#');
      std::string_view file = text.substr(0, hash);
      std::string fragment(hash == std::string_view::npos ? "" : text.substr(hash + 1));
      rapidjson::Pointer pointer(fragment.data(), fragment.size());
      if (!pointer.IsValid()) {
        fail("$ref '" + std::string(text) + "' has an invalid JSON pointer");
      }
      const Value* target_doc = &unit.source;
      if (!file.empty()) {
        const CompiledUnit& dep = compile_embedded_locked(file);
        deps.push_back(&dep);
        target_doc = &dep.source;
      }
      const Value* target = pointer.Get(*target_doc);
      if (target == nullptr || !target->IsObject()) {
        fail("$ref '" + std::string(text) + "' does not resolve to a schema");
      }
    }
    if (auto p = v.FindMember("pattern"); p != v.MemberEnd() && p->value.IsString()) {
      if (!regex_supported(p->value)) {
        fail("pattern '" + std::string(as_view(p->value)) + "' is not a valid regular expression");
      }
    }
    if (auto pp = v.FindMember("patternProperties"); pp != v.MemberEnd() && pp->value.IsObject()) {
      for (const auto& m : pp->value.GetObject()) {
        if (!regex_supported(m.name)) {
          fail("patternProperties key '" + std::string(as_view(m.name)) +
               "' is not a valid regular expression");
        }
      }
    }
    for (const auto& m : v.GetObject()) {
      std::string_view key = as_view(m.name);
      // Instance data, not schemas.
      if (key == "enum" || key == "default" || key == "examples" || key == "const") {
        continue;
      }
      prescan(unit, m.value, where + "/" + json_pointer_token(key), deps);
    }
  }

  std::shared_mutex mu_;  // guards units_ and compiling_; compiled units never change
  std::map<std::string, std::unique_ptr<CompiledUnit>, std::less<>> units_;
  std::set<std::string> compiling_;
};

// ---- Turning RapidJSON's (keyword, schema pointer, document pointer) into a message ----

std::string type_name(const Value& v) {
  switch (v.GetType()) {
    case rapidjson::kNullType:
      return "null";
    case rapidjson::kFalseType:
    case rapidjson::kTrueType:
      return "boolean";
    case rapidjson::kObjectType:
      return "object";
    case rapidjson::kArrayType:
      return "array";
    case rapidjson::kStringType:
      return "string";
    case rapidjson::kNumberType:
      return (v.IsInt64() || v.IsUint64()) ? "integer" : "number";
  }
  return "value";
}

bool type_matches(std::string_view type, const Value& v) {
  if (type == "number") {
    return v.IsNumber();
  }
  if (type == "integer") {
    return v.IsInt64() || v.IsUint64();
  }
  return type == type_name(v);
}

std::vector<std::string_view> type_list(const Value& type) {
  std::vector<std::string_view> out;
  if (type.IsString()) {
    out.push_back(as_view(type));
  } else if (type.IsArray()) {
    for (const auto& t : type.GetArray()) {
      if (t.IsString()) {
        out.push_back(as_view(t));
      }
    }
  }
  return out;
}

std::size_t code_points(const Value& s) {
  std::size_t n = 0;
  for (char c : as_view(s)) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) {
      ++n;
    }
  }
  return n;
}

std::vector<std::string> missing_required(const Value& schema, const Value* instance) {
  std::vector<std::string> out;
  auto req = schema.FindMember("required");
  if (req == schema.MemberEnd() || !req->value.IsArray() || instance == nullptr ||
      !instance->IsObject()) {
    return out;
  }
  for (const auto& k : req->value.GetArray()) {
    if (k.IsString() && !instance->HasMember(k)) {
      out.emplace_back(as_view(k));
    }
  }
  return out;
}

bool in_enum(const Value& schema, const Value& v) {
  const Value& values = schema["enum"];
  if (!values.IsArray()) {
    return true;
  }
  return std::any_of(values.Begin(), values.End(), [&](const Value& e) { return e == v; });
}

bool is_property(const Value& schema, std::string_view key) {
  auto props = schema.FindMember("properties");
  if (props == schema.MemberEnd() || !props->value.IsObject()) {
    return false;
  }
  return props->value.HasMember(Value(rapidjson::StringRef(key.data(), key.size())));
}

bool flag(const Value& schema, const char* name) {
  auto it = schema.FindMember(name);
  return it != schema.MemberEnd() && it->value.IsBool() && it->value.GetBool();
}

// Whether `schema` (a candidate for where the failure happened) really rejects the value for
// `keyword`; used to pick the right document when several hold the same pointer.
bool explains(std::string_view keyword, const Value& schema, const Value* instance,
              std::string_view key) {
  const Value& k = schema[Value(rapidjson::StringRef(keyword.data(), keyword.size()))];
  if (keyword == "additionalProperties") {
    return !is_property(schema, key);
  }
  if (keyword == "required") {
    return !missing_required(schema, instance).empty();
  }
  if (instance == nullptr) {
    return true;
  }
  if (keyword == "type") {
    auto types = type_list(k);
    return std::none_of(types.begin(), types.end(),
                        [&](std::string_view t) { return type_matches(t, *instance); });
  }
  if (keyword == "enum") {
    return !in_enum(schema, *instance);
  }
  if ((keyword == "minimum" || keyword == "maximum") && k.IsNumber() && instance->IsNumber()) {
    double limit = k.GetDouble();
    double value = instance->GetDouble();
    bool exclusive = flag(schema, keyword == "minimum" ? "exclusiveMinimum" : "exclusiveMaximum");
    return keyword == "minimum" ? (exclusive ? value <= limit : value < limit)
                                : (exclusive ? value >= limit : value > limit);
  }
  if ((keyword == "minLength" || keyword == "maxLength") && k.IsUint64() && instance->IsString()) {
    std::size_t n = code_points(*instance);
    return keyword == "minLength" ? n < k.GetUint64() : n > k.GetUint64();
  }
  return true;
}

std::string quoted_list(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) {
    out += (out.empty() ? "'" : ", '") + item + "'";
  }
  return out;
}

std::string short_json(const Value& v) {
  std::string text = json_text(v);
  constexpr std::size_t kMax = 60;
  if (text.size() > kMax) {
    text = text.substr(0, kMax) + "...";
  }
  return text;
}

std::string plural(std::uint64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

std::string describe(std::string_view keyword, const Value* schema, const Value* instance,
                     std::string_view key) {
  static const Value kEmpty(rapidjson::kObjectType);
  const Value& s = schema != nullptr ? *schema : kEmpty;
  auto member = [&](const char* name) -> const Value* {
    auto it = s.FindMember(name);
    return it == s.MemberEnd() ? nullptr : &it->value;
  };
  const Value* k = member(std::string(keyword).c_str());

  if (keyword == "additionalProperties") {
    std::string msg = "unknown key '" + std::string(key) + "'";
    const Value* props = member("properties");
    if (props != nullptr && props->IsObject() && props->MemberCount() > 0 &&
        props->MemberCount() <= 30) {
      std::vector<std::string> names;
      for (const auto& m : props->GetObject()) {
        names.emplace_back(as_view(m.name));
      }
      msg += " (expected one of " + quoted_list(names) + ")";
    }
    return msg;
  }
  if (keyword == "required") {
    auto missing = missing_required(s, instance);
    if (missing.empty()) {
      return "missing a required key";
    }
    return std::string(missing.size() == 1 ? "missing required key " : "missing required keys ") +
           quoted_list(missing);
  }
  if (keyword == "type") {
    std::string msg = "expected ";
    auto types = k != nullptr ? type_list(*k) : std::vector<std::string_view>{};
    for (std::size_t i = 0; i < types.size(); ++i) {
      msg += (i == 0 ? "" : (i + 1 == types.size() ? " or " : ", ")) + std::string(types[i]);
    }
    if (types.empty()) {
      msg += "another type";
    }
    if (instance != nullptr) {
      msg += ", got " + type_name(*instance);
    }
    return msg;
  }
  if (keyword == "enum") {
    std::string msg = "must be one of ";
    if (k != nullptr && k->IsArray()) {
      for (SizeType i = 0; i < k->Size(); ++i) {
        msg += (i == 0 ? "" : ", ") + json_text((*k)[i]);
      }
    }
    if (instance != nullptr) {
      msg += " (got " + short_json(*instance) + ")";
    }
    return msg;
  }
  if ((keyword == "minimum" || keyword == "maximum") && k != nullptr && k->IsNumber()) {
    bool exclusive = flag(s, keyword == "minimum" ? "exclusiveMinimum" : "exclusiveMaximum");
    std::string op = keyword == "minimum" ? (exclusive ? ">" : ">=") : (exclusive ? "<" : "<=");
    std::string msg = "must be " + op + " " + json_text(*k);
    if (instance != nullptr) {
      msg += " (got " + short_json(*instance) + ")";
    }
    return msg;
  }
  if (keyword == "multipleOf" && k != nullptr) {
    return "must be a multiple of " + json_text(*k);
  }
  if ((keyword == "minLength" || keyword == "maxLength") && k != nullptr && k->IsUint64()) {
    std::uint64_t n = k->GetUint64();
    if (keyword == "minLength") {
      return n == 1 ? "must not be empty" : "must be at least " + plural(n, "character") + " long";
    }
    return "must be at most " + plural(n, "character") + " long";
  }
  if (keyword == "pattern" && k != nullptr && k->IsString()) {
    std::string msg = "does not match the pattern " + std::string(as_view(*k));
    if (instance != nullptr) {
      msg = short_json(*instance) + " " + msg;
    }
    return msg;
  }
  if ((keyword == "minItems" || keyword == "maxItems") && k != nullptr && k->IsUint64()) {
    std::uint64_t n = k->GetUint64();
    if (keyword == "minItems") {
      return n == 1 ? "must not be empty" : "must have at least " + plural(n, "item");
    }
    return "must have at most " + plural(n, "item");
  }
  if ((keyword == "minProperties" || keyword == "maxProperties") && k != nullptr && k->IsUint64()) {
    return std::string("must have ") + (keyword == "minProperties" ? "at least " : "at most ") +
           plural(k->GetUint64(), "key");
  }
  if (keyword == "uniqueItems") {
    return "items must be unique";
  }
  if (keyword == "dependencies" && k != nullptr && k->IsObject() && instance != nullptr &&
      instance->IsObject()) {
    for (const auto& dep : k->GetObject()) {
      if (!instance->HasMember(dep.name) || !dep.value.IsArray()) {
        continue;
      }
      for (const auto& needed : dep.value.GetArray()) {
        if (needed.IsString() && !instance->HasMember(needed)) {
          return "key '" + std::string(as_view(dep.name)) + "' requires key '" +
                 std::string(as_view(needed)) + "'";
        }
      }
    }
    return "does not satisfy the dependencies between its keys";
  }
  if (keyword == "oneOf") {
    return "must match exactly one of the allowed forms";
  }
  if (keyword == "anyOf") {
    return "does not match any of the allowed forms";
  }
  if (keyword == "allOf") {
    return "does not match all of the required forms";
  }
  if (keyword == "not") {
    return "matches a form that is not allowed";
  }
  if (keyword == "items" || keyword == "additionalItems") {
    return "has more items than allowed";
  }
  if (keyword == "patternProperties") {
    return "has a key that matches no allowed pattern";
  }
  return "violates schema keyword '" + std::string(keyword) + "'";
}

// A schema fragment and the schema document it sits in (local `$ref`s are relative to it).
struct Located {
  const Value* doc = nullptr;
  const Value* schema = nullptr;
};

Located follow_refs(const CompiledUnit& unit, Located at) {
  for (int hops = 0; hops < 32 && at.schema != nullptr && at.schema->IsObject(); ++hops) {
    auto ref = at.schema->FindMember("$ref");
    if (ref == at.schema->MemberEnd() || !ref->value.IsString()) {
      return at;
    }
    std::string_view text = as_view(ref->value);
    std::size_t hash = text.find('#');
    std::string_view file = text.substr(0, hash);
    std::string fragment(hash == std::string_view::npos ? "" : text.substr(hash + 1));
    if (!file.empty()) {
      auto it = unit.sources.find(file);
      if (it == unit.sources.end()) {
        return {};
      }
      at.doc = it->second;
    }
    rapidjson::Pointer pointer(fragment.data(), fragment.size());
    at.schema = pointer.IsValid() ? pointer.Get(*at.doc) : nullptr;
  }
  return at;
}

// The schema that applies to the member or element `token` of a value validated by `at`,
// through properties / additionalProperties / items / additionalItems. Empty when it
// cannot be told without validating (patternProperties).
Located child_schema(const CompiledUnit& unit, Located at, std::string_view token, SizeType index) {
  at = follow_refs(unit, at);
  if (at.schema == nullptr || !at.schema->IsObject()) {
    return {};
  }
  const Value& s = *at.schema;
  auto props = s.FindMember("properties");
  if (props != s.MemberEnd() && props->value.IsObject()) {
    auto m = props->value.FindMember(Value(rapidjson::StringRef(token.data(), token.size())));
    if (m != props->value.MemberEnd()) {
      return {at.doc, &m->value};
    }
  }
  auto items = s.FindMember("items");
  if (items != s.MemberEnd() && items->value.IsObject()) {
    return {at.doc, &items->value};
  }
  if (items != s.MemberEnd() && items->value.IsArray()) {
    if (index != rapidjson::kPointerInvalidIndex && index < items->value.Size()) {
      return {at.doc, &items->value[index]};
    }
    auto extra = s.FindMember("additionalItems");
    if (extra != s.MemberEnd() && extra->value.IsObject()) {
      return {at.doc, &extra->value};
    }
    return {};
  }
  auto extra = s.FindMember("additionalProperties");
  if (extra != s.MemberEnd() && extra->value.IsObject()) {
    return {at.doc, &extra->value};
  }
  return {};
}

// Instances nested deeper than this are refused before validation: RapidJSON's validator
// and the walks below recurse once per level.
constexpr std::size_t kMaxDepth = 100;
// std::regex matches recursively, about one stack frame per character; a longer string is
// refused where a pattern applies instead of risking the stack.
constexpr std::size_t kMaxPatternSubjectBytes = 4096;

struct Shape {
  bool too_deep = false;
  bool has_long_string = false;
};

void measure(const Value& v, std::size_t depth, std::string& path, Shape& shape) {
  if (shape.too_deep) {
    return;
  }
  if (v.IsString()) {
    shape.has_long_string |= v.GetStringLength() > kMaxPatternSubjectBytes;
    return;
  }
  if (!v.IsObject() && !v.IsArray()) {
    return;
  }
  if (depth >= kMaxDepth) {
    shape.too_deep = true;
    return;
  }
  std::size_t mark = path.size();
  if (v.IsObject()) {
    for (const auto& m : v.GetObject()) {
      shape.has_long_string |= m.name.GetStringLength() > kMaxPatternSubjectBytes;
      path += "/" + json_pointer_token(as_view(m.name));
      measure(m.value, depth + 1, path, shape);
      if (shape.too_deep) {
        return;
      }
      path.resize(mark);
    }
  } else {
    for (SizeType i = 0; i < v.Size(); ++i) {
      path += "/" + std::to_string(i);
      measure(v[i], depth + 1, path, shape);
      if (shape.too_deep) {
        return;
      }
      path.resize(mark);
    }
  }
}

std::optional<SchemaViolation> long_pattern_subject(const CompiledUnit& unit, const Value& v,
                                                    Located at, const std::string& path,
                                                    int same_value_hops);

std::optional<SchemaViolation> long_pattern_subject_in_all(const CompiledUnit& unit, const Value& v,
                                                           Located at, const Value& schemas,
                                                           const std::string& path, int hops) {
  if (schemas.IsObject()) {
    return long_pattern_subject(unit, v, {at.doc, &schemas}, path, hops);
  }
  if (schemas.IsArray()) {
    for (const auto& branch : schemas.GetArray()) {
      if (auto found = long_pattern_subject(unit, v, {at.doc, &branch}, path, hops)) {
        return found;
      }
    }
  }
  return std::nullopt;
}

// Finds a string longer than kMaxPatternSubjectBytes at a place where some schema that
// could apply to it (any branch of a combinator counts) has a pattern.
std::optional<SchemaViolation> long_pattern_subject(const CompiledUnit& unit, const Value& v,
                                                    Located at, const std::string& path,
                                                    int same_value_hops) {
  at = follow_refs(unit, at);
  if (at.schema == nullptr || !at.schema->IsObject() || same_value_hops > 16) {
    return std::nullopt;
  }
  const Value& s = *at.schema;
  auto too_long = [&](const std::string& where, std::size_t bytes) {
    return SchemaViolation{where, "is too long to check against its pattern (" +
                                      std::to_string(bytes) + " bytes, at most " +
                                      std::to_string(kMaxPatternSubjectBytes) + ")"};
  };
  if (v.IsString() && v.GetStringLength() > kMaxPatternSubjectBytes && s.HasMember("pattern")) {
    return too_long(path, v.GetStringLength());
  }
  for (const char* combinator : {"allOf", "anyOf", "oneOf", "not"}) {
    if (auto it = s.FindMember(combinator); it != s.MemberEnd()) {
      if (auto found =
              long_pattern_subject_in_all(unit, v, at, it->value, path, same_value_hops + 1)) {
        return found;
      }
    }
  }
  if (v.IsObject()) {
    auto pattern_props = s.FindMember("patternProperties");
    bool has_pattern_props = pattern_props != s.MemberEnd() && pattern_props->value.IsObject();
    for (const auto& m : v.GetObject()) {
      std::string member_path = path + "/" + json_pointer_token(as_view(m.name));
      if (has_pattern_props && m.name.GetStringLength() > kMaxPatternSubjectBytes) {
        return too_long(member_path, m.name.GetStringLength());
      }
      auto props = s.FindMember("properties");
      if (props != s.MemberEnd() && props->value.IsObject()) {
        if (auto p = props->value.FindMember(m.name); p != props->value.MemberEnd()) {
          if (auto found =
                  long_pattern_subject(unit, m.value, {at.doc, &p->value}, member_path, 0)) {
            return found;
          }
        }
      }
      if (has_pattern_props) {
        for (const auto& pp : pattern_props->value.GetObject()) {
          if (auto found =
                  long_pattern_subject(unit, m.value, {at.doc, &pp.value}, member_path, 0)) {
            return found;
          }
        }
      }
      if (auto extra = s.FindMember("additionalProperties");
          extra != s.MemberEnd() && extra->value.IsObject()) {
        if (auto found =
                long_pattern_subject(unit, m.value, {at.doc, &extra->value}, member_path, 0)) {
          return found;
        }
      }
    }
  }
  if (v.IsArray()) {
    auto items = s.FindMember("items");
    auto extra = s.FindMember("additionalItems");
    for (SizeType i = 0; i < v.Size(); ++i) {
      const Value* item_schema = nullptr;
      if (items != s.MemberEnd() && items->value.IsObject()) {
        item_schema = &items->value;
      } else if (items != s.MemberEnd() && items->value.IsArray() && i < items->value.Size()) {
        item_schema = &items->value[i];
      } else if (extra != s.MemberEnd() && extra->value.IsObject()) {
        item_schema = &extra->value;
      }
      if (item_schema != nullptr) {
        if (auto found = long_pattern_subject(unit, v[i], {at.doc, item_schema},
                                              path + "/" + std::to_string(i), 0)) {
          return found;
        }
      }
    }
  }
  return std::nullopt;
}

std::optional<SchemaViolation> run(const CompiledUnit& unit, const Value& doc) {
  Shape shape;
  std::string deep_path;
  measure(doc, 0, deep_path, shape);
  if (shape.too_deep) {
    return SchemaViolation{deep_path,
                           "nested more than " + std::to_string(kMaxDepth) + " levels deep"};
  }
  if (shape.has_long_string) {
    if (auto found = long_pattern_subject(unit, doc, {&unit.source, &unit.source}, "", 0)) {
      return found;
    }
  }
  SchemaValidator validator(*unit.compiled);
  doc.Accept(validator);
  if (validator.IsValid()) {
    return std::nullopt;
  }
  std::string keyword = validator.GetInvalidSchemaKeyword();
  auto doc_ptr = validator.GetInvalidDocumentPointer();
  const Value* instance = doc_ptr.Get(doc);
  const std::size_t depth = doc_ptr.GetTokenCount();
  std::string_view key;
  if (depth > 0) {
    const auto& last = doc_ptr.GetTokens()[depth - 1];
    key = std::string_view(last.name, last.length);
  }

  // Find the failing schema by walking the instance path through the schema text. For
  // `additionalProperties` the path ends at the unknown key; the schema is its parent's.
  std::size_t schema_depth = (keyword == "additionalProperties" && depth > 0) ? depth - 1 : depth;
  Located at{&unit.source, &unit.source};
  for (std::size_t i = 0; i < schema_depth && at.schema != nullptr; ++i) {
    const auto& token = doc_ptr.GetTokens()[i];
    at = child_schema(unit, at, std::string_view(token.name, token.length), token.index);
  }
  at = follow_refs(unit, at);
  const Value* schema = nullptr;
  if (at.schema != nullptr && at.schema->IsObject() && at.schema->HasMember(keyword.c_str())) {
    schema = at.schema;
  } else {
    // The walk failed (patternProperties); RapidJSON's schema pointer is relative to an
    // unknown file, so take the first file where it names a schema that explains the error.
    auto schema_ptr = validator.GetInvalidSchemaPointer();
    for (const auto& [name, source] : unit.sources) {
      (void)name;
      Located candidate = follow_refs(unit, {source, schema_ptr.Get(*source)});
      if (candidate.schema != nullptr && candidate.schema->IsObject() &&
          candidate.schema->HasMember(keyword.c_str()) &&
          explains(keyword, *candidate.schema, instance, key)) {
        schema = candidate.schema;
        break;
      }
    }
  }
  return SchemaViolation{pointer_text(doc_ptr), describe(keyword, schema, instance, key)};
}

}  // namespace

std::optional<SchemaViolation> validate(const rapidjson::Value& doc, std::string_view schema_file) {
  return run(SchemaRegistry::instance().embedded(schema_file), doc);
}

std::optional<SchemaViolation> validate_json_text(std::string_view json,
                                                  std::string_view schema_file,
                                                  rapidjson::Document* out) {
  rapidjson::Document local;
  rapidjson::Document& doc = out != nullptr ? *out : local;
  if (auto violation = parse_json_text(json, doc))
    return violation;
  return validate(doc, schema_file);
}

std::optional<SchemaViolation> parse_json_text(std::string_view json, rapidjson::Document& doc) {
  // Iterative parsing: a deeply nested body must not exhaust the stack.
  // Iterative parsing with UTF-8 validation: text that is not UTF-8 is bad input (400),
  // not something to discover later when Postgres refuses it.
  doc.Parse<rapidjson::kParseIterativeFlag | rapidjson::kParseValidateEncodingFlag>(json.data(),
                                                                                    json.size());
  if (doc.HasParseError()) {
    return SchemaViolation{"", "invalid JSON at offset " + std::to_string(doc.GetErrorOffset()) +
                                   ": " + rapidjson::GetParseError_En(doc.GetParseError())};
  }
  if (auto offset = lone_surrogate_escape(json)) {
    return SchemaViolation{"", "invalid JSON at offset " + std::to_string(*offset) +
                                   ": a lone low surrogate escape is not a character"};
  }
  return std::nullopt;
}

struct CompiledSchema::Impl {
  CompiledUnit unit;
};

CompiledSchema::CompiledSchema(const rapidjson::Value& schema) : impl_(std::make_unique<Impl>()) {
  if (!schema.IsObject()) {
    throw std::invalid_argument("a schema must be a JSON object, got " + type_name(schema));
  }
  impl_->unit.name = "(inline)";
  impl_->unit.source.CopyFrom(schema, impl_->unit.source.GetAllocator());
  SchemaRegistry::instance().compile_inline(impl_->unit);
}

CompiledSchema::~CompiledSchema() = default;
CompiledSchema::CompiledSchema(CompiledSchema&&) noexcept = default;
CompiledSchema& CompiledSchema::operator=(CompiledSchema&&) noexcept = default;

std::optional<SchemaViolation> CompiledSchema::validate(const rapidjson::Value& doc) const {
  return run(impl_->unit, doc);
}

std::string check_embedded_schemas() {
  std::string problems;
  for (const auto& [name, contents] : agentfleet::embedded::schemas()) {
    (void)contents;
    try {
      SchemaRegistry::instance().embedded(name);
    } catch (const std::invalid_argument& e) {
      problems += std::string(name) + ": " + e.what() + "\n";
    }
  }
  return problems;
}

std::string json_pointer_token(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace agentfleet::codec
