// GET /v1/fleet (issue 20, item 1: the console's fleet page) on the embedded fleet: its
// workers, queue depth by priority, tasks in flight and completions per second, for admins
// only.

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/integration/fleet_client.hpp"

namespace agentfleet {
namespace {

using namespace std::chrono_literals;
namespace bhttp = boost::beast::http;
using test::api;
using test::kAdminKey;
using test::kU1Key;
using test::parse;

TEST(ApiFleet, AnAdminSeesTheLiveWorkersTheQueueAndTheRateOfEnds) {
  // A task that ends now: the rate over the last minute cannot be nothing after it.
  const std::string task_id =
      test::submit(R"({"user_id": "fleet-)" + test::run_tag() + R"(", "text": "bench: steps=1"})");
  ASSERT_EQ(test::str(test::wait_terminal(task_id), "status"), "succeeded");

  rapidjson::Document view;
  const auto until = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    auto response = api(bhttp::verb::get, "/v1/fleet", kAdminKey);  // checked by the contract
    ASSERT_EQ(response.status, 200) << response.body;
    view = parse(response.body);
    if (view["completions_per_s"].GetDouble() > 0 || std::chrono::steady_clock::now() > until)
      break;
    std::this_thread::sleep_for(200ms);  // the feed hears the result event on its own time
  }
  EXPECT_GT(view["completions_per_s"].GetDouble(), 0);
  EXPECT_EQ(view["window_s"].GetInt(), 60);
  // The fixture runs two workers, worker-1 and worker-2 (more may have joined for a test).
  int fixture_workers = 0;
  for (const auto& w : view["workers"].GetArray()) {
    const std::string id = w["worker_id"].GetString();
    fixture_workers += id == "worker-1" || id == "worker-2";
    EXPECT_GE(w["capacity"].GetInt(), 0);
    EXPECT_GE(w["in_flight"].GetInt(), 0);
  }
  EXPECT_EQ(fixture_workers, 2);
  EXPECT_GE(view["queued"]["interactive"].GetInt64(), 0);
  EXPECT_GE(view["queued"]["batch"].GetInt64(), 0);
  EXPECT_GE(view["in_flight"].GetInt64(), 0);

  auto refused = api(bhttp::verb::get, "/v1/fleet", kU1Key);
  EXPECT_EQ(refused.status, 403) << refused.body;
}

}  // namespace
}  // namespace agentfleet
