// A migration marked "-- agentfleet: no-transaction" runs a statement at a time: how it is
// split (pg::no_transaction_statements).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "core/adapters/pg/migrations.hpp"

namespace agentfleet {
namespace {

TEST(MigrationSplit, AFileWithoutTheMarkRunsInOneTransaction) {
  EXPECT_FALSE(pg::no_transaction_statements("CREATE TABLE a (x int);\nDROP TABLE a;\n"));
  EXPECT_FALSE(
      pg::no_transaction_statements("-- a comment\n-- agentfleet: no-transaction\nSELECT 1;\n"))
      << "the mark counts only as the first line";
}

TEST(MigrationSplit, StatementsEndAtASemicolonEndingALineAndCommentLinesAreDropped) {
  const auto statements = pg::no_transaction_statements(
      "-- agentfleet: no-transaction\r\n"
      "-- why: the index is built without blocking writes\n"
      "DROP INDEX CONCURRENTLY IF EXISTS t_x;\n"
      "\n"
      "CREATE INDEX CONCURRENTLY t_x\n"
      "  ON t (x) WHERE note = 'a;b';\n"
      "ANALYZE t");
  ASSERT_TRUE(statements);
  EXPECT_EQ(*statements,
            (std::vector<std::string>{"DROP INDEX CONCURRENTLY IF EXISTS t_x",
                                      "CREATE INDEX CONCURRENTLY t_x\nON t (x) WHERE note = 'a;b'",
                                      "ANALYZE t"}));
}

TEST(MigrationSplit, ADollarQuotedBodyIsRefusedRatherThanCut) {
  EXPECT_THROW(pg::no_transaction_statements("-- agentfleet: no-transaction\n"
                                             "DO $$ BEGIN PERFORM 1; END $$;\n"),
               std::invalid_argument);
}

}  // namespace
}  // namespace agentfleet
