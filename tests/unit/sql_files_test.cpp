// The stores' statements in core/adapters/pg/sql/*.sql (pg::sql, sql.hpp): every name a store
// runs is in a file and every statement of a file is run, no prepared statement is given two
// texts, and the statements written out more than once in the files are still alike.

#include "tests/source_dir.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/adapters/pg/ended_tasks.hpp"
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

// `sql` with each run of white space made one space, none just inside parentheses: the
// statement as Postgres reads it, whatever its layout in the file.
std::string squashed(const std::string& sql) {
  std::string out;
  for (char c : sql) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!out.empty() && out.back() != ' ' && out.back() != '(')
        out.push_back(' ');
      continue;
    }
    if (c == ')' && !out.empty() && out.back() == ' ')
      out.pop_back();
    out.push_back(c);
  }
  if (!out.empty() && out.back() == ' ')
    out.pop_back();
  return out;
}

std::string statement(const char* name) {
  return squashed(pg::sql::text(name));
}

// The part of `text` after `from` (included) and before `to` (excluded, searched after
// `from`; empty `to`: to the end); empty when `from` or `to` is missing.
std::string between(const std::string& text, const std::string& from, const std::string& to) {
  const auto start = text.find(from);
  if (start == std::string::npos)
    return {};
  if (to.empty())
    return text.substr(start);
  const auto stop = text.find(to, start + from.size());
  return stop == std::string::npos ? std::string() : text.substr(start, stop - start);
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

// The insert of tasks is written twice: insert_tasks, and the function a submission calls
// (agentfleet_submit, last replaced by migration 0031), whose statements are indented in its
// body.
TEST(SqlFiles, TheSubmissionRepeatsTheInsertAlike) {
  std::ifstream in(std::filesystem::path(AGENTFLEET_SOURCE_DIR) /
                   "core/adapters/pg/migrations/0031_batch_line.sql");
  std::ostringstream text;
  text << in.rdbuf();
  const std::string function = squashed(text.str());
  ASSERT_NE(function.find("CREATE OR REPLACE FUNCTION agentfleet_submit"), std::string::npos);
  const std::string insert =
      between(statement("insert_tasks"), "INSERT INTO tasks", " ON CONFLICT");
  ASSERT_FALSE(insert.empty());
  // The function reads its task from its parameter, the statement from $1.
  std::string expected = insert;
  const std::string from = "jsonb_to_recordset($1::jsonb)";
  ASSERT_NE(expected.find(from), std::string::npos);
  expected.replace(expected.find(from), from.size(), "jsonb_to_recordset(p_task)");
  EXPECT_NE(function.find(expected), std::string::npos) << expected;
  const std::string conflict =
      "ON CONFLICT (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING";
  EXPECT_NE(statement("insert_tasks").find(conflict), std::string::npos);
  EXPECT_NE(function.find(conflict), std::string::npos);
  EXPECT_NE(statement("submit").find("agentfleet_submit("), std::string::npos);
}

// Every read of a task the API shows selects the same columns (the fragment task_row, read
// by pg::read_task_row), so the codec writes each shape from one row.
// A submission reads the task it inserted as task_row_inserted: the same columns, its totals
// read from the row itself.
TEST(SqlFiles, EveryReadOfATaskSelectsTheTaskRow) {
  const std::string row = squashed(pg::sql::fragment("task_row"));
  ASSERT_NE(row.find("t.task_id::text"), std::string::npos) << row;
  for (const char* name : {"task_json", "task_history", "list_tasks"})
    EXPECT_NE(statement(name).find(row), std::string::npos) << name;
  const std::string inserted = squashed(pg::sql::fragment("task_row_inserted"));
  EXPECT_NE(statement("submit").find(inserted), std::string::npos);
  const std::string head = squashed(pg::sql::fragment("task_row_head"));
  const std::string times = squashed(pg::sql::fragment("task_row_times"));
  for (const std::string& text : {row, inserted}) {
    EXPECT_EQ(text.substr(0, head.size()), head) << text;
    EXPECT_EQ(text.substr(text.size() - std::min(text.size(), times.size())), times) << text;
  }
  EXPECT_EQ(row, head + ", " + squashed(pg::sql::fragment("task_totals")) + ", " + times);
}

// scheduler.sql writes the owner-gone condition, the marking of picked tasks and the
// RETURNING list of ended tasks more than once, and the dispatch message once (a fragment
// both dispatching statements hold).
TEST(SqlFiles, TheSchedulerRepeatsItsSharedPartsAlike) {
  const std::string exhausted = statement("sched_exhausted");
  const std::string recover = statement("sched_recover");
  const std::string owner_gone = between(exhausted, "((t.worker_incarnation IS NULL", " ORDER BY");
  ASSERT_FALSE(owner_gone.empty());
  EXPECT_NE(recover.find("attempt - releases < $3 AND " + owner_gone + ")"), std::string::npos)
      << owner_gone;
  EXPECT_NE(exhausted.find("attempt - releases >= $2 AND " + owner_gone), std::string::npos);

  std::string recovered = between(recover, "), marked AS (", "");
  const std::string clears = ", lease_until = NULL, worker_incarnation = NULL";
  const auto at = recovered.find(clears);
  ASSERT_NE(at, std::string::npos);
  recovered.erase(at, clears.size());
  EXPECT_EQ(recovered, between(statement("sched_admit"), "), marked AS (", ""));

  const std::string dispatch = squashed(pg::sql::fragment("dispatch_marked"));
  ASSERT_NE(dispatch.find("RETURNING t.task_id"), std::string::npos) << dispatch;
  for (const std::string& text : {recover, statement("sched_admit")})
    EXPECT_EQ(text.substr(text.size() - std::min(text.size(), dispatch.size())), dispatch);
  EXPECT_THROW(pg::sql::fragment("no_such_fragment"), std::logic_error);

  const std::string returning = "RETURNING " + squashed(pg::kEndedColumns);
  // A task the scheduler ends keeps what its attempts ran and billed: the running totals,
  // derived while it ran, are folded into its row and its result event.
  const std::string fold = squashed(pg::sql::fragment("fold_totals"));
  for (const char* name : {"sched_exhausted", "sched_expire"}) {
    const std::string text = statement(name);
    EXPECT_EQ(text.substr(text.size() - std::min(text.size(), returning.size())), returning)
        << name;
    EXPECT_NE(text.find(fold), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace agentfleet
