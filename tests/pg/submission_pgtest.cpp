// A submission on a private Postgres (tests/pg): pg::insert_task stores a task in one
// autocommitted statement (the function agentfleet_submit: the user's lock, their overrides,
// the count, the insert and the answer). What a submitter relies on: the answer is the task
// as the API shows it, a key names one task, max_queued holds exactly, also when many
// submissions of one user race, and the limits applied are the user's as they are, whatever
// the dispatcher believed of them.

#include <gtest/gtest.h>

#include <pqxx/pqxx>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/adapters/pg/scheduler_session.hpp"
#include "core/adapters/pg/submission_store.hpp"
#include "core/adapters/pg/usage_store.hpp"
#include "tests/pg/pg_url.hpp"

namespace agentfleet {
namespace {

using pgtest::next_id;
using pgtest::pg_url;

pg::NewTask task_of(const std::string& user, const std::string& key = {},
                    const std::string& text = "把周会改到晚上8点") {
  pg::NewTask task;
  task.spec.task_id = next_id();
  task.spec.user_id = user;
  task.spec.text = text;
  task.spec.model = "sim-model";
  task.spec.idempotency_key = key;
  task.canonical = R"({"text":")" + text + R"("})";
  return task;
}

// Tier "small" allows 2 queued tasks, any other 1000; a user's own max_queued wins.
int queue_limit(const std::string& tier, std::optional<int> max_queued) {
  if (max_queued)
    return *max_queued;
  return tier == "small" ? 2 : 1000;
}

std::int64_t count(pqxx::connection& db, const std::string& user) {
  pqxx::work tx(db);
  auto n =
      tx.exec_params1("SELECT count(*) FROM tasks WHERE user_id = $1", user)[0].as<std::int64_t>();
  tx.commit();
  return n;
}

void set_limits(pqxx::connection& db, const std::string& user, const std::string& tier,
                std::optional<int> max_queued) {
  pqxx::work tx(db);
  tx.exec_params0(
      "INSERT INTO user_limits (user_id, tier, max_queued) VALUES ($1, $2, $3) "
      "ON CONFLICT (user_id) DO UPDATE SET tier = $2, max_queued = $3",
      user, tier, max_queued);
  tx.commit();
}

class Submission : public ::testing::Test {
 protected:
  pqxx::connection db_{pg_url()};
};

TEST_F(Submission, TheAnswerIsTheStoredTaskAsTheApiShowsIt) {
  pg::NewTask task = task_of("sub-u1", "sub-k1");
  task.spec.tools = std::vector<std::string>{"create_item"};
  task.spec.metadata.time_zone = "Asia/Shanghai";
  const auto created = pg::insert_task(db_, task, queue_limit, /*with_json=*/true);
  ASSERT_EQ(created.outcome, pg::InsertOutcome::kCreated);
  EXPECT_EQ(created.task_id, task.spec.task_id);
  const auto stored = pg::task_json(db_, created.task_id);
  ASSERT_TRUE(stored);
  EXPECT_EQ(created.task_json, *stored);
  EXPECT_NE(created.task_json.find(R"("status":"queued")"), std::string::npos) << created.task_json;
  EXPECT_NE(created.task_json.find(R"("time_zone": "Asia/Shanghai")"), std::string::npos);
  // Without the JSON (the submit topic), no answer is built.
  const auto quiet = pg::insert_task(db_, task_of("sub-u1"), queue_limit);
  EXPECT_EQ(quiet.outcome, pg::InsertOutcome::kCreated);
  EXPECT_TRUE(quiet.task_json.empty());
}

TEST_F(Submission, ATasksOwnSpendingLimitsAreStoredExactlyAndShownAsSubmitted) {
  pg::NewTask limited = task_of("sub-u5");
  limited.spec.max_tokens = 20000;
  limited.spec.max_cost_micros = 50'001;
  const auto one = pg::insert_task(db_, limited, queue_limit, /*with_json=*/true);
  ASSERT_EQ(one.outcome, pg::InsertOutcome::kCreated);
  EXPECT_NE(one.task_json.find(R"("max_tokens":20000)"), std::string::npos) << one.task_json;
  EXPECT_NE(one.task_json.find(R"("max_cost":"0.050001")"), std::string::npos) << one.task_json;
  EXPECT_EQ(pg::task_json(db_, one.task_id), one.task_json);

  // A batch's slice stores them the same way, and a task without them shows null.
  pg::NewTask batched = task_of("sub-u5");
  batched.spec.max_cost_micros = 999'999'999'999'999'999;
  pg::NewTask plain = task_of("sub-u5");
  {
    pqxx::work tx(db_);
    EXPECT_EQ(pg::insert_tasks(tx, {batched, plain}).size(), 2u);
    tx.commit();
  }
  const auto shown = pg::task_json(db_, batched.spec.task_id);
  ASSERT_TRUE(shown);
  EXPECT_NE(shown->find(R"("max_cost":"999999999999.999999")"), std::string::npos) << *shown;
  EXPECT_NE(shown->find(R"("max_tokens":null)"), std::string::npos) << *shown;
  const auto none = pg::task_json(db_, plain.spec.task_id);
  ASSERT_TRUE(none);
  EXPECT_NE(none->find(R"("max_cost":null)"), std::string::npos) << *none;

  // The database refuses a limit of zero, whoever writes it.
  pqxx::work tx(db_);
  EXPECT_THROW(
      tx.exec_params0("UPDATE tasks SET max_cost = 0 WHERE task_id = $1::uuid", plain.spec.task_id),
      pqxx::check_violation);
}

TEST_F(Submission, AKeyNamesOneTaskTheSameRequestGetsItAnotherIsAConflict) {
  const auto first = pg::insert_task(db_, task_of("sub-u2", "sub-k2"), queue_limit, true);
  ASSERT_EQ(first.outcome, pg::InsertOutcome::kCreated);
  const auto again = pg::insert_task(db_, task_of("sub-u2", "sub-k2"), queue_limit, true);
  EXPECT_EQ(again.outcome, pg::InsertOutcome::kExisting);
  EXPECT_EQ(again.task_id, first.task_id);
  EXPECT_EQ(again.task_json, first.task_json);
  const auto other = pg::insert_task(db_, task_of("sub-u2", "sub-k2", "另一个请求"), queue_limit);
  EXPECT_EQ(other.outcome, pg::InsertOutcome::kConflict);
  EXPECT_EQ(other.task_id, first.task_id);
  EXPECT_EQ(count(db_, "sub-u2"), 1);
  // Another user's key of the same name is theirs.
  EXPECT_EQ(pg::insert_task(db_, task_of("sub-u2b", "sub-k2"), queue_limit).outcome,
            pg::InsertOutcome::kCreated);
}

TEST_F(Submission, AFullQueueStoresNothingAndSaysHowFullAndTheUsersOwnLimitWins) {
  set_limits(db_, "sub-u3", "small", std::nullopt);
  EXPECT_EQ(pg::insert_task(db_, task_of("sub-u3"), queue_limit).outcome,
            pg::InsertOutcome::kCreated);
  EXPECT_EQ(pg::insert_task(db_, task_of("sub-u3", "sub-k3"), queue_limit).outcome,
            pg::InsertOutcome::kCreated);
  const auto full = pg::insert_task(db_, task_of("sub-u3"), queue_limit, true);
  EXPECT_EQ(full.outcome, pg::InsertOutcome::kQueueFull);
  EXPECT_EQ(full.room.queued, 2);
  EXPECT_EQ(full.room.max_queued, 2);
  EXPECT_TRUE(full.task_json.empty());
  EXPECT_EQ(count(db_, "sub-u3"), 2);
  // A full queue still answers a key it knows with its task.
  EXPECT_EQ(pg::insert_task(db_, task_of("sub-u3", "sub-k3"), queue_limit).outcome,
            pg::InsertOutcome::kExisting);
  set_limits(db_, "sub-u3", "small", 3);
  EXPECT_EQ(pg::insert_task(db_, task_of("sub-u3"), queue_limit).outcome,
            pg::InsertOutcome::kCreated);
  // Without a limit nothing is counted against.
  EXPECT_EQ(pg::insert_task(db_, task_of("sub-u3"), {}).outcome, pg::InsertOutcome::kCreated);
}

TEST_F(Submission, RacingSubmissionsOfOneUserNeverQueueMoreThanItsLimit) {
  set_limits(db_, "sub-u4", "standard", 5);
  constexpr int kThreads = 6, kEach = 8;
  std::atomic<int> created{0}, full{0}, failed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      try {
        pqxx::connection c(pg_url());
        for (int j = 0; j < kEach; ++j) {
          const auto r = pg::insert_task(c, task_of("sub-u4"), queue_limit);
          ++(r.outcome == pg::InsertOutcome::kCreated ? created : full);
        }
      } catch (const std::exception&) {
        ++failed;
      }
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(created.load(), 5);
  EXPECT_EQ(full.load(), kThreads * kEach - 5);
  EXPECT_EQ(count(db_, "sub-u4"), 5);
}

TEST_F(Submission, TheLimitIsTheUsersAsItIsWhateverTheDispatcherBelieved) {
  pg::KnownOverrides known;
  // Believed without overrides; "small" allows 2.
  set_limits(db_, "sub-u5", "small", std::nullopt);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(pg::insert_task(db_, task_of("sub-u5"), queue_limit, false, {}, &known).outcome,
              pg::InsertOutcome::kCreated);
  }
  const auto full = pg::insert_task(db_, task_of("sub-u5"), queue_limit, false, {}, &known);
  EXPECT_EQ(full.outcome, pg::InsertOutcome::kQueueFull);
  EXPECT_EQ(full.room.max_queued, 2);
  EXPECT_EQ(known.get("sub-u5").tier, "small") << "learnt from the store's answer";
  // Changed behind the dispatcher's back: the new limit applies at once.
  set_limits(db_, "sub-u5", "small", 3);
  EXPECT_EQ(pg::insert_task(db_, task_of("sub-u5"), queue_limit, false, {}, &known).outcome,
            pg::InsertOutcome::kCreated);
  EXPECT_EQ(known.get("sub-u5").max_queued, std::optional<int>(3));
  EXPECT_EQ(pg::insert_task(db_, task_of("sub-u5"), queue_limit, false, {}, &known).outcome,
            pg::InsertOutcome::kQueueFull);
  // Removed: the default limit (1000) applies, and nothing is believed any more.
  {
    pqxx::work tx(db_);
    tx.exec_params0("DELETE FROM user_limits WHERE user_id = $1", "sub-u5");
    tx.commit();
  }
  EXPECT_EQ(pg::insert_task(db_, task_of("sub-u5"), queue_limit, false, {}, &known).outcome,
            pg::InsertOutcome::kCreated);
  EXPECT_EQ(known.get("sub-u5"), pg::KnownOverrides::Overrides{});
  EXPECT_EQ(count(db_, "sub-u5"), 4);
}

TEST_F(Submission, AModelIsRefusedOnlyOnTheUsersTierAsItIs) {
  const pg::ModelCheck models = [](const std::string& tier, const std::string& model) {
    return model == "big-model" && tier != "gold" ? std::string("big-model needs tier gold")
                                                  : std::string();
  };
  pg::KnownOverrides known;
  auto big = [](const std::string& user) {
    pg::NewTask task = task_of(user);
    task.spec.model = "big-model";
    return task;
  };
  // Believed without a tier, but gold: stored.
  set_limits(db_, "sub-u6", "gold", std::nullopt);
  EXPECT_EQ(pg::insert_task(db_, big("sub-u6"), queue_limit, false, models, &known).outcome,
            pg::InsertOutcome::kCreated);
  EXPECT_EQ(known.get("sub-u6").tier, "gold");
  // Believed gold, no longer: refused, nothing stored.
  set_limits(db_, "sub-u6", "small", std::nullopt);
  const auto refused = pg::insert_task(db_, big("sub-u6"), queue_limit, false, models, &known);
  EXPECT_EQ(refused.outcome, pg::InsertOutcome::kModelNotAllowed);
  EXPECT_EQ(refused.refusal, "big-model needs tier gold");
  EXPECT_EQ(known.get("sub-u6").tier, "small");
  // Without a tier at all: refused on the first look.
  EXPECT_EQ(pg::insert_task(db_, big("sub-u6b"), queue_limit, false, models, &known).outcome,
            pg::InsertOutcome::kModelNotAllowed);
  EXPECT_EQ(count(db_, "sub-u6"), 1);
  EXPECT_EQ(count(db_, "sub-u6b"), 0);
}

TEST_F(Submission, LimitsPutThroughThisReplicaAreBelievedAtOnce) {
  pg::KnownOverrides known;
  ports::UserOverrides limits;
  limits.user_id = "sub-u7";
  limits.tier = "small";
  limits.max_queued = 1;
  pg::put_user_overrides(db_, limits, &known);
  EXPECT_EQ(known.get("sub-u7"), (pg::KnownOverrides::Overrides{"small", 1}));
  EXPECT_EQ(pg::insert_task(db_, task_of("sub-u7"), queue_limit, false, {}, &known).outcome,
            pg::InsertOutcome::kCreated);
  const auto full = pg::insert_task(db_, task_of("sub-u7"), queue_limit, false, {}, &known);
  EXPECT_EQ(full.outcome, pg::InsertOutcome::kQueueFull);
  EXPECT_EQ(full.room.max_queued, 1);
  // Cleared: nothing is believed any more, and the tier's default limit applies.
  pg::put_user_overrides(db_, ports::UserOverrides{.user_id = "sub-u7"}, &known);
  EXPECT_EQ(known.get("sub-u7"), pg::KnownOverrides::Overrides{});
  EXPECT_EQ(pg::insert_task(db_, task_of("sub-u7"), queue_limit, false, {}, &known).outcome,
            pg::InsertOutcome::kCreated);
  EXPECT_EQ(count(db_, "sub-u7"), 2);
}

// A replayed dead letter that reached the store is recorded with the task it made or found;
// GET /v1/dead-letters asks for the letters it lists. A message read twice counts once.
TEST_F(Submission, ALettersReplaysAreRecordedOncePerMessageAndNameTheirTask) {
  const std::string topic = "dlq-" + next_id();
  const pg::NewTask task = task_of("sub-replay", "kafka:agent.tasks.submit:0:41");
  const auto made = pg::insert_task(db_, task, queue_limit);
  ASSERT_EQ(made.outcome, pg::InsertOutcome::kCreated);
  // Letter 0:7 replayed twice (submit 0:90, then 0:95, which found the task); 0:95 read
  // twice. Letter 1:3 of another dead-letter topic.
  pg::record_replay(db_, {topic, 0, 7, "agent.tasks.submit", 0, 90, made.task_id, true});
  pg::record_replay(db_, {topic, 0, 7, "agent.tasks.submit", 0, 95, made.task_id, false});
  pg::record_replay(db_, {topic, 0, 7, "agent.tasks.submit", 0, 95, made.task_id, false});
  pg::record_replay(db_, {topic + "-other", 1, 3, "agent.tasks.submit", 0, 96, made.task_id, true});

  const auto replays = pg::letter_replays(db_, topic, {{0, 7}, {1, 3}, {0, 8}});
  ASSERT_EQ(replays.size(), 1u) << "1:3 is another topic's letter; 0:8 was not replayed";
  const pg::LetterReplays& r = replays.at({0, 7});
  EXPECT_EQ(r.task_id, made.task_id);
  EXPECT_EQ(r.stored, 2);
  EXPECT_EQ(r.created, 1);
  EXPECT_EQ(r.first_at.size(), 24u) << r.first_at;  // 2026-12-03T12:00:00.000Z
  EXPECT_TRUE(pg::letter_replays(db_, topic, {}).empty());
}

// The scheduler's session hears each submission by its user and priority (migration 0029),
// and anything else on the channel as other work. Other tests' submissions may be heard too:
// the test looks for its own.
TEST_F(Submission, ASubmissionWakesTheSchedulerNamingItsUserAndPriority) {
  pg::SchedulerSession session{pg::SchedulerSessionOptions{pg_url()}};
  // Opens the session (LISTEN) without the scheduler's lock, which the tests of
  // tests/pg/waiting_pgtest.cpp running beside this one need.
  session.refresh_plans();
  pg::NewTask batch = task_of("sub-heard two words");
  batch.spec.priority = Priority::kBatch;
  ASSERT_EQ(pg::insert_task(db_, task_of("sub-heard"), queue_limit).outcome,
            pg::InsertOutcome::kCreated);
  ASSERT_EQ(pg::insert_task(db_, batch, queue_limit).outcome, pg::InsertOutcome::kCreated);
  {
    pqxx::nontransaction tx(db_);
    tx.exec0("NOTIFY agentfleet_work, ''");  // as a hand-back or a version-28 replica
  }
  std::vector<std::pair<std::string, Priority>> heard;
  bool other = false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  const auto ours = [&] {
    return std::count(heard.begin(), heard.end(),
                      std::make_pair(std::string("sub-heard"), Priority::kInteractive)) == 1 &&
           std::count(heard.begin(), heard.end(),
                      std::make_pair(std::string("sub-heard two words"), Priority::kBatch)) == 1;
  };
  while (!(ours() && other) && std::chrono::steady_clock::now() < until) {
    session.wait(std::chrono::milliseconds(200), /*wake_fd=*/-1);
    ports::Heard got = session.take_heard();
    heard.insert(heard.end(), got.submitted.begin(), got.submitted.end());
    other = other || got.other;
  }
  EXPECT_TRUE(ours()) << heard.size() << " submissions heard";
  EXPECT_TRUE(other) << "an empty notification is other work";
  session.reset();
  EXPECT_TRUE(session.take_heard().empty()) << "nothing is kept across a new session";
}

TEST(SchedulerSessionHears, ASubmissionsPayloadAndNothingElse) {
  ports::Heard heard;
  pg::hear("queued interactive u1", heard);
  pg::hear("queued batch user with spaces", heard);
  ASSERT_EQ(heard.submitted.size(), 2u);
  EXPECT_EQ(heard.submitted[0], std::make_pair(std::string("u1"), Priority::kInteractive));
  EXPECT_EQ(heard.submitted[1], std::make_pair(std::string("user with spaces"), Priority::kBatch));
  EXPECT_FALSE(heard.other);
  for (const char* payload : {"", "queued", "queued interactive", "queued interactive ",
                              "queued urgent u1", "something else"}) {
    ports::Heard one;
    pg::hear(payload, one);
    EXPECT_TRUE(one.submitted.empty()) << payload;
    EXPECT_TRUE(one.other) << payload;
  }
}

TEST(KnownOverrides, KeepsOnlyUsersWithOverridesAndAtMostItsCapacity) {
  pg::KnownOverrides known(2);
  known.put("a", {"gold", std::nullopt});
  known.put("b", {"", 5});
  EXPECT_EQ(known.get("a").tier, "gold");
  known.put("c", {"small", std::nullopt});  // full: starts over
  EXPECT_EQ(known.get("a"), pg::KnownOverrides::Overrides{});
  EXPECT_EQ(known.get("c").tier, "small");
  known.put("c", {});
  EXPECT_EQ(known.get("c"), pg::KnownOverrides::Overrides{});
}

}  // namespace
}  // namespace agentfleet
