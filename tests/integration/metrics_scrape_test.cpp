// The metrics endpoints of the embedded fleet (started by the ctest fixture in
// fleet_fixture.sh): each process's /healthz and /readyz answer 200, and after a task ran
// through the fleet the dispatcher's and the workers' /metrics show it; the task gauges
// count what Postgres holds, queued tasks by priority. When Debian's
// `promtool` is installed, every exposition also passes `promtool check metrics`.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/adapters/http/client.hpp"
#include "tests/integration/fleet_client.hpp"
#include "tests/integration/fleet_env.hpp"

namespace agentfleet {
namespace {

using namespace std::chrono_literals;
namespace bhttp = boost::beast::http;

using test::fleet_env;
using test::split_list;

http::ClientResponse call(bhttp::verb method, const std::string& url,
                          const std::string& body = {}) {
  http::ClientRequest request;
  request.method = method;
  request.url = url;
  request.body = body;
  request.headers.push_back(test::admin_auth());
  request.deadline = std::chrono::steady_clock::now() + 10s;
  return test::exchange(std::move(request));
}

// Sum of every sample of `name` whose label text contains each of `labels` (an empty
// list matches every series); -1 when the family has no sample at all.
double value_of(const std::string& exposition, const std::string& name,
                const std::vector<std::string>& labels = {}) {
  double sum = 0;
  bool found = false;
  std::istringstream lines(exposition);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#')
      continue;
    const auto end_of_name = line.find_first_of("{ ");
    if (line.substr(0, end_of_name) != name)
      continue;
    const std::string series = line.substr(0, line.rfind(' '));
    bool match = true;
    for (const auto& label : labels)
      match = match && series.find(label) != std::string::npos;
    if (!match)
      continue;
    found = true;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return found ? sum : -1;
}

void expect_promtool_accepts(const std::string& exposition, const std::string& who) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0)
    return;  // optional: only where Debian's prometheus package is installed
  const std::string path = std::string(std::getenv("AGENTFLEET_TEST_RUN_DIR")) + "/scrape.txt";
  std::ofstream(path) << exposition;
  const std::string command = "promtool check metrics < " + path + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof(buffer), pipe))
    output += buffer;
  EXPECT_EQ(pclose(pipe), 0) << who << ": promtool check metrics:\n" << output;
}

// One task through the fleet, so every process has something to count.
void run_one_task(const std::string& base) {
  const std::string key =
      "metrics-" + std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
  auto submitted = call(
      bhttp::verb::post, base + "/v1/tasks",
      R"({"user_id":"u-metrics","text":"删除2月30日的日程","idempotency_key":")" + key + R"("})");
  ASSERT_EQ(submitted.status, 201) << submitted.body;
  const std::string location = submitted.header("Location");
  ASSERT_FALSE(location.empty());
  const auto until = std::chrono::steady_clock::now() + 90s;
  while (std::chrono::steady_clock::now() < until) {
    auto task = call(bhttp::verb::get, base + location);
    if (task.body.find(R"("finished_at":null)") == std::string::npos) {
      return;
    }
    std::this_thread::sleep_for(100ms);  // polling interval of a bounded wait
  }
  FAIL() << "the task did not finish within 90 s";
}

TEST(Metrics, EveryProcessAnswersHealthAndReadiness) {
  auto env = fleet_env();
  std::vector<std::string> bases = split_list(env["AGENTFLEET_WORKER_METRICS_URLS"]);
  ASSERT_FALSE(bases.empty()) << "the fixture exported no worker metrics URL";
  bases.push_back(env["AGENTFLEET_DISPATCHER_METRICS_URL"]);
  for (const auto& base : bases) {
    for (const char* path : {"/healthz", "/readyz", "/metrics"}) {
      auto response = call(bhttp::verb::get, base + path);
      EXPECT_EQ(response.status, 200) << base << path << ": " << response.body;
    }
    // Each reports whether its commits wait for a synchronous standby (none here): in its
    // readiness, and as a gauge once it has read it (the readiness probe above did).
    EXPECT_NE(
        call(bhttp::verb::get, base + "/readyz").body.find(R"("synchronous_replication":false)"),
        std::string::npos)
        << base;
    EXPECT_NE(call(bhttp::verb::get, base + "/metrics")
                  .body.find("\nagentfleet_postgres_synchronous_replication 0\n"),
              std::string::npos)
        << base;
  }
  // With an operations port, the API port answers liveness only.
  EXPECT_EQ(call(bhttp::verb::get, env["AGENTFLEET_URL"] + "/healthz").status, 200);
  for (const char* path : {"/readyz", "/metrics"})
    EXPECT_EQ(call(bhttp::verb::get, env["AGENTFLEET_URL"] + path).status, 404) << path;
  auto wrong = call(bhttp::verb::get, env["AGENTFLEET_DISPATCHER_METRICS_URL"] + "/v1/tasks");
  EXPECT_EQ(wrong.status, 404) << "the metrics port serves no API";
}

// A user held to one running task by its limit: the rest wait queued, and within a refresh
// (metrics.refresh_interval_s, 5 s in the fleet's configuration) the dispatcher's gauges
// count them by priority, the queued total agreeing with the two priorities.
TEST(Metrics, TheTaskGaugesCountQueuedTasksByPriorityAndTheRunningOne) {
  auto env = fleet_env();
  const std::string base = env["AGENTFLEET_URL"];
  const std::string run =
      std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
  const std::string user = "u-gauges-" + run;
  auto limits =
      call(bhttp::verb::put, base + "/v1/users/" + user + "/limits", R"({"max_concurrency":1})");
  ASSERT_EQ(limits.status, 200) << limits.body;

  std::vector<std::string> locations;
  const auto submit = [&](const std::string& priority) {
    const std::string key = "gauges-" + run + "-" + std::to_string(locations.size());
    auto submitted =
        call(bhttp::verb::post, base + "/v1/tasks",
             R"({"user_id":")" + user + R"(","text":"slow: steps=40","max_steps":50,"priority":")" +
                 priority + R"(","idempotency_key":")" + key + R"("})");
    ASSERT_EQ(submitted.status, 201) << submitted.body;
    locations.push_back(submitted.header("Location"));
  };
  submit("interactive");  // runs (about 25 s), the others wait behind it
  for (const char* priority : {"batch", "batch", "batch", "interactive", "interactive"})
    submit(priority);
  ASSERT_EQ(locations.size(), 6u);

  const std::string metrics = env["AGENTFLEET_DISPATCHER_METRICS_URL"] + "/metrics";
  const auto until = std::chrono::steady_clock::now() + 20s;
  double batch = -1, interactive = -1, queued = -1, running = -1;
  while (std::chrono::steady_clock::now() < until) {
    const auto scraped = call(bhttp::verb::get, metrics);
    ASSERT_EQ(scraped.status, 200);
    batch = value_of(scraped.body, "agentfleet_queue_depth", {R"(priority="batch")"});
    interactive = value_of(scraped.body, "agentfleet_queue_depth", {R"(priority="interactive")"});
    queued = value_of(scraped.body, "agentfleet_tasks_by_status", {R"(status="queued")"});
    running = value_of(scraped.body, "agentfleet_tasks_by_status", {R"(status="running")"});
    // Other tests' tasks may be counted too: at least this user's.
    if (batch >= 3 && interactive >= 2 && running >= 1)
      break;
    std::this_thread::sleep_for(250ms);  // polling interval of a bounded wait
  }
  EXPECT_GE(batch, 3);
  EXPECT_GE(interactive, 2);
  EXPECT_GE(running, 1);
  EXPECT_EQ(queued, batch + interactive) << "the queued total is the two priorities' sum";

  for (const auto& location : locations) {  // 200 ends a queued task, 202 asks a running one
    const int status = call(bhttp::verb::post, base + location + "/cancel").status;
    EXPECT_TRUE(status == 200 || status == 202) << location << ": " << status;
  }
}

TEST(Metrics, DispatcherAndWorkersCountATaskThatRan) {
  auto env = fleet_env();
  run_one_task(env["AGENTFLEET_URL"]);

  auto scraped = call(bhttp::verb::get, env["AGENTFLEET_DISPATCHER_METRICS_URL"] + "/metrics");
  ASSERT_EQ(scraped.status, 200);
  EXPECT_EQ(scraped.header("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
  const std::string& d = scraped.body;
  EXPECT_GE(value_of(d, "agentfleet_tasks_submitted_total", {R"(outcome="accepted")"}), 1) << d;
  EXPECT_GE(
      value_of(d, "agentfleet_http_requests_total", {R"(route="/v1/tasks")", R"(code="201")"}), 1);
  EXPECT_GE(value_of(d, "agentfleet_http_request_duration_seconds_count"), 1);
  EXPECT_GE(value_of(d, "agentfleet_scheduler_admissions_total", {R"(priority="interactive")"}), 1);
  EXPECT_GE(value_of(d, "agentfleet_scheduler_pass_duration_seconds_count"), 1);
  EXPECT_GE(value_of(d, "agentfleet_outbox_published_total", {R"(topic="agent.tasks.dispatch")"}),
            1);
  EXPECT_EQ(value_of(d, "agentfleet_scheduler_is_leader"), 1);
  EXPECT_GE(value_of(d, "agentfleet_tasks_by_status"), 0);
  EXPECT_GE(value_of(d, "agentfleet_outbox_backlog_messages"), 0);
  EXPECT_GT(value_of(d, "agentfleet_db_pool_connections"), 0);
  EXPECT_GT(value_of(d, "process_resident_memory_bytes"), 0);
  EXPECT_GT(value_of(d, "process_open_fds"), 0);
  expect_promtool_accepts(d, "dispatcher");

  // Summed over the workers: either may have run the task.
  double db_jobs = 0;
  for (const auto& base : split_list(env["AGENTFLEET_WORKER_METRICS_URLS"])) {
    auto worker = call(bhttp::verb::get, base + "/metrics");
    ASSERT_EQ(worker.status, 200) << base;
    const std::string& w = worker.body;
    EXPECT_GE(value_of(w, "agentfleet_tasks_in_flight"), 0) << base;
    EXPECT_GE(value_of(w, "agentfleet_consumer_paused"), 0) << base;
    EXPECT_GE(value_of(w, "agentfleet_consumer_lag_messages", {R"(topic="agent.tasks.dispatch")"}),
              0)
        << base;
    EXPECT_GE(value_of(w, "agentfleet_task_claims_total"), 0) << base;
    EXPECT_GE(value_of(w, "agentfleet_model_tokens_total"), 0) << base;
    EXPECT_GT(value_of(w, "agentfleet_db_pool_connections"), 0) << base;
    EXPECT_GT(value_of(w, "process_resident_memory_bytes"), 0) << base;
    EXPECT_GT(value_of(w, "process_start_time_seconds"), 1e9) << base;
    db_jobs += value_of(w, "agentfleet_db_queue_wait_seconds_count");
    expect_promtool_accepts(w, base);
  }
  EXPECT_GE(db_jobs, 1) << "a task ran, so some worker used its Postgres pool";
}

}  // namespace
}  // namespace agentfleet
