// The task runner's loop as a whole (worker/task_runner.cpp): a run from its claim to its end,
// and what stops it between steps (a cancel, a fence, a drain, a store that fails).
// Fakes and harness: tests/unit/task_runner_harness.hpp.
#include "tests/unit/task_runner_harness.hpp"

#include <gtest/gtest.h>

namespace agentfleet::worker::runner_test {
namespace {

TEST(TaskRunner, RunsTheLoopToItsEndWithACheckpointAndALedgerRowPerModelCall) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(calls_reply({call("c2", "create_item", R"({"title":"周会"})")}));
  h.model.then(finish_reply("已改到晚上8点"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.calls, 3);
  EXPECT_EQ(h.tools.invocations.size(), 2u);
  EXPECT_EQ(h.store.status, "succeeded");
  ASSERT_TRUE(h.store.ended && h.store.ended->result);
  EXPECT_EQ(h.store.ended->result->message, "已改到晚上8点");
  EXPECT_EQ(h.store.ledger.size(), 3u) << "one ledger row per model call";
  EXPECT_EQ(h.store.tool_calls, 2);
  // Identity comes from the task, never from the model's arguments.
  for (const auto& invocation : h.tools.invocations) {
    EXPECT_EQ(invocation.user_id, kUser);
    EXPECT_EQ(invocation.task_id, kTaskId);
  }
  // The result event was published by the run, and its announcement forgotten by the store.
  ASSERT_EQ(h.publisher.published.size(), 1u);
  EXPECT_NE(h.publisher.published[0].value.find("\"status\":\"succeeded\""), std::string::npos);
  EXPECT_EQ(h.store.forgotten, std::vector<std::int64_t>{1});
  EXPECT_EQ(h.publisher.events("done").size(), 1u);
}

TEST(TaskRunner, TheResultEventReportsWhatEveryAttemptBilledAsTheLedgerSumsIt) {
  Harness h;
  // An earlier attempt billed 1,000 input tokens (cost 0.002 CNY) and saved step 0.
  h.store.attempt = 1;
  h.store.billed_before.usage.input = 1000;
  h.store.billed_before.cost_micros = 2000;
  h.store.billed_before.currency = "CNY";
  h.store.checkpoint(0, calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}),
                     R"([{"call_id":"c1","tool":"search_items","ok":true,"content":"{}"}])");
  // This attempt: 250,000 input and 10,000 output tokens at 2 and 8 CNY per million.
  h.model.then(finish_reply("done", 250000, 10000));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  ASSERT_EQ(h.store.ledger.size(), 1u);
  EXPECT_EQ(h.store.ledger[0].ledger.cost, "0.580000");
  EXPECT_NE(h.store.event.find(R"("input_tokens":251000)"), std::string::npos) << h.store.event;
  EXPECT_NE(h.store.event.find(R"("output_tokens":10000)"), std::string::npos) << h.store.event;
  EXPECT_NE(h.store.event.find(R"("cost":"0.582000")"), std::string::npos) << h.store.event;
  EXPECT_NE(h.store.event.find(R"("currency":"CNY")"), std::string::npos) << h.store.event;
  EXPECT_EQ(h.publisher.published.at(0).value, h.store.event)
      << "the event published is the one stored with the end";
}

TEST(TaskRunner, ATaskThatRunsOutOfTimeEndsWithTheCodeDeadline) {
  Harness h;
  h.store.remaining_ms = 2000;
  h.model.then(Error{ErrorKind::kTimeout, "no answer before the deadline", ErrorCode::kDeadline},
               2000ms);
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "timed_out");
  expect_ended_with(h, ErrorCode::kDeadline);
}

TEST(TaskRunner, ATaskOutOfStepsEndsWithTheCodeMaxSteps) {
  Harness h;
  h.store.spec.max_steps = 1;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(calls_reply({call("c2", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(calls_reply({call("c3", "search_items", R"({"keyword":"周会"})")}));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "failed");
  expect_ended_with(h, ErrorCode::kMaxSteps);
}

TEST(TaskRunner, ASucceededTaskHasNoErrorCode) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(finish_reply("done"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  ASSERT_TRUE(h.store.ended);
  EXPECT_EQ(h.store.status, "succeeded");
  EXPECT_FALSE(h.store.ended->error_code.has_value());
  EXPECT_EQ(h.store.ended->result_event.find("error_code"), std::string::npos);
}

TEST(TaskRunner, ACancellationDuringAModelCallStopsAtOnceAndEndsCancelled) {
  Harness h;
  h.model.then_hang();
  h.model.on_call = [&h] { asio::post(h.io, [&h] { h.runner.cancel(kTaskId); }); };
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "cancelled");
  EXPECT_EQ(h.model.calls, 1);
  EXPECT_TRUE(h.tools.invocations.empty());
  EXPECT_TRUE(h.store.ledger.empty());
  expect_ended_with(h, ErrorCode::kCancelled);
}

TEST(TaskRunner, TheAnswerThatEndsTheTaskIsCheckpointedAndBilledInTheEndsOwnWrite) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}, 100, 10));
  h.model.then(finish_reply("done", 140, 20));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "succeeded");
  ASSERT_TRUE(h.store.ended);
  ASSERT_TRUE(h.store.ended->last_step) << "the final answer rides on the end: one commit";
  EXPECT_EQ(h.store.ended->last_step->step, 1);
  EXPECT_EQ(h.store.ended->last_step->ledger.usage.input, 140);
  EXPECT_EQ(h.store.steps_with_end, 1);
  ASSERT_EQ(h.store.ledger.size(), 2u) << "both answers billed, each once";
  EXPECT_EQ(h.store.ledger[0].step, 0) << "the first in a checkpoint of its own";
  EXPECT_EQ(h.store.ledger[1].step, 1);
  EXPECT_EQ(h.store.steps.size(), 2u) << "a replay finds both steps";
  EXPECT_TRUE(h.store.in_flight.empty()) << "both calls' records settled";
  // The result event counts the last step and its tokens, as before.
  EXPECT_NE(h.store.event.find(R"("steps":2)"), std::string::npos) << h.store.event;
}

TEST(TaskRunner, AnAnswerThatEndsTheTaskIsBilledUnreconciledWhenTheEndIsFenced) {
  Harness h;
  h.model.then(finish_reply("done", 130, 25));
  h.model.on_call = [&h] { h.store.take_over(); };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_FALSE(h.store.ended) << "the new attempt ends the task";
  EXPECT_TRUE(h.store.ledger.empty()) << "the step is the new owner's";
  ASSERT_EQ(h.store.charges.size(), 1u);
  EXPECT_EQ(h.store.charges[0].step, 0);
  ASSERT_EQ(h.store.charges[0].charges.size(), 1u);
  EXPECT_EQ(h.store.charges[0].charges[0].charge.reason, ChargeLoss::kLeaseLost);
  EXPECT_EQ(h.store.charges[0].charges[0].charge.usage.input, 130);
  EXPECT_EQ(h.store.charges[0].charges[0].charge.usage.output, 25);
  EXPECT_EQ(h.store.settled, 1) << "its record settled by the bill, not left to the scheduler";
  EXPECT_TRUE(h.store.in_flight.empty());
}

TEST(TaskRunner, AFenceDuringAModelCallStopsAtOnceWithoutWritingAnything) {
  Harness h;
  h.model.then_hang();
  h.model.on_call = [&h] { asio::post(h.io, [&h] { h.runner.fence(); }); };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_EQ(h.store.status, "running") << "nothing written: the lease keeper hands it back";
  EXPECT_FALSE(h.store.ended);
  EXPECT_TRUE(h.store.ledger.empty());
  EXPECT_TRUE(h.tools.invocations.empty());
  EXPECT_TRUE(h.publisher.published.empty());
  EXPECT_EQ(h.model.calls, 1);
}

TEST(TaskRunner, EveryWriteCarriesTheClaimingIncarnationAndAnotherOwnerAtTheSameAttemptStopsIt) {
  Harness h;
  h.store.incarnation = 41;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  // While the second call is under way the row passes to incarnation 42 at the same attempt
  // (a row an operator or a bug reset): the attempt alone would let this run write on.
  h.model.then(finish_reply("done"));
  h.model.on_call = [&h] {
    if (h.model.calls == 2)
      h.store.owner = 42;
  };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  ASSERT_EQ(h.store.ledger.size(), 1u) << "the first step was written under incarnation 41";
  EXPECT_EQ(h.store.ledger[0].incarnation, 41);
  EXPECT_FALSE(h.store.ended) << "the end was fenced off";
  EXPECT_TRUE(h.publisher.published.empty());
}

TEST(TaskRunner, AFenceThatFailsAtACheckpointStopsTheRunBeforeItsToolsRun) {
  Harness h;
  h.model.then(calls_reply({call("c1", "create_item", R"({"title":"x"})")}));
  h.model.on_call = [&h] { h.store.take_over(); };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_TRUE(h.tools.invocations.empty()) << "a call of an unsaved step never runs";
  EXPECT_TRUE(h.store.ledger.empty());
  EXPECT_FALSE(h.store.ended);
}

// A worker stopped (SIGSTOP, a VM paused) longer than its lease comes back to find the task
// taken over: its next write is refused. It did not die, so the attempt it ran is handed back
// under the incarnation that claimed it and not charged (issue: repeated stalls ended tasks
// attempts_exhausted with every worker alive).
TEST(TaskRunner, ARunWhoseWriteIsRefusedAfterAStallHandsBackItsAttemptUnderItsIncarnation) {
  Harness h;
  h.store.incarnation = 41;
  std::vector<ports::HeldTask> abandoned;
  h.runner.set_abandoned_handler([&](ports::HeldTask task) { abandoned.push_back(task); });
  h.model.then(calls_reply({call("c1", "create_item", R"({"title":"x"})")}));
  h.model.on_call = [&h] { h.store.take_over(); };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_TRUE(h.tools.invocations.empty());
  ASSERT_EQ(abandoned.size(), 1u);
  EXPECT_EQ(abandoned[0].task_id, kTaskId);
  EXPECT_EQ(abandoned[0].attempt, 1) << "the attempt this run held, not the new owner's";
  EXPECT_EQ(abandoned[0].incarnation, 41) << "the incarnation that claimed it";
  EXPECT_TRUE(h.runner.held().empty());
}

// A run the fence stopped is in what the keeper collected when it raised the fence: reported
// again, a task taken over meanwhile would count two releases for one attempt.
TEST(TaskRunner, ARunStoppedByTheFenceIsLeftToTheKeeperNotReportedAgain) {
  Harness h;
  std::vector<ports::HeldTask> abandoned;
  h.runner.set_abandoned_handler([&](ports::HeldTask task) { abandoned.push_back(task); });
  h.model.then_hang();
  h.model.on_call = [&h] { asio::post(h.io, [&h] { h.runner.fence(); }); };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_TRUE(abandoned.empty());
}

TEST(TaskRunner, AStoreOutageAtACheckpointStopsBeforeTheToolsAndReportsTheTaskAbandoned) {
  Harness h;
  std::vector<ports::HeldTask> abandoned;
  h.runner.set_abandoned_handler([&](ports::HeldTask task) { abandoned.push_back(task); });
  h.model.then(calls_reply({call("c1", "create_item", R"({"title":"x"})")}));
  h.model.on_call = [&h] { h.store.store_error = Error{ErrorKind::kTransient, "connection lost"}; };
  EXPECT_EQ(h.run(), RunOutcome::kStoreUnavailable);
  EXPECT_TRUE(h.tools.invocations.empty());
  EXPECT_FALSE(h.store.ended);
  // Still this worker's in the store and run by nobody: the lease keeper hands it back.
  ASSERT_EQ(abandoned.size(), 1u);
  EXPECT_EQ(abandoned[0].task_id, kTaskId);
  EXPECT_EQ(abandoned[0].attempt, 1);
  EXPECT_TRUE(h.runner.held().empty());
}

TEST(TaskRunner, ADrainHandsTheTaskBackAtTheNextCheckpoint) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}));
  h.model.on_call = [&h] { h.runner.drain(); };
  EXPECT_EQ(h.run(), RunOutcome::kReleased);
  EXPECT_EQ(h.store.status, "queued");
  EXPECT_EQ(h.store.releases, 1);
  EXPECT_EQ(h.store.ledger.size(), 1u) << "the step the model answered is kept";
  EXPECT_EQ(h.tools.invocations.size(), 0u) << "stopped at the checkpoint, before the tools";
  EXPECT_FALSE(h.store.ended);
}

// A claim that commits while the worker drains makes the task this worker's. The drain ended
// when no run was left, while such claims were still under way: the worker retired, no run
// handed their tasks back, and the scheduler recovered them from a worker that had not died,
// charging an attempt (found by the chaos run: nine tasks claimed 0.1 s before a SIGTERM,
// each at attempt 2 with no worker death). A claim under way counts as running until its
// answer is acted on, and the run it starts hands the task back.
TEST(TaskRunner, AClaimUnderWayCountsAsRunningAndADrainMeanwhileHandsItsTaskBack) {
  Harness h;
  std::size_t running_while_claiming = 0;
  h.store.on_claim = [&h, &running_while_claiming] {
    running_while_claiming = h.runner.running();
    h.runner.drain();  // SIGTERM while the claim commits
  };
  EXPECT_EQ(h.runner.running(), 0u);
  EXPECT_EQ(h.run(), RunOutcome::kReleased);
  EXPECT_EQ(running_while_claiming, 1u) << "a drain would not have waited for the claim";
  EXPECT_EQ(h.runner.running(), 0u);
  EXPECT_EQ(h.store.status, "queued");
  EXPECT_EQ(h.store.releases, 1) << "handed back: the attempt does not count";
  EXPECT_EQ(h.model.calls, 0) << "stopped before its first call";
}

}  // namespace
}  // namespace agentfleet::worker::runner_test
