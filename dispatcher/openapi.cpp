#include "dispatcher/openapi.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/codec/embedded.hpp"
#include "core/config/yaml_json.hpp"

namespace agentfleet::embedded {
// The file cmake/embed.cmake builds from schemas/openapi.yaml (dispatcher/CMakeLists.txt).
const std::vector<std::pair<std::string_view, std::string_view>>& openapi();
}  // namespace agentfleet::embedded

namespace agentfleet::dispatcher {

namespace {

using rapidjson::Value;
using Allocator = rapidjson::Document::AllocatorType;
constexpr std::string_view kSchemaSuffix = ".schema.json";

// "task_submission.schema.json" -> "TaskSubmission".
std::string component_name(std::string_view file) {
  std::string name;
  bool upper = true;
  for (char c : file.substr(0, file.size() - kSchemaSuffix.size())) {
    if (c == '_' || c == '-') {
      upper = true;
      continue;
    }
    name += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return name;
}

std::string_view embedded_schema(std::string_view file) {
  for (const auto& [name, contents] : embedded::schemas()) {
    if (name == file)
      return contents;
  }
  throw std::runtime_error("schemas/openapi.yaml names '" + std::string(file) +
                           "', which is not one of schemas/*.json");
}

// Copies the schema files the document names into components.schemas, and points every
// $ref at the copy. A file's own refs ("#/definitions/x") are pointed into its copy; its
// refs to other files are followed in turn.
class Inliner {
 public:
  explicit Inliner(rapidjson::Document& doc) : doc_(doc), alloc_(doc.GetAllocator()) {}

  void run() {
    rewrite(doc_, "");
    // Copies are added once the walk is over (adding members moves the tree being walked).
    // A copy may name further files: those are copied in later rounds.
    while (!pending_.empty()) {
      auto batch = std::move(pending_);
      pending_.clear();
      for (auto& [name, copy] : batch) {
        Value& components = member(doc_, "components");
        Value& schemas = member(components, "schemas");
        Value key(name.c_str(), static_cast<rapidjson::SizeType>(name.size()), alloc_);
        schemas.AddMember(key, copy, alloc_);
      }
    }
  }

 private:
  Value& member(Value& object, const char* name) {
    if (!object.IsObject())
      throw std::runtime_error(std::string("schemas/openapi.yaml: '") + name +
                               "' is not inside an object");
    auto it = object.FindMember(name);
    if (it == object.MemberEnd()) {
      object.AddMember(Value(name, alloc_), Value(rapidjson::kObjectType), alloc_);
      it = object.FindMember(name);
    }
    return it->value;
  }

  // `within`: the component a copied file lives in ("" for the document itself).
  void rewrite(Value& node, const std::string& within) {
    if (node.IsArray()) {
      for (auto& item : node.GetArray())
        rewrite(item, within);
      return;
    }
    if (!node.IsObject())
      return;
    for (auto& m : node.GetObject()) {
      if (std::string_view(m.name.GetString()) == "$ref" && m.value.IsString()) {
        const std::string target = pointed(m.value.GetString(), within);
        m.value.SetString(target.c_str(), static_cast<rapidjson::SizeType>(target.size()), alloc_);
      } else {
        rewrite(m.value, within);
      }
    }
  }

  std::string pointed(std::string_view ref, const std::string& within) {
    const std::size_t hash = ref.find('#');
    const std::string_view file = ref.substr(0, hash);
    const std::string_view fragment =
        hash == std::string_view::npos ? std::string_view() : ref.substr(hash + 1);
    if (file.empty()) {
      // Within the document, or within a copied file (its root is its component).
      return within.empty() ? std::string(ref)
                            : "#/components/schemas/" + within + std::string(fragment);
    }
    if (file.size() <= kSchemaSuffix.size() ||
        file.substr(file.size() - kSchemaSuffix.size()) != kSchemaSuffix) {
      throw std::runtime_error("schemas/openapi.yaml: $ref '" + std::string(ref) +
                               "' names neither the document nor a schema file");
    }
    const std::string name = component_name(file);
    if (copied_.insert(name).second)
      copy(file, name);
    return "#/components/schemas/" + name + std::string(fragment);
  }

  void copy(std::string_view file, const std::string& name) {
    const std::string_view text = embedded_schema(file);
    rapidjson::Document parsed;
    parsed.Parse(text.data(), text.size());
    if (parsed.HasParseError())
      throw std::runtime_error("schema " + std::string(file) + " is not JSON");
    Value copy(parsed, alloc_);
    // Its identity (draft-04 "id", later "$id") and dialect are the document's now.
    copy.RemoveMember("id");
    copy.RemoveMember("$id");
    copy.RemoveMember("$schema");
    rewrite(copy, name);
    pending_.emplace_back(name, std::move(copy));
  }

  rapidjson::Document& doc_;
  Allocator& alloc_;
  std::set<std::string> copied_;
  std::vector<std::pair<std::string, Value>> pending_;
};

std::string build_json() {
  rapidjson::Document doc = config::yaml_text_to_json(openapi_yaml());
  if (!doc.IsObject() || !doc.HasMember("openapi") || !doc.HasMember("paths"))
    throw std::runtime_error("schemas/openapi.yaml is not an OpenAPI document");
  Inliner(doc).run();
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  doc.Accept(writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace

std::string_view openapi_yaml() {
  const auto& files = embedded::openapi();
  if (files.empty())
    throw std::runtime_error("schemas/openapi.yaml was not built into the binary");
  return files.front().second;
}

const std::string& openapi_json() {
  static const std::string kJson = build_json();
  return kJson;
}

rapidjson::Document openapi_document() {
  rapidjson::Document doc;
  const std::string& json = openapi_json();
  doc.Parse(json.c_str(), json.size());
  return doc;
}

}  // namespace agentfleet::dispatcher
