#pragma once
// Checks an answer of the API against its contract (GET /v1/openapi.json, built from
// schemas/openapi.yaml): the route, the status and the content type must be in it; a JSON
// body must match the schema it gives for that status, each line of JSON Lines its
// `x-line` schema, and each server-sent event its `x-events` schema by name. The API
// tests check every answer they get.

#include <rapidjson/document.h>
#include <rapidjson/pointer.h>

#include <boost/beast/http/verb.hpp>

#include <cctype>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/codec/json_schema.hpp"
#include "dispatcher/openapi.hpp"

namespace agentfleet::test {

class Contract {
 public:
  static Contract& instance() {
    static Contract contract;
    return contract;
  }

  // Why the answer breaks the contract, or nullopt. `target`: the request's path and query.
  std::optional<std::string> violation(boost::beast::http::verb method, std::string_view target,
                                       int status, std::string_view content_type,
                                       std::string_view body) {
    const std::string path(target.substr(0, target.find('?')));
    std::string verb(boost::beast::http::to_string(method));
    for (char& c : verb)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const rapidjson::Value* operation = nullptr;
    std::string template_path;
    for (const auto& p : doc_["paths"].GetObject()) {
      if (fits(p.name.GetString(), path) && p.value.HasMember(verb.c_str())) {
        operation = &p.value[verb.c_str()];
        template_path = p.name.GetString();
        break;
      }
    }
    const std::string what = verb + " " + path + " " + std::to_string(status);
    // Answers the server gives before any route (info.description of the contract): no such
    // route or method, a head or target too long, a body over the route's limit.
    const bool before_any_route =
        status == 404 || status == 405 || status == 413 || status == 414 || status == 431;
    if (operation == nullptr)
      return before_any_route ? std::nullopt
                              : std::optional<std::string>(what + ": no such operation");
    const auto& responses = (*operation)["responses"];
    const std::string code = std::to_string(status);
    const rapidjson::Value* response = nullptr;
    if (responses.HasMember(code.c_str()))
      response = &responses[code.c_str()];
    else if (responses.HasMember("default"))
      response = &responses["default"];
    if (response == nullptr) {
      if (before_any_route && status != 404)
        return std::nullopt;
      return what + ": the contract does not list this status for " + template_path;
    }
    if (response->HasMember("$ref"))
      response = resolve((*response)["$ref"].GetString());
    if (response == nullptr)
      return what + ": its response $ref points at nothing";
    const std::string media(content_type.substr(0, content_type.find(';')));
    if (!response->HasMember("content") || (media.empty() && body.empty()))
      return std::nullopt;
    const auto& content = (*response)["content"];
    if (!content.HasMember(media.c_str()))
      return what + ": answered " + (media.empty() ? "no content type" : media) +
             ", which the contract does not list";
    const auto& listed = content[media.c_str()];
    if (media == "text/event-stream")
      return event_violation(what, listed, body);
    if (media == "application/x-ndjson")
      return line_violation(what, listed, body);
    if (media != "application/json")
      return std::nullopt;  // text (/metrics): no schema to hold it to
    return json_violation(what, listed["schema"], body);
  }

 private:
  // The body as one JSON value of `schema`.
  std::optional<std::string> json_violation(const std::string& what, const rapidjson::Value& schema,
                                            std::string_view body) {
    rapidjson::Document answer;
    answer.Parse(body.data(), body.size());
    if (answer.HasParseError())
      return what + ": the body is not JSON: " + std::string(body.substr(0, 200));
    std::optional<codec::SchemaViolation> problem = compiled(schema).validate(answer);
    if (problem)
      return what + ": at '" + problem->path + "': " + problem->message + " in " +
             std::string(body.substr(0, 400));
    return std::nullopt;
  }

  // JSON Lines: each line a value of the listed `x-line` schema.
  std::optional<std::string> line_violation(const std::string& what, const rapidjson::Value& listed,
                                            std::string_view body) {
    if (!listed.HasMember("x-line"))
      return what + ": the contract gives no x-line schema for its JSON Lines";
    std::size_t number = 0;
    for (std::size_t start = 0; start < body.size();) {
      const std::size_t end = std::min(body.find('\n', start), body.size());
      const std::string_view line = body.substr(start, end - start);
      start = end + 1;
      ++number;
      if (line.empty())
        continue;
      if (auto broken =
              json_violation(what + " line " + std::to_string(number), listed["x-line"], line))
        return broken;
    }
    return std::nullopt;
  }

  // Server-sent events: each event's name among the listed `x-events`, its data a JSON value
  // of that event's schema; comment lines skipped.
  std::optional<std::string> event_violation(const std::string& what,
                                             const rapidjson::Value& listed,
                                             std::string_view body) {
    if (!listed.HasMember("x-events"))
      return what + ": the contract gives no x-events for its event stream";
    const auto& events = listed["x-events"];
    std::string name = "message";
    std::string data;
    bool has_data = false;
    std::size_t count = 0;
    for (std::size_t start = 0; start <= body.size();) {
      std::size_t end = std::min(body.find('\n', start), body.size());
      std::string_view line = body.substr(start, end - start);
      start = end + 1;
      if (!line.empty() && line.back() == '\r')
        line.remove_suffix(1);
      if (line.empty()) {
        if (has_data) {
          ++count;
          const std::string which = what + " event " + std::to_string(count) + " (" + name + ")";
          if (!events.HasMember(name.c_str()))
            return which + ": not an event the contract lists";
          if (auto broken = json_violation(which, events[name.c_str()], data))
            return broken;
        }
        name = "message";
        data.clear();
        has_data = false;
        if (end == body.size())
          break;
        continue;
      }
      if (line.front() == ':')
        continue;
      const std::size_t colon = line.find(':');
      const std::string_view field = line.substr(0, colon);
      std::string_view value =
          colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
      if (!value.empty() && value.front() == ' ')
        value.remove_prefix(1);
      if (field == "event") {
        name = std::string(value);
      } else if (field == "data") {
        data += (has_data ? "\n" : "") + std::string(value);
        has_data = true;
      }
    }
    return std::nullopt;
  }

  Contract() { doc_ = dispatcher::openapi_document(); }

  // Whether `path` fits the template ("{x}" one segment; "{x}:call" a segment ending so).
  static bool fits(std::string_view pattern, std::string_view path) {
    std::size_t a = 0, b = 0;
    while (a < pattern.size() && b < path.size()) {
      if (pattern[a] == '{') {
        const std::size_t close = pattern.find('}', a);
        const std::size_t end_p = std::min(pattern.find('/', close), pattern.size());
        const std::string_view suffix = pattern.substr(close + 1, end_p - close - 1);
        const std::size_t end_s = std::min(path.find('/', b), path.size());
        const std::string_view segment = path.substr(b, end_s - b);
        if (segment.size() <= suffix.size() ||
            segment.substr(segment.size() - suffix.size()) != suffix)
          return false;
        a = end_p;
        b = end_s;
        continue;
      }
      if (pattern[a] != path[b])
        return false;
      ++a;
      ++b;
    }
    return a == pattern.size() && b == path.size();
  }

  const rapidjson::Value* resolve(std::string_view ref) {
    if (ref.substr(0, 2) != "#/")
      return nullptr;
    return rapidjson::Pointer(std::string(ref.substr(1)).c_str()).Get(doc_);
  }

  // The schema with the document's components beside it, so its "#/components/..." refs
  // resolve; compiled once.
  const codec::CompiledSchema& compiled(const rapidjson::Value& schema) {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(&schema);
    if (it != cache_.end())
      return *it->second;
    rapidjson::Document root;
    root.CopyFrom(schema, root.GetAllocator());
    if (!root.IsObject())
      root.SetObject();
    rapidjson::Value components;
    components.CopyFrom(doc_["components"], root.GetAllocator());
    root.AddMember("components", components, root.GetAllocator());
    auto made = std::make_unique<codec::CompiledSchema>(root);
    return *cache_.emplace(&schema, std::move(made)).first->second;
  }

  rapidjson::Document doc_;
  std::mutex mutex_;
  std::map<const rapidjson::Value*, std::unique_ptr<codec::CompiledSchema>> cache_;
};

}  // namespace agentfleet::test
