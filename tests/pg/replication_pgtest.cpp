// What a fleet session reads of the server's replication (pg::read_replication), on the
// tests' own Postgres: no standby, so commits do not wait for one; and the session's own
// synchronous_commit is what it reads (a role or session may lower it).
#include <gtest/gtest.h>

#include <pqxx/pqxx>

#include <string>

#include "core/adapters/pg/replication.hpp"
#include "tests/pg/pg_url.hpp"

namespace agentfleet {
namespace {

TEST(Replication, ASessionReadsItsOwnCommitLevelAndTheServersStandbys) {
  pqxx::connection db(pgtest::pg_url());
  const pg::ReplicationSettings read = pg::read_replication(db);
  EXPECT_EQ(read.synchronous_commit, "on");
  EXPECT_EQ(read.synchronous_standby_names, "") << "the tests' cluster has no standby";
  EXPECT_EQ(read.standbys_in_sync, 0);
  const pg::ReplicationState state = pg::judge_replication(read);
  EXPECT_FALSE(state.synchronous);
  EXPECT_NE(state.detail.find("synchronous_standby_names is empty"), std::string::npos)
      << state.detail;

  pqxx::nontransaction(db).exec0("SET synchronous_commit = local");
  EXPECT_EQ(pg::read_replication(db).synchronous_commit, "local");
}

}  // namespace
}  // namespace agentfleet
