// The stores' statements in core/adapters/pg/sql/*.sql (pg::sql, sql.hpp): every name a store
// runs is in a file and every statement of a file is run, and no prepared statement is given
// two texts.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/adapters/pg/sql.hpp"

namespace agentfleet {
namespace {

// The sources of the stores, each file's text.
std::vector<std::pair<std::string, std::string>> store_sources() {
  std::vector<std::pair<std::string, std::string>> out;
  const std::filesystem::path dir =
      std::filesystem::path(AGENTFLEET_SOURCE_DIR) / "core/adapters/pg";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const auto ext = entry.path().extension();
    if (ext != ".cpp" && ext != ".hpp")
      continue;
    std::ifstream in(entry.path());
    std::ostringstream text;
    text << in.rdbuf();
    out.emplace_back(entry.path().filename().string(), text.str());
  }
  return out;
}

// Every capture of `pattern`'s first group in the stores' sources.
std::set<std::string> found_in_sources(const std::regex& pattern) {
  std::set<std::string> found;
  for (const auto& [file, text] : store_sources()) {
    for (std::sregex_iterator it(text.begin(), text.end(), pattern), end; it != end; ++it)
      found.insert((*it)[1].str());
  }
  return found;
}

// The names the stores run: exec_named*(tx, "name", ...), exec_text*(tx, "name", ...) and
// sql::text("name").
std::set<std::string> names_run() {
  return found_in_sources(
      std::regex(R"re((?:(?:exec_named|exec_text)[01]?\(\s*\w+\s*,|sql::text\()\s*"(\w+)")re"));
}

TEST(SqlFiles, EveryStatementTheStoresNameIsInAFile) {
  const std::set<std::string> run = names_run();
  ASSERT_TRUE(run.count("claim_tasks") && run.count("relay_due"))
      << "the scan of core/adapters/pg's sources finds the names of neither";
  for (const std::string& name : run)
    EXPECT_NO_THROW(pg::sql::text(name)) << name;
}

TEST(SqlFiles, EveryStatementOfAFileIsRunByAStore) {
  const std::set<std::string> run = names_run();
  for (const auto& [file, name] : pg::sql::names())
    EXPECT_TRUE(run.count(name)) << "sql/" << file << ": " << name << " is never run";
}

// libpqxx refuses a prepared statement name given a second text: a statement still prepared
// from C++ (exec_prepared "af_<x>") must not share its name with a file's.
TEST(SqlFiles, NoPreparedStatementNameHasTwoTexts) {
  std::set<std::string> in_files;
  for (const auto& [file, name] : pg::sql::names())
    in_files.insert(name);
  for (const std::string& name : found_in_sources(std::regex(R"re("af_(\w+)")re")))
    EXPECT_FALSE(in_files.count(name)) << "af_" << name << " is prepared from C++ and a file";
}

}  // namespace
}  // namespace agentfleet
