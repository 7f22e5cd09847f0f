// The worker's run store on a private Postgres (tests/pg): the writes of one kind in a batch
// are one statement (sql/run.sql), each write still fenced on its own, and a write that fails
// is undone alone. Writes are made to share a batch by holding the batcher's one thread with a
// write that waits until they have queued.

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <pqxx/pqxx>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "core/adapters/pg/db_pool.hpp"
#include "core/adapters/pg/run_store.hpp"
#include "core/adapters/pg/scheduler_session.hpp"
#include "core/adapters/pg/sql.hpp"
#include "core/adapters/pg/write_batcher.hpp"
#include "tests/pg/pg_url.hpp"

namespace agentfleet {
namespace {

using pgtest::pg_url;

// A worker incarnation whose liveness runs until `lease` from now ('30 s' holds; '-1 s' has
// lapsed); its incarnation number.
std::int64_t worker_row(pqxx::work& tx, const std::string& worker_id, const std::string& lease) {
  return tx
      .exec_params1("INSERT INTO workers (worker_id, lease_until) "
                    "VALUES ($1, now() + $2::interval) RETURNING incarnation",
                    worker_id, lease)[0]
      .as<std::int64_t>();
}

// The worker incarnation whose runs write here (no liveness row needed: only fences).
constexpr std::int64_t kIncarnation = 7;

// A running task at `attempt`, claimed by `incarnation`.
std::string running_task(pqxx::connection& db, const std::string& user, int attempt = 1,
                         std::int64_t incarnation = kIncarnation) {
  pqxx::work tx(db);
  auto row = tx.exec_params1(
      R"SQL(INSERT INTO tasks (task_id, user_id, text, model, timeout_s, schedule_timeout_s,
                               max_steps, priority, request_canonical, status, attempt,
                               worker_id, worker_incarnation, started_at, dispatched_at)
            VALUES (gen_random_uuid(), $1, 'x', 'sim-model', 30, 3600, 10, 'interactive', '{}',
                    'running', $2, 'w', $3, now(), now())
            RETURNING task_id::text)SQL",
      user, attempt, incarnation);
  tx.commit();
  return row[0].as<std::string>();
}

// Task `id`'s running totals as every read of it shows them (the fragment task_totals):
// steps, tool calls, input, cached input and output tokens, cost, currency.
pqxx::row totals_of(pqxx::work& tx, const std::string& id) {
  static const std::string kTotals = std::string("SELECT ") + pg::sql::fragment("task_totals") +
                                     " FROM tasks t WHERE t.task_id = $1::uuid";
  return tx.exec_params1(kTotals, id);
}

// The version of task `id`'s row: a write of the row makes a new one, a lock does not.
std::string row_version(pqxx::connection& db, const std::string& id) {
  pqxx::work tx(db);
  return tx.exec_params1("SELECT xmin::text FROM tasks WHERE task_id = $1::uuid", id)[0]
      .as<std::string>();
}

ports::ModelStep model_step(const std::string& task_id, int attempt, int step, int input,
                            const std::string& reply = R"({"content":"","tool_calls":[]})") {
  ports::ModelStep m;
  m.task_id = task_id;
  m.attempt = attempt;
  m.incarnation = kIncarnation;
  m.step = step;
  m.reply_json = reply;
  m.latency_ms = 12;
  m.ledger.user_id = "rs-u1";
  m.ledger.model = "sim-model";
  m.ledger.usage.input = input;
  m.ledger.usage.output = 10;
  m.ledger.cost = "0.000100";
  m.ledger.currency = "CNY";
  return m;
}

struct Harness {
  boost::asio::io_context io;
  pqxx::connection db{pg_url()};
  pg::DbPool pool{pg_url(), 1, 5000, 5};
  pg::WriteBatcher writes{pool, 1, 500};
  pg::RunStore store{io.get_executor(), writes,
                     pg::RunStoreOptions{"worker-rs", 30, 5, "agent.tasks.results"}};

  // Holds the batcher's one thread, alone in a batch of its own, until `count` writes wait
  // for it (at most 30 s), so that what is spawned next shares one batch however slowly
  // this machine runs. Returns once the hold has begun.
  void hold_the_batcher(std::uint64_t count) {
    auto& holder = *holders.emplace_back(std::make_unique<Holder>());
    auto begun = std::make_shared<std::promise<void>>();
    auto has_begun = begun->get_future();
    boost::asio::co_spawn(holder.io,
                          writes.run({},
                                     [this, count, begun](pqxx::work&) {
                                       begun->set_value();
                                       const auto until = std::chrono::steady_clock::now() +
                                                          std::chrono::seconds(30);
                                       while (writes.stats().queued < count &&
                                              std::chrono::steady_clock::now() < until)
                                         std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                       return true;
                                     }),
                          boost::asio::detached);
    holder.thread = std::thread([&holder] { holder.io.run(); });
    has_begun.wait();
  }
  // The hold's completion is delivered on an executor of its own, run by its own thread.
  struct Holder {
    boost::asio::io_context io;
    std::thread thread;
    ~Holder() {
      if (thread.joinable())
        thread.join();
    }
  };
  std::vector<std::unique_ptr<Holder>> holders;  // joined first: declared after the batcher

  template <typename T>
  std::future<T> spawn(boost::asio::awaitable<T> a) {
    return boost::asio::co_spawn(io, std::move(a), boost::asio::use_future);
  }
  // Runs `a` to its end on the io context and gives its result.
  template <typename T>
  T run(boost::asio::awaitable<T> a) {
    io.restart();
    auto done = spawn(std::move(a));
    io.run();
    return done.get();
  }
};

TEST(RunStore, ModelStepsOfManyTasksAreOneStatementAndEachIsFencedOnItsOwn) {
  Harness h;
  const std::string a = running_task(h.db, "rs-u1");
  const std::string b = running_task(h.db, "rs-u1");
  const std::string taken = running_task(h.db, "rs-u1", /*attempt=*/2);
  // Another worker's at the same attempt: the attempt alone would not fence it off.
  const std::string elsewhere = running_task(h.db, "rs-u1", 1, kIncarnation + 1);
  const std::string b_before = row_version(h.db, b);
  h.hold_the_batcher(4);
  auto fa = h.spawn(h.store.save_model_step(model_step(a, 1, 0, 100)));
  auto fb = h.spawn(h.store.save_model_step(model_step(b, 1, 0, 200)));
  auto ft = h.spawn(h.store.save_model_step(model_step(taken, 1, 0, 300)));  // an old attempt
  auto fe = h.spawn(h.store.save_model_step(model_step(elsewhere, 1, 0, 400)));
  h.io.run();
  const auto ra = fa.get(), rb = fb.get(), rt = ft.get(), re = fe.get();
  ASSERT_TRUE(ra.ok() && rb.ok() && rt.ok() && re.ok());
  EXPECT_TRUE(ra.value().ok());
  EXPECT_TRUE(rb.value().ok());
  ASSERT_FALSE(rt.value().ok());
  EXPECT_EQ(rt.value().error().kind, ErrorKind::kLeaseLost);
  ASSERT_FALSE(re.value().ok()) << "another incarnation owns it";
  EXPECT_EQ(re.value().error().kind, ErrorKind::kLeaseLost);
  const auto stats = h.writes.stats();
  EXPECT_GE(stats.largest, 4u) << "the four checkpoints went in one batch";
  EXPECT_EQ(stats.isolated, 0u) << "a lost fence is an answer, not a failure";
  pqxx::work tx(h.db);
  auto row = tx.exec_params1(
      "SELECT (SELECT count(*) FROM task_steps WHERE task_id = ANY(ARRAY[$1, $2, $3]::uuid[])),"
      " (SELECT count(*) FROM usage_ledger WHERE task_id = ANY(ARRAY[$1, $2, $3]::uuid[]))",
      a, b, taken);
  EXPECT_EQ(row[0].as<int>(), 2) << "no step row for the fenced-out write";
  EXPECT_EQ(row[1].as<int>(), 2) << "no ledger row for it either";
  EXPECT_EQ(tx.exec_params1("SELECT count(*) FROM task_steps WHERE task_id = $1::uuid", elsewhere)[0]
                .as<int>(),
            0);
  // The running totals every read shows come from the step and ledger rows: the checkpoint
  // locks the task's row (its fence) but leaves it as it was.
  const auto totals = totals_of(tx, b);
  EXPECT_EQ(totals[0].as<int>(), 1) << "steps";
  EXPECT_EQ(totals[2].as<int>(), 200) << "input tokens";
  EXPECT_EQ(totals[5].as<std::string>(), "0.000100");
  EXPECT_EQ(totals_of(tx, taken)[2].as<int>(), 0);
  tx.commit();
  EXPECT_EQ(row_version(h.db, b), b_before) << "the task's row is not rewritten by a step";
}

TEST(RunStore, ToolResultsCutShortKeepTheTraceAndTheCountButNoObservations) {
  Harness h;
  const std::string id = running_task(h.db, "rs-u5");
  auto saved = h.spawn(h.store.save_model_step(model_step(id, 1, 0, 100)));
  h.io.run();
  ASSERT_TRUE(saved.get().ok());
  ports::ToolResults cut;
  cut.task_id = id;
  cut.attempt = 1;
  cut.incarnation = kIncarnation;
  cut.step = 0;
  cut.trace_json = R"([{"call_id":"c1","tool":"search_items","status":"ok"},)"
                   R"({"call_id":"c2","tool":"create_item","status":"no_answer"}])";
  cut.executed_calls = 1;
  h.io.restart();
  auto written = h.spawn(h.store.save_tool_results(cut));
  h.io.run();
  const auto result = written.get();
  ASSERT_TRUE(result.ok() && result.value().ok());
  pqxx::work tx(h.db);
  auto row = tx.exec_params1(
      "SELECT s.observations IS NULL, s.tools_done_at IS NULL, jsonb_array_length(s.trace)"
      " FROM task_steps s WHERE s.task_id = $1::uuid AND s.step = 0",
      id);
  EXPECT_TRUE(row[0].as<bool>()) << "no observations: a replay calls the step's tools again";
  EXPECT_TRUE(row[1].as<bool>());
  EXPECT_EQ(row[2].as<int>(), 2);
  EXPECT_EQ(totals_of(tx, id)[1].as<int>(), 1) << "the calls that ran, counted";
}

TEST(RunStore, ChargesNoCheckpointBillsAreRecordedWhoeverOwnsTheTaskAndAnEstimateIsFlagged) {
  Harness h;
  // The task is another attempt's by now: the charges of attempt 1 are recorded all the same.
  const std::string id = running_task(h.db, "rs-u6", /*attempt=*/2);
  ports::Charges charges;
  charges.task_id = id;
  charges.attempt = 1;
  charges.step = 3;
  charges.user_id = "rs-u6";
  charges.model = "sim-model";
  LostCharge late;
  late.usage.input = 500;
  late.usage.output = 40;
  late.estimated = false;
  late.reason = ChargeLoss::kLeaseLost;
  LostCharge timed_out;
  timed_out.usage.input = 480;
  timed_out.reason = ChargeLoss::kTimeout;
  charges.charges = {{late, "0.001300", "CNY"}, {timed_out, "0.000960", "CNY"}};
  auto recorded = h.spawn(h.store.record_charges(charges));
  h.io.run();
  const auto result = recorded.get();
  ASSERT_TRUE(result.ok() && result.value().ok());
  // A checkpoint of a call whose usage was estimated keeps the flag.
  const std::string ours = running_task(h.db, "rs-u6");
  ports::ModelStep estimated = model_step(ours, 1, 0, 100);
  estimated.ledger.usage_estimated = true;
  h.io.restart();
  auto saved = h.spawn(h.store.save_model_step(estimated));
  h.io.run();
  ASSERT_TRUE(saved.get().ok());
  pqxx::work tx(h.db);
  auto rows = tx.exec_params(
      "SELECT reason, attempt, step, input_tokens, output_tokens, usage_estimated, cost::text,"
      " batch_id IS NULL FROM usage_unreconciled WHERE task_id = $1::uuid ORDER BY id",
      id);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0][0].as<std::string>(), "lease_lost");
  EXPECT_EQ(rows[0][1].as<int>(), 1);
  EXPECT_EQ(rows[0][2].as<int>(), 3);
  EXPECT_EQ(rows[0][3].as<int>(), 500);
  EXPECT_EQ(rows[0][4].as<int>(), 40);
  EXPECT_FALSE(rows[0][5].as<bool>());
  EXPECT_EQ(rows[0][6].as<std::string>(), "0.001300");
  EXPECT_TRUE(rows[0][7].as<bool>());
  EXPECT_EQ(rows[1][0].as<std::string>(), "timeout");
  EXPECT_TRUE(rows[1][5].as<bool>());
  EXPECT_TRUE(
      tx.exec_params1("SELECT usage_estimated FROM usage_ledger WHERE task_id = $1::uuid", ours)[0]
          .as<bool>());
  EXPECT_EQ(
      tx.exec_params1("SELECT input_tokens FROM tasks WHERE task_id = $1::uuid", id)[0].as<int>(),
      0)
      << "not the task's own totals";
}

ports::CallSent call_sent(const std::string& task_id, int attempt, int step,
                          std::int64_t incarnation = kIncarnation) {
  ports::CallSent c;
  c.task_id = task_id;
  c.attempt = attempt;
  c.step = step;
  c.user_id = "rs-u9";
  c.model = "sim-model";
  c.input_tokens = 640;
  c.cost = "0.001280";
  c.currency = "CNY";
  c.incarnation = incarnation;
  return c;
}

// The scheduler's pass over calls left in flight (sched_settle_calls): how many it billed.
int settle_lost_calls(pqxx::connection& db) {
  pqxx::work tx(db);
  const int billed = pg::settle_lost_calls(tx, 100);
  tx.commit();
  return billed;
}

int count_of(pqxx::connection& db, const std::string& sql, const std::string& task_id) {
  pqxx::work tx(db);
  return tx.exec_params1(sql, task_id)[0].as<int>();
}

constexpr const char* kInFlight =
    "SELECT count(*) FROM model_calls_in_flight WHERE task_id = $1::uuid";
constexpr const char* kUnreconciled =
    "SELECT count(*) FROM usage_unreconciled WHERE task_id = $1::uuid";

TEST(RunStore, AModelCallIsRecordedBeforeItIsSentAndBilledOnceByWhoeverSettlesIt) {
  Harness h;
  // Its checkpoint settles a call: the ledger bills it, the record goes.
  const std::string checkpointed = running_task(h.db, "rs-u9");
  auto recorded = h.run(h.store.record_call(call_sent(checkpointed, 1, 0)));
  ASSERT_TRUE(recorded.ok() && recorded.value().ok());
  auto again = h.run(h.store.record_call(call_sent(checkpointed, 1, 0)));  // a second try
  ASSERT_TRUE(again.ok() && again.value().ok());
  EXPECT_EQ(count_of(h.db, kInFlight, checkpointed), 1) << "one record per call";
  EXPECT_EQ(settle_lost_calls(h.db), 0) << "the task is still its worker's run";
  ASSERT_TRUE(h.run(h.store.save_model_step(model_step(checkpointed, 1, 0, 640))).ok());
  EXPECT_EQ(count_of(h.db, kInFlight, checkpointed), 0);

  // A call of an attempt that no longer owns the task is refused its record (not sent).
  auto fenced = h.run(h.store.record_call(call_sent(checkpointed, 2, 1)));
  ASSERT_TRUE(fenced.ok());
  ASSERT_FALSE(fenced.value().ok());
  EXPECT_EQ(fenced.value().error().kind, ErrorKind::kLeaseLost);
  EXPECT_EQ(count_of(h.db, kInFlight, checkpointed), 0);

  // A call whose answer was lost settles its record with its charge.
  const std::string timed_out = running_task(h.db, "rs-u9");
  ASSERT_TRUE(h.run(h.store.record_call(call_sent(timed_out, 1, 0))).ok());
  ports::Charges lost;
  lost.task_id = timed_out;
  lost.attempt = 1;
  lost.step = 0;
  lost.user_id = "rs-u9";
  lost.model = "sim-model";
  lost.settles_call = true;
  LostCharge charge;
  charge.usage.input = 640;
  charge.reason = ChargeLoss::kTimeout;
  lost.charges = {{charge, "0.001280", "CNY"}};
  auto settled = h.run(h.store.record_charges(lost));
  ASSERT_TRUE(settled.ok() && settled.value().ok());
  EXPECT_EQ(count_of(h.db, kUnreconciled, timed_out), 1);
  EXPECT_EQ(count_of(h.db, kInFlight, timed_out), 0);

  // A worker that dies with a call in flight: once the task is no longer its run (recovery
  // took it back), the scheduler bills the record's estimate, once.
  const std::string killed = running_task(h.db, "rs-u9");
  ASSERT_TRUE(h.run(h.store.record_call(call_sent(killed, 1, 2))).ok());
  {
    pqxx::work tx(h.db);
    tx.exec_params0(
        "UPDATE tasks SET status = 'dispatched', worker_incarnation = NULL "
        "WHERE task_id = $1::uuid",
        killed);
    tx.commit();
  }
  EXPECT_EQ(settle_lost_calls(h.db), 1);
  EXPECT_EQ(settle_lost_calls(h.db), 0) << "billed once";
  {
    pqxx::work tx(h.db);
    auto row = tx.exec_params1(
        "SELECT reason, attempt, step, input_tokens, output_tokens, usage_estimated, cost::text,"
        " currency, user_id FROM usage_unreconciled WHERE task_id = $1::uuid",
        killed);
    EXPECT_EQ(row[0].as<std::string>(), "worker_lost");
    EXPECT_EQ(row[1].as<int>(), 1);
    EXPECT_EQ(row[2].as<int>(), 2);
    EXPECT_EQ(row[3].as<int>(), 640);
    EXPECT_EQ(row[4].as<int>(), 0);
    EXPECT_TRUE(row[5].as<bool>());
    EXPECT_EQ(row[6].as<std::string>(), "0.001280");
    EXPECT_EQ(row[7].as<std::string>(), "CNY");
    EXPECT_EQ(row[8].as<std::string>(), "rs-u9");
  }
  // The worker was not dead after all: its late bill of that call is refused, not doubled.
  lost.task_id = killed;
  lost.step = 2;
  auto late = h.run(h.store.record_charges(lost));
  ASSERT_TRUE(late.ok());
  ASSERT_FALSE(late.value().ok());
  EXPECT_EQ(late.value().error().kind, ErrorKind::kConflict);
  EXPECT_EQ(count_of(h.db, kUnreconciled, killed), 1);

  // A call a live worker abandoned (its task ended meanwhile) is the worker's to bill; once
  // the worker's liveness lapses, it is the scheduler's.
  std::int64_t live = 0;
  {
    pqxx::work tx(h.db);
    live = worker_row(tx, "w-live", "30 s");
    tx.commit();
  }
  const std::string abandoned = running_task(h.db, "rs-u9", 1, live);
  ASSERT_TRUE(h.run(h.store.record_call(call_sent(abandoned, 1, 0, live))).ok());
  {
    pqxx::work tx(h.db);
    tx.exec_params0("UPDATE tasks SET status = 'cancelled' WHERE task_id = $1::uuid", abandoned);
    tx.commit();
  }
  EXPECT_EQ(settle_lost_calls(h.db), 0) << "its worker is alive and will bill it";
  {
    pqxx::work tx(h.db);
    tx.exec_params0(
        "UPDATE workers SET lease_until = now() - interval '1 s' WHERE incarnation = $1", live);
    tx.commit();
  }
  EXPECT_EQ(settle_lost_calls(h.db), 1);
  EXPECT_EQ(count_of(h.db, kInFlight, abandoned), 0);
}

// Tool results that lead to a model call carry its record (ports::ToolResults::next_call):
// written in their statement and fenced with them, so the call needs no commit of its own.
TEST(RunStore, ToolResultsCarryTheRecordOfTheCallTheyLeadToFencedWithThem) {
  Harness h;
  const std::string id = running_task(h.db, "rs-u9");
  ASSERT_TRUE(h.run(h.store.save_model_step(model_step(id, 1, 0, 100))).ok());
  ports::ToolResults results;
  results.task_id = id;
  results.attempt = 1;
  results.incarnation = kIncarnation;
  results.step = 0;
  results.observations_json =
      R"([{"call_id":"c1","tool":"search_items","ok":true,"content":"{}"}])";
  results.trace_json = "[]";
  results.executed_calls = 1;
  results.next_call = call_sent(id, 1, 1);
  auto saved = h.run(h.store.save_tool_results(results));
  ASSERT_TRUE(saved.ok() && saved.value().ok());
  {
    pqxx::work tx(h.db);
    auto row = tx.exec_params1(
        "SELECT count(*), min(step), min(input_tokens), min(cost)::text, min(incarnation)"
        " FROM model_calls_in_flight WHERE task_id = $1::uuid",
        id);
    EXPECT_EQ(row[0].as<int>(), 1);
    EXPECT_EQ(row[1].as<int>(), 1) << "the next call's step";
    EXPECT_EQ(row[2].as<std::int64_t>(), 640);
    EXPECT_EQ(row[3].as<std::string>(), "0.001280");
    EXPECT_EQ(row[4].as<std::int64_t>(), kIncarnation);
  }
  EXPECT_EQ(settle_lost_calls(h.db), 0) << "the task is still its worker's run";

  // Results of an attempt that no longer owns the task are refused, and so is the record.
  results.attempt = 2;
  results.next_call = call_sent(id, 2, 2);
  auto fenced = h.run(h.store.save_tool_results(results));
  ASSERT_TRUE(fenced.ok());
  ASSERT_FALSE(fenced.value().ok());
  EXPECT_EQ(fenced.value().error().kind, ErrorKind::kLeaseLost);
  EXPECT_EQ(count_of(h.db, kInFlight, id), 1) << "only the first record";
}

TEST(RunStore, AWriteThatFailsIsUndoneAloneAndTheRestOfItsKindCommits) {
  Harness h;
  const std::string good = running_task(h.db, "rs-u2");
  const std::string bad = running_task(h.db, "rs-u2");
  h.hold_the_batcher(2);
  auto fg = h.spawn(h.store.save_model_step(model_step(good, 1, 0, 100)));
  // Step 0 twice for `bad`: the second insert breaks the step's primary key.
  auto fb1 = h.spawn(h.store.save_model_step(model_step(bad, 1, 0, 100)));
  h.io.run();
  ASSERT_TRUE(fg.get().ok());
  ASSERT_TRUE(fb1.get().ok());
  h.io.restart();
  h.hold_the_batcher(2);
  auto fg2 = h.spawn(h.store.save_model_step(model_step(good, 1, 1, 100)));
  auto fbad = h.spawn(h.store.save_model_step(model_step(bad, 1, 0, 100)));
  h.io.run();
  const auto rg = fg2.get(), rbad = fbad.get();
  ASSERT_TRUE(rg.ok()) << rg.error().message;
  EXPECT_TRUE(rg.value().ok());
  ASSERT_FALSE(rbad.ok()) << "the duplicate step is refused";
  EXPECT_EQ(h.writes.stats().isolated, 1u) << "written again write by write";
  pqxx::work tx(h.db);
  EXPECT_EQ(totals_of(tx, good)[0].as<int>(), 2) << "steps";
  EXPECT_EQ(tx.exec_params1("SELECT count(*) FROM usage_ledger WHERE task_id = $1::uuid", bad)[0]
                .as<int>(),
            1)
      << "billed once";
}

TEST(RunStore, EndsOfManyTasksAreOneStatementAndEachKnowsItsOutboxRow) {
  Harness h;
  const std::string a = running_task(h.db, "rs-u3");
  const std::string b = running_task(h.db, "rs-u3");
  const std::string taken = running_task(h.db, "rs-u3", 2);
  auto end = [](const std::string& id, int attempt) {
    ports::TaskEnd e;
    e.task_id = id;
    e.attempt = attempt;
    e.incarnation = kIncarnation;
    e.status = TaskStatus::kSucceeded;
    e.result = TaskResult{ResultType::kActionCompleted, "done " + id, {"a", "b"}};
    e.user_id = "rs-u3";
    e.result_event = R"({"task_id":")" + id + R"("})";
    return e;
  };
  h.hold_the_batcher(3);
  auto fa = h.spawn(h.store.finish(end(a, 1)));
  auto fb = h.spawn(h.store.finish(end(b, 1)));
  auto ft = h.spawn(h.store.finish(end(taken, 1)));
  h.io.run();
  const auto ra = fa.get(), rb = fb.get(), rt = ft.get();
  ASSERT_TRUE(ra.ok() && rb.ok() && rt.ok());
  ASSERT_TRUE(ra.value().ok());
  ASSERT_TRUE(rb.value().ok());
  EXPECT_FALSE(rt.value().ok());
  EXPECT_GE(h.writes.stats().largest, 3u);
  pqxx::work tx(h.db);
  for (const auto& [id, outbox] :
       {std::pair{a, ra.value().value()}, std::pair{b, rb.value().value()}}) {
    auto row = tx.exec_params1(
        "SELECT o.payload, o.message_key, o.topic, t.status, t.result_message, "
        "t.result_options::text, o.publish_after > now() FROM outbox o JOIN tasks t "
        "ON t.task_id = o.task_id WHERE o.id = $1",
        outbox);
    EXPECT_EQ(row[0].as<std::string>(), R"({"task_id":")" + id + R"("})") << "its own event";
    EXPECT_EQ(row[1].as<std::string>(), "rs-u3") << "keyed by user";
    EXPECT_EQ(row[2].as<std::string>(), "agent.tasks.results");
    EXPECT_EQ(row[3].as<std::string>(), "succeeded");
    EXPECT_EQ(row[4].as<std::string>(), "done " + id);
    EXPECT_EQ(row[5].as<std::string>(), R"(["a", "b"])");
    EXPECT_TRUE(row[6].as<bool>()) << "the relay waits for the worker first";
  }
  EXPECT_EQ(
      tx.exec_params1("SELECT count(*) FROM outbox WHERE task_id = $1::uuid", taken)[0].as<int>(),
      0);
}

TEST(RunStore, AnEndCarriesTheCheckpointOfTheAnswerThatEndedItInTheSameStatement) {
  Harness h;
  const std::string with_step = running_task(h.db, "rs-u4");
  const std::string without = running_task(h.db, "rs-u4");
  const std::string taken = running_task(h.db, "rs-u4", 2);
  {
    // The first step was checkpointed on its own (its step row and its bill); the second
    // call's record waits for its end.
    pqxx::work tx(h.db);
    tx.exec_params0(
        "INSERT INTO task_steps (task_id, step, attempt, model_reply, observations) VALUES "
        "($1::uuid, 0, 1, '{\"content\":\"\",\"tool_calls\":[]}', '[]')",
        with_step);
    tx.exec_params0(
        "INSERT INTO usage_ledger (task_id, step, user_id, model, input_tokens, "
        "cached_input_tokens, output_tokens, cost, currency) "
        "VALUES ($1::uuid, 0, 'rs-u4', 'sim-model', 100, 0, 10, 0.0001, 'CNY')",
        with_step);
    for (const std::string& id : {with_step, taken})
      tx.exec_params0(
          "INSERT INTO model_calls_in_flight (task_id, attempt, step, incarnation, "
          "user_id, model, input_tokens, cost, currency) "
          "VALUES ($1::uuid, 1, 1, 7, 'rs-u4', 'sim-model', 90, 0.00009, 'CNY')",
          id);
    tx.commit();
  }
  auto end = [](const std::string& id, bool step) {
    ports::TaskEnd e;
    e.task_id = id;
    e.attempt = 1;
    e.incarnation = kIncarnation;
    e.status = TaskStatus::kSucceeded;
    e.result = TaskResult{ResultType::kActionCompleted, "done", {}};
    e.user_id = "rs-u4";
    e.result_event = "{}";
    if (step) {
      e.last_step = model_step(id, 1, 1, 250);
      e.last_step->ledger.user_id = "rs-u4";
    }
    return e;
  };
  h.hold_the_batcher(3);
  auto fs = h.spawn(h.store.finish(end(with_step, true)));
  auto fw = h.spawn(h.store.finish(end(without, false)));
  auto ft = h.spawn(h.store.finish(end(taken, true)));  // an old attempt's: refused whole
  h.io.run();
  const auto rs = fs.get(), rw = fw.get(), rt = ft.get();
  ASSERT_TRUE(rs.ok() && rw.ok() && rt.ok());
  EXPECT_TRUE(rs.value().ok());
  EXPECT_TRUE(rw.value().ok());
  ASSERT_FALSE(rt.value().ok());
  EXPECT_EQ(rt.value().error().kind, ErrorKind::kLeaseLost);
  EXPECT_GE(h.writes.stats().largest, 3u) << "the three ends went in one batch";
  pqxx::work tx(h.db);
  auto task = tx.exec_params1(
      "SELECT status, steps, input_tokens, output_tokens, cost::text, currency FROM tasks "
      "WHERE task_id = $1::uuid",
      with_step);
  EXPECT_EQ(task[0].as<std::string>(), "succeeded");
  EXPECT_EQ(task[1].as<int>(), 2) << "the last step counted";
  EXPECT_EQ(task[2].as<int>(), 350) << "its tokens added to the earlier steps'";
  EXPECT_EQ(task[3].as<int>(), 20);
  EXPECT_EQ(task[4].as<std::string>(), "0.000200");
  EXPECT_EQ(task[5].as<std::string>(), "CNY");
  auto step = tx.exec_params1(
      "SELECT (SELECT count(*) FROM task_steps WHERE task_id = $1::uuid AND step = 1),"
      " (SELECT count(*) FROM usage_ledger WHERE task_id = $1::uuid AND step = 1"
      "   AND input_tokens = 250 AND user_id = 'rs-u4'),"
      " (SELECT count(*) FROM model_calls_in_flight WHERE task_id = $1::uuid)",
      with_step);
  EXPECT_EQ(step[0].as<int>(), 1) << "its checkpoint";
  EXPECT_EQ(step[1].as<int>(), 1) << "its bill";
  EXPECT_EQ(step[2].as<int>(), 0) << "its call's record settled by the bill";
  auto plain = tx.exec_params1(
      "SELECT status, steps, input_tokens FROM tasks WHERE task_id = $1::uuid", without);
  EXPECT_EQ(plain[0].as<std::string>(), "succeeded");
  EXPECT_EQ(plain[1].as<int>(), 0) << "an end without a step leaves the totals";
  EXPECT_EQ(plain[2].as<int>(), 0);
  auto refused = tx.exec_params1(
      "SELECT (SELECT status FROM tasks WHERE task_id = $1::uuid),"
      " (SELECT count(*) FROM task_steps WHERE task_id = $1::uuid),"
      " (SELECT count(*) FROM usage_ledger WHERE task_id = $1::uuid),"
      " (SELECT count(*) FROM model_calls_in_flight WHERE task_id = $1::uuid)",
      taken);
  EXPECT_EQ(refused[0].as<std::string>(), "running");
  EXPECT_EQ(refused[1].as<int>(), 0) << "the fenced end wrote no step";
  EXPECT_EQ(refused[2].as<int>(), 0) << "and billed nothing: its run bills it unreconciled";
  EXPECT_EQ(refused[3].as<int>(), 1) << "its record is left for that bill";
}

TEST(RunStore, AnEndRemovesTheRecordOfACallItsRunNeverSentAndBillsNothing) {
  Harness h;
  const std::string unsent = running_task(h.db, "rs-u5");
  const std::string fenced = running_task(h.db, "rs-u5", 2);
  for (const std::string& id : {unsent, fenced}) {  // each recorded by its claim, say
    pqxx::work tx(h.db);
    tx.exec_params0(
        "INSERT INTO model_calls_in_flight (task_id, attempt, step, incarnation, user_id, model, "
        "input_tokens, cost, currency) VALUES ($1::uuid, 1, 0, 7, 'rs-u5', 'sim-model', 90, "
        "0.00018, 'CNY')",
        id);
    tx.commit();
  }
  auto end = [](const std::string& id) {
    ports::TaskEnd e;
    e.task_id = id;
    e.attempt = 1;
    e.incarnation = kIncarnation;
    e.status = TaskStatus::kFailed;
    e.error = "the monthly budget is used up";
    e.error_code = ErrorCode::kQuotaExceeded;
    e.user_id = "rs-u5";
    e.result_event = "{}";
    e.unsent_call_step = 0;
    return e;
  };
  auto ended = h.run(h.store.finish(end(unsent)));
  ASSERT_TRUE(ended.ok() && ended.value().ok());
  EXPECT_EQ(count_of(h.db, kInFlight, unsent), 0) << "the record went with the end";
  EXPECT_EQ(count_of(h.db, kUnreconciled, unsent), 0) << "a call never sent costs nothing";
  auto refused = h.run(h.store.finish(end(fenced)));  // attempt 1 of a task at attempt 2
  ASSERT_TRUE(refused.ok());
  ASSERT_FALSE(refused.value().ok());
  EXPECT_EQ(count_of(h.db, kInFlight, fenced), 1) << "a fenced end leaves it to its run";
}

TEST(RunStore, ATaskAskedForTwiceInOneBatchIsClaimedOnceAndAResumedClaimBringsItsPast) {
  Harness h;
  std::string dispatched, resumed;
  std::int64_t me = 0;
  {
    pqxx::work tx(h.db);
    // The claimer: an incarnation whose liveness holds.
    me = worker_row(tx, "worker-rs", "30 s");
    dispatched =
        tx.exec1(
              R"SQL(INSERT INTO tasks (task_id, user_id, text, model, timeout_s, schedule_timeout_s,
                                 max_steps, priority, request_canonical, status, dispatched_at)
              VALUES (gen_random_uuid(), 'rs-u4', 'x', 'sim-model', 30, 3600, 10,
                      'interactive', '{}', 'dispatched', now())
              RETURNING task_id::text)SQL")[0]
            .as<std::string>();
    // Attempt 1 saved step 0 and billed it 500 tokens (its ledger row; the task's row keeps
    // no running totals), then its worker vanished (a version-7 lease that expired).
    resumed =
        tx.exec1(
              R"SQL(INSERT INTO tasks (task_id, user_id, text, model, timeout_s, schedule_timeout_s,
                                 max_steps, priority, request_canonical, status, attempt,
                                 worker_id, lease_until, started_at, dispatched_at,
                                 max_tokens, max_cost)
              VALUES (gen_random_uuid(), 'rs-u4', 'x', 'sim-model', 30, 3600, 10,
                      'interactive', '{}', 'running', 1, 'gone', now() - interval '1 s',
                      now(), now(), 5000, 0.25)
              RETURNING task_id::text)SQL")[0]
            .as<std::string>();
    tx.exec_params0(
        "INSERT INTO task_steps (task_id, step, attempt, model_reply, observations) VALUES "
        "($1::uuid, 0, 1, '{\"content\":\"\",\"tool_calls\":[]}', '[]')",
        resumed);
    tx.exec_params0(
        "INSERT INTO usage_ledger (task_id, step, user_id, model, input_tokens, "
        "cached_input_tokens, output_tokens, cost, currency) "
        "VALUES ($1::uuid, 0, 'rs-u4', 'sim-model', 500, 0, 20, 0.00123, 'CNY')",
        resumed);
    tx.commit();
  }
  h.store.set_incarnation(me);
  h.hold_the_batcher(3);
  auto f1 = h.spawn(h.store.claim(dispatched, nullptr));
  auto f2 = h.spawn(h.store.claim(dispatched, nullptr));
  auto f3 = h.spawn(h.store.claim(resumed, nullptr));
  h.io.run();
  const auto c1 = f1.get(), c2 = f2.get(), c3 = f3.get();
  ASSERT_TRUE(c1.ok() && c2.ok() && c3.ok());
  EXPECT_EQ(c1.value().outcome, ports::ClaimOutcome::kClaimed);
  EXPECT_EQ(c2.value().outcome, ports::ClaimOutcome::kBusyOrDone) << "one run of it, not two";
  EXPECT_GE(h.writes.stats().largest, 3u);
  EXPECT_EQ(h.writes.stats().isolated, 0u);
  ASSERT_EQ(c3.value().outcome, ports::ClaimOutcome::kClaimed);
  const ports::ClaimedTask& r = *c3.value().task;
  EXPECT_EQ(r.attempt, 2);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(r.steps[0].step, 0);
  EXPECT_EQ(r.steps[0].observations, "[]");
  EXPECT_EQ(r.totals.usage.input, 500);
  EXPECT_EQ(r.totals.usage.output, 20);
  EXPECT_EQ(r.totals.cost_micros, 1230);
  EXPECT_EQ(r.totals.currency, "CNY");
  // The task's own limits come with it; a task without them has none.
  EXPECT_EQ(r.spec.max_tokens, 5000);
  EXPECT_EQ(r.spec.max_cost_micros, 250'000);
  EXPECT_FALSE(c1.value().task->spec.max_tokens);
  EXPECT_FALSE(c1.value().task->spec.max_cost_micros);
  pqxx::work tx(h.db);
  EXPECT_EQ(tx.exec_params1("SELECT worker_incarnation FROM tasks WHERE task_id = $1::uuid",
                            dispatched)[0]
                .as<std::int64_t>(),
            me);
}

TEST(RunStore, AClaimRunAfterTheClaimersLivenessLapsedTakesNothing) {
  Harness h;
  std::string dispatched;
  std::int64_t lapsed = 0;
  {
    pqxx::work tx(h.db);
    lapsed = worker_row(tx, "worker-rs", "-1 s");
    dispatched =
        tx.exec1(
              R"SQL(INSERT INTO tasks (task_id, user_id, text, model, timeout_s, schedule_timeout_s,
                                 max_steps, priority, request_canonical, status, dispatched_at)
              VALUES (gen_random_uuid(), 'rs-u5', 'x', 'sim-model', 30, 3600, 10,
                      'interactive', '{}', 'dispatched', now())
              RETURNING task_id::text)SQL")[0]
            .as<std::string>();
    tx.commit();
  }
  h.store.set_incarnation(lapsed);
  auto f = h.spawn(h.store.claim(dispatched, nullptr));
  h.io.run();
  const auto c = f.get();
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c.value().outcome, ports::ClaimOutcome::kNotLive);
  pqxx::work tx(h.db);
  auto row = tx.exec_params1("SELECT status, attempt FROM tasks WHERE task_id = $1::uuid",
                             dispatched);
  EXPECT_EQ(row[0].as<std::string>(), "dispatched") << "left for a live claimer";
  EXPECT_EQ(row[1].as<int>(), 0) << "no attempt spent";
}

TEST(RunStore, AClaimOfATaskItsOwnIncarnationRunsSaysAtWhichAttempt) {
  // A claim whose answer was lost may have committed: claimed again, the task is busy, and
  // the answer says this incarnation runs it at attempt 2 (so the worker hands it back at
  // that attempt). Run by another live incarnation, it is busy and not its own.
  Harness h;
  std::string mine, theirs;
  std::int64_t me = 0;
  {
    pqxx::work tx(h.db);
    me = worker_row(tx, "worker-rs", "30 s");
    const std::int64_t other = worker_row(tx, "worker-other", "30 s");
    const std::string insert = R"SQL(
        INSERT INTO tasks (task_id, user_id, text, model, timeout_s, schedule_timeout_s,
                           max_steps, priority, request_canonical, status, attempt, worker_id,
                           worker_incarnation, started_at, dispatched_at)
        VALUES (gen_random_uuid(), 'rs-u6', 'x', 'sim-model', 30, 3600, 10, 'interactive',
                '{}', 'running', 2, $1, $2, now(), now())
        RETURNING task_id::text)SQL";
    mine = tx.exec_params1(insert, "worker-rs", me)[0].as<std::string>();
    theirs = tx.exec_params1(insert, "worker-other", other)[0].as<std::string>();
    tx.commit();
  }
  h.store.set_incarnation(me);
  auto f1 = h.spawn(h.store.claim(mine, nullptr));
  auto f2 = h.spawn(h.store.claim(theirs, nullptr));
  h.io.run();
  const auto c1 = f1.get(), c2 = f2.get();
  ASSERT_TRUE(c1.ok() && c2.ok());
  EXPECT_EQ(c1.value().outcome, ports::ClaimOutcome::kBusyOrDone);
  EXPECT_EQ(c1.value().held_attempt, 2);
  EXPECT_EQ(c1.value().incarnation, me);
  EXPECT_EQ(c2.value().outcome, ports::ClaimOutcome::kBusyOrDone);
  EXPECT_EQ(c2.value().held_attempt, 0) << "another incarnation's run";
  pqxx::work tx(h.db);
  EXPECT_EQ(tx.exec_params1("SELECT attempt FROM tasks WHERE task_id = $1::uuid", mine)[0]
                .as<int>(),
            2)
      << "no attempt spent";
}

// Every fenced write of run.sql reaches its task by the primary key, also in the generic plan
// a prepared statement keeps for the connection's life, made while `tasks` was new and never
// analyzed (a new database, before autovacuum's first ANALYZE). The table here is a copy of
// `tasks` with its indexes, in a schema of the test's own first on the search path, never
// analyzed. A fence whose conditions sat in the lookup was planned as a scan of an index of
// running tasks (by incarnation) in such a plan: every task the worker ran was read for each
// row of a batch (321 buffers a checkpoint at 100 tasks/s in the benchmark,
// docs/performance.md).
TEST(RunStatements, EachFencedWriteReachesItsTaskByThePrimaryKeyInAPlanMadeOnANewTable) {
  pqxx::connection db(pg_url());
  pqxx::work tx(db);
  tx.exec0("CREATE SCHEMA fence_plans");
  tx.exec0("CREATE TABLE fence_plans.tasks (LIKE public.tasks INCLUDING ALL)");
  tx.exec0("SET LOCAL search_path = fence_plans, public");
  tx.exec0("SET LOCAL plan_cache_mode = force_generic_plan");
  const std::regex param(R"(\$(\d+))");
  const std::regex fence(R"(worker_incarnation = (r\.incarnation|\$3))");
  int fenced = 0;
  for (const auto& [file, name] : pg::sql::names()) {
    const std::string text = pg::sql::text(name);
    if (file != "run.sql" || !std::regex_search(text, fence))
      continue;
    ++fenced;
    int params = 0;
    for (std::sregex_iterator it(text.begin(), text.end(), param), end; it != end; ++it)
      params = std::max(params, std::stoi((*it)[1].str()));
    std::string args;
    for (int i = 0; i < params; ++i)
      args += i ? ", NULL" : "NULL";
    tx.exec0("PREPARE fenced AS " + text);
    std::string plan;
    for (const auto& row : tx.exec("EXPLAIN EXECUTE fenced(" + args + ")"))
      plan += row[0].as<std::string>() + "\n";
    tx.exec0("DEALLOCATE fenced");
    EXPECT_EQ(plan.find("Index Cond: (worker_incarnation"), std::string::npos) << name << ":\n"
                                                                               << plan;
    EXPECT_NE(plan.find("Index Cond: (task_id = "), std::string::npos) << name << ":\n" << plan;
    EXPECT_EQ(plan.find("Filter: ((task_id = "), std::string::npos) << name << ":\n" << plan;
    EXPECT_EQ(plan.find("Seq Scan on tasks x"), std::string::npos) << name << ":\n" << plan;
  }
  EXPECT_GE(fenced, 7) << "the claim, the checkpoints, the records, the tool rounds and steps, "
                          "the ends and the hand-back's fence";
}

// The sessions of the fleet's write path (pg::PlanCache::kGeneric: the workers, the scheduler,
// the relay) plan each prepared statement once and keep that plan: their rows come as a JSON
// array or by key, so a plan made for the arguments is no better, and Postgres's default made
// one for each of the first five executions and, whenever it judged the generic plan dearer,
// for every execution after (docs/performance.md, 2026-12-03). A session of the API's kind
// keeps the default.
TEST(RunStatements, AWriteSessionKeepsOneGenericPlanForEachStatementAndAnApiSessionDoesNot) {
  // {generic, custom} plans the pool's session used for seven executions of a fence.
  const auto plans_used = [](pg::PlanCache mode) {
    pg::DbPool pool{pg_url(), 1, 5000, 5, mode};
    boost::asio::io_context io;
    auto done = boost::asio::co_spawn(io, pool.run([](pqxx::connection& c) {
      for (int i = 0; i < 7; ++i) {
        pqxx::work tx(c);
        pg::exec_named(tx, "still_ours", pgtest::next_id(), 1, std::int64_t{1});
        tx.commit();
      }
      pqxx::nontransaction tx(c);
      const auto row = tx.exec1(
          "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
          "WHERE name = 'af_still_ours'");
      return std::pair{row[0].as<long>(), row[1].as<long>()};
    }),
                                      boost::asio::use_future);
    io.run();
    auto result = done.get();
    EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().message);
    return result.ok() ? result.value() : std::pair{-1L, -1L};
  };
  EXPECT_EQ(plans_used(pg::PlanCache::kGeneric), (std::pair{7L, 0L}));
  const auto [generic, custom] = plans_used(pg::PlanCache::kAuto);
  EXPECT_EQ(generic + custom, 7);
  EXPECT_GE(custom, 5) << "Postgres's default plans the first five executions for their arguments";
}

}  // namespace
}  // namespace agentfleet
