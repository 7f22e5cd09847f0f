// The API's contract (schemas/openapi.yaml, served at GET /v1/openapi.json) against the
// dispatcher's route table: every route is in the document, and nothing else is; the
// served document stands alone (every $ref points inside it).
#include <gtest/gtest.h>

#include <rapidjson/pointer.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <boost/beast/http/verb.hpp>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/codec/json_schema.hpp"

#include "core/config/yaml_json.hpp"
#include "dispatcher/openapi.hpp"
#include "dispatcher/routes.hpp"

namespace agentfleet::dispatcher {
namespace {

// "/v1/tasks/{task_id}/cancel" -> "/v1/tasks/{}/cancel": parameter names may differ.
std::string shape(std::string path) {
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '{') {
      out += "{}";
      i = path.find('}', i);
      if (i == std::string::npos)
        break;
      continue;
    }
    out += path[i];
  }
  return out;
}

const std::set<std::string> kMethods = {"get",   "put",  "post",    "delete",
                                        "patch", "head", "options", "trace"};

TEST(OpenApi, TheContractNamesEveryRouteAndNoOther) {
  const rapidjson::Document doc = config::yaml_text_to_json(openapi_yaml());
  ASSERT_TRUE(doc.IsObject());
  ASSERT_TRUE(doc.HasMember("paths") && doc["paths"].IsObject());
  std::set<std::string> documented;
  for (const auto& path : doc["paths"].GetObject()) {
    ASSERT_TRUE(path.value.IsObject()) << path.name.GetString();
    for (const auto& operation : path.value.GetObject()) {
      const std::string method = operation.name.GetString();
      if (kMethods.count(method))
        documented.insert(method + " " + shape(path.name.GetString()));
    }
  }
  std::set<std::string> declared;
  for (const Route& route : routes()) {
    std::string method(boost::beast::http::to_string(route.method));
    for (char& c : method)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    declared.insert(method + " " + shape(std::string(route.pattern)));
  }
  EXPECT_EQ(documented, declared);
}

// Every "$ref" below `node`, with where it is.
void refs(const rapidjson::Value& node, const std::string& at,
          std::vector<std::pair<std::string, std::string>>& out) {
  if (node.IsArray()) {
    for (rapidjson::SizeType i = 0; i < node.Size(); ++i)
      refs(node[i], at + "/" + std::to_string(i), out);
  } else if (node.IsObject()) {
    for (const auto& m : node.GetObject()) {
      const std::string name = m.name.GetString();
      if (name == "$ref" && m.value.IsString())
        out.emplace_back(at, m.value.GetString());
      else
        refs(m.value, at + "/" + name, out);
    }
  }
}

TEST(OpenApi, TheServedDocumentStandsAloneEveryReferenceResolvingInsideIt) {
  const rapidjson::Document doc = openapi_document();
  ASSERT_TRUE(doc.IsObject());
  EXPECT_EQ(std::string(doc["openapi"].GetString()).rfind("3.1", 0), 0u);
  std::vector<std::pair<std::string, std::string>> found;
  refs(doc, "", found);
  ASSERT_FALSE(found.empty());
  for (const auto& [at, ref] : found) {
    ASSERT_EQ(ref.rfind("#/", 0), 0u) << at << ": " << ref;
    EXPECT_NE(rapidjson::Pointer(ref.substr(1).c_str()).Get(doc), nullptr)
        << at << ": " << ref << " points at nothing";
  }
  // A JSON Schema of schemas/ the document names is copied in, without its own identity.
  const rapidjson::Value* submission =
      rapidjson::Pointer("/components/schemas/TaskSubmission").Get(doc);
  ASSERT_NE(submission, nullptr);
  EXPECT_FALSE(submission->HasMember("id"));
  EXPECT_FALSE(submission->HasMember("$id"));
  EXPECT_TRUE(submission->HasMember("properties"));
}

TEST(OpenApi, EveryOperationHasItsOwnIdASummaryAndItsAnswers) {
  const rapidjson::Document doc = openapi_document();
  std::set<std::string> ids;
  for (const auto& path : doc["paths"].GetObject()) {
    for (const auto& operation : path.value.GetObject()) {
      if (!kMethods.count(operation.name.GetString()))
        continue;
      const std::string where =
          std::string(operation.name.GetString()) + " " + path.name.GetString();
      const auto& op = operation.value;
      ASSERT_TRUE(op.IsObject()) << where;
      ASSERT_TRUE(op.HasMember("operationId") && op["operationId"].IsString()) << where;
      EXPECT_TRUE(ids.insert(op["operationId"].GetString()).second)
          << where << ": operationId " << op["operationId"].GetString() << " used twice";
      EXPECT_TRUE(op.HasMember("summary")) << where;
      ASSERT_TRUE(op.HasMember("responses") && op["responses"].IsObject() &&
                  op["responses"].MemberCount() > 0)
          << where;
    }
  }
  EXPECT_EQ(ids.size(), routes().size());
}

// `schema` with the document's components beside it, so its "#/components/..." refs resolve;
// compiled once (a compilation copies every component).
const codec::CompiledSchema& compile(const rapidjson::Document& doc,
                                     const rapidjson::Value& schema) {
  static std::map<std::string, std::unique_ptr<codec::CompiledSchema>> compiled;
  rapidjson::StringBuffer text;
  rapidjson::Writer<rapidjson::StringBuffer> writer(text);
  schema.Accept(writer);
  auto& slot = compiled[text.GetString()];  // most are a $ref to one of the components
  if (!slot) {
    rapidjson::Document root;
    root.CopyFrom(schema, root.GetAllocator());
    rapidjson::Value components;
    components.CopyFrom(doc["components"], root.GetAllocator());
    root.AddMember("components", components, root.GetAllocator());
    slot = std::make_unique<codec::CompiledSchema>(root);
  }
  return *slot;
}

// Why `example` is not what `media` (a content entry of type `type`) promises, or "": a JSON
// value of its schema; JSON Lines of its x-line schema; server-sent events each named in its
// x-events with data of that event's schema.
std::string example_problem(const rapidjson::Document& doc, std::string_view type,
                            const rapidjson::Value& media, const rapidjson::Value& example) {
  auto check = [&](const rapidjson::Value& schema, const rapidjson::Value& value) -> std::string {
    auto problem = compile(doc, schema).validate(value);
    return problem ? "at '" + problem->path + "': " + problem->message : "";
  };
  auto check_text = [&](const rapidjson::Value& schema, std::string_view text) -> std::string {
    rapidjson::Document value;
    value.Parse(text.data(), text.size());
    return value.HasParseError() ? "not JSON: " + std::string(text) : check(schema, value);
  };
  if (type == "application/json")
    return check(media["schema"], example);
  if (!example.IsString())
    return "a text example must be a string";
  const std::string_view text(example.GetString(), example.GetStringLength());
  std::vector<std::string_view> lines;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (type == "application/x-ndjson") {
    for (std::string_view line : lines) {
      if (!line.empty()) {
        if (auto problem = check_text(media["x-line"], line); !problem.empty())
          return problem;
      }
    }
  } else if (type == "text/event-stream") {
    std::string name = "message";
    for (std::string_view line : lines) {
      if (line.rfind("event: ", 0) == 0) {
        name = std::string(line.substr(7));
      } else if (line.rfind("data: ", 0) == 0) {
        const auto& events = media["x-events"];
        if (!events.HasMember(name.c_str()))
          return "event '" + name + "' is not in x-events";
        if (auto problem = check_text(events[name.c_str()], line.substr(6)); !problem.empty())
          return "event " + name + " " + problem;
      }
    }
  }
  return "";
}

// Every operation shows an example of its successful answer (and of its body, when it takes
// one), each what its schema promises: the reference page shows them, and a reader may copy
// one.
TEST(OpenApi, EveryOperationShowsExamplesItsSchemasAccept) {
  const rapidjson::Document doc = openapi_document();
  int examples = 0;
  for (const auto& path : doc["paths"].GetObject()) {
    for (const auto& operation : path.value.GetObject()) {
      if (!kMethods.count(operation.name.GetString()))
        continue;
      const std::string where =
          std::string(operation.name.GetString()) + " " + path.name.GetString();
      const auto& op = operation.value;
      bool answered = false, has_content = false;
      auto each_example = [&](const rapidjson::Value& content, const std::string& what) {
        int found = 0;
        for (const auto& media : content.GetObject()) {
          const std::string type(media.name.GetString());
          const std::string bare = type.substr(0, type.find(';'));
          std::vector<const rapidjson::Value*> values;
          if (media.value.HasMember("example"))
            values.push_back(&media.value["example"]);
          if (media.value.HasMember("examples")) {
            for (const auto& e : media.value["examples"].GetObject())
              values.push_back(&e.value["value"]);
          }
          for (const rapidjson::Value* value : values) {
            ++found;
            ++examples;
            EXPECT_EQ(example_problem(doc, bare, media.value, *value), "")
                << where << " " << what << " " << type;
          }
        }
        return found;
      };
      for (const auto& response : op["responses"].GetObject()) {
        const std::string code = response.name.GetString();
        const rapidjson::Value* r = &response.value;
        if (r->HasMember("$ref"))
          r = rapidjson::Pointer(std::string((*r)["$ref"].GetString()).substr(1).c_str()).Get(doc);
        if (code[0] != '2' || r == nullptr || !r->HasMember("content"))
          continue;
        has_content = true;
        answered = each_example((*r)["content"], "answer " + code) > 0 || answered;
      }
      EXPECT_TRUE(answered || !has_content) << where << ": no example of its answer";
      if (op.HasMember("requestBody") && op["requestBody"].HasMember("content")) {
        EXPECT_GT(each_example(op["requestBody"]["content"], "body"), 0)
            << where << ": no example of its body";
      }
    }
  }
  EXPECT_GT(examples, 30);
}

}  // namespace
}  // namespace agentfleet::dispatcher
