#pragma once
// The SQL of the stores, kept in .sql files under core/adapters/pg/sql/ and compiled into the
// binary (cmake/embed.cmake). A file holds several statements, each after a line
// `-- name: <name>` and its comment lines; `text(name)` is that statement's text, and
// exec_named() runs it as the prepared statement "af_<name>" (prepared.hpp). exec_text()
// sends it as text instead, planned afresh at each call: for the rare statements, and for
// those whose plan should follow their arguments (a filter that is empty or not) rather
// than be a generic plan cached for the connection's life.
//
// A name that no file holds is a bug: text() throws std::logic_error naming it, and the unit
// test SqlFiles.EveryStatementTheStoresNameIsInAFile finds it before anything runs.
//
// Thread-safety: the statements are read once, at the first call, and never change.

#include <pqxx/pqxx>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace agentfleet::pg::sql {

const char* text(std::string_view name);
// A part several statements share, kept once in a file after a line `-- fragment: <name>`
// (a select list, say): a statement of a file names it as `{{<name>}}`, and text() holds it
// in its place; a statement built in C++ adds fragment(name). A name that no file holds, in
// either place, is a bug (std::logic_error).
const char* fragment(std::string_view name);
// Every (file, name) pair, in file order: for the tests and the docs.
std::vector<std::pair<std::string, std::string>> names();

}  // namespace agentfleet::pg::sql

namespace agentfleet::pg {

namespace detail {
// "af_<name>", kept for the life of the process (libpqxx keeps the pointer it is given).
const char* prepared_name(std::string_view name);
}  // namespace detail

template <typename... Args>
pqxx::result exec_named(pqxx::transaction_base& tx, std::string_view name, Args&&... args) {
  const char* prepared = detail::prepared_name(name);
  tx.conn().prepare(prepared, sql::text(name));
  return tx.exec_prepared(prepared, std::forward<Args>(args)...);
}

template <typename... Args>
pqxx::row exec_named1(pqxx::transaction_base& tx, std::string_view name, Args&&... args) {
  const char* prepared = detail::prepared_name(name);
  tx.conn().prepare(prepared, sql::text(name));
  return tx.exec_prepared1(prepared, std::forward<Args>(args)...);
}

template <typename... Args>
void exec_named0(pqxx::transaction_base& tx, std::string_view name, Args&&... args) {
  const char* prepared = detail::prepared_name(name);
  tx.conn().prepare(prepared, sql::text(name));
  tx.exec_prepared0(prepared, std::forward<Args>(args)...);
}

template <typename... Args>
pqxx::result exec_text(pqxx::transaction_base& tx, std::string_view name, Args&&... args) {
  return tx.exec_params(sql::text(name), std::forward<Args>(args)...);
}

template <typename... Args>
pqxx::row exec_text1(pqxx::transaction_base& tx, std::string_view name, Args&&... args) {
  return tx.exec_params1(sql::text(name), std::forward<Args>(args)...);
}

template <typename... Args>
void exec_text0(pqxx::transaction_base& tx, std::string_view name, Args&&... args) {
  tx.exec_params0(sql::text(name), std::forward<Args>(args)...);
}

}  // namespace agentfleet::pg
