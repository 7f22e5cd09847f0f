// A batch upload on a private Postgres (tests/pg): pg::BatchWriter commits each slice as it
// comes (no transaction stays open while a client sends), its tasks staged: no scheduler
// takes them, no API read shows them, and they hold room in the user's queue. The upload is
// sealed under the user's queue lock with the exact room check, then moved into the queue;
// or discarded. An upload whose replica died is deleted by the scheduler's sweep, and a
// move cut short is finished by it.

#include <gtest/gtest.h>

#include <pqxx/pqxx>

#include <stdexcept>
#include <string>
#include <vector>

#include "core/adapters/pg/batch_store.hpp"
#include "core/adapters/pg/submission_store.hpp"
#include "tests/pg/pg_url.hpp"

namespace agentfleet {
namespace {

using pgtest::next_id;
using pgtest::pg_url;

std::vector<pg::NewTask> tasks_of(const std::string& user, const std::string& batch, int n) {
  std::vector<pg::NewTask> tasks;
  for (int i = 0; i < n; ++i) {
    pg::NewTask task;
    task.spec.task_id = next_id();
    task.spec.user_id = user;
    task.spec.text = "把周会改到晚上8点";
    task.spec.model = "sim-model";
    task.spec.batch_id = batch;
    task.canonical = R"({"text":"x"})";
    tasks.push_back(std::move(task));
  }
  return tasks;
}

// Every user may queue 1000 tasks, unless their own max_queued says otherwise.
int queue_limit(const std::string&, std::optional<int> max_queued) {
  return max_queued.value_or(1000);
}

class Batches : public ::testing::Test {
 protected:
  std::int64_t count(const std::string& sql, const std::string& arg) {
    pqxx::work tx(db_);
    auto n = tx.exec_params1(sql, arg)[0].as<std::int64_t>();
    tx.commit();
    return n;
  }
  std::int64_t tasks_with(const std::string& batch, const std::string& status) {
    pqxx::work tx(db_);
    auto n = tx.exec_params1("SELECT count(*) FROM tasks WHERE batch_id = $1 AND status = $2",
                             batch, status)[0]
                 .as<std::int64_t>();
    tx.commit();
    return n;
  }
  void exec(const std::string& sql, const std::string& arg) {
    pqxx::work tx(db_);
    tx.exec_params0(sql, arg);
    tx.commit();
  }
  std::unique_ptr<pg::BatchWriter> writer(const std::string& user, const std::string& batch) {
    return std::make_unique<pg::BatchWriter>(pg_url(), 5000, 5,
                                             pg::BatchHeader{batch, user, Priority::kBatch},
                                             /*renew_s=*/90);
  }
  int sweep(int limit) {
    pqxx::work tx(db_);
    const int done = pg::sweep_staged_batches(tx, limit);
    tx.commit();
    return done;
  }
  pqxx::connection db_{pg_url()};
};

TEST_F(Batches, SlicesAreCommittedAsTheyComeHiddenUntilSealedThenQueued) {
  const std::string user = "batch-u1", batch = "batch-" + next_id();
  auto upload = writer(user, batch);
  ASSERT_TRUE(upload->create());
  auto first = tasks_of(user, batch, 3);
  auto second = tasks_of(user, batch, 2);
  EXPECT_EQ(upload->add(first), 3);
  EXPECT_EQ(upload->add(second), 2);

  // Committed, with no transaction left open between slices.
  EXPECT_EQ(tasks_with(batch, "staged"), 5);
  EXPECT_EQ(count("SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' "
                  "AND query LIKE $1",
                  "%INSERT INTO tasks%"),
            0);
  // Not the scheduler's, not the API's: no queued task, no task, no batch to show.
  EXPECT_EQ(tasks_with(batch, "queued"), 0);
  EXPECT_FALSE(pg::task_json(db_, first[0].spec.task_id));
  EXPECT_FALSE(pg::find_batch(db_, batch));
  EXPECT_FALSE(pg::batch_json(db_, batch));
  // But they hold room in the user's queue.
  EXPECT_EQ(pg::queue_room_now(db_, user, queue_limit).queued, 5);

  const pg::Seal seal = upload->seal(queue_limit, 5);
  ASSERT_EQ(seal.outcome, pg::SealOutcome::kSealed);
  EXPECT_EQ(seal.room.queued, 5);
  EXPECT_FALSE(pg::find_batch(db_, batch)) << "shown only once every task is in the queue";
  EXPECT_EQ(upload->promote(2), 2);
  EXPECT_EQ(upload->promote(2), 2);
  EXPECT_EQ(upload->promote(2), 1);
  EXPECT_EQ(tasks_with(batch, "queued"), 5);
  EXPECT_EQ(tasks_with(batch, "staged"), 0);
  ASSERT_TRUE(pg::find_batch(db_, batch));
  const auto shown = pg::batch_json(db_, batch);
  ASSERT_TRUE(shown);
  EXPECT_NE(shown->find(R"("total": 5)"), std::string::npos) << *shown;
  EXPECT_TRUE(pg::task_json(db_, first[0].spec.task_id));
  // Submitted when sealed: the queue deadline runs from the move, not from the slice.
  EXPECT_EQ(count("SELECT count(*) FROM tasks WHERE batch_id = $1 "
                  "AND queue_deadline_at > now() + interval '10 seconds'",
                  batch),
            5);
}

TEST_F(Batches, ASealOverTheQueueStoresNothingAndTheDiscardDeletesEveryRow) {
  const std::string user = "batch-u2", batch = "batch-" + next_id();
  exec(
      "INSERT INTO user_limits (user_id, max_queued) VALUES ($1, 4) "
      "ON CONFLICT (user_id) DO UPDATE SET max_queued = 4",
      user);
  auto upload = writer(user, batch);
  ASSERT_TRUE(upload->create());
  auto slice = tasks_of(user, batch, 5);
  EXPECT_EQ(upload->add(slice), 5);
  const pg::Seal seal = upload->seal(queue_limit, 5);
  EXPECT_EQ(seal.outcome, pg::SealOutcome::kQueueFull);
  EXPECT_EQ(seal.room.max_queued, 4);
  EXPECT_EQ(tasks_with(batch, "queued"), 0);
  upload->discard(2);
  EXPECT_EQ(count("SELECT count(*) FROM tasks WHERE batch_id = $1", batch), 0);
  EXPECT_EQ(count("SELECT count(*) FROM batches WHERE batch_id = $1", batch), 0);
}

TEST_F(Batches, StagedTasksHoldTheirRoomAgainstTheUsersOtherSubmissions) {
  const std::string user = "batch-u3", batch = "batch-" + next_id();
  exec(
      "INSERT INTO user_limits (user_id, max_queued) VALUES ($1, 4) "
      "ON CONFLICT (user_id) DO UPDATE SET max_queued = 4",
      user);
  auto upload = writer(user, batch);
  ASSERT_TRUE(upload->create());
  auto slice = tasks_of(user, batch, 3);
  EXPECT_EQ(upload->add(slice), 3);
  auto one = tasks_of(user, "", 2);
  EXPECT_EQ(pg::insert_task(db_, one[0], queue_limit).outcome, pg::InsertOutcome::kCreated);
  EXPECT_EQ(pg::insert_task(db_, one[1], queue_limit).outcome, pg::InsertOutcome::kQueueFull);
}

TEST_F(Batches, TheSweepDeletesAnAbandonedUploadWhichCanThenNeitherGrowNorBeSealed) {
  const std::string user = "batch-u4", batch = "batch-" + next_id();
  auto upload = writer(user, batch);
  ASSERT_TRUE(upload->create());
  auto slice = tasks_of(user, batch, 3);
  EXPECT_EQ(upload->add(slice), 3);
  EXPECT_EQ(sweep(100), 0) << "an upload within its deadline is left alone";
  // Its replica died: no slice renewed it.
  exec("UPDATE batches SET upload_deadline = now() - interval '1 second' WHERE batch_id = $1",
       batch);
  EXPECT_EQ(sweep(2), 2);
  EXPECT_EQ(count("SELECT count(*) FROM batches WHERE batch_id = $1", batch), 1);
  EXPECT_EQ(sweep(2), 1);
  EXPECT_EQ(count("SELECT count(*) FROM tasks WHERE batch_id = $1", batch), 0);
  EXPECT_EQ(count("SELECT count(*) FROM batches WHERE batch_id = $1", batch), 0);
  auto late = tasks_of(user, batch, 1);
  EXPECT_THROW(upload->add(late), std::exception);
  EXPECT_EQ(upload->seal(queue_limit, 3).outcome, pg::SealOutcome::kExpired);
  EXPECT_EQ(count("SELECT count(*) FROM tasks WHERE batch_id = $1", batch), 0);
}

TEST_F(Batches, TheSweepFinishesTheMoveOfASealedBatchItsUploaderDidNotFinish) {
  const std::string user = "batch-u5", batch = "batch-" + next_id();
  auto upload = writer(user, batch);
  ASSERT_TRUE(upload->create());
  auto slice = tasks_of(user, batch, 3);
  EXPECT_EQ(upload->add(slice), 3);
  ASSERT_EQ(upload->seal(queue_limit, 3).outcome, pg::SealOutcome::kSealed);
  EXPECT_EQ(upload->promote(1), 1);
  upload.reset();  // its replica died
  EXPECT_EQ(sweep(100), 0) << "the uploader's time to move them has not passed";
  exec("UPDATE batches SET upload_deadline = now() - interval '1 second' WHERE batch_id = $1",
       batch);
  // A pass at a time, without waiting for another deadline between them.
  EXPECT_EQ(sweep(1), 1);
  EXPECT_FALSE(pg::find_batch(db_, batch));
  EXPECT_EQ(sweep(1), 1);
  EXPECT_EQ(tasks_with(batch, "queued"), 3);
  ASSERT_TRUE(pg::find_batch(db_, batch));
  EXPECT_EQ(sweep(100), 0);
}

}  // namespace
}  // namespace agentfleet
