// The worker's write batcher on the fleet's Postgres when Postgres drops its connections
// (a restart, a failover, an operator's pg_terminate_backend). libpqxx reports such a
// connection as open until it is used, so the first batch on each pool thread fails on it;
// a batch whose COMMIT was never sent runs again on a fresh connection, and its writes
// succeed instead of failing a claim or a checkpoint. And a batch is written without
// savepoints until one of its writes fails: then that write alone is undone. And the
// worker's deletion of published outbox rows, which shares those batches, skips a row the
// relay holds instead of waiting for it.

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <pqxx/pqxx>

#include <chrono>
#include <cstdint>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/adapters/pg/db_pool.hpp"
#include "core/adapters/pg/outbox_relay.hpp"
#include "core/adapters/pg/write_batcher.hpp"
#include "tests/integration/fleet_client.hpp"

// libpqxx 6.4 leaks the PGresult of a statement that fails on a connection the server
// closed (pqxx::internal::make_result throws before taking ownership); this test makes
// exactly that happen, so LeakSanitizer is told to ignore leaks allocated inside libpqxx
// in this test program (tools/chaos does the same for its fleet, docs/chaos.md).
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libpqxx-6.4.so\n";
}

namespace agentfleet {
namespace {

using namespace std::chrono_literals;

// `n` writes at once, each on its own key (so they may share a batch or not); the backend
// pid each one's transaction ran on, or -1 for a write that failed.
std::vector<int> backend_pids_of_writes(pg::WriteBatcher& batcher, int n) {
  boost::asio::io_context io;
  std::vector<std::future<Result<int>>> futures;
  for (int i = 0; i < n; ++i) {
    futures.push_back(boost::asio::co_spawn(
        io,
        batcher.run(
            "write-batcher-test-" + std::to_string(i),
            [](pqxx::work& tx) { return tx.exec1("SELECT pg_backend_pid()")[0].as<int>(); }),
        boost::asio::use_future));
  }
  io.run();
  std::vector<int> pids;
  for (auto& future : futures) {
    Result<int> result = future.get();
    EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message);
    pids.push_back(result.ok() ? result.value() : -1);
  }
  return pids;
}

// A write held on its pool thread by an advisory lock the test holds: made at construction,
// which waits (at most 10 s) until Postgres shows it waiting for the lock; it goes on at
// release() (or at destruction, when a test ends early).
class HeldWrite {
 public:
  HeldWrite(pg::WriteBatcher& batcher, pqxx::connection& admin, long long lock, std::string key)
      : admin_(admin), lock_(lock) {
    pqxx::nontransaction(admin_).exec_params("SELECT pg_advisory_lock($1)", lock_);
    result_ = boost::asio::co_spawn(
        io_,
        batcher.run(std::move(key),
                    [lock](pqxx::work& tx) {
                      tx.exec_params("SELECT pg_advisory_xact_lock($1)", lock);
                      return tx.exec1("SELECT pg_backend_pid()")[0].as<int>();
                    }),
        boost::asio::use_future);
    thread_ = std::thread([this] { io_.run(); });
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!waiting_ && std::chrono::steady_clock::now() < until) {
      waiting_ = pqxx::nontransaction(admin_)
                     .exec_params1(
                         "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                         "AND objid = $1 AND NOT granted",
                         lock_)[0]
                     .as<int>() > 0;
      if (!waiting_)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a bounded wait
    }
  }
  HeldWrite(const HeldWrite&) = delete;
  HeldWrite& operator=(const HeldWrite&) = delete;
  ~HeldWrite() {
    if (thread_.joinable())
      release();
  }

  bool waiting() const { return waiting_; }

  // Lets the write go; the backend pid it ran on.
  Result<int> release() {
    pqxx::nontransaction(admin_).exec_params("SELECT pg_advisory_unlock($1)", lock_);
    thread_.join();
    return result_.get();
  }

 private:
  pqxx::connection& admin_;
  long long lock_;
  boost::asio::io_context io_;
  std::future<Result<int>> result_;
  std::thread thread_;
  bool waiting_ = false;
};

TEST(WriteBatcher, ABatchOnAConnectionPostgresClosedRunsAgainOnAFreshOne) {
  const std::string url = test::env()["AGENTFLEET_PG_URL"];
  pg::DbPool pool(url, 2, 5000, 5);
  pg::WriteBatcher batcher(pool, 2, 100);

  // Every pool thread opens its connection: one write is held on its thread by an advisory
  // lock the test holds, so a write made while it waits runs on the other thread.
  pqxx::connection admin(url);
  HeldWrite held(batcher, admin, 7311901, "write-batcher-test-held");
  ASSERT_TRUE(held.waiting()) << "the held write never waited for the lock";
  const std::vector<int> other = backend_pids_of_writes(batcher, 1);
  const Result<int> held_pid = held.release();
  ASSERT_TRUE(held_pid.ok()) << held_pid.error().message;
  const std::set<int> before{held_pid.value(), other.at(0)};
  ASSERT_EQ(before.size(), 2u) << "two pool threads, two connections";

  // Postgres ends both sessions; the pool does not notice.
  for (int pid : before) {
    pqxx::work tx(admin);
    EXPECT_TRUE(tx.exec_params1("SELECT pg_terminate_backend($1)", pid)[0].as<bool>());
    tx.commit();
  }
  const auto until = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    pqxx::work tx(admin);
    const auto alive =
        tx.exec_params1("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1::int[])",
                        "{" + std::to_string(*before.begin()) + "," +
                            std::to_string(*before.rbegin()) + "}")[0]
            .as<int>();
    tx.commit();
    if (alive == 0)
      break;
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the sessions did not end";
    std::this_thread::sleep_for(50ms);  // polling a bounded wait
  }

  // The next writes all succeed, on new sessions.
  for (int round = 0; round < 3; ++round) {
    for (int pid : backend_pids_of_writes(batcher, 4)) {
      EXPECT_GT(pid, 0);
      EXPECT_EQ(before.count(pid), 0u) << "a write reported success on a closed session";
    }
  }
  const auto stats = batcher.stats();
  EXPECT_GE(stats.writes, 14u);  // the two that opened the connections, the twelve after
}

TEST(WriteBatcher, AFailingWriteIsUndoneAloneAndTheOthersCommitTogether) {
  const std::string url = test::env()["AGENTFLEET_PG_URL"];
  pqxx::connection admin(url);
  {
    pqxx::work tx(admin);
    tx.exec0(
        "CREATE TABLE IF NOT EXISTS write_batcher_test_rows "
        "(k text PRIMARY KEY, v integer NOT NULL CHECK (v >= 0))");
    tx.exec0("TRUNCATE write_batcher_test_rows");
    tx.commit();
  }
  pg::DbPool pool(url, 1, 5000, 5);
  pg::WriteBatcher batcher(pool, 1, 100);

  // The only batch slot waits on a lock the test holds, so the writes below queue up
  // behind it and form the next batch together.
  HeldWrite blocker(batcher, admin, 7311999, "0-blocker");
  ASSERT_TRUE(blocker.waiting()) << "the blocking write never ran";
  const auto until = std::chrono::steady_clock::now() + 10s;

  boost::asio::io_context io;
  std::vector<std::future<Result<std::int64_t>>> futures;
  for (int i = 0; i < 10; ++i) {
    const std::string key = "row-" + std::to_string(i);
    const int value = i == 5 ? -1 : i;  // row 5 breaks the CHECK constraint
    futures.push_back(boost::asio::co_spawn(
        io,
        batcher.run(key,
                    [key, value](pqxx::work& tx) {
                      return tx
                          .exec_params1(
                              "INSERT INTO write_batcher_test_rows (k, v) VALUES ($1, $2) "
                              "RETURNING txid_current()",
                              key, value)[0]
                          .as<std::int64_t>();
                    }),
        boost::asio::use_future));
  }
  // Once all ten wait in the queue, the lock goes.
  std::thread writes_thread([&] { io.run(); });
  while (batcher.stats().queued < 10) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the writes were never queued";
    std::this_thread::sleep_for(5ms);  // polling a bounded wait
  }
  const Result<int> blocked = blocker.release();
  writes_thread.join();
  ASSERT_TRUE(blocked.ok()) << blocked.error().message;

  std::set<std::int64_t> transactions;
  for (int i = 0; i < 10; ++i) {
    Result<std::int64_t> result = futures[i].get();
    if (i == 5) {
      ASSERT_FALSE(result.ok()) << "a write that breaks a constraint reported success";
      EXPECT_NE(result.error().message.find("write_batcher_test_rows_v_check"), std::string::npos)
          << result.error().message;
      continue;
    }
    ASSERT_TRUE(result.ok()) << result.error().message;
    transactions.insert(result.value());
  }
  EXPECT_EQ(transactions.size(), 1u) << "the nine good writes committed in one transaction";
  EXPECT_EQ(batcher.stats().isolated, 1u) << "the batch was written again with savepoints";
  const auto rows =
      pqxx::nontransaction(admin).exec("SELECT k FROM write_batcher_test_rows ORDER BY k");
  ASSERT_EQ(rows.size(), 9u);
  for (const auto& row : rows)
    EXPECT_NE(row[0].as<std::string>(), "row-5");
  pqxx::nontransaction(admin).exec0("DROP TABLE write_batcher_test_rows");
}

TEST(OutboxDeletion, ARowAnotherTransactionHoldsIsSkippedAndTheRestAreDeletedAtOnce) {
  const std::string url = test::env()["AGENTFLEET_PG_URL"];
  pqxx::connection admin(url);
  // Due in an hour: the fleet's relay leaves these rows alone.
  const auto inserted = pqxx::nontransaction(admin).exec(
      "INSERT INTO outbox (topic, message_key, payload, publish_after) "
      "SELECT 'outbox-deletion-test', 'k', 'p', now() + interval '1 hour' "
      "FROM generate_series(1, 3) RETURNING id");
  ASSERT_EQ(inserted.size(), 3u);
  std::vector<std::int64_t> ids;
  for (const auto& row : inserted)
    ids.push_back(row[0].as<std::int64_t>());

  // The relay's hold on the middle row, as relay_once takes it while it publishes.
  pqxx::connection relay(url);
  pqxx::work held(relay);
  held.exec_params("SELECT id FROM outbox WHERE id = $1 FOR UPDATE", ids[1]);

  pqxx::connection worker(url);
  {
    pqxx::work tx(worker);
    tx.exec0("SET LOCAL statement_timeout = 5000");  // a wait fails instead of hanging
    ASSERT_NO_THROW(pg::delete_outbox_rows(tx, ids));
    tx.commit();
  }
  const auto left = [&] {
    return pqxx::nontransaction(admin).exec_params(
        "SELECT id FROM outbox WHERE id = ANY($1::bigint[]) ORDER BY id",
        "{" + std::to_string(ids[0]) + "," + std::to_string(ids[1]) + "," + std::to_string(ids[2]) +
            "}");
  };
  auto rows = left();
  ASSERT_EQ(rows.size(), 1u) << "the two rows nobody held are deleted";
  EXPECT_EQ(rows[0][0].as<std::int64_t>(), ids[1]);

  // The holder deletes its row in its own transaction, as the relay does once published.
  ASSERT_NO_THROW(pg::delete_outbox_rows(held, {ids[1]}));
  held.commit();
  EXPECT_EQ(left().size(), 0u) << "the relay deletes a row it holds";
}

}  // namespace
}  // namespace agentfleet
