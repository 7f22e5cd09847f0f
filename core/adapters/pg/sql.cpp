#include "core/adapters/pg/sql.hpp"

#include <map>
#include <memory>
#include <stdexcept>

namespace agentfleet::embedded {
const std::vector<std::pair<std::string_view, std::string_view>>& sql();
}  // namespace agentfleet::embedded

namespace agentfleet::pg::sql {

namespace {
struct Statements {
  std::map<std::string, std::string, std::less<>> by_name;
  std::map<std::string, std::string, std::less<>> fragments;
  std::map<std::string, std::string, std::less<>> prepared;  // name -> "af_<name>"
  std::vector<std::pair<std::string, std::string>> order;
};

// `body` with each `{{fragment}}` replaced by that fragment's text.
std::string expanded(const std::string& file, const std::string& name, std::string body,
                     const std::map<std::string, std::string, std::less<>>& fragments) {
  std::size_t at = 0;
  while ((at = body.find("{{", at)) != std::string::npos) {
    const std::size_t end = body.find("}}", at);
    const std::string fragment =
        end == std::string::npos ? std::string() : body.substr(at + 2, end - at - 2);
    auto it = fragments.find(fragment);
    if (it == fragments.end())
      throw std::logic_error("sql/" + file + ": statement " + name + " names no fragment at " +
                             body.substr(at, 40));
    body.replace(at, end + 2 - at, it->second);
    at += it->second.size();
  }
  return body;
}

// Splits each file at its `-- name: X` and `-- fragment: X` lines; a statement (or a
// fragment) is everything up to the next one, without its comment lines and surrounding
// blank lines. Then each `{{X}}` in a statement becomes fragment X (of any file).
Statements read_statements() {
  Statements out;
  constexpr std::string_view kMarker = "-- name: ";
  constexpr std::string_view kFragment = "-- fragment: ";
  for (const auto& entry : embedded::sql()) {
    // Plain names: clang 14 cannot capture a structured binding in a lambda (the fuzz build).
    const std::string_view file = entry.first;
    const std::string_view contents = entry.second;
    std::string name, body;
    bool is_fragment = false;
    auto flush = [&] {
      if (name.empty())
        return;
      while (!body.empty() && (body.back() == '\n' || body.back() == ' ' || body.back() == ';'))
        body.pop_back();
      auto& into = is_fragment ? out.fragments : out.by_name;
      if (body.empty() || !into.emplace(name, body).second)
        throw std::logic_error("sql/" + std::string(file) + ": " +
                               (is_fragment ? "fragment " : "statement ") + name +
                               (body.empty() ? " is empty" : " is named twice"));
      if (is_fragment)
        return;
      out.prepared.emplace(name, "af_" + name);
      out.order.emplace_back(std::string(file), name);
    };
    std::size_t at = 0;
    while (at < contents.size()) {
      std::size_t end = contents.find('\n', at);
      if (end == std::string_view::npos)
        end = contents.size();
      const std::string_view line = contents.substr(at, end - at);
      at = end + 1;
      const bool starts_fragment = line.substr(0, kFragment.size()) == kFragment;
      if (starts_fragment || line.substr(0, kMarker.size()) == kMarker) {
        flush();
        is_fragment = starts_fragment;
        name = std::string(line.substr(starts_fragment ? kFragment.size() : kMarker.size()));
        while (!name.empty() && name.back() == ' ')
          name.pop_back();
        body.clear();
      } else if (!name.empty() && !(body.empty() && (line.empty() || line.substr(0, 2) == "--"))) {
        body.append(line);
        body.push_back('\n');
      }
    }
    flush();
  }
  // A fragment may name another (task_row holds task_totals): fragments are expanded first,
  // a level at a time; one still naming a fragment after four levels names itself.
  std::map<std::string, std::string, std::less<>> fragments = out.fragments;
  for (auto& [name, body] : fragments) {
    for (int depth = 0; depth < 4 && body.find("{{") != std::string::npos; ++depth)
      body = expanded("(fragments)", name, body, out.fragments);
    if (body.find("{{") != std::string::npos)
      throw std::logic_error("sql: fragment " + name + " names itself");
  }
  out.fragments = std::move(fragments);
  for (const auto& [file, name] : out.order) {
    auto& body = out.by_name.find(name)->second;
    body = expanded(file, name, body, out.fragments);
  }
  return out;
}

const Statements& statements() {
  static const Statements kStatements = read_statements();
  return kStatements;
}
}  // namespace

const char* text(std::string_view name) {
  const auto& all = statements().by_name;
  auto it = all.find(name);
  if (it == all.end())
    throw std::logic_error("no SQL statement named " + std::string(name));
  return it->second.c_str();
}

const char* fragment(std::string_view name) {
  const auto& all = statements().fragments;
  auto it = all.find(name);
  if (it == all.end())
    throw std::logic_error("no SQL fragment named " + std::string(name));
  return it->second.c_str();
}

std::vector<std::pair<std::string, std::string>> names() {
  return statements().order;
}

}  // namespace agentfleet::pg::sql

namespace agentfleet::pg::detail {

const char* prepared_name(std::string_view name) {
  const auto& all = sql::statements().prepared;
  auto it = all.find(name);
  if (it == all.end())
    throw std::logic_error("no SQL statement named " + std::string(name));
  return it->second.c_str();
}

}  // namespace agentfleet::pg::detail
