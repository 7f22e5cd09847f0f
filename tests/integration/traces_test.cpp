// OpenTelemetry traces (issue 20, item 4): a task's spans reach a collector over OTLP/HTTP.
// The fixture's fleet exports to a local receiver (tools/otlp_receiver) that writes every
// span it is sent to $AGENTFLEET_OTLP_SPANS, one per line; these tests submit tasks and read
// their spans there.

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/fleet_client.hpp"
#include "tests/integration/fleet_env.hpp"

namespace agentfleet {
namespace {

using namespace std::chrono_literals;
namespace bhttp = boost::beast::http;
using test::api;
using test::env;
using test::kAdminKey;
using test::parse;
using test::run_tag;
using test::wait_terminal;

struct ExportedSpan {
  std::map<std::string, std::string> resource;  // string attributes
  std::string trace_id, span_id, parent, name;
  std::int64_t start_ns = 0, end_ns = 0;
  int status = 0;
  std::map<std::string, std::string> text;   // string attributes
  std::map<std::string, std::int64_t> ints;  // int attributes
  std::map<std::string, double> doubles;     // double attributes
};

std::string random_hex(std::size_t digits) {
  static std::mt19937_64 rng(std::random_device{}());
  std::string out;
  while (out.size() < digits) {
    char part[17];
    std::snprintf(part, sizeof part, "%016llx", static_cast<unsigned long long>(rng()));
    out += part;
  }
  return out.substr(0, digits);
}

// The spans the receiver got that `keep` accepts; only lines holding `needle` are parsed
// (late in a suite the file holds tens of thousands of spans).
template <typename Keep>
std::vector<ExportedSpan> exported(Keep keep, const std::string& needle = "") {
  std::vector<ExportedSpan> out;
  std::ifstream file(env()["AGENTFLEET_OTLP_SPANS"]);
  for (std::string line; std::getline(file, line);) {
    if (!needle.empty() && line.find(needle) == std::string::npos)
      continue;
    rapidjson::Document doc = parse(line);
    if (doc.HasParseError() || !doc.IsObject())
      continue;  // a line being written
    const auto& s = doc["span"];
    ExportedSpan span;
    for (const auto& m : doc["resource"].GetObject()) {
      if (m.value.IsString())
        span.resource[m.name.GetString()] = m.value.GetString();
    }
    span.trace_id = s["traceId"].GetString();
    span.span_id = s["spanId"].GetString();
    span.parent = s.HasMember("parentSpanId") ? s["parentSpanId"].GetString() : "";
    span.name = s["name"].GetString();
    span.start_ns = std::stoll(s["startTimeUnixNano"].GetString());
    span.end_ns = std::stoll(s["endTimeUnixNano"].GetString());
    span.status = s["status"].HasMember("code") ? s["status"]["code"].GetInt() : 0;
    for (const auto& a : s["attributes"].GetArray()) {
      const std::string key = a["key"].GetString();
      const auto& v = a["value"];
      if (v.HasMember("stringValue"))
        span.text[key] = v["stringValue"].GetString();
      else if (v.HasMember("intValue"))
        span.ints[key] = std::stoll(v["intValue"].GetString());
      else if (v.HasMember("doubleValue"))
        span.doubles[key] = v["doubleValue"].GetDouble();
    }
    if (keep(span))
      out.push_back(std::move(span));
  }
  return out;
}

// The spans of task `task_id` once `count` of them arrived (bounded: the workers export
// within their flush interval, 2 s; 30 s in all).
std::vector<ExportedSpan> spans_of_task(const std::string& trace_id, std::size_t count) {
  const auto until = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    auto spans = exported([&](const ExportedSpan& s) { return s.trace_id == trace_id; }, trace_id);
    if (spans.size() >= count || std::chrono::steady_clock::now() > until)
      return spans;
    std::this_thread::sleep_for(100ms);
  }
}

std::vector<const ExportedSpan*> named(const std::vector<ExportedSpan>& spans,
                                       const std::string& name) {
  std::vector<const ExportedSpan*> out;
  for (const auto& s : spans) {
    if (s.name == name)
      out.push_back(&s);
  }
  return out;
}

TEST(Traces, ATasksTraceReachesTheCollectorWithEveryStepJoinedToTheCallersTrace) {
  ASSERT_FALSE(env()["AGENTFLEET_OTLP_SPANS"].empty()) << "the fixture starts an OTLP receiver";
  const std::string trace_id = random_hex(32);
  const std::string caller_span = random_hex(16);
  const std::string user = "otlp-" + run_tag();
  // Three model calls, two tool calls in each of the first two.
  auto submitted = api(bhttp::verb::post, "/v1/tasks", kAdminKey,
                       R"({"user_id": ")" + user + R"(", "text": "bench: steps=2 calls=2"})",
                       {{"traceparent", "00-" + trace_id + "-" + caller_span + "-01"}});
  ASSERT_EQ(submitted.status, 201) << submitted.body;
  const std::string task_id = test::str(parse(submitted.body), "task_id");
  rapidjson::Document task = wait_terminal(task_id);
  ASSERT_EQ(test::str(task, "status"), "succeeded") << test::str(task, "error");
  const auto& trace = task["trace"];
  ASSERT_EQ(trace.Size(), 3u);

  // task, queue, attempt, 3 model calls, 4 tool calls.
  const auto spans = spans_of_task(trace_id, 10);
  ASSERT_EQ(spans.size(), 10u) << "spans of trace " << trace_id << " at the receiver";

  const auto roots = named(spans, "task");
  ASSERT_EQ(roots.size(), 1u);
  const ExportedSpan& root = *roots[0];
  EXPECT_EQ(root.parent, caller_span);  // joined to the caller's span
  EXPECT_EQ(root.text.at("agentfleet.task.id"), task_id);
  EXPECT_EQ(root.text.at("agentfleet.user.id"), user);
  EXPECT_EQ(root.text.at("agentfleet.task.status"), "succeeded");
  EXPECT_EQ(root.text.at("agentfleet.result.type"), "action_completed");
  EXPECT_EQ(root.ints.at("gen_ai.usage.input_tokens"), task["usage"]["input_tokens"].GetInt64());
  EXPECT_EQ(root.ints.at("gen_ai.usage.output_tokens"), task["usage"]["output_tokens"].GetInt64());
  EXPECT_NEAR(root.doubles.at("agentfleet.cost"), std::stod(test::str(task, "cost")), 1e-9);
  EXPECT_EQ(root.resource.at("service.name"), "agentfleet");
  EXPECT_EQ(root.resource.at("service.instance.id").rfind("worker-", 0), 0u);

  const auto queue = named(spans, "queue");
  ASSERT_EQ(queue.size(), 1u);
  EXPECT_EQ(queue[0]->parent, root.span_id);
  EXPECT_EQ(queue[0]->start_ns, root.start_ns);

  const auto attempts = named(spans, "attempt");
  ASSERT_EQ(attempts.size(), 1u);
  const ExportedSpan& attempt = *attempts[0];
  EXPECT_EQ(attempt.parent, root.span_id);
  EXPECT_EQ(attempt.ints.at("agentfleet.attempt"), 1);
  EXPECT_LE(queue[0]->end_ns, attempt.start_ns);

  // Each model call: its step's tokens, a cost, inside its attempt; the costs add up.
  const auto chats = named(spans, "chat sim-model");
  ASSERT_EQ(chats.size(), 3u);
  double cost = 0;
  for (const ExportedSpan* chat : chats) {
    EXPECT_EQ(chat->parent, attempt.span_id);
    const std::int64_t step = chat->ints.at("agentfleet.step");
    ASSERT_TRUE(step >= 0 && step < 3);
    const auto& usage = trace[static_cast<rapidjson::SizeType>(step)]["usage"];
    EXPECT_EQ(chat->ints.at("gen_ai.usage.input_tokens"), usage["input_tokens"].GetInt64());
    EXPECT_EQ(chat->ints.at("gen_ai.usage.output_tokens"), usage["output_tokens"].GetInt64());
    EXPECT_EQ(chat->text.at("gen_ai.operation.name"), "chat");
    cost += chat->doubles.at("agentfleet.cost");
    EXPECT_GE(chat->start_ns, attempt.start_ns - 1'000'000);  // rows' times are to the µs
    EXPECT_LE(chat->end_ns, attempt.end_ns + 1'000'000);
  }
  EXPECT_NEAR(cost, std::stod(test::str(task, "cost")), 1e-5);

  // Each tool call: its tool, its arguments and result, an answer of 200.
  const auto tools = named(spans, "execute_tool search_items");
  ASSERT_EQ(tools.size(), 4u);
  for (const ExportedSpan* tool : tools) {
    EXPECT_EQ(tool->parent, attempt.span_id);
    EXPECT_EQ(tool->text.at("agentfleet.tool.status"), "ok");
    EXPECT_EQ(tool->ints.at("http.response.status_code"), 200);
    EXPECT_NE(tool->text.at("agentfleet.tool.arguments").find("bench"), std::string::npos);
    EXPECT_FALSE(tool->text.at("agentfleet.tool.result").empty());
    EXPECT_EQ(tool->status, 0);
  }
  // Nothing was left unexported or failed on the workers.
  EXPECT_GT(test::metric_sum(test::worker_metrics_urls(), "agentfleet_otlp_spans_exported_total"),
            0);
  EXPECT_EQ(test::metric_sum(test::worker_metrics_urls(), "agentfleet_otlp_spans_dropped_total"),
            0);
}

TEST(Traces, ATaskSubmittedWithoutATraceparentIsTheRootOfATraceOfItsOwn) {
  const std::string user = "otlp-" + run_tag();
  const std::string task_id =
      test::submit(R"({"user_id": ")" + user + R"(", "text": "bench: steps=1 calls=1"})");
  ASSERT_EQ(test::str(wait_terminal(task_id), "status"), "succeeded");
  const auto until = std::chrono::steady_clock::now() + 30s;
  std::vector<ExportedSpan> roots;
  while (roots.empty() && std::chrono::steady_clock::now() < until) {
    roots = exported([&](const ExportedSpan& s) {
      return s.name == "task" && s.text.count("agentfleet.task.id") &&
             s.text.at("agentfleet.task.id") == task_id;
    });
    if (roots.empty())
      std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(roots.size(), 1u) << "the task's root span at the receiver";
  EXPECT_EQ(roots[0].parent, "");  // no parent that was never exported
  // task, queue, attempt, 2 model calls, 1 tool call: all in its trace, all under the root.
  const auto spans = spans_of_task(roots[0].trace_id, 6);
  ASSERT_EQ(spans.size(), 6u);
  for (const auto& s : spans)
    EXPECT_EQ(s.parent.empty(), s.name == "task") << s.name;
}

}  // namespace
}  // namespace agentfleet
