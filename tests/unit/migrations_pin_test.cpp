// A landed migration is never edited: a database that applied it keeps its checksum and
// refuses a binary whose text differs. Every migration is pinned here by that checksum, so
// an edit fails CI instead of a deployment. A new migration adds its line in the commit
// that adds it; a change to a landed one is a new migration.

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/adapters/pg/migrations.hpp"

namespace agentfleet::pg {
namespace {

const std::map<std::string, std::string>& pinned() {
  static const std::map<std::string, std::string> kPinned = {
      {"0001_init.sql", "06e8f64c3e334edc"},
      {"0002_worker_release_permission.sql", "a3d12628243f95f1"},
      {"0003_fair_scheduler.sql", "fe05e638e8b26338"},
      {"0004_strategies.sql", "da035643068d9824"},
      {"0005_tool_call_audit.sql", "8039f335346d9a7d"},
      {"0006_followups.sql", "c2ed90bcd6fded01"},
      {"0007_update_room.sql", "545c7a081c565f50"},
      {"0008_worker_liveness.sql", "88f3cc61a8ad0c12"},
      {"0009_earlier_texts.sql", "69bb6e99712a2834"},
      {"0010_validate_strategy_check.sql", "fc417564b99bc3c5"},
      {"0011_outbox_headers.sql", "6c2a6ccd8f75c5b9"},
      {"0012_unreconciled_charges.sql", "e3db4731053fa363"},
      {"0013_task_spend_limits.sql", "09e342df09bb3a62"},
      {"0014_handed_back_deadline.sql", "86ef2ae684572dc5"},
      {"0015_calls_in_flight.sql", "fa497d64d0e9a3b0"},
      {"0016_validate_unreconciled_reason.sql", "bff0925379c17473"},
      {"0017_staged_batches.sql", "9ecc7bf7bb917b60"},
      {"0018_staged_tasks_index.sql", "67c9d9f1450faf5d"},
      {"0019_staged_cursor.sql", "3ececf2690c218ed"},
      {"0020_waiting_reasons.sql", "31c5512853525c50"},
      {"0021_task_retry_of.sql", "bd08d8bb66343cd3"},
      {"0022_submit_function.sql", "e02d6973dcb5c782"},
      {"0023_step_tool_calls.sql", "9b90524f1a5e3695"},
      {"0024_dead_letter_replays.sql", "b8aee2cdfa35dea5"},
      {"0025_drop_running_lease_index.sql", "d256514b904d06e3"},
      {"0026_task_sequence.sql", "5ca2bf958849fc33"},
      {"0027_session_sequence_index.sql", "cbf811ca3ca4b581"},
      {"0028_batch_line_order.sql", "c630f52d80cddd98"},
      {"0029_submission_names_its_user.sql", "eedfea7d96f9f126"},
      {"0030_batch_ids_per_user.sql", "21bd8c610030daaa"},
      {"0031_batch_line.sql", "d42ce68361990c05"},
      {"0032_task_list_indexes.sql", "8078f030a2f1e3c6"},
  };
  return kPinned;
}

TEST(MigrationsPinned, NoLandedMigrationIsEditedRemovedOrLeftUnpinned) {
  std::map<std::string, std::string> built;
  for (const EmbeddedMigration& m : embedded_migrations())
    built[m.version] = m.checksum;
  for (const auto& [version, checksum] : pinned()) {
    auto it = built.find(version);
    ASSERT_NE(it, built.end()) << version << " landed and is gone: databases record it";
    EXPECT_EQ(it->second, checksum)
        << version << " was edited after it landed; revert it and write the change as a new "
        << "migration (docs/deploy.md, \"Migrations\")";
  }
  for (const auto& [version, checksum] : built) {
    EXPECT_TRUE(pinned().count(version))
        << version << " is not pinned: add {\"" << version << "\", \"" << checksum
        << "\"} to tests/unit/migrations_pin_test.cpp";
  }
}

TEST(MigrationsPinned, TheyApplyInNumberOrderWithoutGapsOrTwins) {
  int expected = 1;
  for (const EmbeddedMigration& m : embedded_migrations()) {
    ASSERT_GE(m.version.size(), 5u);
    EXPECT_EQ(std::stoi(m.version.substr(0, 4)), expected) << m.version;
    EXPECT_EQ(m.version[4], '_') << m.version;
    ++expected;
  }
}

TEST(MigrationsPinned, OnlyTheThreeEarlierTextsAreAcceptedBesideTheCurrentOnes) {
  EXPECT_TRUE(is_earlier_text("0004_strategies.sql", "4be03e83fbc50ee8"));
  EXPECT_FALSE(is_earlier_text("0004_strategies.sql", "22256644dae1c707"));  // 0001's
  EXPECT_FALSE(is_earlier_text("0005_tool_call_audit.sql", "8039f335346d9a7e"));
}

}  // namespace
}  // namespace agentfleet::pg
