// Every provider charge is billed (issue 18, item 6), on the embedded fleet through llm-sim:
// an answer without usage is billed from the worker's estimate and flagged; an answer that
// came after its run stopped waiting for it is billed as unreconciled, with the provider's
// usage, in the bill and the metrics. A task's own max_tokens and max_cost stop it before a
// call that could pass them (issue 18, item 7). (The client's lost attempts, the fenced save and
// the estimates themselves are unit tests: model_client_test.cpp, task_runner_test.cpp.) Each
// call is named to llm-sim and recorded before it is sent, until its fate is written (a
// worker killed in the middle of a call is the chaos run's: docs/chaos.md).

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "tests/integration/fleet_client.hpp"

namespace agentfleet::test {
namespace {

using bhttp = boost::beast::http::verb;
using namespace std::chrono_literals;

std::string llm_sim() {
  return "http://127.0.0.1:" + env()["LLM_SIM_PORT"];
}

double worker_sum(const std::string& series) {
  return metric_sum(worker_metrics_urls(), series);
}

// The user's bill totals (one currency here).
rapidjson::Document totals_of(const std::string& user) {
  auto bill = api(bhttp::get, "/v1/users/" + user + "/usage", kAdminKey);
  EXPECT_EQ(bill.status, 200) << bill.body;
  rapidjson::Document doc = parse(bill.body);
  rapidjson::Document totals;
  if (doc.IsObject() && doc.HasMember("totals") && doc["totals"].IsArray() &&
      doc["totals"].Size() == 1) {
    totals.CopyFrom(doc["totals"][0], totals.GetAllocator());
  }
  EXPECT_TRUE(totals.IsObject()) << bill.body;
  return totals;
}

TEST(Billing, AnAnswerWithoutUsageIsBilledFromTheWorkersEstimateAndFlagged) {
  const std::string user = "bill-est-" + run_tag();
  const std::string series = "agentfleet_model_usage_estimated_total{model=\"sim-model\"";
  const double before = worker_sum(series);
  const std::string id = submit(R"({"user_id":")" + user +
                                R"(","text":"no-usage: steps=1","idempotency_key":"est-1"})");
  auto task = wait_terminal(id);
  ASSERT_EQ(str(task, "status"), "succeeded") << str(task, "error");
  EXPECT_EQ(str(at(task, "result"), "message"), "no-usage 完成：1 步");
  auto ledger = pg_row(
      "SELECT count(*), bool_and(usage_estimated), min(input_tokens), min(output_tokens), "
      "sum(cost)::text FROM usage_ledger WHERE task_id = $1::uuid",
      id);
  EXPECT_EQ(ledger[0].as<int>(), 2);
  EXPECT_TRUE(ledger[1].as<bool>()) << "llm-sim sent no usage: every row is an estimate";
  EXPECT_GT(ledger[2].as<std::int64_t>(), 0) << "the request's tokens, estimated";
  EXPECT_GT(ledger[3].as<std::int64_t>(), 0) << "the answer's tokens, estimated";
  EXPECT_NE(ledger[4].as<std::string>(), "0.000000") << "billed, not free";
  // Each step of the trace says its bill is an estimate (issue 39, item 9).
  const auto& trace = at(task, "trace");
  ASSERT_TRUE(trace.IsArray());
  int estimated_steps = 0;
  for (const auto& step : trace.GetArray()) {
    if (step.HasMember("usage_estimated") && step["usage_estimated"].IsBool() &&
        step["usage_estimated"].GetBool())
      ++estimated_steps;
  }
  EXPECT_EQ(estimated_steps, 2) << "both model calls were billed by estimate";
  auto totals = totals_of(user);
  EXPECT_EQ(num(totals, "calls"), 2);
  EXPECT_EQ(num(totals, "estimated_calls"), 2);
  EXPECT_EQ(num(totals, "unreconciled_calls"), 0);
  EXPECT_GE(worker_sum(series), before + 2);
}

TEST(Billing, AModelAnswerThatCameAfterTheTaskWasCancelledIsBilledUnreconciled) {
  const std::string user = "bill-lost-" + run_tag();
  const std::string series =
      "agentfleet_model_charges_unreconciled_total{model=\"sim-model\",reason=\"abandoned\"";
  const double before = worker_sum(series);
  // The task's first model call is answered 10 s late: the cancel below ends the task long
  // before, and the answer still comes, charged.
  auto fault = fetch(llm_sim() + "/admin/faults", bhttp::post,
                     R"({"mode":"slow","latency":"fixed:10000","scenario":"slow","step":0,)"
                     R"("count":1})");
  ASSERT_EQ(fault.status, 201) << fault.body;
  const std::int64_t fault_id = num(parse(fault.body), "id");
  // llm-sim drops a fault of count 1 the moment a request takes it: once it is gone, this
  // task's first model call (the only one of scenario `slow` now) is in its 10 s wait.
  const auto fault_taken = [fault_id] {
    auto listed = parse(fetch(llm_sim() + "/admin/faults", bhttp::get).body);
    const rapidjson::Value& faults = at(listed, "faults");
    if (!faults.IsArray())
      return false;
    for (const auto& f : faults.GetArray()) {
      if (num(f, "id") == fault_id)
        return false;
    }
    return true;
  };
  const std::string id =
      submit(R"({"user_id":")" + user + R"(","text":"slow: steps=1","idempotency_key":"lost-1"})");
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (!fault_taken() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(fault_taken()) << "the model call never reached llm-sim";
  const char* in_flight =
      "SELECT count(*) FROM model_calls_in_flight WHERE task_id = $1::uuid AND attempt = 1 "
      "AND step = 0";
  EXPECT_EQ(pg_count(in_flight, id), 1) << "recorded before it was sent";
  auto cancel = api(bhttp::post, "/v1/tasks/" + id + "/cancel", kAdminKey);
  EXPECT_EQ(cancel.status, 202) << cancel.body;
  auto task = wait_terminal(id);
  ASSERT_EQ(str(task, "status"), "cancelled");
  ASSERT_EQ(num(task, "steps"), 0) << "the cancel came after the 10 s answer: nothing to test";
  EXPECT_EQ(pg_count("SELECT count(*) FROM usage_ledger WHERE task_id = $1::uuid", id), 0);

  // The answer comes about 10 s after the request; the worker bills it then.
  const auto billed_by = std::chrono::steady_clock::now() + 40s;
  while (pg_count("SELECT count(*) FROM usage_unreconciled WHERE task_id = $1::uuid", id) == 0 &&
         std::chrono::steady_clock::now() < billed_by) {
    std::this_thread::sleep_for(200ms);
  }
  auto row = pg_row(
      "SELECT count(*), min(reason), bool_or(usage_estimated), min(input_tokens), "
      "min(attempt), min(step), min(user_id), sum(cost)::text "
      "FROM usage_unreconciled WHERE task_id = $1::uuid",
      id);
  ASSERT_EQ(row[0].as<int>(), 1) << "the late answer was not billed";
  EXPECT_EQ(pg_count(in_flight, id), 0) << "its bill settled the record";
  EXPECT_EQ(row[1].as<std::string>(), "abandoned");
  EXPECT_FALSE(row[2].as<bool>()) << "llm-sim's own usage came with the answer";
  EXPECT_GT(row[3].as<std::int64_t>(), 0);
  EXPECT_EQ(row[4].as<int>(), 1);
  EXPECT_EQ(row[5].as<int>(), 0);
  EXPECT_EQ(row[6].as<std::string>(), user);
  EXPECT_NE(row[7].as<std::string>(), "0.000000");
  auto totals = totals_of(user);
  EXPECT_EQ(num(totals, "calls"), 1) << "in the bill";
  EXPECT_EQ(num(totals, "unreconciled_calls"), 1);
  EXPECT_EQ(str(totals, "unreconciled_cost"), row[7].as<std::string>());
  EXPECT_GE(worker_sum(series), before + 1);
  EXPECT_EQ(num(at(task, "usage"), "input_tokens"), 0) << "not the task's own totals";
}

// What llm-sim counted as charged for each of the task's calls (GET /calls), by step.
std::map<int, std::int64_t> charged_steps(const std::string& task_id) {
  std::map<int, std::int64_t> steps;
  auto calls = parse(fetch(llm_sim() + "/calls", bhttp::get).body);
  const rapidjson::Value& by_call = at(calls, "calls");
  if (!by_call.IsObject())
    return steps;
  for (const auto& [name, count] : by_call.GetObject()) {
    const std::string call(name.GetString(), name.GetStringLength());
    if (call.rfind(task_id + ":1:", 0) == 0)
      steps[std::stoi(call.substr(task_id.size() + 3))] += count.GetInt64();
  }
  return steps;
}

TEST(Billing, EachCallIsNamedToTheProviderAndRecordedUntilItsCheckpointBillsIt) {
  const std::string user = "bill-named-" + run_tag();
  const std::string id = submit(R"({"user_id":")" + user +
                                R"(","text":"no-usage: steps=2","idempotency_key":"named-1"})");
  auto task = wait_terminal(id);
  ASSERT_EQ(str(task, "status"), "succeeded") << str(task, "error");
  // llm-sim counted each request by its X-Client-Request-Id (<task>:<attempt>:<step>:<try>):
  // one request a step, each billed by its step's ledger row.
  const std::map<int, std::int64_t> expected{{0, 1}, {1, 1}, {2, 1}};
  EXPECT_EQ(charged_steps(id), expected);
  EXPECT_EQ(pg_count("SELECT count(*) FROM usage_ledger WHERE task_id = $1::uuid", id), 3);
  EXPECT_EQ(pg_count("SELECT count(*) FROM model_calls_in_flight WHERE task_id = $1::uuid", id), 0)
      << "every record was settled by its checkpoint";
  EXPECT_EQ(pg_count("SELECT count(*) FROM usage_unreconciled WHERE task_id = $1::uuid", id), 0);
}

TEST(Billing, ATasksOwnMaxTokensAndMaxCostStopItBeforeTheCallThatCouldPassThem) {
  const std::string user = "bill-lim-" + run_tag();
  const auto submission = [&](const std::string& key, const std::string& limits) {
    return R"({"user_id":")" + user + R"(","text":"bench: steps=3","idempotency_key":")" + key +
           "\"" + limits + "}";
  };
  // Without limits: four model calls (three steps of one tool call, then the finish).
  const std::string free_id = submit(submission("lim-0", ""));
  auto free_run = wait_terminal(free_id);
  ASSERT_EQ(str(free_run, "status"), "succeeded") << str(free_run, "error");
  const auto first_three = pg_row(
      "SELECT count(*) FILTER (WHERE step < 3), "
      "coalesce(sum(input_tokens + output_tokens) FILTER (WHERE step < 3), 0) "
      "FROM usage_ledger WHERE task_id = $1::uuid",
      free_id);
  ASSERT_EQ(first_three[0].as<int>(), 3);
  const std::int64_t max_tokens = first_three[1].as<std::int64_t>();

  // The tokens of its first three calls: the fourth call has no room and is not made.
  const std::string limited_id =
      submit(submission("lim-1", R"(,"max_tokens":)" + std::to_string(max_tokens)));
  auto limited = wait_terminal(limited_id);
  EXPECT_EQ(str(limited, "status"), "failed");
  EXPECT_EQ(str(limited, "error_code"), "max_tokens") << str(limited, "error");
  EXPECT_NE(str(limited, "error").find("of its max_tokens of " + std::to_string(max_tokens)),
            std::string::npos)
      << str(limited, "error");
  EXPECT_EQ(num(limited, "max_tokens"), max_tokens) << "the task shows its limit";
  const int calls = static_cast<int>(
      pg_count("SELECT count(*) FROM usage_ledger WHERE task_id = $1::uuid", limited_id));
  EXPECT_GE(calls, 1) << "the first call fits";
  EXPECT_LE(calls, 3) << "the fourth could not be made within the limit";
  EXPECT_EQ(num(limited, "steps"), calls);

  // A max_cost the first call could pass: no call is made, nothing is billed.
  const std::string poor_id = submit(submission("lim-2", R"(,"max_cost":"0.000001")"));
  auto poor = wait_terminal(poor_id);
  EXPECT_EQ(str(poor, "status"), "failed");
  EXPECT_EQ(str(poor, "error_code"), "max_cost") << str(poor, "error");
  EXPECT_EQ(str(poor, "max_cost"), "0.000001");
  EXPECT_EQ(num(poor, "steps"), 0);
  EXPECT_EQ(pg_count("SELECT count(*) FROM usage_ledger WHERE task_id = $1::uuid", poor_id), 0);

  // Limits that cannot hold anything are refused at the door, naming the field.
  for (const char* bad : {R"(,"max_cost":"0")", R"(,"max_cost":0.5)", R"(,"max_tokens":0)"}) {
    auto refused = api(bhttp::post, "/v1/tasks", kAdminKey, submission("lim-bad", bad));
    EXPECT_EQ(refused.status, 400) << bad << ": " << refused.body;
    const std::string field =
        std::string(bad).find("max_cost") != std::string::npos ? "/max_cost" : "/max_tokens";
    EXPECT_NE(refused.body.find(field), std::string::npos) << refused.body;
  }
}

}  // namespace
}  // namespace agentfleet::test
