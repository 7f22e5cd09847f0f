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
  std::map<std::string, std::string, std::less<>> prepared;  // name -> "af_<name>"
  std::vector<std::pair<std::string, std::string>> order;
};

// Splits each file at its `-- name: X` lines; a statement is everything up to the next one,
// without its comment lines and surrounding blank lines.
Statements read_statements() {
  Statements out;
  constexpr std::string_view kMarker = "-- name: ";
  for (const auto& entry : embedded::sql()) {
    // Plain names: clang 14 cannot capture a structured binding in a lambda (the fuzz build).
    const std::string_view file = entry.first;
    const std::string_view contents = entry.second;
    std::string name, body;
    auto flush = [&] {
      if (name.empty())
        return;
      while (!body.empty() && (body.back() == '\n' || body.back() == ' ' || body.back() == ';'))
        body.pop_back();
      if (body.empty() || !out.by_name.emplace(name, body).second)
        throw std::logic_error("sql/" + std::string(file) + ": statement " + name +
                               (body.empty() ? " is empty" : " is named twice"));
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
      if (line.substr(0, kMarker.size()) == kMarker) {
        flush();
        name = std::string(line.substr(kMarker.size()));
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
