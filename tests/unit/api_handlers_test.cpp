// The dispatcher's API handlers on a fake store (fake_api_store.hpp), without Postgres or
// Kafka: a request goes through Api::handle as the server hands it over (its key, route,
// query and body), and what the store was asked and what the caller was answered are held
// to what users rely on: the search across users scoped by the key, its filters and pages,
// a batch's failures retried in slices and never twice, the refusals made before the store
// is asked, and the store away answered 503.
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/adapters/metrics/dispatcher_metrics.hpp"
#include "core/adapters/metrics/metrics_registry.hpp"
#include "core/config/config.hpp"
#include "dispatcher/api.hpp"
#include "dispatcher/auth.hpp"
#include "dispatcher/task_feed.hpp"
#include "tests/unit/fake_api_store.hpp"

namespace agentfleet::dispatcher {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using testing::FakeApiStore;

constexpr const char* kConfig = R"(
postgres: {url: "host=/nonexistent-agentfleet-unit port=1", pool_size: 1}
kafka: {bootstrap_servers: 127.0.0.1:1}
models: [{name: m1, endpoints: [{url: "http://127.0.0.1:1/v1"}]}]
billing:
  prices:
    - {model: m1, effective_from: "2026-01-01", input_per_million: "1"}
task_defaults: {model: m1, tier: standard}
tiers:
  - {tier: standard, max_concurrency: 5, requests_per_minute: 100, tokens_per_minute: 200000,
     max_queued: 10000, monthly_budget: "0", weight: 2}
)";

// An Api on a fake store, with three keys: an operator's (admin), one acting for alice and
// bob, one for bob only.
class ApiOnFakeStore : public ::testing::Test {
 protected:
  ApiOnFakeStore()
      : config_(config::load_config_text(
            std::string(kConfig) +
                "auth:\n  api_keys:\n    - {name: ops, sha256: " + sha256_hex("ops-secret") +
                ", admin: true}\n    - {name: team, sha256: " + sha256_hex("team-secret") +
                ", users: [alice, bob]}\n    - {name: bobs, sha256: " + sha256_hex("bob-secret") +
                ", users: [bob]}\n",
            "unit.yaml")),
        metrics_(registry_, config_),
        feed_(io_, config_, nullptr),
        api_(config_, store_, metrics_, feed_) {}

  // The answer to `method target` sent with `key` (and `body`, JSON).
  http::Response send(bhttp::verb method, const std::string& target, const std::string& key,
                      const std::string& body = {}) {
    http::Request request{method, target, 11};
    request.set(bhttp::field::host, "unit");
    request.set(bhttp::field::authorization, "Bearer " + key);
    if (!body.empty()) {
      request.set(bhttp::field::content_type, "application/json");
      request.body() = body;
      request.prepare_payload();
    }
    auto answer = asio::co_spawn(io_, api_.handle(request), asio::use_future);
    io_.restart();
    io_.run();
    return answer.get();
  }
  http::Response get(const std::string& target, const std::string& key) {
    return send(bhttp::verb::get, target, key);
  }
  http::Response post(const std::string& target, const std::string& key,
                      const std::string& body = {}) {
    return send(bhttp::verb::post, target, key, body);
  }

  static rapidjson::Document json(const http::Response& response) {
    rapidjson::Document doc;
    doc.Parse(response.body().c_str());
    EXPECT_FALSE(doc.HasParseError()) << response.body();
    return doc;
  }
  static std::vector<std::string> ids(const rapidjson::Value& tasks) {
    std::vector<std::string> out;
    for (const auto& t : tasks.GetArray())
      out.emplace_back(t["task_id"].GetString());
    return out;
  }

  // A task of `user`, submitted through the API (so that its stored request is the one a
  // retry reads back), then set to `status` by the test.
  std::string submitted(const std::string& user, const std::string& text,
                        TaskStatus status = TaskStatus::kQueued) {
    auto answer = post("/v1/tasks", "ops-secret",
                       R"({"user_id": ")" + user + R"(", "text": ")" + text + R"("})");
    EXPECT_EQ(answer.result_int(), 201) << answer.body();
    const std::string id = json(answer)["task_id"].GetString();
    store_.tasks.at(id).status = status;
    return id;
  }

  asio::io_context io_;
  config::Config config_;
  metrics::MetricsRegistry registry_;
  metrics::DispatcherMetrics metrics_;
  TaskFeed feed_;
  FakeApiStore store_;
  Api api_;
};

TEST_F(ApiOnFakeStore, ASearchWithoutAUserReadsEveryUserTheKeyActsForAndPagesWithACount) {
  const std::string a1 = submitted("alice", "monthly report one", TaskStatus::kFailed);
  const std::string b1 = submitted("bob", "monthly report two", TaskStatus::kFailed);
  submitted("carol", "monthly report three", TaskStatus::kFailed);
  submitted("alice", "monthly report four", TaskStatus::kSucceeded);
  const std::string a2 = submitted("alice", "monthly report five", TaskStatus::kFailed);

  auto first = get("/v1/tasks?status=failed&q=report&limit=2&count=true", "team-secret");
  ASSERT_EQ(first.result_int(), 200) << first.body();
  ASSERT_EQ(store_.searches.size(), 1u);
  const ports::TaskListQuery& asked = store_.searches.back();
  EXPECT_EQ(asked.user_id, "");
  EXPECT_EQ(asked.users, (std::vector<std::string>{"alice", "bob"}));
  EXPECT_EQ(asked.status, "failed");
  EXPECT_EQ(asked.text, "report");
  EXPECT_EQ(asked.limit, 2);
  auto page = json(first);
  // Newest first; carol's is not the team's, alice's fourth did not fail.
  EXPECT_EQ(ids(page["tasks"]), (std::vector<std::string>{a2, b1}));
  EXPECT_EQ(page["total"].GetInt(), 3);
  EXPECT_FALSE(page["total_capped"].GetBool());
  ASSERT_TRUE(page["next_before"].IsString());

  auto second = get("/v1/tasks?status=failed&q=report&limit=2&before=" +
                        std::string(page["next_before"].GetString()),
                    "team-secret");
  ASSERT_EQ(second.result_int(), 200) << second.body();
  auto rest = json(second);
  EXPECT_EQ(ids(rest["tasks"]), (std::vector<std::string>{a1}));
  EXPECT_TRUE(rest["next_before"].IsNull());
  EXPECT_FALSE(rest.HasMember("total"));  // counted only when asked
}

TEST_F(ApiOnFakeStore, AnOperatorSearchesEveryUserAndANamedUserIsThatUserOnly) {
  submitted("alice", "one");
  const std::string c = submitted("carol", "two");

  auto everyone = get("/v1/tasks", "ops-secret");
  ASSERT_EQ(everyone.result_int(), 200) << everyone.body();
  EXPECT_TRUE(store_.searches.back().users.empty());  // nobody left out
  EXPECT_EQ(json(everyone)["tasks"].Size(), 2u);

  auto carols = get("/v1/tasks?user_id=carol", "ops-secret");
  ASSERT_EQ(carols.result_int(), 200) << carols.body();
  EXPECT_EQ(store_.searches.back().user_id, "carol");
  EXPECT_EQ(ids(json(carols)["tasks"]), (std::vector<std::string>{c}));
}

TEST_F(ApiOnFakeStore, ASearchTheKeyMayNotMakeOrCannotReadIsRefusedBeforeTheStoreIsAsked) {
  const int before = store_.calls;
  auto other = get("/v1/tasks?user_id=carol", "team-secret");
  EXPECT_EQ(other.result_int(), 403) << other.body();
  auto status = get("/v1/tasks?status=sleeping", "team-secret");
  EXPECT_EQ(status.result_int(), 400);
  EXPECT_STREQ(json(status)["error"]["path"].GetString(), "/query/status");
  auto limit = get("/v1/tasks?limit=501", "team-secret");
  EXPECT_EQ(limit.result_int(), 400);
  EXPECT_STREQ(json(limit)["error"]["path"].GetString(), "/query/limit");
  EXPECT_EQ(store_.calls, before);
}

TEST_F(ApiOnFakeStore, ATimeTheStoreCannotReadIs400AndTheStoreAwayIs503EvenToReadiness) {
  store_.failure = Error{ErrorKind::kInvalid, "invalid input syntax for type timestamp"};
  auto bad_time = get("/v1/tasks?since=2026-02-30", "team-secret");
  EXPECT_EQ(bad_time.result_int(), 400) << bad_time.body();
  EXPECT_STREQ(json(bad_time)["error"]["path"].GetString(), "/query/since");

  store_.failure = Error{ErrorKind::kTransient, "connection refused"};
  auto away = get("/v1/tasks", "team-secret");
  EXPECT_EQ(away.result_int(), 503) << away.body();
  EXPECT_STREQ(json(away)["error"]["code"].GetString(), "unavailable");
  EXPECT_EQ(get("/readyz", "").result_int(), 503);  // readiness asks the store too

  store_.failure.reset();
  auto ready = get("/readyz", "");
  EXPECT_EQ(ready.result_int(), 200) << ready.body();
  EXPECT_FALSE(json(ready)["postgres"]["synchronous_replication"].GetBool());
}

TEST_F(ApiOnFakeStore, ABatchsFailuresAreRetriedASliceAtATimeAndNeverTwice) {
  std::vector<std::string> failed;
  for (int i = 0; i < 5; ++i) {
    const std::string id = submitted("alice", "line " + std::to_string(i),
                                     i == 2 ? TaskStatus::kSucceeded : TaskStatus::kFailed);
    store_.tasks.at(id).batch_key = "nightly";
    if (i != 2)
      failed.push_back(id);
  }
  std::sort(failed.begin(), failed.end());  // a slice goes in task id order
  store_.batches.push_back(ports::BatchHeader{"nightly", "alice", Priority::kBatch});

  auto first = post("/v1/batches/nightly/retry?limit=3", "team-secret");
  ASSERT_EQ(first.result_int(), 200) << first.body();
  auto slice = json(first);
  EXPECT_EQ(slice["retried"].GetInt(), 3);
  EXPECT_EQ(slice["already_retried"].GetInt(), 0);
  ASSERT_TRUE(slice["next_after"].IsString());
  EXPECT_EQ(slice["next_after"].GetString(), failed[2]);

  auto second = post("/v1/batches/nightly/retry?limit=3&after=" + failed[2], "team-secret");
  ASSERT_EQ(second.result_int(), 200) << second.body();
  EXPECT_EQ(json(second)["retried"].GetInt(), 1);
  EXPECT_TRUE(json(second)["next_after"].IsNull());

  // Each failure retried once, under its own key, as a retry of it.
  std::vector<std::string> retried;
  for (const auto& [id, t] : store_.tasks) {
    if (!t.retry_of.empty()) {
      retried.push_back(t.retry_of);
      EXPECT_EQ(t.idempotency_key, "batch-retry:" + t.retry_of);
      EXPECT_EQ(t.user_id, "alice");
    }
  }
  std::sort(retried.begin(), retried.end());
  EXPECT_EQ(retried, failed);

  // Asked again (a lost answer, another operator): nothing is retried twice.
  const std::size_t stored = store_.tasks.size();
  auto again = post("/v1/batches/nightly/retry", "team-secret");
  ASSERT_EQ(again.result_int(), 200) << again.body();
  EXPECT_EQ(json(again)["retried"].GetInt(), 0);
  EXPECT_EQ(json(again)["already_retried"].GetInt(), 4);
  EXPECT_EQ(store_.tasks.size(), stored);
}

TEST_F(ApiOnFakeStore, AFullQueueStopsABatchRetryWhereItIsAndTheNextSliceGoesOnFromThere) {
  std::vector<std::string> failed;
  for (int i = 0; i < 4; ++i) {
    const std::string id = submitted("bob", "line " + std::to_string(i), TaskStatus::kTimedOut);
    store_.tasks.at(id).batch_key = "weekly";
    failed.push_back(id);
  }
  std::sort(failed.begin(), failed.end());
  store_.batches.push_back(ports::BatchHeader{"weekly", "bob", Priority::kBatch});

  store_.room = 1;
  auto stopped = post("/v1/batches/weekly/retry", "bob-secret");
  ASSERT_EQ(stopped.result_int(), 200) << stopped.body();
  auto slice = json(stopped);
  EXPECT_EQ(slice["retried"].GetInt(), 1);
  ASSERT_TRUE(slice["stopped"].IsObject());
  EXPECT_STREQ(slice["stopped"]["code"].GetString(), "queue_full");
  EXPECT_EQ(slice["next_after"].GetString(), failed[0]);  // the refused one comes next

  store_.room.reset();
  auto rest = post("/v1/batches/weekly/retry?after=" + failed[0], "bob-secret");
  ASSERT_EQ(rest.result_int(), 200) << rest.body();
  EXPECT_EQ(json(rest)["retried"].GetInt(), 3);
  EXPECT_TRUE(json(rest)["stopped"].IsNull());
}

TEST_F(ApiOnFakeStore, AnotherUsersBatchIsNotFoundAndNothingIsRetried) {
  const std::string id = submitted("alice", "line", TaskStatus::kFailed);
  store_.tasks.at(id).batch_key = "nightly";
  store_.batches.push_back(ports::BatchHeader{"nightly", "alice", Priority::kBatch});
  const std::size_t inserts = store_.inserted.size();

  auto answer = post("/v1/batches/nightly/retry", "bob-secret");
  EXPECT_EQ(answer.result_int(), 404) << answer.body();
  EXPECT_EQ(store_.inserted.size(), inserts);
  auto bad_after = post("/v1/batches/nightly/retry?after=line-3", "team-secret");
  EXPECT_EQ(bad_after.result_int(), 400);
  EXPECT_STREQ(json(bad_after)["error"]["path"].GetString(), "/query/after");
  EXPECT_EQ(store_.inserted.size(), inserts);
}

TEST_F(ApiOnFakeStore, ABatchIsFoundByTheStartOfItsIdAmongTheBatchesOfTheKeysUsers) {
  store_.batches = {{"nightly-1", "alice", Priority::kBatch},
                    {"nightly-2", "bob", Priority::kBatch},
                    {"nightly-3", "carol", Priority::kBatch},
                    {"weekly-1", "alice", Priority::kBatch}};
  auto found = get("/v1/batches?prefix=nightly", "team-secret");
  ASSERT_EQ(found.result_int(), 200) << found.body();
  ASSERT_EQ(store_.batch_lists.size(), 1u);
  EXPECT_EQ(store_.batch_lists.back().prefix, "nightly");
  EXPECT_EQ(store_.batch_lists.back().users, (std::vector<std::string>{"alice", "bob"}));
  auto page = json(found);
  ASSERT_EQ(page["batches"].Size(), 2u);  // carol's is not the team's; weekly does not begin so
  EXPECT_STREQ(page["batches"][0]["batch_id"].GetString(), "nightly-1");
  EXPECT_STREQ(page["batches"][1]["batch_id"].GetString(), "nightly-2");

  auto bad = get("/v1/batches?prefix=night%0Aly", "team-secret");
  EXPECT_EQ(bad.result_int(), 400) << bad.body();
  EXPECT_STREQ(json(bad)["error"]["path"].GetString(), "/query/prefix");
  EXPECT_EQ(store_.batch_lists.size(), 1u);
}

}  // namespace
}  // namespace agentfleet::dispatcher
