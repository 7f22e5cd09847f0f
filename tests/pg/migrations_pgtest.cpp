// The migrator on a private Postgres (tests/pg): a database that applied the earlier texts of
// the migrations edited after they landed (0001, 0003, 0004; tests/pg/earlier_migrations)
// is accepted and reaches the same schema as a fresh one; any other changed text is refused.
// Each test works in databases of its own.

#include "tests/source_dir.hpp"

#include <gtest/gtest.h>

#include <pqxx/pqxx>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "core/adapters/pg/migrations.hpp"
#include "tests/pg/pg_url.hpp"

namespace agentfleet {
namespace {

using pgtest::pg_url;

// A new, empty database `name` in the fixture's cluster; its URL.
std::string fresh_database(const std::string& name) {
  const std::string url = pg_url();
  {
    pqxx::connection db(url);
    pqxx::nontransaction tx(db);
    tx.exec0("DROP DATABASE IF EXISTS " + name);
    tx.exec0("CREATE DATABASE " + name);
  }
  return url.substr(0, url.rfind('/') + 1) + name;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every table's columns, every index, constraint and trigger, one sorted line each.
std::string schema_of(const std::string& url) {
  pqxx::connection db(url);
  pqxx::work tx(db);
  std::string out;
  for (const auto& row : tx.exec(R"SQL(
      SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' ||
             is_nullable || ' ' || coalesce(column_default, '')
        FROM information_schema.columns WHERE table_schema = 'public'
      UNION ALL
      SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public'
      UNION ALL
      SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' ||
             pg_get_constraintdef(oid) || ' valid=' || convalidated
        FROM pg_constraint WHERE connamespace = 'public'::regnamespace
      UNION ALL
      SELECT 'trigger ' || tgrelid::regclass || ' ' || tgname
        FROM pg_trigger WHERE NOT tgisinternal
      ORDER BY 1)SQL"))
    out += row[0].as<std::string>() + "\n";
  return out;
}

TEST(Migrations, ADatabaseThatAppliedTheEarlierTextsReachesTheSameSchema) {
  const std::string fresh = fresh_database("migrate_fresh");
  const pg::MigrationReport all = pg::migrate(fresh);
  EXPECT_EQ(all.applied.size(), pg::embedded_migrations().size());

  // 0001 to 0004 as a database that applied the earlier texts has them, recorded with those
  // texts' checksums, as the migrator of that time recorded them.
  const std::string earlier = fresh_database("migrate_earlier");
  const std::filesystem::path source(AGENTFLEET_SOURCE_DIR);
  {
    pqxx::connection db(earlier);
    pqxx::work tx(db);
    tx.exec0(
        "CREATE TABLE schema_migrations (version text PRIMARY KEY, checksum text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())");
    int earlier_texts = 0;
    for (const pg::EmbeddedMigration& m : pg::embedded_migrations()) {
      if (m.version.compare(0, 4, "0004") > 0)
        break;
      const auto earlier_path = source / "tests/pg/earlier_migrations" / m.version;
      const bool edited = std::filesystem::exists(earlier_path);
      earlier_texts += edited ? 1 : 0;
      const std::string text =
          read_file(edited ? earlier_path : source / "core/adapters/pg/migrations" / m.version);
      tx.exec0(text);
      tx.exec_params0("INSERT INTO schema_migrations (version, checksum) VALUES ($1, $2)",
                      m.version, pg::migration_checksum(text));
    }
    tx.commit();
    ASSERT_EQ(earlier_texts, 3);
  }
  {
    // What the edits added is missing there (so the comparison below can fail).
    pqxx::connection db(earlier);
    pqxx::work tx(db);
    EXPECT_EQ(tx.exec1("SELECT count(*) FROM information_schema.columns"
                       " WHERE table_name = 'batches' AND column_name = 'drained_at'")[0]
                  .as<int>(),
              0);
  }
  const pg::MigrationReport rest = pg::migrate(earlier);
  EXPECT_EQ(rest.already.size(), 4u);
  EXPECT_EQ(rest.applied.size() + 4, pg::embedded_migrations().size());
  EXPECT_EQ(schema_of(earlier), schema_of(fresh));

  // Migrating again changes nothing and applies nothing.
  EXPECT_TRUE(pg::migrate(earlier).applied.empty());
  EXPECT_EQ(schema_of(earlier), schema_of(fresh));
}

TEST(Migrations, AFileWaitingOnALockIsRunAgainAndOneThatNeverGetsItGivesUpSayingWhy) {
  using std::chrono::milliseconds;
  const std::string url = fresh_database("migrate_locked");
  pg::migrate(url);
  // A landed file that locks tasks and may run again (it checks a constraint).
  const std::string last = "0010_validate_strategy_check.sql";
  auto forget_last = [&] {
    pqxx::connection db(url);
    pqxx::work tx(db);
    tx.exec_params0("DELETE FROM schema_migrations WHERE version = $1", last);
    tx.commit();
  };
  forget_last();
  {
    // Another session holds tasks until it has seen the migration wait for it, stop
    // waiting (its lock wait timed out, the file was rolled back) and wait again: then it
    // lets go, and the file goes through.
    pqxx::connection holder(url);
    pqxx::work hold(holder);
    hold.exec0("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE");
    std::thread release([&] {
      pqxx::connection watcher(url);
      auto waiting = [&] {
        pqxx::nontransaction tx(watcher);
        return tx.exec1(
                     "SELECT count(*) FROM pg_locks WHERE NOT granted"
                     " AND relation = 'tasks'::regclass")[0]
                   .as<int>() > 0;
      };
      int phase = 0;  // 0: no wait seen yet; 1: waiting; 2: a wait gave up; 3: waiting again
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(50);
      while (phase < 3 && std::chrono::steady_clock::now() < give_up) {
        const bool now_waiting = waiting();
        if (now_waiting != (phase % 2 == 1))
          ++phase;
        std::this_thread::sleep_for(milliseconds(10));
      }
      hold.abort();
    });
    pg::MigrationReport report;
    try {
      report = pg::migrate(url, 60, milliseconds(200));
    } catch (...) {
      release.join();
      throw;
    }
    release.join();
    EXPECT_EQ(report.applied, std::vector<std::string>{last});
    EXPECT_GE(report.lock_retries, 1);
  }
  forget_last();
  {
    // Held for longer than the migration may wait: it gives up, naming the file and why.
    pqxx::connection holder(url);
    pqxx::work hold(holder);
    hold.exec0("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE");
    try {
      pg::migrate(url, 2, milliseconds(200));
      ADD_FAILURE() << "a migration ran while another session held its table";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("migration " + last +
                                                " could not take its locks within 2 s (each "
                                                "wait bounded to 200 ms)",
                                            0),
                0u)
          << e.what();
    }
  }
  EXPECT_EQ(pg::migrate(url).applied, std::vector<std::string>{last});  // once it is free
}

TEST(Migrations, AnyOtherChangedTextIsRefusedByName) {
  const std::string url = fresh_database("migrate_edited");
  pg::migrate(url);
  {
    pqxx::connection db(url);
    pqxx::work tx(db);
    tx.exec0(
        "UPDATE schema_migrations SET checksum = '0000000000000000'"
        " WHERE version = '0005_tool_call_audit.sql'");
    tx.commit();
  }
  try {
    pg::migrate(url);
    ADD_FAILURE() << "an edited migration was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(),
                 "migration 0005_tool_call_audit.sql was changed after it was applied; add a new "
                 "migration instead");
  }
}

TEST(Migrations, ANoTransactionFileBuildsAnIndexConcurrentlyAndIsRecordedOnce) {
  const std::string url = fresh_database("migrate_concurrently");
  const std::vector<pg::MigrationFile> files = {
      {"0001_table.sql",
       "CREATE TABLE t (x integer);\nINSERT INTO t SELECT generate_series(1, 1000);\n"},
      // In one transaction this would fail: CREATE INDEX CONCURRENTLY cannot run inside one.
      {"0002_index.sql",
       "-- agentfleet: no-transaction\n"
       "-- an index build that failed part-way leaves an invalid index: dropped first\n"
       "DROP INDEX CONCURRENTLY IF EXISTS t_x;\n"
       "CREATE INDEX CONCURRENTLY t_x\n  ON t (x);\n"}};
  const pg::MigrationReport first = pg::migrate_files(url, files);
  EXPECT_EQ(first.applied, (std::vector<std::string>{"0001_table.sql", "0002_index.sql"}));
  pqxx::connection db(url);
  pqxx::work tx(db);
  EXPECT_TRUE(
      tx.exec1("SELECT indisvalid FROM pg_index WHERE indexrelid = 't_x'::regclass")[0].as<bool>())
      << "built, and valid";
  EXPECT_EQ(tx.exec1("SELECT count(*) FROM schema_migrations")[0].as<int>(), 2);
  tx.commit();
  const pg::MigrationReport again = pg::migrate_files(url, files);
  EXPECT_TRUE(again.applied.empty());
  EXPECT_EQ(again.already.size(), 2u);

  // The same statement in a file without the mark fails, naming the file.
  const std::string other = fresh_database("migrate_in_transaction");
  try {
    pg::migrate_files(other,
                      {files[0], {"0002_index.sql", "CREATE INDEX CONCURRENTLY t_x ON t (x);"}});
    ADD_FAILURE() << "a concurrent index build ran inside a transaction";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("migration 0002_index.sql failed"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace agentfleet
