#pragma once
// The statements of the per-task paths (submit, claim, checkpoints, finish) as named
// prepared statements: Postgres parses and plans each once per connection instead of at
// every call. Parsing and planning were the largest part of Postgres's CPU per task in the
// benchmark's profile (docs/performance.md).
//
// libpqxx 6.4 keeps the definitions on the connection and registers one with the server at
// its first use (again on a new connection); defining a name again with the same text does
// nothing, so each call site simply names its statement. A name must never be given two
// texts (libpqxx throws).

#include <pqxx/pqxx>

#include <utility>

namespace agentfleet::pg {

template <typename... Args>
pqxx::result exec_prepared(pqxx::transaction_base& tx, const char* name, const char* sql,
                           Args&&... args) {
  tx.conn().prepare(name, sql);
  return tx.exec_prepared(name, std::forward<Args>(args)...);
}

template <typename... Args>
pqxx::row exec_prepared1(pqxx::transaction_base& tx, const char* name, const char* sql,
                         Args&&... args) {
  tx.conn().prepare(name, sql);
  return tx.exec_prepared1(name, std::forward<Args>(args)...);
}

template <typename... Args>
void exec_prepared0(pqxx::transaction_base& tx, const char* name, const char* sql, Args&&... args) {
  tx.conn().prepare(name, sql);
  tx.exec_prepared0(name, std::forward<Args>(args)...);
}

}  // namespace agentfleet::pg
