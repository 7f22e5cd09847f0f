// Liveness per worker on a private Postgres (tests/pg): the worker's incarnation row, its
// renewals and cancellations (pg::LivenessStore), the hand-back that does not count an
// attempt, the claim that takes over only what a lapsed owner held, and the scheduler's
// recovery, capacity and upkeep of worker rows. Each test makes the rows it needs.

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <pqxx/pqxx>

#include <future>
#include <map>
#include <string>

#include "core/adapters/pg/db_pool.hpp"
#include "core/adapters/pg/liveness_store.hpp"
#include "core/adapters/pg/outbox_relay.hpp"
#include "core/adapters/pg/run_store.hpp"
#include "core/adapters/pg/scheduler_session.hpp"
#include "core/adapters/pg/sql.hpp"
#include "core/billing/money.hpp"
#include "core/codec/task_codec.hpp"
#include "core/react/context_budget.hpp"
#include "tests/pg/pg_url.hpp"

namespace agentfleet {
namespace {

using pgtest::pg_url;

template <typename T>
T await(boost::asio::awaitable<T> awaitable) {
  boost::asio::io_context io;
  auto future = boost::asio::co_spawn(io, std::move(awaitable), boost::asio::use_future);
  io.run();
  return future.get();
}

// A task row in `status`, claimed `attempt` times, owned by `incarnation` (0: none).
std::string insert_task(pqxx::connection& db, const std::string& user, const std::string& status,
                        int attempt, std::int64_t incarnation, int releases = 0) {
  pqxx::work tx(db);
  auto row = tx.exec_params1(
      R"SQL(INSERT INTO tasks (task_id, user_id, text, model, timeout_s, schedule_timeout_s,
                               max_steps, priority, request_canonical, status, attempt, releases,
                               worker_id, worker_incarnation, started_at, dispatched_at)
            VALUES (gen_random_uuid(), $1, 'x', 'sim-model', 30, 3600, 10, 'interactive', '{}',
                    $2, $3::integer, $4::integer, CASE WHEN $5::bigint > 0 THEN 'w' END,
                    NULLIF($5::bigint, 0), CASE WHEN $3::integer > 0 THEN now() END, now())
            RETURNING task_id::text)SQL",
      user, status, attempt, releases, incarnation);
  tx.commit();
  return row[0].as<std::string>();
}

pqxx::row task_row(pqxx::connection& db, const std::string& id) {
  pqxx::work tx(db);
  auto row = tx.exec_params1(
      "SELECT status, attempt, releases, coalesce(worker_incarnation, 0), "
      "coalesce(worker_id, ''), coalesce(error_code, '') FROM tasks WHERE task_id = $1::uuid",
      id);
  tx.commit();
  return row;
}

// A worker row whose lease lapsed `seconds_ago` (negative: still holds).
std::int64_t insert_worker(pqxx::connection& db, double seconds_ago, int capacity = 10,
                           std::int64_t lag = 0, bool draining = false,
                           double heartbeat_seconds_ago = 0) {
  pqxx::work tx(db);
  auto row = tx.exec_params1(
      "INSERT INTO workers (worker_id, lease_until, capacity, dispatch_lag, draining, "
      "heartbeat_at) VALUES ('w', now() - make_interval(secs => $1), $2, $3, $4, "
      "now() - make_interval(secs => $5)) RETURNING incarnation",
      seconds_ago, capacity, lag, draining, heartbeat_seconds_ago);
  tx.commit();
  return row[0].as<std::int64_t>();
}

void clear_workers(pqxx::connection& db) {
  pqxx::work tx(db);
  tx.exec0("DELETE FROM workers");
  tx.commit();
}

class Liveness : public ::testing::Test {
 protected:
  void SetUp() override { clear_workers(db_); }
  pqxx::connection db_{pg_url()};
  pg::DbPool pool_{pg_url(), 1, 2000, 5};
  pg::LivenessStore store_{pool_};
};

TEST_F(Liveness, ARegisteredIncarnationRenewsItsLeaseAndReportsWhatItCanTake) {
  ports::WorkerReport report;
  report.lease_s = 30;
  report.capacity = 64;
  const auto registered = await(store_.register_worker("worker-a", report));
  ASSERT_TRUE(registered.ok()) << registered.error().message;
  report.incarnation = registered.value();
  report.renew = true;
  report.capacity = 40;
  report.running = 7;
  report.dispatch_lag = 3;
  const auto beat = await(store_.beat(report));
  ASSERT_TRUE(beat.ok()) << beat.error().message;
  EXPECT_TRUE(beat.value().alive);
  pqxx::work tx(db_);
  auto row = tx.exec_params1(
      "SELECT worker_id, capacity, running, dispatch_lag, lease_until > now() + interval '25 s' "
      "FROM workers WHERE incarnation = $1",
      report.incarnation);
  EXPECT_EQ(row[0].as<std::string>(), "worker-a");
  EXPECT_EQ(row[1].as<int>(), 40);
  EXPECT_EQ(row[2].as<int>(), 7);
  EXPECT_EQ(row[3].as<int>(), 3);
  EXPECT_TRUE(row[4].as<bool>());
}

TEST_F(Liveness, ALapsedIncarnationIsToldSoAndNotRenewed) {
  const std::int64_t lapsed = insert_worker(db_, 1);
  ports::WorkerReport report;
  report.incarnation = lapsed;
  report.renew = true;
  auto beat = await(store_.beat(report));
  ASSERT_TRUE(beat.ok());
  EXPECT_FALSE(beat.value().alive);
  report.renew = false;
  beat = await(store_.beat(report));
  ASSERT_TRUE(beat.ok());
  EXPECT_FALSE(beat.value().alive);
  pqxx::work tx(db_);
  EXPECT_FALSE(
      tx.exec_params1("SELECT lease_until > now() FROM workers WHERE incarnation = $1", lapsed)[0]
          .as<bool>())
      << "a lapsed lease is never renewed: its tasks may be someone else's now";
}

TEST_F(Liveness, ABeatBringsBackTheCancellationsOfItsOwnRunningTasksOnly) {
  const std::int64_t mine = insert_worker(db_, -30);
  const std::int64_t other = insert_worker(db_, -30);
  const std::string cancel_me = insert_task(db_, "live-u1", "running", 1, mine);
  const std::string keep = insert_task(db_, "live-u1", "running", 1, mine);
  const std::string not_mine = insert_task(db_, "live-u1", "running", 1, other);
  {
    pqxx::work tx(db_);
    tx.exec_params0(
        "UPDATE tasks SET cancel_requested = true WHERE task_id = ANY(ARRAY[$1, $2]::uuid[])",
        cancel_me, not_mine);
    tx.commit();
  }
  ports::WorkerReport report;
  report.incarnation = mine;
  const auto beat = await(store_.beat(report));
  ASSERT_TRUE(beat.ok());
  EXPECT_TRUE(beat.value().alive);
  EXPECT_EQ(beat.value().cancelled, std::vector<std::string>{cancel_me});
}

TEST_F(Liveness, AHandBackQueuesWhatIsStillItsOwnAndNeverCountsTheAttempt) {
  const std::int64_t me = insert_worker(db_, 5);  // lapsed: the worker fenced itself
  const std::int64_t other = insert_worker(db_, -30);
  const std::string mine = insert_task(db_, "hand-u1", "running", 2, me);
  const std::string recovered = insert_task(db_, "hand-u1", "dispatched", 2, 0);
  const std::string taken = insert_task(db_, "hand-u1", "running", 3, other);
  const std::string ended = insert_task(db_, "hand-u1", "succeeded", 2, 0);
  const std::string same_attempt_elsewhere = insert_task(db_, "hand-u1", "running", 2, other);
  const std::string in_doubt = insert_task(db_, "hand-u1", "running", 1, me);
  const std::string taken_and_ended = insert_task(db_, "hand-u1", "succeeded", 3, 0);
  const auto handed = await(store_.hand_back(me, {{mine, 2},
                                                  {recovered, 2},
                                                  {taken, 2},
                                                  {ended, 2},
                                                  {taken_and_ended, 2},
                                                  {same_attempt_elsewhere, 2},
                                                  {in_doubt, -1}}));
  ASSERT_TRUE(handed.ok()) << handed.error().message;
  EXPECT_EQ(handed.value(), 2) << "the two still its own went back to the queue";
  auto r = task_row(db_, mine);
  EXPECT_EQ(r[0].as<std::string>(), "queued");
  EXPECT_EQ(r[2].as<int>(), 1) << "released, not lost";
  EXPECT_EQ(r[3].as<std::int64_t>(), 0);
  EXPECT_EQ(r[4].as<std::string>(), "");
  r = task_row(db_, recovered);
  EXPECT_EQ(r[0].as<std::string>(), "dispatched") << "recovery already sent it again";
  EXPECT_EQ(r[2].as<int>(), 1) << "its lost attempt is not counted";
  r = task_row(db_, taken);
  EXPECT_EQ(r[0].as<std::string>(), "running") << "its new owner keeps it";
  EXPECT_EQ(r[3].as<std::int64_t>(), other);
  EXPECT_EQ(r[2].as<int>(), 1);
  r = task_row(db_, ended);
  EXPECT_EQ(r[2].as<int>(), 0) << "a task that ended at the attempt handed back is left alone";
  r = task_row(db_, taken_and_ended);
  EXPECT_EQ(r[0].as<std::string>(), "succeeded");
  EXPECT_EQ(r[2].as<int>(), 1) << "taken over, then ended: the lost attempt is still not counted";
  r = task_row(db_, same_attempt_elsewhere);
  EXPECT_EQ(r[0].as<std::string>(), "running");
  EXPECT_EQ(r[2].as<int>(), 0) << "another incarnation's run of that attempt is not ours";
  r = task_row(db_, in_doubt);
  EXPECT_EQ(r[0].as<std::string>(), "queued") << "a claim in doubt: whatever attempt it holds";
}

TEST_F(Liveness, ARetiredIncarnationLapsesAtOnceAndTakesNothing) {
  const std::int64_t me = insert_worker(db_, -30, 64);
  ASSERT_TRUE(await(store_.retire(me)).ok());
  pqxx::work tx(db_);
  auto row = tx.exec_params1(
      "SELECT lease_until <= now(), capacity, draining FROM workers WHERE incarnation = $1", me);
  EXPECT_TRUE(row[0].as<bool>());
  EXPECT_EQ(row[1].as<int>(), 0);
  EXPECT_TRUE(row[2].as<bool>());
}

// ---- the claim ---------------------------------------------------------------------------

TEST_F(Liveness, AClaimTakesADispatchedTaskOrOneWhoseOwnerIsGoneNeverOneALiveWorkerRuns) {
  const std::int64_t me = insert_worker(db_, -30);
  const std::int64_t live = insert_worker(db_, -30);
  const std::int64_t dead = insert_worker(db_, 1);
  const std::string dispatched = insert_task(db_, "claim-u1", "dispatched", 0, 0);
  const std::string running_live = insert_task(db_, "claim-u1", "running", 1, live);
  const std::string running_dead = insert_task(db_, "claim-u1", "running", 1, dead);
  const std::string exhausted = insert_task(db_, "claim-u1", "running", 5, dead);
  auto claim = [&](const std::string& id) {
    pqxx::work tx(db_);
    auto claims = pg::claim_tasks(tx, {{id, "worker-me", me, 5}});
    tx.commit();
    return claims.at(0);
  };
  auto c = claim(dispatched);
  ASSERT_EQ(c.outcome, ports::ClaimOutcome::kClaimed);
  EXPECT_EQ(c.task->attempt, 1);
  auto r = task_row(db_, dispatched);
  EXPECT_EQ(r[0].as<std::string>(), "running");
  EXPECT_EQ(r[3].as<std::int64_t>(), me);
  EXPECT_EQ(r[4].as<std::string>(), "worker-me");
  EXPECT_EQ(claim(running_live).outcome, ports::ClaimOutcome::kBusyOrDone);
  c = claim(running_dead);
  ASSERT_EQ(c.outcome, ports::ClaimOutcome::kClaimed);
  EXPECT_EQ(c.task->attempt, 2);
  EXPECT_EQ(claim(exhausted).outcome, ports::ClaimOutcome::kBusyOrDone)
      << "out of attempts: recovery ends it";
  EXPECT_EQ(claim("00000000-0000-4000-8000-00000000dead").outcome, ports::ClaimOutcome::kUnknown);
}

TEST_F(Liveness, ATaskOfAVersion7WorkerIsTakenOverOnceItsOwnLeaseExpired) {
  const std::int64_t me = insert_worker(db_, -30);
  const std::string old_style = insert_task(db_, "claim-u2", "running", 1, 0);
  {
    pqxx::work tx(db_);
    tx.exec_params0(
        "UPDATE tasks SET worker_id = 'v7-worker', lease_until = now() + interval '30 s' "
        "WHERE task_id = $1::uuid",
        old_style);
    tx.commit();
  }
  auto claim = [&](const std::string& id) {
    pqxx::work tx(db_);
    auto claims = pg::claim_tasks(tx, {{id, "worker-me", me, 5}});
    tx.commit();
    return claims.at(0);
  };
  EXPECT_EQ(claim(old_style).outcome, ports::ClaimOutcome::kBusyOrDone) << "its lease still holds";
  {
    pqxx::work tx(db_);
    tx.exec_params0(
        "UPDATE tasks SET lease_until = now() - interval '1 s' WHERE task_id = $1::uuid",
        old_style);
    tx.commit();
  }
  EXPECT_EQ(claim(old_style).outcome, ports::ClaimOutcome::kClaimed);
}

TEST_F(Liveness, AClaimRecordsTheFirstCallOfANewTaskAtItsPromptAndTextAndNoOtherCall) {
  const std::int64_t me = insert_worker(db_, -30);
  const std::int64_t dead = insert_worker(db_, 1);
  // Hangul, full-width forms, an ideograph of extension B and an emoji (not CJK) besides.
  const std::string text = "把周会改到晚上8点 ok 한국어 ｆｕｌｌ 𠀀 😀 tail";
  // 1.5 CNY a million tokens at a window's half price; plan_execute tasks at full price.
  constexpr std::int64_t kHalfRate = 1'500'000LL * 500'000;
  constexpr std::int64_t kFullRate = 1'500'000LL * 1'000'000;
  auto estimates = std::make_shared<ports::FirstCallEstimates>(
      ports::FirstCallEstimates{{"sim-model", "", 121, kHalfRate, "CNY"},
                                {"sim-model", "plan_execute", 300, kFullRate, "USD"}});
  auto claim = [&](const std::string& id,
                   std::shared_ptr<const ports::FirstCallEstimates> with = nullptr) {
    pqxx::work tx(db_);
    auto claims = pg::claim_tasks(tx, {{id, "worker-me", me, 5, with ? with : estimates}});
    tx.commit();
    return claims.at(0);
  };
  auto set = [&](const std::string& id, const std::string& assignment, const std::string& value) {
    pqxx::work tx(db_);
    tx.exec_params0("UPDATE tasks SET " + assignment + " WHERE task_id = $1::uuid", id, value);
    tx.commit();
  };
  auto records = [&](const std::string& id) {
    pqxx::work tx(db_);
    return tx.exec_params(
        "SELECT attempt, step, incarnation, input_tokens, cost::text, currency, user_id, model "
        "FROM model_calls_in_flight WHERE task_id = $1::uuid",
        id);
  };
  // As billing::PriceTable::cost prices it: rate x tokens / 10^12 micro-units, half up.
  auto priced = [](std::int64_t tokens, std::int64_t rate) {
    __extension__ using Wide = __int128;
    const Wide wide = static_cast<Wide>(tokens) * rate;
    return billing::format_micros(
        static_cast<std::int64_t>((wide * 2 + 1'000'000'000'000) / 2'000'000'000'000));
  };

  const std::string plain = insert_task(db_, "first-u1", "dispatched", 0, 0);
  set(plain, "text = $2", text);
  auto c = claim(plain);
  ASSERT_EQ(c.outcome, ports::ClaimOutcome::kClaimed);
  EXPECT_TRUE(c.task->first_call_recorded);
  auto r = records(plain);
  ASSERT_EQ(r.size(), 1u);
  const std::int64_t input = 121 + react::estimate_tokens(text);
  EXPECT_EQ(r[0][0].as<int>(), 1);
  EXPECT_EQ(r[0][1].as<int>(), 0) << "the first call's step";
  EXPECT_EQ(r[0][2].as<std::int64_t>(), me);
  EXPECT_EQ(r[0][3].as<std::int64_t>(), input) << "the prompt's tokens and the text's, "
                                                  "counted as the worker counts them";
  EXPECT_EQ(r[0][4].as<std::string>(), priced(input, kHalfRate));
  EXPECT_EQ(r[0][5].as<std::string>(), "CNY");
  EXPECT_EQ(r[0][6].as<std::string>(), "first-u1");
  EXPECT_EQ(r[0][7].as<std::string>(), "sim-model");

  const std::string planned = insert_task(db_, "first-u1", "dispatched", 0, 0);
  set(planned, "strategy = $2", "plan_execute");
  c = claim(planned);
  EXPECT_TRUE(c.task->first_call_recorded);
  r = records(planned);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0][3].as<std::int64_t>(), 300 + react::estimate_tokens("x"))
      << "the prompt of the task's own strategy";
  EXPECT_EQ(r[0][4].as<std::string>(), priced(300 + react::estimate_tokens("x"), kFullRate));
  EXPECT_EQ(r[0][5].as<std::string>(), "USD");

  // No record where the run's first call is not the claim's to estimate, or none is made.
  const std::string follow_up = insert_task(db_, "first-u1", "dispatched", 0, 0);
  set(follow_up, "parent_task_id = $2::uuid", plain);
  const std::string other_model = insert_task(db_, "first-u1", "dispatched", 0, 0);
  set(other_model, "model = $2", "another-model");
  const std::string cancelled = insert_task(db_, "first-u1", "dispatched", 0, 0);
  set(cancelled, "cancel_requested = $2::boolean", "true");
  const std::string expired = insert_task(db_, "first-u1", "dispatched", 0, 0);
  set(expired, "created_at = now() - make_interval(secs => $2::integer)", "7200");
  const std::string resumed = insert_task(db_, "first-u1", "running", 1, dead);
  const std::string unpriced = insert_task(db_, "first-u1", "dispatched", 0, 0);
  for (const std::string& id : {follow_up, other_model, cancelled, expired, resumed}) {
    c = claim(id);
    ASSERT_EQ(c.outcome, ports::ClaimOutcome::kClaimed) << id;
    EXPECT_FALSE(c.task->first_call_recorded) << id;
    EXPECT_EQ(records(id).size(), 0u) << id;
  }
  EXPECT_EQ(c.task->attempt, 2) << "a resumed task's first call is its run's to record";
  c = claim(unpriced, std::make_shared<ports::FirstCallEstimates>());
  EXPECT_FALSE(c.task->first_call_recorded) << "a worker that knows no prompt yet";
  EXPECT_EQ(records(unpriced).size(), 0u);
}

// ---- the scheduler: recovery, capacity, upkeep -------------------------------------------

pg::RecoveryReport recover(pqxx::connection& db, int redispatch_after_s = 60,
                           bool recover_lapsed = true) {
  pqxx::work tx(db);
  pg::SchedulerPass pass;
  pass.recover_lapsed = recover_lapsed;
  pass.dispatch_topic = "agent.tasks.dispatch";
  pass.results_topic = "agent.tasks.results";
  pass.limit = 1000;
  pass.redispatch_after_s = redispatch_after_s;
  pass.max_attempts = 5;
  auto report = pg::recover_tasks(tx, pass);
  tx.commit();
  return report;
}

TEST_F(Liveness, RecoveryDispatchesAgainTheTasksOfALapsedIncarnationAndEndsThoseOutOfAttempts) {
  const std::int64_t dead = insert_worker(db_, 1);
  const std::int64_t live = insert_worker(db_, -30);
  const std::string orphan = insert_task(db_, "rec-u1", "running", 2, dead);
  const std::string spent = insert_task(db_, "rec-u1", "running", 6, dead, /*releases=*/1);
  const std::string alive = insert_task(db_, "rec-u1", "running", 1, live);
  const auto report = recover(db_);
  EXPECT_GE(report.lease_expired, 1);
  EXPECT_GE(report.exhausted, 1);
  auto r = task_row(db_, orphan);
  EXPECT_EQ(r[0].as<std::string>(), "dispatched");
  EXPECT_EQ(r[3].as<std::int64_t>(), 0) << "no owner any more";
  r = task_row(db_, spent);
  EXPECT_EQ(r[0].as<std::string>(), "failed");
  EXPECT_EQ(r[5].as<std::string>(), "attempts_exhausted");
  r = task_row(db_, alive);
  EXPECT_EQ(r[0].as<std::string>(), "running") << "its worker is alive";
}

// Task `id` ran `steps` model steps before: a step row each (the first with two tool calls that
// ran) and its bill (100 input, 10 output tokens, 0.000100 CNY a step).
void ran_steps(pqxx::connection& db, const std::string& id, int steps) {
  pqxx::work tx(db);
  for (int step = 0; step < steps; ++step) {
    tx.exec_params0(
        "INSERT INTO task_steps (task_id, step, attempt, model_reply, tool_calls) "
        "VALUES ($1::uuid, $2, 1, '{}', $3)",
        id, step, step == 0 ? 2 : 0);
    tx.exec_params0(
        "INSERT INTO usage_ledger (task_id, step, user_id, model, input_tokens, "
        "cached_input_tokens, output_tokens, cost, currency) "
        "VALUES ($1::uuid, $2, 'end-u1', 'sim-model', 100, 0, 10, 0.0001, 'CNY')",
        id, step);
  }
  tx.commit();
}

// Its row's totals, and the same in its result event: steps, tool calls, input tokens, cost.
std::string totals_and_event(pqxx::connection& db, const std::string& id) {
  pqxx::work tx(db);
  auto row = tx.exec_params1(
      "SELECT t.steps || ' ' || t.tool_calls || ' ' || t.input_tokens || ' ' || t.cost || ' | ' ||"
      " coalesce((SELECT (o.payload::jsonb->>'steps') || ' ' || (o.payload::jsonb->>'tool_calls')"
      "   || ' ' || (o.payload::jsonb->'usage'->>'input_tokens') || ' ' ||"
      "   (o.payload::jsonb->>'cost') FROM outbox o"
      "   WHERE o.payload::jsonb->>'task_id' = t.task_id::text), 'no event')"
      " FROM tasks t WHERE t.task_id = $1::uuid",
      id);
  tx.commit();
  return row[0].as<std::string>();
}

// A task's steps and tool rounds leave its row alone (its running totals are derived while
// it runs); whatever ends it folds them into the row and its result event, not only the
// worker's own end.
TEST_F(Liveness, ATaskTheSchedulerEndsKeepsWhatItsAttemptsRanAndBilled) {
  const std::int64_t dead = insert_worker(db_, 1);
  const std::string spent = insert_task(db_, "end-u1", "running", 6, dead, /*releases=*/1);
  ran_steps(db_, spent, 2);
  // Handed back to the queue after it ran, and past its deadline while it waited.
  const std::string late = insert_task(db_, "end-u1", "queued", 1, 0);
  ran_steps(db_, late, 1);
  {
    pqxx::work tx(db_);
    tx.exec_params0(
        "UPDATE tasks SET deadline_at = now() - interval '1 s' WHERE task_id = $1::uuid", late);
    tx.commit();
  }
  recover(db_);
  EXPECT_EQ(task_row(db_, spent)[5].as<std::string>(), "attempts_exhausted");
  EXPECT_EQ(totals_and_event(db_, spent), "2 2 200 0.000200 | 2 2 200 0.000200");
  {
    pqxx::work tx(db_);
    pg::expire_queued(tx, 100, "agent.tasks.results");
    tx.commit();
  }
  EXPECT_EQ(task_row(db_, late)[5].as<std::string>(), "deadline");
  EXPECT_EQ(totals_and_event(db_, late), "1 2 100 0.000100 | 1 2 100 0.000100");
}

// With statistics taken before the queue filled (autovacuum takes the next up to a minute
// later, and may have taken the last while a batch was still staged), the queue's own index
// looks empty to the planner, and the expiry read every queued task, sorted, to find the few
// handed back: 100,000 at each housekeeping (twice a second) after a flood of that size.
TEST_F(Liveness, TheExpiryReadsNoQueuedTaskItDoesNotEndWhateverTheStatisticsSay) {
  {
    // A batch of 5,000 uploaded, counted by ANALYZE while staged, then moved into the queue.
    pqxx::work tx(db_);
    tx.exec0(R"SQL(INSERT INTO tasks (task_id, user_id, text, model, timeout_s, schedule_timeout_s,
                                     max_steps, priority, request_canonical, status, batch_id)
                   SELECT gen_random_uuid(), 'deep-u1', 'x', 'sim-model', 30, 3600, 10, 'batch',
                          '{}', 'staged', 'deep-b1'
                   FROM generate_series(1, 5000))SQL");
    tx.exec0("ANALYZE tasks");
    tx.exec0("UPDATE tasks SET status = 'queued' WHERE batch_id = 'deep-b1'");
    tx.commit();
  }
  // Handed back to the queue after it started, past its deadline.
  const std::string late = insert_task(db_, "deep-u2", "queued", 1, 0);
  {
    pqxx::work tx(db_);
    tx.exec_params0(
        "UPDATE tasks SET deadline_at = now() - interval '1 s' WHERE task_id = $1::uuid", late);
    tx.commit();
  }
  // What this session's scans have returned so far (not yet reported, so read within one
  // transaction, before and after): entries of the queue's index, rows of the table scanned.
  const std::string read_so_far =
      "SELECT pg_stat_get_xact_tuples_returned('tasks_queued_user'::regclass), "
      "pg_stat_get_xact_tuples_returned('tasks'::regclass)";
  pqxx::work tx(db_);
  const auto before = tx.exec1(read_so_far);
  const pg::Expired expired = pg::expire_queued(tx, 100, "agent.tasks.results");
  const auto after = tx.exec1(read_so_far);
  tx.commit();
  EXPECT_EQ(expired.deadline, 1);
  EXPECT_EQ(expired.schedule_timeout, 0);
  EXPECT_EQ(after[0].as<std::int64_t>() - before[0].as<std::int64_t>(), 0)
      << "entries of the queue's index read";
  EXPECT_EQ(after[1].as<std::int64_t>() - before[1].as<std::int64_t>(), 0)
      << "rows read by scanning the table";
  EXPECT_EQ(task_row(db_, late)[5].as<std::string>(), "deadline");
}

TEST_F(Liveness, AfterAnOutageALapsedIncarnationHandsBackItsClaimInDoubtBeforeRecoveryCounts) {
  // Postgres was away longer than a lease: the worker's lease lapsed, and a claim it made as
  // the store went away had committed without the worker learning so.
  const std::int64_t lapsed = insert_worker(db_, 5);
  const std::string in_doubt = insert_task(db_, "outage-u1", "running", 1, lapsed);
  const std::string spent = insert_task(db_, "outage-u1", "running", 6, lapsed, /*releases=*/1);
  auto report = recover(db_, 60, /*recover_lapsed=*/false);
  EXPECT_EQ(report.lease_expired, 0);
  EXPECT_EQ(report.exhausted, 0);
  EXPECT_EQ(task_row(db_, in_doubt)[0].as<std::string>(), "running") << "held for its worker";
  EXPECT_EQ(task_row(db_, spent)[0].as<std::string>(), "running") << "not ended either";

  ASSERT_TRUE(await(store_.hand_back(lapsed, {{in_doubt, -1}})).ok());
  auto r = task_row(db_, in_doubt);
  EXPECT_EQ(r[0].as<std::string>(), "queued");
  EXPECT_EQ(r[2].as<int>(), 1) << "released: the outage costs the task no attempt";

  report = recover(db_);  // the hold is over: what the worker did not hand back is recovered
  EXPECT_EQ(task_row(db_, spent)[0].as<std::string>(), "failed");
  EXPECT_GE(report.exhausted, 1);
}

// A dispatched task whose message is old: (task id).
std::string old_dispatch(pqxx::connection& db, const std::string& user) {
  const std::string id = insert_task(db, user, "dispatched", 0, 0);
  pqxx::work tx(db);
  tx.exec_params0(
      "UPDATE tasks SET dispatched_at = now() - interval '120 s' WHERE task_id = $1::uuid", id);
  tx.commit();
  return id;
}

TEST_F(Liveness, ADispatchIsSentAgainOnlyWhenEveryLiveWorkerHasReadItsPartitionsToTheEnd) {
  // No live worker: nobody could say the message is lost; it is not sent again.
  const std::string waiting = old_dispatch(db_, "redis-u1");
  recover(db_);
  EXPECT_EQ(task_row(db_, waiting)[0].as<std::string>(), "dispatched");
  {
    pqxx::work tx(db_);
    tx.exec_params0(
        "UPDATE tasks SET dispatched_at = now() - interval '120 s' "
        "WHERE task_id = $1::uuid",
        waiting);
    tx.commit();
  }
  // A live worker with messages still to read on its partitions: the message may be one of
  // them (behind a paused worker); it is not sent twice.
  const std::int64_t behind = insert_worker(db_, -30, 10, /*lag=*/25);
  insert_worker(db_, -30, 10, 0);
  auto report = recover(db_);
  EXPECT_EQ(task_row(db_, waiting)[0].as<std::string>(), "dispatched");
  {
    pqxx::work tx(db_);
    tx.exec_params0(
        "UPDATE tasks SET dispatched_at = now() - interval '120 s' "
        "WHERE task_id = $1::uuid",
        waiting);
    tx.exec_params0("UPDATE workers SET dispatch_lag = 0 WHERE incarnation = $1", behind);
    tx.commit();
  }
  // Every live worker has read everything since it was dispatched: it is lost; sent again.
  report = recover(db_);
  EXPECT_GE(report.redispatched, 1);
  pqxx::work tx(db_);
  EXPECT_EQ(
      tx.exec_params1("SELECT count(*) FROM outbox WHERE message_key = $1", waiting)[0].as<int>(),
      1)
      << "its dispatch message again, keyed by the task";
}

TEST_F(Liveness, ADispatchUnclaimedForFiveTimesTheRedispatchDelayIsSentAgainWhateverTheLag) {
  // A worker that reports messages to read and never reads them (a consumer stuck behind
  // a pause it lost track of) must not hold a dispatch, and the capacity it counts
  // against, for ever.
  insert_worker(db_, -30, 10, /*lag=*/3);
  const std::string stuck = old_dispatch(db_, "redis-u2");  // 120 s ago
  recover(db_, /*redispatch_after_s=*/60);
  EXPECT_EQ(task_row(db_, stuck)[0].as<std::string>(), "dispatched");
  pqxx::work read(db_);
  EXPECT_EQ(
      read.exec_params1("SELECT count(*) FROM outbox WHERE message_key = $1", stuck)[0].as<int>(),
      0)
      << "twice the delay, behind a lag: still waiting";
  read.commit();
  const auto report = recover(db_, /*redispatch_after_s=*/20);  // 120 s is six times 20 s
  EXPECT_GE(report.redispatched, 1);
  pqxx::work tx(db_);
  EXPECT_EQ(
      tx.exec_params1("SELECT count(*) FROM outbox WHERE message_key = $1", stuck)[0].as<int>(), 1);
}

TEST_F(Liveness, TheBacklogCarriesWhatTheLiveWorkersThatTakeWorkCanRunAndWhatIsActive) {
  {
    pqxx::work tx(db_);
    tx.exec0("DELETE FROM tasks WHERE status IN ('queued', 'dispatched', 'running')");
    tx.commit();
  }
  pqxx::nontransaction none(db_);
  EXPECT_TRUE(pg::read_backlog(none, 200, 0).users.empty());
  none.commit();
  insert_task(db_, "cap-u1", "queued", 0, 0);
  insert_task(db_, "cap-u1", "dispatched", 0, 0);
  {
    pqxx::nontransaction unknown(db_);
    const auto backlog = pg::read_backlog(unknown, 200, 0);
    ASSERT_EQ(backlog.users.size(), 1u);
    EXPECT_EQ(backlog.fleet_capacity, -1) << "no worker reports: unknown";
    EXPECT_EQ(backlog.fleet_active, 1);
    EXPECT_EQ(backlog.count_cap, ports::backlog_count_cap(200, 0, -1, 1));
    EXPECT_EQ(pg::read_backlog(unknown, 200, 4).count_cap, ports::backlog_count_cap(200, 4, -1, 1));
  }
  insert_worker(db_, -30, 40);
  insert_worker(db_, -30, 24);
  insert_worker(db_, 1, 1000);                         // lapsed
  insert_worker(db_, -30, 500, 0, /*draining=*/true);  // leaving
  const std::int64_t live = insert_worker(db_, -30, 0);
  insert_task(db_, "cap-u2", "running", 1, live);
  pqxx::nontransaction reads(db_);
  const auto backlog = pg::read_backlog(reads, 200, 0);
  ASSERT_EQ(backlog.users.size(), 1u);
  EXPECT_EQ(backlog.users[0].user_id, "cap-u1");
  EXPECT_EQ(backlog.users[0].active, 1);
  EXPECT_EQ(backlog.fleet_capacity, 64);
  EXPECT_EQ(backlog.fleet_active, 2);
  EXPECT_EQ(backlog.count_cap, ports::backlog_count_cap(200, 0, 64, 2)) << "the room reported";
  EXPECT_EQ(pg::read_backlog(reads, 200, 5).count_cap, ports::backlog_count_cap(200, 5, 64, 2))
      << "max_active_tasks";
  EXPECT_EQ(pg::read_backlog(reads, 2, 0).count_cap, ports::backlog_count_cap(2, 0, 64, 2))
      << "the scheduler batch";
  EXPECT_EQ(pg::read_backlog(reads, 200, 1).count_cap, ports::backlog_count_cap(200, 1, 64, 2))
      << "over max_active_tasks: one, to see who waits";
  reads.commit();
  // The counts stop at that cap.
  for (int i = 0; i < 4; ++i)
    insert_task(db_, "cap-u1", "queued", 0, 0);
  pqxx::nontransaction again(db_);
  const auto capped = pg::read_backlog(again, 200, 4);
  ASSERT_EQ(capped.users.size(), 1u);
  EXPECT_EQ(capped.count_cap, 3) << "max_active_tasks 4, 2 active: 2 could start, and one more";
  EXPECT_EQ(capped.users[0].queued_interactive + capped.users[0].queued_batch, 3);
  again.commit();
  // Nothing queued, tasks under way: no user, and the fleet's active total all the same (the
  // scheduler's rounds look after their leases by it; an idle fleet's rounds only read).
  {
    pqxx::work tx(db_);
    tx.exec0("DELETE FROM tasks WHERE status = 'queued'");
    tx.commit();
  }
  pqxx::nontransaction under_way(db_);
  const auto running = pg::read_backlog(under_way, 200, 0);
  EXPECT_TRUE(running.users.empty());
  EXPECT_EQ(running.fleet_active, 2);
  EXPECT_EQ(running.fleet_capacity, 64);
}

TEST_F(Liveness, ATaskOfACancelledBatchHandedBackAfterTheCancelIsDispatchedToBeEndedCancelled) {
  // The batch cancel asked its running task to stop and marked the batch drained; the
  // task's worker was fenced before it saw the request and handed the task back to the
  // queue. Admission skips the rest of a cancelled batch, but not this one: its claim ends it.
  const std::int64_t worker = insert_worker(db_, -30);
  const std::string handed = insert_task(db_, "cb-u1", "running", 1, worker);
  const std::string left = insert_task(db_, "cb-u1", "queued", 0, 0);
  {
    pqxx::work tx(db_);
    tx.exec0(
        "INSERT INTO batches (batch_id, user_id, cancelled, cancelled_at, drained_at) "
        "VALUES ('cb-batch', 'cb-u1', true, now(), now())");
    tx.exec_params0("UPDATE tasks SET batch_id = 'cb-batch' WHERE task_id IN ($1::uuid, $2::uuid)",
                    handed, left);
    tx.exec_params0("UPDATE tasks SET cancel_requested = true WHERE task_id = $1::uuid", handed);
    tx.commit();
  }
  const auto back = await(store_.hand_back(worker, {ports::HeldTask{handed, 1}}));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(task_row(db_, handed)[0].as<std::string>(), "queued");
  pqxx::work tx(db_);
  const auto dispatched = pg::dispatch_grants(
      tx, {ports::DispatchGrant{"cb-u1", Priority::kInteractive, 5}}, "dispatch");
  tx.commit();
  ASSERT_EQ(dispatched.size(), 1u);
  EXPECT_EQ(dispatched[0].task_id, handed);
  EXPECT_EQ(task_row(db_, left)[0].as<std::string>(), "queued") << "left to the cancel";
}

// The dispatch messages of the relay's next batch on `topic`, by key: their headers. Rows of
// other topics (other tests') are refused, so they stay for their own readers.
std::map<std::string, ports::Headers> relay(const std::string& topic) {
  pg::OutboxRelay relay(pg_url(), 5000, 5);
  std::map<std::string, ports::Headers> sent;
  auto relayed = relay.once(1000, topic, [&](std::vector<ports::OutMessage> messages) {
    std::vector<Status> results;
    for (auto& m : messages) {
      if (m.topic != topic) {
        results.emplace_back(Error{ErrorKind::kTransient, "not this test's"});
        continue;
      }
      sent[m.key] = m.headers;
      results.push_back(ok_status());
    }
    return results;
  });
  EXPECT_TRUE(relayed.ok()) << relayed.error().message;
  return sent;
}

std::string header(const ports::Headers& headers, const std::string& name) {
  for (const auto& [key, value] : headers) {
    if (key == name)
      return value;
  }
  return "(none)";
}

TEST_F(Liveness, ADispatchMessageNamesTheStrategyItsTaskAskedForAndAParentItFollows) {
  const std::string plain = insert_task(db_, "needs-u1", "queued", 0, 0);
  const std::string planned = insert_task(db_, "needs-u1", "queued", 0, 0);
  const std::string follow = insert_task(db_, "needs-u1", "queued", 0, 0);
  const std::string parent = insert_task(db_, "needs-u1", "succeeded", 1, 0);
  {
    pqxx::work tx(db_);
    tx.exec_params0("UPDATE tasks SET strategy = 'plan_only' WHERE task_id = $1::uuid", planned);
    tx.exec_params0(
        "UPDATE tasks SET strategy = 'plan_execute', parent_task_id = $2::uuid "
        "WHERE task_id = $1::uuid",
        follow, parent);
    tx.commit();
  }
  {
    pqxx::work tx(db_);
    const auto dispatched = pg::dispatch_grants(
        tx, {ports::DispatchGrant{"needs-u1", Priority::kInteractive, 3}}, "needs-dispatch");
    tx.commit();
    ASSERT_EQ(dispatched.size(), 3u);
  }
  auto sent = relay("needs-dispatch");
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(header(sent[plain], "agentfleet-needs"), "(none)")
      << "no strategy asked for: the worker's default, nothing needed";
  EXPECT_EQ(header(sent[planned], "agentfleet-needs"), "strategy:plan_only");
  EXPECT_EQ(header(sent[follow], "agentfleet-needs"), "strategy:plan_execute feature:follow_up");
  EXPECT_EQ(header(sent[planned], "traceparent"), "(none)") << "none was given";

  // Sent again by recovery: the same needs.
  insert_worker(db_, -30);
  {
    pqxx::work tx(db_);
    tx.exec_params0(
        "UPDATE tasks SET dispatched_at = now() - interval '10 minutes' WHERE task_id = $1::uuid",
        planned);
    tx.commit();
  }
  pqxx::work tx(db_);
  pg::SchedulerPass pass;
  pass.dispatch_topic = "needs-dispatch";
  pass.limit = 1000;
  pg::recover_tasks(tx, pass);
  tx.commit();
  sent = relay("needs-dispatch");
  ASSERT_EQ(sent.count(planned), 1u);
  EXPECT_EQ(header(sent[planned], "agentfleet-needs"), "strategy:plan_only");
}

// The dispatch statement writes each message itself (the fragment dispatch_marked): what it
// writes is what the worker reads, with the needs header the worker checks. A pass's
// messages handed to its relay are not due to any relay for the hand-off's seconds, and go
// once the relay that was handed them removed their rows: together with the others it
// published within its gathering time, in one statement.
TEST_F(Liveness, WhatTheSchedulerWritesIsWhatTheWorkerReadsAndAHandedMessageWaitsForItsRelay) {
  const std::string user = "handoff-\"用户\\1";
  const std::string limited = insert_task(db_, user, "queued", 0, 0);
  {
    pqxx::work tx(db_);
    tx.exec_params0(
        "UPDATE tasks SET max_tokens = 1000, priority = 'batch' WHERE task_id = $1::uuid", limited);
    tx.commit();
  }
  std::vector<pg::DispatchedTask> dispatched;
  {
    pqxx::nontransaction tx(db_);  // its own commit, as a pass sends it
    dispatched = pg::dispatch_grants(tx, {ports::DispatchGrant{user, Priority::kBatch, 5}},
                                     "handoff-dispatch", /*handoff_s=*/10);
  }
  ASSERT_EQ(dispatched.size(), 1u);
  const pg::DispatchedTask& task = dispatched[0];
  EXPECT_EQ(task.message.topic, "handoff-dispatch");
  EXPECT_EQ(task.message.key, limited);
  auto parsed = codec::parse_dispatch_message(task.message.value);
  ASSERT_TRUE(std::holds_alternative<codec::DispatchMessage>(parsed)) << task.message.value;
  const auto& read = std::get<codec::DispatchMessage>(parsed);
  EXPECT_EQ(read.task_id, limited);
  EXPECT_EQ(read.user_id, user);
  EXPECT_EQ(read.priority, Priority::kBatch);
  {
    pqxx::work tx(db_);
    const auto row = tx.exec_params1(
        "SELECT to_char(t.dispatched_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), "
        "o.publish_after > now() + interval '9 seconds', o.payload "
        "FROM tasks t JOIN outbox o ON o.id = $2 WHERE t.task_id = $1::uuid",
        limited, task.outbox_id);
    EXPECT_EQ(read.dispatched_at, row[0].as<std::string>());
    EXPECT_TRUE(row[1].as<bool>()) << "due only after the hand-off";
    EXPECT_EQ(row[2].as<std::string>(), task.message.value) << "the row holds what was handed";
  }
  EXPECT_EQ(header(ports::Headers(task.message.headers), "agentfleet-needs"),
            "feature:spend_limits");
  EXPECT_TRUE(codec::unmet_needs("feature:spend_limits").empty()) << "this worker meets it";
  EXPECT_TRUE(relay("handoff-dispatch").empty()) << "no relay takes a handed row before it is due";

  const auto gather = std::chrono::milliseconds(1000);
  pg::OutboxRelay relay_of_the_pass(pg_url(), 5000, 5, gather);
  EXPECT_EQ(relay_of_the_pass.removal_due(), pg::OutboxRelay::Clock::time_point::max());
  std::vector<ports::OutMessage> sent;
  const auto at = pg::OutboxRelay::Clock::now();
  const auto published = relay_of_the_pass.publish_handed(
      {ports::OutboxMessage{task.outbox_id, task.message}},
      [&](std::vector<ports::OutMessage> messages) {
        sent = messages;
        return std::vector<Status>(messages.size(), ok_status());
      },
      at);
  ASSERT_TRUE(published.ok()) << published.error().message;
  EXPECT_EQ(published.value().published, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].value, task.message.value);
  const auto rows = [&] {
    pqxx::work tx(db_);
    return tx.exec_params1("SELECT count(*) FROM outbox WHERE id = $1", task.outbox_id)[0]
        .as<int>();
  };
  EXPECT_EQ(relay_of_the_pass.removal_due(), at + gather);
  const auto early = relay_of_the_pass.remove_published(at + gather / 2);
  ASSERT_TRUE(early.ok()) << early.error().message;
  EXPECT_EQ(early.value(), 0) << "gathered until the first has waited `gather`";
  EXPECT_EQ(rows(), 1) << "published, its row waits to be removed with the next ones";
  EXPECT_TRUE(relay("handoff-dispatch").empty()) << "and is not due meanwhile";
  const auto removed = relay_of_the_pass.remove_published(at + gather);
  ASSERT_TRUE(removed.ok()) << removed.error().message;
  EXPECT_EQ(removed.value(), 1);
  EXPECT_EQ(rows(), 0) << "published: its row is gone";
  EXPECT_EQ(relay_of_the_pass.removal_due(), pg::OutboxRelay::Clock::time_point::max());
}

TEST_F(Liveness, HandedRowsPublishedAreRemovedAllAtOnceWhenAsked) {
  const std::string user = "handoff-all-u1";
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i)
    ids.push_back(insert_task(db_, user, "queued", 0, 0));
  std::vector<pg::DispatchedTask> dispatched;
  {
    pqxx::nontransaction tx(db_);
    dispatched = pg::dispatch_grants(tx, {ports::DispatchGrant{user, Priority::kInteractive, 3}},
                                     "handoff-all", /*handoff_s=*/10);
  }
  ASSERT_EQ(dispatched.size(), 3u);
  pg::OutboxRelay relay_of_the_pass(pg_url(), 5000, 5, std::chrono::milliseconds(1000));
  std::vector<ports::OutboxMessage> handed;
  for (const pg::DispatchedTask& task : dispatched)
    handed.push_back(ports::OutboxMessage{task.outbox_id, task.message});
  const auto at = pg::OutboxRelay::Clock::now();
  // The broker refuses the second: its row stays, to be published once it falls due.
  const auto published = relay_of_the_pass.publish_handed(
      std::move(handed),
      [&](std::vector<ports::OutMessage> messages) {
        std::vector<Status> results(messages.size(), ok_status());
        results[1] = Status{Error{ErrorKind::kTransient, "broker down"}};
        return results;
      },
      at);
  ASSERT_TRUE(published.ok()) << published.error().message;
  EXPECT_EQ(published.value().published, 2);
  const auto removed = relay_of_the_pass.remove_published(at, /*all=*/true);
  ASSERT_TRUE(removed.ok()) << removed.error().message;
  EXPECT_EQ(removed.value(), 2) << "a stopping relay removes what it published";
  pqxx::work tx(db_);
  EXPECT_EQ(tx.exec_params1("SELECT count(*) FROM outbox WHERE topic = 'handoff-all'")[0].as<int>(),
            1)
      << "the message the broker refused keeps its row";
}

// A look that finds nothing due says when the earliest row falls due, so that an idle relay
// sleeps until then (or relay_idle_ms) instead of asking every second; a row due now is
// published and removed as before, and one the broker refuses stays, counted.
TEST_F(Liveness, ALookThatFindsNothingDueSaysWhenTheEarliestRowFallsDue) {
  pg::OutboxRelay outbox(pg_url(), 5000, 5);
  std::vector<std::string> sent;
  bool refuse = false;
  const auto send = [&](std::vector<ports::OutMessage> messages) {
    for (const ports::OutMessage& m : messages)
      sent.push_back(m.key);
    return std::vector<Status>(
        messages.size(),
        refuse ? Status{Error{ErrorKind::kTransient, "broker down"}} : ok_status());
  };
  const auto look = [&] {
    auto relayed = outbox.once(100, "look-dispatch", send);
    EXPECT_TRUE(relayed.ok()) << relayed.error().message;
    return relayed.ok() ? relayed.value() : pg::RelayedBatch{};
  };
  const auto insert = [&](const std::string& key, int due_in_s) {
    pqxx::work tx(db_);
    tx.exec_params0(
        "INSERT INTO outbox (topic, message_key, payload, publish_after) "
        "VALUES ('look-results', $1, '{}', now() + make_interval(secs => $2))",
        key, due_in_s);
    tx.commit();
  };

  pg::RelayedBatch relayed = look();
  EXPECT_FALSE(relayed.next_due_in.has_value()) << "an empty outbox";
  EXPECT_EQ(relayed.published, 0);

  insert("later", 60);  // a minute: the look comes long before, however slow the machine
  relayed = look();
  ASSERT_TRUE(relayed.next_due_in.has_value());
  EXPECT_GT(*relayed.next_due_in, std::chrono::milliseconds(30000));
  EXPECT_LE(*relayed.next_due_in, std::chrono::milliseconds(60000));
  EXPECT_TRUE(sent.empty()) << "nothing was due";

  insert("now", 0);
  relayed = look();
  EXPECT_EQ(relayed.published, 1);
  EXPECT_EQ(sent, std::vector<std::string>{"now"});

  insert("refused", 0);
  refuse = true;
  relayed = look();
  EXPECT_EQ(relayed.published, 0);
  EXPECT_EQ(relayed.undelivered, 1);
  ASSERT_TRUE(relayed.next_due_in.has_value());
  EXPECT_EQ(*relayed.next_due_in, std::chrono::milliseconds(0)) << "a row is due";
  pqxx::work tx(db_);
  EXPECT_EQ(tx.exec1("SELECT string_agg(message_key, ',' ORDER BY message_key) FROM outbox")[0]
                .as<std::string>(),
            "later,refused")
      << "the published row is gone; the refused and the later one stay";
}

TEST_F(Liveness, RowsOfLongLapsedWorkersGoOnceTheyOwnNothing) {
  const std::int64_t empty = insert_worker(db_, 120);
  const std::int64_t holding = insert_worker(db_, 120);
  const std::int64_t recent = insert_worker(db_, 5);
  insert_task(db_, "forget-u1", "running", 1, holding);
  {
    pqxx::work tx(db_);
    pg::forget_workers(tx);
    tx.commit();
  }
  pqxx::work tx(db_);
  auto rows = tx.exec("SELECT incarnation FROM workers ORDER BY incarnation");
  std::vector<std::int64_t> left;
  for (const auto& r : rows)
    left.push_back(r[0].as<std::int64_t>());
  EXPECT_EQ(left, (std::vector<std::int64_t>{holding, recent}));
  (void)empty;
}

}  // namespace
}  // namespace agentfleet
