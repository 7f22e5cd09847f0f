// A batch upload on a private Postgres (tests/pg): pg::BatchWriter commits each slice as it
// comes (no transaction stays open while a client sends), its tasks staged: no scheduler
// takes them, no API read shows them, and they hold room in the user's queue. The upload is
// sealed under the user's queue lock with the exact room check, then moved into the queue;
// or discarded. An upload whose replica died is deleted by the scheduler's sweep, and a
// move cut short is finished by it.

#include <gtest/gtest.h>

#include <rapidjson/document.h>
#include <pqxx/pqxx>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/adapters/pg/batch_store.hpp"
#include "core/adapters/pg/scheduler_session.hpp"
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

// The one batch of a name there to read, of any user.
std::optional<pg::BatchHeader> find_batch(pqxx::connection& c, const std::string& name) {
  auto found = pg::find_batches(c, name, "", 2);
  if (found.size() > 1)
    throw std::logic_error("batch '" + name + "' is more than one user's");
  return found.empty() ? std::nullopt : std::optional<pg::BatchHeader>(found.front());
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
  std::string text(const std::string& sql, const std::string& arg) {
    pqxx::work tx(db_);
    auto row = tx.exec_params1(sql, arg);
    tx.commit();
    return row[0].is_null() ? std::string("(null)") : row[0].as<std::string>();
  }
  int dispatch(const std::string& user) {
    pqxx::work tx(db_);
    const auto sent = pg::dispatch_grants(tx,
                                          {ports::DispatchGrant{user, Priority::kInteractive, 10},
                                           ports::DispatchGrant{user, Priority::kBatch, 10}},
                                          "b-dispatch");
    tx.commit();
    return static_cast<int>(sent.size());
  }
  std::unique_ptr<pg::BatchWriter> writer(const std::string& user, const std::string& batch) {
    return std::make_unique<pg::BatchWriter>(pg_url(), 5000, 5,
                                             pg::BatchHeader{batch, user, Priority::kBatch},
                                             /*renew_s=*/90);
  }
  // An upload of `n` tasks of `user`, created, stored in one slice and sealed, none of them
  // moved into the queue yet; nullptr (and the test's failure recorded) when a step failed.
  std::unique_ptr<pg::BatchWriter> sealed_upload(const std::string& user, const std::string& batch,
                                                 int n) {
    auto upload = writer(user, batch);
    if (!upload->create()) {
      ADD_FAILURE() << "batch " << batch << " exists";
      return nullptr;
    }
    auto slice = tasks_of(user, batch, n);
    if (const int inserted = upload->add(slice).inserted; inserted != n) {
      ADD_FAILURE() << inserted << " of " << n << " tasks stored";
      return nullptr;
    }
    if (upload->seal(queue_limit, n).outcome != pg::SealOutcome::kSealed) {
      ADD_FAILURE() << "batch " << batch << " not sealed";
      return nullptr;
    }
    return upload;
  }
  int sweep(int limit) {
    pqxx::work tx(db_);
    const int done = pg::sweep_staged_batches(tx, limit);
    tx.commit();
    return done;
  }
  int sweep_cancelled(int limit) {
    pqxx::work tx(db_);
    const int ended = pg::sweep_cancelled_batches(tx, limit, "agent.results");
    tx.commit();
    return ended;
  }
  pqxx::connection db_{pg_url()};
};

TEST_F(Batches, SlicesAreCommittedAsTheyComeHiddenUntilSealedThenQueued) {
  const std::string user = "batch-u1", batch = "batch-" + next_id();
  auto upload = writer(user, batch);
  ASSERT_TRUE(upload->create());
  auto first = tasks_of(user, batch, 3);
  auto second = tasks_of(user, batch, 2);
  EXPECT_EQ(upload->add(first).inserted, 3);
  EXPECT_EQ(upload->add(second).inserted, 2);

  // Committed, with no transaction left open between slices. Sessions of this test's own
  // database only: tests running beside it have databases of their own in the same cluster,
  // and one may be between two statements of a transaction.
  EXPECT_EQ(tasks_with(batch, "staged"), 5);
  EXPECT_EQ(count("SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' "
                  "AND datname = current_database() AND query LIKE $1",
                  "%INSERT INTO tasks%"),
            0);
  // Not the scheduler's, not the API's: no queued task, no task, no batch to show.
  EXPECT_EQ(tasks_with(batch, "queued"), 0);
  EXPECT_FALSE(pg::task_json(db_, first[0].spec.task_id));
  EXPECT_FALSE(find_batch(db_, batch));
  EXPECT_FALSE(pg::batch_json(db_, batch));
  // But they hold room in the user's queue.
  EXPECT_EQ(pg::queue_room_now(db_, user, queue_limit).queued, 5);

  const pg::Seal seal = upload->seal(queue_limit, 5);
  ASSERT_EQ(seal.outcome, pg::SealOutcome::kSealed);
  EXPECT_EQ(seal.room.queued, 5);
  // Stored once sealed: shown while its tasks move into the queue, the staged ones as queued.
  ASSERT_TRUE(find_batch(db_, batch)) << "a sealed batch is there";
  const auto moving = pg::batch_json(db_, batch);
  ASSERT_TRUE(moving);
  EXPECT_NE(moving->find(R"("queued": 5)"), std::string::npos) << *moving;
  EXPECT_EQ(upload->promote(2), 2);
  EXPECT_EQ(upload->promote(2), 2);
  EXPECT_EQ(upload->promote(2), 1);
  EXPECT_EQ(tasks_with(batch, "queued"), 5);
  EXPECT_EQ(tasks_with(batch, "staged"), 0);
  ASSERT_TRUE(find_batch(db_, batch));
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
  EXPECT_EQ(upload->add(slice).inserted, 5);
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
  EXPECT_EQ(upload->add(slice).inserted, 3);
  auto one = tasks_of(user, "", 2);
  EXPECT_EQ(pg::insert_task(db_, one[0], queue_limit).outcome, pg::InsertOutcome::kCreated);
  EXPECT_EQ(pg::insert_task(db_, one[1], queue_limit).outcome, pg::InsertOutcome::kQueueFull);
}

TEST_F(Batches, TheSweepDeletesAnAbandonedUploadWhichCanThenNeitherGrowNorBeSealed) {
  const std::string user = "batch-u4", batch = "batch-" + next_id();
  auto upload = writer(user, batch);
  ASSERT_TRUE(upload->create());
  auto slice = tasks_of(user, batch, 3);
  EXPECT_EQ(upload->add(slice).inserted, 3);
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
  auto upload = sealed_upload(user, batch, 3);
  ASSERT_TRUE(upload);
  EXPECT_EQ(upload->promote(1), 1);
  upload.reset();  // its replica died
  EXPECT_EQ(sweep(100), 0) << "the uploader's time to move them has not passed";
  exec("UPDATE batches SET upload_deadline = now() - interval '1 second' WHERE batch_id = $1",
       batch);
  // A pass at a time, without waiting for another deadline between them.
  EXPECT_EQ(sweep(1), 1);
  EXPECT_TRUE(find_batch(db_, batch)) << "sealed: there while its tasks move";
  EXPECT_EQ(sweep(1), 1);
  EXPECT_EQ(tasks_with(batch, "queued"), 3);
  ASSERT_TRUE(find_batch(db_, batch));
  EXPECT_EQ(sweep(100), 0);
}

// A user who cancels right after a large upload, while its tasks still move into the queue
// (or after its uploader left the move to the sweep), cancels all of it: the staged tasks
// end cancelled too, the move finds nothing left, and none of it runs.
TEST_F(Batches, ACancelWhileTheTasksMoveIntoTheQueueEndsTheStagedOnesToo) {
  const std::string user = "batch-u5c", batch = "batch-" + next_id();
  auto upload = sealed_upload(user, batch, 5);
  ASSERT_TRUE(upload);
  EXPECT_EQ(upload->promote(2), 2);
  ASSERT_EQ(tasks_with(batch, "staged"), 3);

  const auto header = find_batch(db_, batch);
  ASSERT_TRUE(header) << "the batch is there to cancel";
  std::string after;
  EXPECT_EQ(pg::cancel_batch_slice(db_, *header, after, 100, "agent.results"), 5);
  EXPECT_EQ(tasks_with(batch, "cancelled"), 5);
  EXPECT_EQ(tasks_with(batch, "staged"), 0);
  EXPECT_EQ(
      count("SELECT count(*) FROM outbox WHERE topic = 'agent.results' AND message_key = $1", user),
      5)
      << "each cancelled task is announced";
  EXPECT_EQ(text("SELECT drained_at IS NOT NULL FROM batches WHERE batch_id = $1", batch), "t");

  // The uploader's move goes on, finds nothing to move, and completes the batch.
  EXPECT_EQ(upload->promote(2), 0);
  EXPECT_EQ(text("SELECT upload_deadline IS NULL FROM batches WHERE batch_id = $1", batch), "t");
  EXPECT_EQ(dispatch(user), 0) << "nothing of the batch runs";
  const auto shown = pg::batch_json(db_, batch);
  ASSERT_TRUE(shown);
  EXPECT_NE(shown->find(R"("cancelled": 5)"), std::string::npos) << *shown;
}

// The scheduler's sweep of cancelled batches is for a cancel cut short; it leaves alone a
// batch whose cancel is under way (a slice's transaction holds the batch's row), so that the
// slice's ordered scan never waits behind the sweep's passes one after another (which made a
// 20,000-task cancel run out of its statement timeout and answer 503). A cancel cut short
// between its slices is still finished by the sweep.
TEST_F(Batches, TheSweepLeavesABatchWhoseCancelIsUnderWayAndFinishesOneCutShort) {
  const std::string user = "batch-u5s", batch = "batch-" + next_id();
  auto upload = sealed_upload(user, batch, 6);
  ASSERT_TRUE(upload);
  EXPECT_EQ(upload->promote(6), 6);
  ASSERT_EQ(tasks_with(batch, "queued"), 6);

  // The cancel's first slice has ended two tasks and committed; its second is under way.
  const auto header = find_batch(db_, batch);
  ASSERT_TRUE(header);
  std::string after;
  ASSERT_EQ(pg::cancel_batch_slice(db_, *header, after, 2, "agent.results"), 2);
  pqxx::connection api(pg_url());
  pqxx::work second_slice(api);
  second_slice.exec_params0(
      "UPDATE batches SET cancelled = true, cancelled_at = "
      "coalesce(cancelled_at, now()) WHERE batch_id = $1",
      batch);
  EXPECT_EQ(sweep_cancelled(100), 0) << "the cancel under way is left to its slices";
  EXPECT_EQ(tasks_with(batch, "queued"), 4);
  // The second slice fails (its request was cut short): the sweep finishes the cancel.
  second_slice.abort();
  EXPECT_EQ(sweep_cancelled(3), 3);
  EXPECT_EQ(sweep_cancelled(3), 1);
  EXPECT_EQ(tasks_with(batch, "cancelled"), 6);
}

TEST_F(Batches, AKeyStagedByAnUploadUnderWayIsNeitherADuplicateNorFreeUntilThatUploadEnds) {
  const std::string user = "batch-u6", first = "batch-" + next_id(), second = "batch-" + next_id();
  auto upload = writer(user, first);
  ASSERT_TRUE(upload->create());
  auto keyed = tasks_of(user, first, 2);
  keyed[0].spec.idempotency_key = "line-1";
  EXPECT_EQ(upload->add(keyed).inserted, 2);

  // A submission with that key: not stored, not told of a task that may never exist.
  auto single = tasks_of(user, "", 1);
  single[0].spec.idempotency_key = "line-1";
  const pg::InsertResult pending = pg::insert_task(db_, single[0], queue_limit);
  EXPECT_EQ(pending.outcome, pg::InsertOutcome::kPending);
  EXPECT_EQ(pending.held_by_batch, first);
  EXPECT_TRUE(pending.task_id.empty());

  // Another upload (the same lines sent again under a new batch id): its slice is not
  // stored, and it is told which key and which upload hold it.
  auto retry = writer(user, second);
  ASSERT_TRUE(retry->create());
  auto again = tasks_of(user, second, 3);
  again[1].spec.idempotency_key = "line-1";
  const pg::Added held = retry->add(again);
  EXPECT_EQ(held.inserted, 0);
  EXPECT_EQ(held.held_key, "line-1");
  EXPECT_EQ(held.held_by_batch, first);
  EXPECT_EQ(count("SELECT count(*) FROM tasks WHERE batch_id = $1", second), 0);

  // The first upload is refused: the key is free again, for the upload and the submission.
  upload->discard(10);
  EXPECT_EQ(retry->add(again).inserted, 3);
  const pg::InsertResult after = pg::insert_task(db_, single[0], queue_limit);
  EXPECT_EQ(after.outcome, pg::InsertOutcome::kPending) << "now held by the second upload";
  ASSERT_EQ(retry->seal(queue_limit, 3).outcome, pg::SealOutcome::kSealed);
  while (retry->promote(100) == 100) {
  }
  // Sealed and queued: a duplicate (or a conflict) from then on, like any stored task.
  auto third = writer(user, "batch-" + next_id());
  ASSERT_TRUE(third->create());
  auto once_more = tasks_of(user, "", 1);
  once_more[0].spec.idempotency_key = "line-1";
  const pg::Added duplicate = third->add(once_more);
  EXPECT_EQ(duplicate.inserted, 0);
  EXPECT_TRUE(duplicate.held_key.empty());
  const pg::InsertResult existing = pg::insert_task(db_, single[0], queue_limit);
  EXPECT_EQ(existing.outcome, pg::InsertOutcome::kExisting);
  EXPECT_EQ(existing.task_id, again[1].spec.task_id);
}

// A line whose key names a task stored with a different request is not a duplicate: its
// slice is not stored and the upload is told which line and task, as a single submission
// with that key is answered 409. The same request under the key is a duplicate.
TEST_F(Batches, ALineWhoseKeyNamesAnotherRequestRefusesTheSliceAndTheSameRequestIsADuplicate) {
  const std::string user = "batch-u10", batch = "batch-" + next_id();
  auto single = tasks_of(user, "", 1);
  single[0].spec.idempotency_key = "order-7";
  single[0].canonical = R"({"text":"book a table"})";
  ASSERT_EQ(pg::insert_task(db_, single[0], queue_limit).outcome, pg::InsertOutcome::kCreated);

  auto upload = writer(user, batch);
  ASSERT_TRUE(upload->create());
  auto lines = tasks_of(user, batch, 3);
  lines[1].spec.idempotency_key = "order-7";
  lines[1].canonical = R"({"text":"cancel the table"})";
  const pg::Added refused = upload->add(lines);
  EXPECT_EQ(refused.inserted, 0);
  EXPECT_EQ(refused.conflict_at, 1);
  EXPECT_EQ(refused.conflict_key, "order-7");
  EXPECT_EQ(refused.conflict_task_id, single[0].spec.task_id);
  EXPECT_EQ(count("SELECT count(*) FROM tasks WHERE batch_id = $1", batch), 0)
      << "nothing of the slice stored";

  lines[1].canonical = single[0].canonical;
  const pg::Added duplicate = upload->add(lines);
  EXPECT_EQ(duplicate.inserted, 2);
  EXPECT_EQ(duplicate.conflict_at, -1) << "the same request: a duplicate";

  // Two lines of one slice with one key and two requests: the second is the conflict.
  auto twice = tasks_of(user, batch, 2);
  for (auto& line : twice)
    line.spec.idempotency_key = "order-8";
  twice[1].canonical = R"({"text":"something else"})";
  const pg::Added repeated = upload->add(twice);
  EXPECT_EQ(repeated.conflict_at, 1);
  EXPECT_EQ(repeated.conflict_task_id, twice[0].spec.task_id);
  EXPECT_TRUE(repeated.conflict_in_batch);
  EXPECT_EQ(repeated.conflict_with_at, 0) << "the slice's own first line";
  EXPECT_FALSE(refused.conflict_in_batch);
  EXPECT_EQ(refused.conflict_with_at, -1);
  EXPECT_EQ(count("SELECT count(*) FROM tasks WHERE idempotency_key = $1", "order-8"), 0);
}

TEST_F(Batches, TwoUploadsThatFitOneAfterTheOtherDoNotRefuseEachOtherAtTheirSeal) {
  const std::string user = "batch-u7", a = "batch-" + next_id(), b = "batch-" + next_id();
  exec(
      "INSERT INTO user_limits (user_id, max_queued) VALUES ($1, 4) "
      "ON CONFLICT (user_id) DO UPDATE SET max_queued = 4",
      user);
  auto first = writer(user, a);
  auto second = writer(user, b);
  ASSERT_TRUE(first->create());
  ASSERT_TRUE(second->create());
  auto three = tasks_of(user, a, 3);
  auto two = tasks_of(user, b, 2);
  EXPECT_EQ(first->add(three).inserted, 3);
  EXPECT_EQ(second->add(two).inserted, 2);
  // 3 + 2 staged: over 4 together, but the first fits alone and is sealed.
  const pg::Seal sealed = first->seal(queue_limit, 3);
  EXPECT_EQ(sealed.outcome, pg::SealOutcome::kSealed);
  EXPECT_EQ(sealed.room.queued, 3);
  // The second is counted with the first, sealed (still staged, or queued): refused.
  const pg::Seal refused = second->seal(queue_limit, 2);
  EXPECT_EQ(refused.outcome, pg::SealOutcome::kQueueFull);
  EXPECT_EQ(refused.room.queued, 5);
  EXPECT_EQ(first->promote(10), 3);
  EXPECT_EQ(second->seal(queue_limit, 2).outcome, pg::SealOutcome::kQueueFull);
}

TEST_F(Batches, AFollowUpWaitsForAParentStillStagedAndSessionsSkipOtherUploadsStagedTasks) {
  const std::string user = "batch-u8", batch = "batch-" + next_id();
  auto upload = writer(user, batch);
  ASSERT_TRUE(upload->create());
  // The child's line comes before its parent's: it moves into the queue first (the move
  // goes in line order; a parent still staged when its child is queued is also what a move
  // that skipped a row another mover held leaves).
  auto lines = tasks_of(user, batch, 2);
  lines[0].spec.parent_task_id = lines[1].spec.task_id;
  lines[1].spec.session_id = "s-" + batch;
  EXPECT_EQ(upload->add(lines).inserted, 2);
  // A later line of the same upload in that session follows its staged task.
  auto later = tasks_of(user, batch, 1);
  later[0].spec.session_id = "s-" + batch;
  EXPECT_EQ(upload->add(later).inserted, 1);
  EXPECT_EQ(text("SELECT parent_task_id::text FROM tasks WHERE task_id = $1::uuid",
                 later[0].spec.task_id),
            lines[1].spec.task_id);
  // A submission in the same session meanwhile: not the follow-up of a task that may never
  // exist.
  auto single = tasks_of(user, "", 1);
  single[0].spec.session_id = "s-" + batch;
  ASSERT_EQ(pg::insert_task(db_, single[0], queue_limit).outcome, pg::InsertOutcome::kCreated);
  EXPECT_EQ(text("SELECT parent_task_id::text FROM tasks WHERE task_id = $1::uuid",
                 single[0].spec.task_id),
            "(null)");

  ASSERT_EQ(upload->seal(queue_limit, 3).outcome, pg::SealOutcome::kSealed);
  EXPECT_EQ(upload->promote(1), 1);
  EXPECT_EQ(tasks_with(batch, "queued"), 1);
  EXPECT_EQ(text("SELECT status FROM tasks WHERE task_id = $1::uuid", lines[0].spec.task_id),
            "queued");
  // The single submission (no parent) goes; the child waits for its staged parent.
  EXPECT_EQ(dispatch(user), 1);
  EXPECT_EQ(text("SELECT status FROM tasks WHERE task_id = $1::uuid", lines[0].spec.task_id),
            "queued");
}

// Issue: a batch of two lines of one session ("今天下午去买东西", then "改第二个") ran the second
// without its parent, because a row of one INSERT cannot see another; across slices the
// parent depended on where a slice broke, and after the move into the queue "the session's
// latest task" was any task of the batch (they share created_at).
TEST_F(Batches, LinesOfOneSessionChainInLineOrderAcrossSlicesAndThroughDuplicates) {
  const std::string user = "batch-u12", batch = "batch-" + next_id(), session = "s-" + batch;
  // A task of the session before the upload, and one whose key a line repeats.
  auto before = tasks_of(user, "", 2);
  before[0].spec.session_id = session;
  before[1].spec.idempotency_key = "dup-" + batch;
  for (const auto& task : before)
    ASSERT_EQ(pg::insert_task(db_, task, queue_limit).outcome, pg::InsertOutcome::kCreated);
  auto upload = writer(user, batch);
  ASSERT_TRUE(upload->create());
  // Slice 1: three lines of the session, the last a duplicate; a line of another session.
  auto first = tasks_of(user, batch, 4);
  for (int i : {0, 1, 3})
    first[static_cast<std::size_t>(i)].spec.session_id = session;
  first[2].spec.session_id = "other-" + batch;
  first[3].spec.idempotency_key = "dup-" + batch;
  EXPECT_EQ(upload->add(first).inserted, 3);
  // Slice 2: the session goes on after the duplicate; then a line that follows it.
  auto second = tasks_of(user, batch, 2);
  second[0].spec.session_id = session;
  second[1].spec.session_id = session;
  EXPECT_EQ(upload->add(second).inserted, 2);
  auto parent_of = [&](const pg::NewTask& task) {
    return text("SELECT coalesce(parent_task_id::text, '') FROM tasks WHERE task_id = $1::uuid",
                task.spec.task_id);
  };
  EXPECT_EQ(parent_of(first[0]), before[0].spec.task_id) << "the session's latest before";
  EXPECT_EQ(parent_of(first[1]), first[0].spec.task_id) << "a row of the same insert";
  EXPECT_EQ(parent_of(first[2]), "") << "another session";
  EXPECT_EQ(parent_of(second[0]), before[1].spec.task_id)
      << "the previous line was a duplicate: the task its key names";
  EXPECT_EQ(parent_of(second[1]), second[0].spec.task_id);

  // Moved into the queue, the session's latest task is its last line, whatever the ids.
  ASSERT_EQ(upload->seal(queue_limit, 6).outcome, pg::SealOutcome::kSealed);
  while (upload->promote(2) == 2) {
  }
  auto after = tasks_of(user, "", 1);
  after[0].spec.session_id = session;
  ASSERT_EQ(pg::insert_task(db_, after[0], queue_limit).outcome, pg::InsertOutcome::kCreated);
  EXPECT_EQ(parent_of(after[0]), second[1].spec.task_id);
  pqxx::connection c(pg_url());
  auto found = pg::find_parent(c, user, "", session, "");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->task_id, after[0].spec.task_id);
}

// Two sessions' lines interleaved in one insert, and a line naming its parent: each session
// chains on its own, and a named parent is kept.
TEST(ChainedParents, EachSessionFollowsItsOwnPreviousTaskAndANamedParentIsKept) {
  auto tasks = tasks_of("u", "b", 5);
  tasks[0].spec.session_id = "a";
  tasks[1].spec.session_id = "b";
  tasks[2].spec.session_id = "a";
  tasks[3].spec.session_id = "a";
  tasks[3].spec.parent_task_id = "named";
  tasks[4].spec.session_id = "a";
  EXPECT_EQ(pg::chained_parents(tasks), (std::vector<int>{-1, -1, 0, -1, 3}));
  tasks[4].spec.user_id = "v";  // another user's session of the same name
  EXPECT_EQ(pg::chained_parents(tasks)[4], -1);
}

TEST_F(Batches, EachSliceOfAMoveGoesOnFromTheLastWithoutReReadingTheMovedRows) {
  const std::string user = "batch-u9", batch = "batch-" + next_id();
  auto upload = sealed_upload(user, batch, 7);
  ASSERT_TRUE(upload);
  EXPECT_EQ(upload->promote(3), 3);
  const std::string through =
      text("SELECT settled_through_seq::text FROM batches WHERE batch_id = $1", batch);
  EXPECT_EQ(count("SELECT count(*) FROM tasks WHERE batch_id = $1 AND status = 'queued' "
                  "AND seq > (SELECT settled_through_seq FROM batches WHERE batch_id = $1)",
                  batch),
            0)
      << "the slice took the first lines, and the batch row says where it stopped";
  EXPECT_EQ(count("SELECT count(*) FROM tasks WHERE batch_id = $1 AND status = 'staged' "
                  "AND seq <= (SELECT settled_through_seq FROM batches WHERE batch_id = $1)",
                  batch),
            0);
  // The uploader dies; the sweep goes on from the same place.
  upload.reset();
  exec("UPDATE batches SET upload_deadline = now() - interval '1 second' WHERE batch_id = $1",
       batch);
  EXPECT_EQ(sweep(3), 3);
  EXPECT_NE(text("SELECT settled_through_seq::text FROM batches WHERE batch_id = $1", batch),
            through);
  EXPECT_EQ(sweep(3), 1);
  EXPECT_EQ(tasks_with(batch, "queued"), 7);
  EXPECT_TRUE(find_batch(db_, batch));
  // The move reads the batch's staged tasks by an index, in line order, starting at the
  // cursor: the rows moved before it are not read again, and nothing is sorted.
  pqxx::work tx(db_);
  std::string plan;
  for (const auto& row : tx.exec_params(
           "EXPLAIN SELECT s.task_id FROM tasks s WHERE s.batch_id = $1 AND s.status = 'staged' "
           "AND s.user_id = $2 AND s.seq > $3::bigint ORDER BY s.seq LIMIT 1000",
           batch, user, through))
    plan += row[0].as<std::string>() + "\n";
  EXPECT_NE(plan.find("tasks_staged_batch_seq"), std::string::npos) << plan;
  EXPECT_NE(plan.find("AND (seq > '" + through + "'::bigint))"), std::string::npos) << plan;
  EXPECT_EQ(plan.find("Sort"), std::string::npos) << plan;
}

// The lines of a sealed batch reach the queue, and leave it, in the order they were sent,
// whatever their task ids: the move goes a slice at a time in line order, each line
// submitted a microsecond after the one before it, and the scheduler admits a user's tasks
// oldest first.
TEST_F(Batches, ASealedBatchIsQueuedAndAdmittedInLineOrderWhateverItsTaskIds) {
  const std::string user = "batch-u10", batch = "batch-" + next_id();
  auto upload = writer(user, batch);
  ASSERT_TRUE(upload->create());
  auto lines = tasks_of(user, batch, 7);
  std::vector<std::string> ids;
  for (const auto& line : lines)
    ids.push_back(line.spec.task_id);
  std::sort(ids.rbegin(), ids.rend());  // the first line has the highest task id
  for (std::size_t i = 0; i < lines.size(); ++i)
    lines[i].spec.task_id = ids[i];
  std::vector<pg::NewTask> first(lines.begin(), lines.begin() + 4);
  std::vector<pg::NewTask> second(lines.begin() + 4, lines.end());
  ASSERT_EQ(upload->add(first).inserted, 4);
  ASSERT_EQ(upload->add(second).inserted, 3);
  ASSERT_EQ(upload->seal(queue_limit, 7).outcome, pg::SealOutcome::kSealed);
  while (upload->promote(3) == 3) {
  }
  ASSERT_EQ(tasks_with(batch, "queued"), 7);
  pqxx::work tx(db_);
  std::vector<std::string> queued;
  for (const auto& row : tx.exec_params(
           "SELECT task_id::text FROM tasks WHERE batch_id = $1 ORDER BY created_at", batch))
    queued.push_back(row[0].as<std::string>());
  EXPECT_EQ(queued, ids) << "queued in line order, three slices of the move";
  // Admitted three at a time: the first three lines, then the next three.
  const Priority priority = lines[0].spec.priority;
  std::vector<std::string> admitted;
  for (const auto& sent :
       pg::dispatch_grants(tx, {ports::DispatchGrant{user, priority, 3}}, "b-dispatch"))
    admitted.push_back(sent.task_id);
  std::sort(admitted.rbegin(), admitted.rend());
  EXPECT_EQ(admitted, std::vector<std::string>(ids.begin(), ids.begin() + 3));
  admitted.clear();
  for (const auto& sent :
       pg::dispatch_grants(tx, {ports::DispatchGrant{user, priority, 3}}, "b-dispatch"))
    admitted.push_back(sent.task_id);
  std::sort(admitted.rbegin(), admitted.rend());
  EXPECT_EQ(admitted, std::vector<std::string>(ids.begin() + 3, ids.begin() + 6));
}

// A batch's id is its user's (migration 0030): a second user naming a batch as another did
// gets a batch of their own under that name, not 409 batch_exists (which told them it
// exists); the same user naming it twice is refused. Each batch's tasks, its progress, its
// cancel and the scheduler's view of that cancel are its own.
TEST_F(Batches, TwoUsersEachHaveABatchOfOneNameAndOneUserHasOne) {
  const std::string name = "nightly-" + next_id(), first = "batch-name-u1",
                    second = "batch-name-u2";
  auto a = sealed_upload(first, name, 2);
  ASSERT_TRUE(a);
  auto b = sealed_upload(second, name, 3);
  ASSERT_TRUE(b) << "another user's batch of the name does not refuse it";
  EXPECT_EQ(a->header().batch_id, name) << "the first keeps the name as its key";
  EXPECT_EQ(b->header().batch_id, batch_key_of_user(name, second));
  EXPECT_EQ(batch_name(b->header().batch_id), name);
  EXPECT_FALSE(writer(second, name)->create()) << "one user, one batch of a name";
  EXPECT_FALSE(writer(first, name)->create());
  EXPECT_EQ(a->promote(10), 2);
  EXPECT_EQ(b->promote(10), 3);

  // Found by name for a user, or both for a caller acting for any user, the oldest first.
  const auto all = pg::find_batches(db_, name, "", 10);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].user_id, first);
  EXPECT_EQ(all[1].user_id, second);
  const auto seconds = pg::find_batches(db_, name, second, 10);
  ASSERT_EQ(seconds.size(), 1u);
  EXPECT_EQ(seconds[0].batch_id, b->header().batch_id);
  EXPECT_TRUE(pg::find_batches(db_, name, "batch-name-u3", 10).empty());
  // Each shows its name and its own tasks.
  const auto shown = pg::batch_json(db_, seconds[0].batch_id);
  ASSERT_TRUE(shown);
  EXPECT_NE(shown->find(R"("batch_id": ")" + name + R"(")"), std::string::npos) << *shown;
  EXPECT_NE(shown->find(R"("total": 3)"), std::string::npos) << *shown;
  EXPECT_NE(shown->find(R"("queued": 3)"), std::string::npos) << *shown;
  pg::ResultsCursor last;
  const std::string lines = pg::batch_results_page(db_, seconds[0], {}, 10, last);
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 3);
  const auto task = pg::task_json(db_, lines.substr(lines.find(R"("task_id":")") + 11, 36));
  ASSERT_TRUE(task);
  EXPECT_NE(task->find(R"("batch_id":")" + name + R"(")"), std::string::npos)
      << "its tasks show the name: " << *task;
  EXPECT_EQ(task->find("\\u001f"), std::string::npos) << *task;

  // The second user's cancelled (a cancel cut short after its mark): the scheduler admits
  // none of its tasks, and the first user's batch of the name runs.
  {
    pqxx::work tx(db_);
    tx.exec_params0("UPDATE batches SET cancelled = true WHERE batch_id = $1", seconds[0].batch_id);
    tx.commit();
  }
  EXPECT_EQ(dispatch(second), 0);
  EXPECT_EQ(dispatch(first), 2);
  std::string after;
  EXPECT_EQ(pg::cancel_batch_slice(db_, seconds[0], after, 100, "agent.results"), 3);
  EXPECT_EQ(tasks_with(b->header().batch_id, "cancelled"), 3);
}

// GET /v1/batches: a user's batches, or several users', newest first, a page at a time, each
// with its counts; an upload under way is not listed.
TEST_F(Batches, TheListShowsBatchesNewestFirstWithTheirCountsAPageAtATime) {
  const std::string name = "list-" + next_id(), first = "batch-list-u1-" + next_id(),
                    second = "batch-list-u2-" + next_id();
  auto older = sealed_upload(first, name + "-a", 2);
  ASSERT_TRUE(older);
  auto newer = sealed_upload(first, name + "-b", 3);
  ASSERT_TRUE(newer);
  auto theirs = sealed_upload(second, name + "-a", 1);
  ASSERT_TRUE(theirs);
  EXPECT_EQ(newer->promote(10), 3);
  auto uploading = writer(first, name + "-c");
  ASSERT_TRUE(uploading->create());

  rapidjson::Document page;
  const auto list = [&](pg::BatchListQuery query) {
    page.Parse(pg::list_batches(db_, query).c_str());
    EXPECT_TRUE(page.IsArray());
    std::vector<std::string> ids;
    for (const auto& b : page.GetArray())
      ids.push_back(std::string(b["user_id"].GetString()) + ":" + b["batch_id"].GetString());
    return ids;
  };
  EXPECT_EQ(list({{first}, 20, ""}),
            (std::vector<std::string>{first + ":" + name + "-b", first + ":" + name + "-a"}))
      << "newest first, the upload under way left out";
  ASSERT_EQ(page.Size(), 2u);
  EXPECT_EQ(page[0]["total"].GetInt(), 3);
  EXPECT_EQ(page[0]["counts"]["queued"].GetInt(), 3);
  EXPECT_EQ(page[0]["ended"].GetInt(), 0);
  EXPECT_EQ(page[1]["counts"]["queued"].GetInt(), 2) << "staged tasks wait as queued ones";
  EXPECT_EQ(page[1]["result_types"]["error"].GetInt(), 0);

  EXPECT_EQ(list({{first, second}, 20, ""}),
            (std::vector<std::string>{second + ":" + name + "-a", first + ":" + name + "-b",
                                      first + ":" + name + "-a"}));
  EXPECT_EQ(list({{first, second}, 2, ""}).size(), 2u);
  const std::string last = page[1]["created_at"].GetString();
  EXPECT_EQ(list({{first, second}, 2, last}), std::vector<std::string>{first + ":" + name + "-a"})
      << "the next page: those created before the last shown";
  EXPECT_TRUE(list({{"batch-list-nobody"}, 20, ""}).empty());
  EXPECT_GE(list({{}, 100, ""}).size(), 3u) << "every user's";

  // By the start of an id (agentctl's batch id prefixes), as written, any user's or one's.
  EXPECT_EQ(list({{}, 20, "", name + "-a"}),
            (std::vector<std::string>{second + ":" + name + "-a", first + ":" + name + "-a"}));
  EXPECT_EQ(list({{first}, 20, "", name}),
            (std::vector<std::string>{first + ":" + name + "-b", first + ":" + name + "-a"}));
  EXPECT_TRUE(list({{}, 20, "", name + "-c"}).empty()) << "the upload under way";
  EXPECT_TRUE(list({{}, 20, "", "LIST-" + name.substr(5)}).empty()) << "case counts";
  EXPECT_TRUE(list({{}, 20, "", name.substr(1)}).empty()) << "the start, not a part";
}

// A batch's results name each task's line of the upload and its text, and come in the order
// of the lines, page after page (migrations 0031, 0032): a client maps each result to its
// input. The tasks' ids run against their lines, so an order by id would show it.
TEST_F(Batches, ResultsComeInTheOrderOfTheLinesAndNameThem) {
  const std::string user = "batch-lines-u1", name = "lines-" + next_id();
  auto upload = writer(user, name);
  ASSERT_TRUE(upload->create());
  auto slice = tasks_of(user, name, 5);
  std::vector<std::string> ids;
  for (const auto& task : slice)
    ids.push_back(task.spec.task_id);
  std::sort(ids.rbegin(), ids.rend());
  for (std::size_t i = 0; i < slice.size(); ++i) {
    slice[i].spec.task_id = ids[i];
    slice[i].batch_line = static_cast<std::int64_t>(i) + 1;
    slice[i].spec.text = "line " + std::to_string(i + 1);
  }
  ASSERT_EQ(upload->add(slice).inserted, 5);
  ASSERT_EQ(upload->seal(queue_limit, 5).outcome, pg::SealOutcome::kSealed);
  EXPECT_EQ(upload->promote(10), 5);

  std::vector<std::int64_t> lines;
  pg::ResultsCursor after;
  for (int page = 0; page < 5; ++page) {
    pg::ResultsCursor last;
    const std::string text = pg::batch_results_page(db_, upload->header(), after, 2, last);
    if (last.task_id.empty())
      break;
    std::size_t at = 0;
    while (at < text.size()) {
      const std::size_t end = text.find('\n', at);
      rapidjson::Document line;
      line.Parse(text.data() + at, end - at);
      ASSERT_TRUE(line.IsObject()) << text;
      lines.push_back(line["line"].GetInt64());
      EXPECT_EQ(std::string(line["text"].GetString()), "line " + std::to_string(lines.back()));
      at = end + 1;
    }
    after = last;
  }
  EXPECT_EQ(lines, (std::vector<std::int64_t>{1, 2, 3, 4, 5}));
  const auto task = pg::task_json(db_, ids[2]);
  ASSERT_TRUE(task);
  EXPECT_NE(task->find(R"("batch_line":3)"), std::string::npos) << *task;
}

}  // namespace
}  // namespace agentfleet
