// The API's contract (schemas/openapi.yaml, served at GET /v1/openapi.json) against the
// dispatcher's route table: every route is in the document, and nothing else is; the
// served document stands alone (every $ref points inside it).
#include <gtest/gtest.h>

#include <rapidjson/pointer.h>

#include <boost/beast/http/verb.hpp>

#include <set>
#include <string>

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

}  // namespace
}  // namespace agentfleet::dispatcher
