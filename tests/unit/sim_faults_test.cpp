// The simulators' shared fault injection and latency (tools/llm_sim/fault_schedule.hpp,
// latency.hpp) and llm-sim's fault answers, with a seeded random source and a fake clock.

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <variant>

#include "tools/llm_sim/fault_schedule.hpp"
#include "tools/llm_sim/latency.hpp"
#include "tools/llm_sim/llm_faults.hpp"
#include "tools/llm_sim/timing_log.hpp"

namespace agentfleet::sim {
namespace {

using namespace std::chrono_literals;

LatencyDistribution latency(const std::string& text) {
  std::string error;
  const auto parsed = parse_latency(text, &error);
  EXPECT_TRUE(parsed) << error;
  return parsed.value_or(LatencyDistribution{});
}

FaultSpec spec(const std::string& json, bool runtime = true) {
  auto parsed = parse_fault_spec(json, llm_sim::llm_fault_rules(runtime));
  if (auto* error = std::get_if<FaultSpecError>(&parsed)) {
    ADD_FAILURE() << json << ": " << error->path << ": " << error->message;
    return {};
  }
  return std::get<FaultSpec>(parsed);
}

std::string spec_error(const std::string& json) {
  auto parsed = parse_fault_spec(json, llm_sim::llm_fault_rules(true));
  auto* error = std::get_if<FaultSpecError>(&parsed);
  return error == nullptr ? "" : error->path + ": " + error->message;
}

// A steady clock the test moves by hand.
struct FakeClock {
  std::chrono::steady_clock::time_point now{std::chrono::seconds(1000)};
  SteadyClock fn() {
    return [this] { return now; };
  }
};

TEST(SimLatencyTest, ParsesTheThreeDistributionsAndABareNumber) {
  EXPECT_EQ(latency("fixed:200").describe(), "fixed:200");
  EXPECT_EQ(latency("200").describe(), "fixed:200");
  EXPECT_EQ(latency("uniform:50:300").describe(), "uniform:50:300");
  EXPECT_EQ(latency("lognormal:200:0.5").describe(), "lognormal:200:0.5");
  std::string error;
  for (const char* bad : {"", "fixed", "fixed:-1", "uniform:300:50", "uniform:1", "lognormal:0:1",
                          "lognormal:200:11", "gauss:1:2", "fixed:700000", "fixed:1e3"}) {
    EXPECT_FALSE(parse_latency(bad, &error)) << bad;
    EXPECT_NE(error.find("expected fixed:MS"), std::string::npos) << error;
  }
}

TEST(SimLatencyTest, SamplesStayWithinTheirBoundsAndFollowTheSeed) {
  RandomSource random(42);
  RandomSource again(42);
  const auto uniform = latency("uniform:50:300");
  const auto lognormal = latency("lognormal:200:0.5");
  std::int64_t below_median = 0;
  double uniform_sum = 0;
  constexpr int kSamples = 4000;
  for (int i = 0; i < kSamples; ++i) {
    const auto u = random.sample(uniform);
    EXPECT_EQ(u, again.sample(uniform));
    EXPECT_GE(u.count(), 50);
    EXPECT_LE(u.count(), 300);
    uniform_sum += static_cast<double>(u.count());
    const auto l = random.sample(lognormal);
    EXPECT_EQ(l, again.sample(lognormal));
    EXPECT_GE(l.count(), 0);
    EXPECT_LE(l.count(), kMaxLatencyMs);
    below_median += l.count() < 200 ? 1 : 0;
  }
  EXPECT_NEAR(uniform_sum / kSamples, 175, 10);
  EXPECT_NEAR(static_cast<double>(below_median) / kSamples, 0.5, 0.05);  // 200 is the median
  EXPECT_EQ(random.sample(latency("fixed:200")), 200ms);
  // Extreme log-normal draws are clamped.
  RandomSource wide(1);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_LE(wide.sample(latency("lognormal:600000:10")).count(), kMaxLatencyMs);
  }
}

TEST(SimFaultSpecTest, ParsesModesBoundsAndRetryHints) {
  const FaultSpec a = spec(R"({"mode":"http_429","retry_after_s":1.5,"retry_after_ms":1500,
                               "duration_s":10})");
  EXPECT_EQ(a.mode, FaultMode::kHttp429);
  EXPECT_EQ(a.probability, 1);
  EXPECT_EQ(a.duration_s, 10);
  EXPECT_FALSE(a.count);
  const auto headers = retry_headers(a);
  ASSERT_EQ(headers.size(), 2u);
  EXPECT_EQ(headers[0], std::make_pair(std::string("Retry-After"), std::string("2")));
  EXPECT_EQ(headers[1], std::make_pair(std::string("retry-after-ms"), std::string("1500")));

  const FaultSpec b = spec(R"({"mode":"http_503","probability":0.3,"count":50})");
  EXPECT_EQ(b.probability, 0.3);
  EXPECT_EQ(b.count, 50);
  EXPECT_TRUE(retry_headers(b).empty());

  const FaultSpec c = spec(R"({"mode":"hang","count":1,"hang_s":5,"scenario":"bench","step":1})");
  EXPECT_EQ(c.hang_s, 5);
  EXPECT_EQ(c.scope, "bench");
  EXPECT_EQ(c.step, 1);

  EXPECT_EQ(spec(R"({"mode":"slow","latency":"fixed:5000","count":2})").latency->describe(),
            "fixed:5000");
  // A scenario file's fault may be unbounded.
  EXPECT_FALSE(spec(R"({"mode":"http_500","probability":0.5})", false).count);
}

TEST(SimFaultSpecTest, RejectsBadFaultsNamingTheKey) {
  EXPECT_EQ(spec_error(R"({"mode":"http_500"})"),
            ": a fault needs 'count' or 'duration_s' (or both) so that it ends");
  EXPECT_NE(spec_error(R"({"mode":"teapot","count":1})").find("/mode: unknown mode 'teapot'"),
            std::string::npos);
  EXPECT_NE(spec_error(R"({"count":1})").find("/mode"), std::string::npos);
  EXPECT_NE(spec_error(R"({"mode":"http_500","count":1,"probability":1.5})").find("/probability"),
            std::string::npos);
  EXPECT_NE(spec_error(R"({"mode":"http_500","count":0})").find("/count"), std::string::npos);
  EXPECT_NE(spec_error(R"({"mode":"http_500","count":1.5})").find("/count"), std::string::npos);
  EXPECT_NE(spec_error(R"({"mode":"http_500","duration_s":-1})").find("/duration_s"),
            std::string::npos);
  EXPECT_NE(spec_error(R"({"mode":"http_500","count":1,"colour":"red"})").find("unknown key"),
            std::string::npos);
  EXPECT_NE(spec_error(R"({"mode":"slow","count":1})").find("/latency"), std::string::npos);
  EXPECT_NE(spec_error("not json").find("not valid JSON"), std::string::npos);
  // tool-sim's rules: no insufficient_quota, a tool scope instead of a scenario.
  FaultRules tool_rules;
  tool_rules.modes = {FaultMode::kHttp500};
  tool_rules.scope_key = "tool";
  EXPECT_TRUE(std::holds_alternative<FaultSpec>(
      parse_fault_spec(R"({"mode":"http_500","count":1,"tool":"create_item"})", tool_rules)));
  EXPECT_TRUE(std::holds_alternative<FaultSpecError>(
      parse_fault_spec(R"({"mode":"insufficient_quota","count":1})", tool_rules)));
  EXPECT_TRUE(std::holds_alternative<FaultSpecError>(
      parse_fault_spec(R"({"mode":"http_500","count":1,"scenario":"x"})", tool_rules)));
}

TEST(SimFaultScheduleTest, ACountBoundEndsTheFaultAfterThatManyAnswers) {
  RandomSource random(1);
  FakeClock clock;
  FaultSchedule schedule(random, clock.fn(), "scenario");
  schedule.add(spec(R"({"mode":"http_429","count":3})"));
  for (int i = 0; i < 3; ++i) {
    const auto fault = schedule.next(std::nullopt);
    ASSERT_TRUE(fault);
    EXPECT_EQ(fault->mode, FaultMode::kHttp429);
  }
  EXPECT_FALSE(schedule.next(std::nullopt));
  EXPECT_EQ(schedule.active(), 0u);
}

TEST(SimFaultScheduleTest, ADurationBoundEndsTheFaultOnTheInjectedClock) {
  RandomSource random(1);
  FakeClock clock;
  FaultSchedule schedule(random, clock.fn(), "scenario");
  schedule.add(spec(R"({"mode":"http_503","duration_s":10,"count":100})"));
  EXPECT_TRUE(schedule.next(std::nullopt));
  clock.now += 9999ms;
  EXPECT_TRUE(schedule.next(std::nullopt));
  EXPECT_NE(schedule.list_json().find("\"remaining_count\":98"), std::string::npos);
  clock.now += 1ms;
  EXPECT_FALSE(schedule.next(std::nullopt));
  // Gone, and still listed with what it did.
  EXPECT_EQ(schedule.list_json(),
            R"({"faults":[],"ended":[{"id":1,"origin":"runtime","mode":"http_503","served":2,)"
            R"("seen":2}]})");
}

// What a fault did can be asked after it ended (its bound reached, or cleared): the checker of
// the chaos run counts a fault as fired only when it answered a request. The record is
// bounded: the oldest of more than kEndedKept ended faults are forgotten.
TEST(SimFaultScheduleTest, EndedFaultsAreListedWithWhatTheyServedUpToABound) {
  RandomSource random(1);
  FaultSchedule schedule(random, {}, "tool");
  schedule.add(spec(R"({"mode":"http_500","count":1})"));
  schedule.add(spec(R"({"mode":"http_429","probability":0,"count":1})"));
  EXPECT_TRUE(schedule.next(std::nullopt));  // the first, which ends at once
  EXPECT_FALSE(schedule.next(std::nullopt));
  EXPECT_EQ(schedule.clear(), 1u);  // the second, never served
  EXPECT_EQ(schedule.list_json(),
            R"({"faults":[],"ended":[{"id":1,"origin":"runtime","mode":"http_500","served":1,)"
            R"("seen":1},{"id":2,"origin":"runtime","mode":"http_429","served":0,"seen":1}]})");
  for (std::size_t i = 0; i < FaultSchedule::kEndedKept; ++i) {
    schedule.add(spec(R"({"mode":"http_503","count":1})"));
    EXPECT_TRUE(schedule.next(std::nullopt));
  }
  const std::string listed = schedule.list_json();
  EXPECT_EQ(listed.find("\"id\":2,"), std::string::npos) << "the oldest forgotten";
  EXPECT_NE(listed.find("\"id\":3,"), std::string::npos);
  EXPECT_NE(listed.find("\"id\":" + std::to_string(FaultSchedule::kEndedKept + 2) + ","),
            std::string::npos);
}

TEST(SimFaultScheduleTest, ProbabilityFollowsTheSeededSource) {
  const auto run = [](std::uint64_t seed) {
    RandomSource random(seed);
    FaultSchedule schedule(random, {}, "scenario");
    schedule.add(spec(R"({"mode":"http_503","probability":0.3,"count":1000000})"));
    std::string pattern;
    for (int i = 0; i < 2000; ++i) {
      pattern += schedule.next(std::nullopt) ? '1' : '0';
    }
    return pattern;
  };
  const std::string first = run(7);
  EXPECT_EQ(first, run(7));
  EXPECT_NE(first, run(8));
  const auto fired = std::count(first.begin(), first.end(), '1');
  EXPECT_NEAR(static_cast<double>(fired) / 2000, 0.3, 0.04);
  // Probability 0 never fires; the count bound counts answers, not requests seen.
  RandomSource random(1);
  FaultSchedule schedule(random, {}, "scenario");
  schedule.add(spec(R"({"mode":"http_500","probability":0,"count":1})"));
  for (int i = 0; i < 100; ++i) {
    EXPECT_FALSE(schedule.next(std::nullopt));
  }
  EXPECT_NE(schedule.list_json().find("\"served\":0,\"seen\":100"), std::string::npos);
}

TEST(SimFaultScheduleTest, ScopedFaultsAnswerOnlyTheirScenarioAndStep) {
  RandomSource random(1);
  FaultSchedule schedule(random, {}, "scenario");
  schedule.add(spec(R"({"mode":"http_500","count":5,"scenario":"bench","step":1})"));
  EXPECT_FALSE(schedule.next(std::nullopt));  // not in the unscoped pass
  EXPECT_FALSE(schedule.next(FaultTarget{"bench", 0}));
  EXPECT_FALSE(schedule.next(FaultTarget{"move_meeting", 1}));
  EXPECT_TRUE(schedule.next(FaultTarget{"bench", 1}));
  EXPECT_NE(schedule.list_json().find("\"scenario\":\"bench\",\"step\":1"), std::string::npos);
}

TEST(SimFaultScheduleTest, FaultsFireInOrderAndClearKeepsStartupOnes) {
  RandomSource random(1);
  FaultSchedule schedule(random, {}, "tool");
  FaultSpec startup;
  startup.mode = FaultMode::kHttp500;  // --failure-rate: unbounded
  startup.probability = 1;
  schedule.add(startup, FaultSchedule::Origin::kStartup);
  schedule.add(spec(R"({"mode":"http_429","count":1})"));
  EXPECT_EQ(schedule.next(std::nullopt)->mode, FaultMode::kHttp500);
  EXPECT_EQ(schedule.clear(), 1u);  // the runtime one
  EXPECT_EQ(schedule.active(), 1u);
  EXPECT_NE(schedule.list_json().find("\"origin\":\"startup\""), std::string::npos);
  EXPECT_EQ(schedule.clear(true), 1u);
  EXPECT_FALSE(schedule.next(std::nullopt));
}

TEST(SimFaultScheduleTest, LlmFaultAnswersHaveOpenAiShapes) {
  const auto body_of = [](const llm_sim::FaultAnswer& answer) {
    rapidjson::Document document;
    document.Parse(answer.body.c_str());
    EXPECT_FALSE(document.HasParseError()) << answer.body;
    return document;
  };
  const auto quota = llm_sim::fault_answer(spec(R"({"mode":"insufficient_quota","count":1})"));
  EXPECT_EQ(quota.status, 429);
  const auto quota_body = body_of(quota);
  EXPECT_STREQ(quota_body["error"]["code"].GetString(), "insufficient_quota");
  EXPECT_STREQ(quota_body["error"]["type"].GetString(), "insufficient_quota");

  const auto limited =
      llm_sim::fault_answer(spec(R"({"mode":"http_429","retry_after_s":2,"count":1})"));
  EXPECT_EQ(limited.status, 429);
  EXPECT_STREQ(body_of(limited)["error"]["code"].GetString(), "rate_limit_exceeded");
  ASSERT_EQ(limited.headers.size(), 1u);
  EXPECT_EQ(limited.headers[0].second, "2");

  for (const char* mode : {"http_500", "http_502", "http_503"}) {
    const auto answer =
        llm_sim::fault_answer(spec(std::string(R"({"mode":")") + mode + R"(","count":1})"));
    EXPECT_EQ(answer.status, std::stoi(std::string(mode).substr(5)));
    EXPECT_TRUE(body_of(answer)["error"].IsObject());
  }
  const auto not_json = llm_sim::fault_answer(spec(R"({"mode":"not_json","count":1})"));
  EXPECT_EQ(not_json.status, 200);
  rapidjson::Document document;
  document.Parse(not_json.body.c_str());
  EXPECT_TRUE(document.HasParseError());
}

// The timing log tools/bench reads: the traceparent's trace id, and the two instants in
// microseconds since the epoch, one line per record, appended.
TEST(TimingLog, WritesTraceIdAndMicrosecondsPerLineAndAppends) {
  const std::string path = ::testing::TempDir() + "timing_log_test.log";
  std::remove(path.c_str());
  const std::chrono::system_clock::time_point received{std::chrono::microseconds(1700000000123456)};
  {
    TimingLog log(path);
    log.record("model", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", received,
               received + 2500us);
  }
  {
    TimingLog log(path);
    log.record("search_items", "not a traceparent", received, received);
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(),
            "model 0af7651916cd43dd8448eb211c80319c 1700000000123456 1700000000125956\n"
            "search_items - 1700000000123456 1700000000123456\n");
  std::remove(path.c_str());
}

TEST(TimingLog, TraceIdOnlyFromAWellFormedTraceparent) {
  EXPECT_EQ(TimingLog::trace_id_of("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            "0af7651916cd43dd8448eb211c80319c");
  EXPECT_EQ(TimingLog::trace_id_of(""), "-");
  EXPECT_EQ(TimingLog::trace_id_of("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"), "-");
  EXPECT_EQ(TimingLog::trace_id_of("00-0af7651916cd43dd8448eb211c8031-b7ad6b7169203331-01"), "-");
  EXPECT_EQ(TimingLog::trace_id_of("00-0af7651916cd43dd8448eb211c80319c\n-b7ad6b71692033-01"), "-");
}

TEST(TimingLog, AnUnwritablePathIsNamedInTheError) {
  try {
    TimingLog log("/nonexistent-agentfleet-dir/timing.log");
    FAIL() << "opened an unwritable path";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-agentfleet-dir/timing.log"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace agentfleet::sim
