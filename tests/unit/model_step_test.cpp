// A model step (worker/model_step.cpp): what a call sends, the limits checked before it (budget,
// max_tokens, max_cost), how a failed or late call ends the task, a streamed answer.
// Fakes and harness: tests/unit/task_runner_harness.hpp.
#include "tests/unit/task_runner_harness.hpp"

#include <gtest/gtest.h>

namespace agentfleet::worker::runner_test {
namespace {

TEST(TaskRunner, EachCallSendsTheConversationAsBuiltWholeEncodingOnlyWhatIsNew) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(calls_reply({call("c2", "create_item", R"({"title":"周会"})")}));
  h.model.then(finish_reply("已改到晚上8点"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  ASSERT_EQ(h.model.sent_bodies.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(h.model.sent_encoded[i]) << "call " << i;
    EXPECT_EQ(h.model.sent_bodies[i], h.model.built_bodies[i]) << "call " << i;
  }
  EXPECT_EQ(h.model.sent_messages, (std::vector<std::size_t>{2, 4, 6}));
}

TEST(TaskRunner, AConversationOverTheContextBudgetIsSentTrimmedAndBuiltWhole) {
  // The first call's conversation, to size a context window it fits and the second does not.
  Harness probe;
  probe.model.then(finish_reply("done"));
  ASSERT_EQ(probe.run(), RunOutcome::kFinished);
  const std::int64_t first = react::estimate_tokens(probe.model.sent.at(0));
  const std::int64_t tools = probe.model.sent_tool_tokens.at(0);

  Harness h;
  h.config.models[0].context_window_tokens =
      static_cast<int>(h.config.models[0].max_output_tokens + tools + first + 200);
  h.tools.content = "{\"items\":\"" + std::string(4000, 'x') + "\"}";  // about 1,000 tokens
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(calls_reply({call("c2", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(finish_reply("done"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  ASSERT_EQ(h.model.sent.size(), 3u);
  EXPECT_TRUE(h.model.sent_encoded[0]);
  // Over the budget, the second call is built whole from a copy (its one tool output, the
  // latest step's, is never trimmed); the third has the older output stubbed.
  EXPECT_FALSE(h.model.sent_encoded[1]);
  EXPECT_FALSE(h.model.sent_encoded[2]);
  ASSERT_EQ(h.model.sent[2].size(), 6u);
  EXPECT_EQ(h.model.sent[2][3].role, Role::kTool);
  EXPECT_EQ(h.model.sent[2][3].content.rfind(R"({"trimmed":true,"original_chars":)", 0), 0u)
      << h.model.sent[2][3].content.substr(0, 80);
  EXPECT_EQ(h.model.sent[2][5].content, h.model.sent[1][3].content);
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(h.model.sent_bodies[i], h.model.built_bodies[i]) << "call " << i;
  EXPECT_EQ(h.model.sent_bodies[1], h.model.built_bodies[1]);
}

TEST(TaskRunner, ACallPastTheDeadlineEndsTheTaskTimedOutWithItsTokensBilledAndNoToolsRun) {
  Harness h;
  h.store.remaining_ms = 1000;
  // The answer arrives 1.2 s into a task with 1 s left: it is billed, its tools never run.
  h.model.then(calls_reply({call("c1", "create_item", R"({"title":"x"})")}, 500, 50), 1200ms);
  const auto started = h.clock.now();
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "timed_out");
  EXPECT_TRUE(h.tools.invocations.empty()) << "no tool runs past the deadline";
  ASSERT_EQ(h.store.ledger.size(), 1u) << "the tokens used are billed";
  EXPECT_EQ(h.store.ledger[0].ledger.usage.input, 500);
  EXPECT_EQ(h.model.calls, 1);
  // The model call was given the task's deadline (min(call timeout, deadline)), and the end
  // was written without waiting any longer.
  ASSERT_EQ(h.model.deadlines.size(), 1u);
  EXPECT_EQ(h.model.deadlines[0], started + 1000ms);
  EXPECT_EQ(h.clock.now(), started + 1200ms);
}

TEST(TaskRunner, AModelTimeoutAtTheTaskDeadlineEndsTimedOutNotFailed) {
  Harness h;
  h.store.remaining_ms = 2000;
  h.model.then(Error{ErrorKind::kTimeout, "no answer before the deadline"}, 2000ms);
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "timed_out");
  EXPECT_EQ(h.model.calls, 1);
}

TEST(TaskRunner, ACallThatCouldPassTheMonthlyBudgetIsNotMadeAndTheTaskEndsQuotaExceeded) {
  // Budget 1 CNY, 0.995 spent: the first call at its most (its input as estimated and m1's
  // 1024 output tokens at 8 CNY a million, 0.008192 CNY) could pass it.
  Harness h;
  h.store.user_budget_micros = 1'000'000;
  h.store.month_spent = {{"CNY", 995'000}};
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.calls, 0) << "stopped before the call";
  EXPECT_EQ(h.store.status, "failed");
  expect_ended_with(h, ErrorCode::kQuotaExceeded);
  EXPECT_NE(h.store.ended->error.find("monthly budget of 1.000000 CNY"), std::string::npos)
      << h.store.ended->error;
  EXPECT_NE(h.store.ended->error.find("0.995000 CNY used this month"), std::string::npos);
  EXPECT_TRUE(h.store.ledger.empty());
}

TEST(TaskRunner, TheBudgetCountsWhatTheRunSpentSinceItBegan) {
  // 0.5 of 1 CNY spent; the first call costs 0.492 (246,000 input tokens at 2 a million),
  // so the second (0.008192 for its output alone) could pass the budget: the task stops
  // after the first step's tools.
  Harness h;
  h.store.user_budget_micros = 1'000'000;
  h.store.month_spent = {{"CNY", 500'000}};
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}, 246'000, 0));
  h.model.then(finish_reply("done"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.calls, 1);
  EXPECT_EQ(h.tools.invocations.size(), 1u) << "the step's calls ran";
  expect_ended_with(h, ErrorCode::kQuotaExceeded);
  EXPECT_NE(h.store.ended->error.find("0.992000 CNY used this month"), std::string::npos)
      << h.store.ended->error;
  EXPECT_EQ(h.store.spend_reads, 1) << "the month's spend is read once, when the run begins";
}

TEST(TaskRunner, ATasksMaxTokensCapsTheOutputOfItsLastCallsAndStopsItWhenUsedUp) {
  // 6000 tokens: the first call has room for m1's whole 1024 output tokens; after it used
  // 4910, the second's output is capped at what its input leaves of the 1090; after 5920 the
  // third could not write 64 tokens and is not made.
  Harness h;
  h.store.spec.max_tokens = 6000;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}, 4900, 10));
  h.model.then(calls_reply({call("c2", "search_items", R"({"keyword":"y"})")}, 1000, 10));
  h.model.then(finish_reply("done"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.calls, 2);
  ASSERT_EQ(h.model.output_allowances.size(), 2u);
  EXPECT_EQ(h.model.output_allowances[0], 0) << "the model's own allowance";
  EXPECT_GT(h.model.output_allowances[1], billing::kMinOutputTokens);
  EXPECT_LT(h.model.output_allowances[1], 6000 - 4910) << "less its estimated input";
  EXPECT_EQ(h.tools.invocations.size(), 2u) << "both steps' calls ran";
  EXPECT_EQ(h.store.status, "failed");
  expect_ended_with(h, ErrorCode::kMaxTokens);
  EXPECT_NE(h.store.ended->error.find("used 5920 of its max_tokens of 6000"), std::string::npos)
      << h.store.ended->error;
  EXPECT_EQ(h.store.ledger.size(), 2u);
}

TEST(TaskRunner, AnAnswerCutAtWhatMaxTokensLeftEndsMaxTokensNotTruncated) {
  Harness h;
  h.store.spec.max_tokens = 6000;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}, 4900, 10));
  ModelReply cut;
  cut.content = "The meeting is moved to";
  cut.finish_reason = "length";
  cut.usage.input = 900;
  cut.usage.output = 300;
  h.model.then(cut);
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  ASSERT_EQ(h.model.output_allowances.size(), 2u);
  const std::int64_t cap = h.model.output_allowances[1];
  EXPECT_GT(cap, 0);
  expect_ended_with(h, ErrorCode::kMaxTokens);
  EXPECT_NE(h.store.ended->error.find("cut at the " + std::to_string(cap) + " tokens"),
            std::string::npos)
      << h.store.ended->error;

  // The same answer under the model's own allowance is the model's limit.
  Harness own;
  own.model.then(cut);
  EXPECT_EQ(own.run(), RunOutcome::kFinished);
  expect_ended_with(own, ErrorCode::kTruncated);
}

TEST(TaskRunner, ATasksMaxCostStopsACallThatCouldPassIt) {
  // 0.01 CNY: the first call at its most (its input and 1024 output tokens at 8 a million,
  // 0.008192 and a little) fits; it cost 0.002 (1000 input tokens at 2 a million), so the
  // second at its most could pass it.
  Harness h;
  h.store.spec.max_cost_micros = 10'000;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}, 1000, 0));
  h.model.then(finish_reply("done"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.calls, 1);
  expect_ended_with(h, ErrorCode::kMaxCost);
  EXPECT_NE(h.store.ended->error.find("the task's max_cost of 0.010000 CNY (0.002000 CNY spent "
                                      "by the task"),
            std::string::npos)
      << h.store.ended->error;
  EXPECT_EQ(h.store.spend_reads, 0) << "a task's own limit needs no read of the month";
}

TEST(TaskRunner, ATasksLimitsCountWhatEarlierAttemptsUsed) {
  Harness h;
  h.store.spec.max_tokens = 6000;
  h.store.billed_before.usage.input = 5500;
  h.store.billed_before.usage.output = 400;
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.calls, 0);
  expect_ended_with(h, ErrorCode::kMaxTokens);
  EXPECT_NE(h.store.ended->error.find("used 5900 of"), std::string::npos) << h.store.ended->error;

  Harness cost;
  cost.store.spec.max_cost_micros = 10'000;
  cost.store.billed_before.cost_micros = 9'000;
  cost.store.billed_before.currency = "CNY";
  EXPECT_EQ(cost.run(), RunOutcome::kFinished);
  EXPECT_EQ(cost.model.calls, 0);
  expect_ended_with(cost, ErrorCode::kMaxCost);
}

TEST(TaskRunner, AStreamedAnswersTextReachesTheEventStreamAsItComesAndOnlyOnce) {
  Harness h;
  ModelReply first = calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")});
  first.content = "我先查一下";
  h.model.then_streamed(first, {"我先", "查一下"});
  ModelReply whole = finish_reply("已改到晚上8点");
  whole.content = "好了";
  h.model.then(whole);  // a model that does not stream: its text at once
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  const auto deltas = h.publisher.events("delta");
  ASSERT_EQ(deltas.size(), 3u);
  EXPECT_NE(deltas[0].find(R"("data":{"text":"我先"})"), std::string::npos) << deltas[0];
  EXPECT_NE(deltas[1].find(R"("data":{"text":"查一下"})"), std::string::npos) << deltas[1];
  EXPECT_NE(deltas[2].find(R"("data":{"text":"好了"})"), std::string::npos) << deltas[2];
  EXPECT_NE(deltas[0].find(R"("step":0)"), std::string::npos) << deltas[0];
  EXPECT_NE(deltas[2].find(R"("step":1)"), std::string::npos) << deltas[2];
}

TEST(TaskRunner, ACallThatGaveUpEarlyOnARetryAfterSaysHowMuchTimeWasLeft) {
  Harness h;
  h.store.remaining_ms = 30000;
  // The client gives up at once: the provider asked for 60 s, 30 s are left.
  h.model.then(Error{ErrorKind::kTimeout,
                     "HTTP 429; the server asked to wait 60000 ms, more than the 30000 ms left "
                     "before the deadline",
                     ErrorCode::kDeadline});
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "timed_out");
  expect_ended_with(h, ErrorCode::kDeadline);
  const std::string& error = h.store.ended->error;
  EXPECT_EQ(error.rfind("gave up on a model call with 30 s left before the deadline: ", 0), 0u)
      << error;
  EXPECT_NE(error.find("asked to wait 60000 ms"), std::string::npos) << error;
  EXPECT_EQ(error.find("deadline passed"), std::string::npos) << error;
}

TEST(TaskRunner, AModelFailureEndsWithTheCodeTheClientGaveOrModelUnavailable) {
  for (const auto& [given, expected] :
       {std::pair{std::optional(ErrorCode::kModelRejected), ErrorCode::kModelRejected},
        std::pair{std::optional(ErrorCode::kModelOutOfQuota), ErrorCode::kModelOutOfQuota},
        // A call's own timeout (call_timeout_s) is not the task's deadline.
        std::pair{std::optional(ErrorCode::kDeadline), ErrorCode::kModelUnavailable},
        std::pair{std::optional<ErrorCode>(), ErrorCode::kModelUnavailable}}) {
    Harness h;
    h.model.then(Error{ErrorKind::kTransient, "HTTP 503 three times", given});
    EXPECT_EQ(h.run(), RunOutcome::kFinished);
    EXPECT_EQ(h.store.status, "failed");
    expect_ended_with(h, expected);
  }
}

TEST(TaskRunner, AnExhaustedModelQuotaEndsTheTaskFailedWithTheReasonAndNothingMoreIsCalled) {
  Harness h;
  h.model.then(Error{ErrorKind::kFatal,
                     "every endpoint of m1 is out of quota (insufficient_quota): the account "
                     "has no credit",
                     ErrorCode::kModelOutOfQuota});
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "failed");
  ASSERT_TRUE(h.store.ended);
  EXPECT_NE(h.store.ended->error.find("insufficient_quota"), std::string::npos)
      << h.store.ended->error;
  EXPECT_EQ(h.store.ended->error_code, ErrorCode::kModelOutOfQuota);
  EXPECT_EQ(h.model.calls, 1);
  EXPECT_TRUE(h.tools.invocations.empty());
}

}  // namespace
}  // namespace agentfleet::worker::runner_test
