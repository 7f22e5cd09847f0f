// A model call's record and bills (worker/model_step.cpp): each try recorded before it is sent,
// the record settled by its checkpoint, and what no checkpoint bills billed unreconciled.
// Fakes and harness: tests/unit/task_runner_harness.hpp.
#include "tests/unit/task_runner_harness.hpp"

#include <gtest/gtest.h>

namespace agentfleet::worker::runner_test {
namespace {

TEST(TaskRunner, AModelCallTheRunStoppedWaitingForIsBilledUnreconciledWhenItsAnswerComes) {
  Harness h;
  h.model.then_held(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}, 300, 40));
  h.model.on_call = [&h] { asio::post(h.io, [&h] { h.runner.cancel(kTaskId); }); };
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "cancelled");
  EXPECT_TRUE(h.store.ledger.empty()) << "no step to bill it with";
  EXPECT_TRUE(h.store.charges.empty()) << "not answered yet";
  h.model.release();
  settle(h, [&h] { return !h.store.charges.empty(); });
  ASSERT_EQ(h.store.charges.size(), 1u) << "the provider charged for the answer nobody read";
  const ports::Charges& billed = h.store.charges[0];
  EXPECT_EQ(billed.task_id, kTaskId);
  EXPECT_EQ(billed.attempt, 1);
  EXPECT_EQ(billed.step, 0);
  EXPECT_EQ(billed.user_id, kUser);
  EXPECT_EQ(billed.model, "m1");
  ASSERT_EQ(billed.charges.size(), 1u);
  EXPECT_EQ(billed.charges[0].charge.reason, ChargeLoss::kAbandoned);
  EXPECT_FALSE(billed.charges[0].charge.estimated) << "the provider's own usage";
  EXPECT_EQ(billed.charges[0].charge.usage.input, 300);
  EXPECT_EQ(billed.charges[0].charge.usage.output, 40);
  EXPECT_FALSE(billed.charges[0].cost.empty());
  EXPECT_FALSE(billed.charges[0].currency.empty());
  EXPECT_TRUE(h.tools.invocations.empty()) << "its calls are never run";
}

TEST(TaskRunner, AnAnswerItsRunCouldNotCheckpointAfterTheLeaseWasLostIsBilledUnreconciled) {
  Harness h;
  h.model.then(calls_reply({call("c1", "create_item", R"({"title":"x"})")}, 120, 30));
  h.model.on_call = [&h] { h.store.take_over(); };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_TRUE(h.store.ledger.empty()) << "the step is the new owner's";
  ASSERT_EQ(h.store.charges.size(), 1u);
  ASSERT_EQ(h.store.charges[0].charges.size(), 1u);
  EXPECT_EQ(h.store.charges[0].attempt, 1) << "the attempt that made the call";
  EXPECT_EQ(h.store.charges[0].charges[0].charge.reason, ChargeLoss::kLeaseLost);
  EXPECT_EQ(h.store.charges[0].charges[0].charge.usage.input, 120);
}

TEST(TaskRunner, AttemptsTheClientReportsLostAreBilledUnreconciledAtTheirStep) {
  Harness h;
  LostCharge timed_out;
  timed_out.usage.input = 90;
  timed_out.estimated = true;
  timed_out.reason = ChargeLoss::kTimeout;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(finish_reply("done"), 0ms, {timed_out});
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "succeeded");
  EXPECT_EQ(h.store.ledger.size(), 2u) << "the answers are billed as always";
  ASSERT_EQ(h.store.charges.size(), 1u);
  EXPECT_EQ(h.store.charges[0].step, 1);
  ASSERT_EQ(h.store.charges[0].charges.size(), 1u);
  EXPECT_EQ(h.store.charges[0].charges[0].charge.reason, ChargeLoss::kTimeout);
  EXPECT_TRUE(h.store.charges[0].charges[0].charge.estimated);
  // Billed at the prices of the model: 90 input tokens cost something.
  EXPECT_NE(h.store.charges[0].charges[0].cost, "0.000000");
  EXPECT_NE(h.registry.render().find(
                "agentfleet_model_charges_unreconciled_total{model=\"m1\",reason=\"timeout\"} 1"),
            std::string::npos);
}

TEST(TaskRunner, EachModelCallIsRecordedBeforeItIsSentAndItsCheckpointSettlesTheRecord) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(finish_reply("done"));
  std::vector<std::size_t> recorded_at_send;
  h.model.on_call = [&h, &recorded_at_send] {
    recorded_at_send.push_back(h.store.in_flight.size());
  };
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(recorded_at_send, (std::vector<std::size_t>{1, 1})) << "each call's own record";
  // The first call's record is a write of its own, at the client's estimate; the second's
  // rides on the tool results before it, at the runner's estimate of the same request.
  ASSERT_EQ(h.store.calls_sent.size(), 1u) << "the second call needs no write of its own";
  ASSERT_EQ(h.store.calls_carried.size(), 1u);
  EXPECT_EQ(h.store.calls_sent[0].input_tokens, ScriptedModel::kEstimatedInput);
  EXPECT_GT(h.store.calls_carried[0].input_tokens, 0);
  const std::vector<ports::CallSent> records{h.store.calls_sent[0], h.store.calls_carried[0]};
  for (int step = 0; step < 2; ++step) {
    const ports::CallSent& sent = records[static_cast<std::size_t>(step)];
    EXPECT_EQ(sent.task_id, kTaskId);
    EXPECT_EQ(sent.attempt, 1);
    EXPECT_EQ(sent.step, step);
    EXPECT_EQ(sent.user_id, kUser);
    EXPECT_EQ(sent.model, "m1");
    EXPECT_NE(sent.cost, "0.000000") << "priced at the model's input price";
    EXPECT_FALSE(sent.currency.empty());
    EXPECT_EQ(sent.incarnation, h.store.incarnation);
  }
  EXPECT_EQ(h.model.call_ids, (std::vector<std::string>{std::string(kTaskId) + ":1:0",
                                                        std::string(kTaskId) + ":1:1"}));
  EXPECT_TRUE(h.store.in_flight.empty()) << "both checkpoints billed their calls";
  EXPECT_TRUE(h.store.charges.empty());
}

TEST(TaskRunner, ACallInFlightWhenTheWorkerStopsIsLeftRecordedForTheSchedulerToBill) {
  Harness h;
  h.model.then_hang();
  h.model.on_call = [&h] { asio::post(h.io, [&h] { h.io.stop(); }); };  // the worker dies
  asio::co_spawn(h.io, h.runner.run(kTaskId, kUser, ""), asio::detached);
  h.io.run();
  EXPECT_EQ(h.model.tries_sent, 1);
  EXPECT_TRUE(h.store.charges.empty()) << "nothing was left to bill it";
  EXPECT_TRUE(h.store.ledger.empty());
  ASSERT_EQ(h.store.in_flight.size(), 1u) << "but its record is durable";
  const std::vector<ports::CallSent> billed = h.store.settle_lost_calls();
  ASSERT_EQ(billed.size(), 1u);
  EXPECT_EQ(billed[0].step, 0);
  EXPECT_EQ(billed[0].input_tokens, ScriptedModel::kEstimatedInput);
}

TEST(TaskRunner, TriesLostBeforeTheLastAreBilledBeforeTheNextTryIsSent) {
  Harness h;
  LostCharge timed_out;
  timed_out.usage.input = 90;
  timed_out.reason = ChargeLoss::kTimeout;
  LostCharge cut;
  cut.usage.input = 95;
  cut.reason = ChargeLoss::kConnectionLost;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(finish_reply("done"), 0ms, {timed_out, cut});
  std::size_t billed_at_last_try = 0;
  h.model.on_call = [&h, &billed_at_last_try] {
    for (const auto& c : h.store.charges)
      billed_at_last_try += c.charges.size();
  };
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.tries_sent, 4) << "one for the first call, three for the second";
  EXPECT_EQ(billed_at_last_try, 2u) << "a worker dying during the last try loses neither";
  ASSERT_EQ(h.store.charges.size(), 2u) << "each billed before the try after it";
  EXPECT_EQ(h.store.charges[0].charges.at(0).charge.reason, ChargeLoss::kTimeout);
  EXPECT_EQ(h.store.charges[1].charges.at(0).charge.reason, ChargeLoss::kConnectionLost);
  EXPECT_FALSE(h.store.charges[0].settles_call) << "the call was still going";
  EXPECT_EQ(h.store.charges[1].step, 1);
  EXPECT_EQ(h.store.calls_sent.size() + h.store.calls_carried.size(), 4u)
      << "every try recorded (the second call's first with the tool results)";
  EXPECT_EQ(h.store.calls_carried.size(), 1u);
  EXPECT_TRUE(h.store.in_flight.empty());
  EXPECT_EQ(h.store.ledger.size(), 2u);
}

TEST(TaskRunner, ACallThatCouldNotBeRecordedIsNotSentAndTheTaskIsLeftForRecovery) {
  Harness h;
  h.model.then(finish_reply("done"));
  h.store.record_error = Error{ErrorKind::kTransient, "connection to postgres lost"};
  EXPECT_EQ(h.run(), RunOutcome::kStoreUnavailable);
  EXPECT_EQ(h.model.tries_sent, 0) << "a call that could not be recorded is never sent";
  EXPECT_TRUE(h.store.ledger.empty());
  EXPECT_TRUE(h.store.charges.empty());
  EXPECT_EQ(h.store.status, "running") << "left for lease recovery, not failed";
}

TEST(TaskRunner, ACallWhoseTaskIsNoLongerThisAttemptsIsNotSent) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(finish_reply("done"));
  // Another attempt takes the task over while the first step's tools run: the results, and
  // the second call's record that rides on them, are refused.
  h.tools.on_call = [&h] { h.store.take_over(); };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_EQ(h.model.tries_sent, 1) << "the second call was refused its record, so not sent";
  EXPECT_EQ(h.store.calls_sent.size(), 1u);
  EXPECT_TRUE(h.store.calls_carried.empty());
}

// A run that stops between a tool round and the call its results lead to (a cancel, a drain,
// the deadline, a fence) never sends that call: the record its round wrote goes, unbilled,
// or the scheduler would bill a call never made once the worker's incarnation ends.
TEST(TaskRunner, ARecordWrittenWithToolResultsIsSettledUnbilledWhenTheRunStopsBeforeTheCall) {
  struct Stop {
    const char* name;
    std::function<void(Harness&)> now;
    RunOutcome outcome;
    const char* status;
    bool by_the_end;  // the task's end removes the record; else a write of its own settles it
  };
  const std::vector<Stop> stops{
      {"cancel", [](Harness& h) { h.runner.cancel(kTaskId); }, RunOutcome::kFinished, "cancelled",
       true},
      {"drain", [](Harness& h) { h.runner.drain(); }, RunOutcome::kReleased, "queued", false},
      {"deadline", [](Harness& h) { h.clock.advance(std::chrono::hours(1)); },
       RunOutcome::kFinished, "timed_out", true},
      {"fence", [](Harness& h) { h.runner.fence(); }, RunOutcome::kLeaseLost, "running", false},
  };
  for (const Stop& stop : stops) {
    SCOPED_TRACE(stop.name);
    Harness h;
    h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
    h.model.then(finish_reply("done"));
    h.store.on_tool_results = [&h, &stop] { stop.now(h); };
    EXPECT_EQ(h.run(), stop.outcome);
    EXPECT_EQ(h.store.status, stop.status);
    EXPECT_EQ(h.model.tries_sent, 1) << "the second call was not sent";
    ASSERT_EQ(h.store.calls_carried.size(), 1u) << "its record rode on the tool results";
    EXPECT_TRUE(h.store.in_flight.empty()) << "and went when the run stopped";
    EXPECT_EQ(h.store.unsent_ended, stop.by_the_end ? 1 : 0);
    EXPECT_EQ(h.store.settled, stop.by_the_end ? 0 : 1);
    EXPECT_TRUE(h.store.charges.empty()) << "nothing billed for a call never sent";
    EXPECT_EQ(h.store.ledger.size(), 1u);
  }
}

// The same when the run throws there (the runner's last backstop ends the task failed).
TEST(TaskRunner, ARecordWrittenWithToolResultsIsSettledWhenTheRunThrowsBeforeTheCall) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(finish_reply("done"));
  h.store.on_tool_results = [&h] {
    h.runner.cancel(kTaskId);           // the run ends before the call...
    h.store.finish_throws_once = true;  // ...and its end throws
  };
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "failed") << "the backstop's end";
  EXPECT_EQ(h.model.tries_sent, 1);
  ASSERT_EQ(h.store.calls_carried.size(), 1u);
  EXPECT_TRUE(h.store.in_flight.empty()) << "the record of the call never sent went";
  EXPECT_EQ(h.store.unsent_ended, 1) << "with the backstop's end";
  EXPECT_TRUE(h.store.charges.empty());
}

TEST(TaskRunner, ACallTheProviderRefusedSettlesItsRecordWithNothingToBill) {
  Harness h;
  h.model.then(Error{ErrorKind::kFatal, "HTTP 400: invalid request", ErrorCode::kModelUnavailable});
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "failed");
  EXPECT_EQ(h.store.settled, 1) << "its end settled the record";
  EXPECT_TRUE(h.store.in_flight.empty()) << "so the scheduler bills nothing for it";
  EXPECT_TRUE(h.store.charges.empty()) << "a refused request costs nothing";
}

TEST(TaskRunner, AnAbandonedCallTheSchedulerBilledFirstIsNotBilledAgain) {
  Harness h;
  h.model.then_held(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}, 300, 40));
  h.model.on_call = [&h] { asio::post(h.io, [&h] { h.runner.cancel(kTaskId); }); };
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "cancelled");
  // The worker's liveness lapsed meanwhile: the scheduler billed the call from its record.
  EXPECT_EQ(h.store.settle_lost_calls().size(), 1u);
  h.model.release();
  settle(h, [] { return false; });  // the late answer's bill runs its course
  EXPECT_TRUE(h.store.charges.empty()) << "billed once, by the scheduler";
  EXPECT_EQ(h.registry.render().find("agentfleet_model_charges_unreconciled_total{model=\"m1\","
                                     "reason=\"abandoned\"} 1"),
            std::string::npos)
      << "nor counted twice";
}

// Runs one task whose first call the worker prepares, so that it learns the first request's
// prompt for m1; then the store holds a new task (text `next_text`), not claimed yet.
// A task's model calls: one tool round, then the answer.
void script_task(Harness& h) {
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(finish_reply("done"));
}

void learn_first_prompt(Harness& h, const std::string& next_text) {
  script_task(h);
  ASSERT_EQ(h.run(), RunOutcome::kFinished);
  ASSERT_EQ(h.store.status, "succeeded");
  ASSERT_EQ(h.store.calls_sent.size(), 1u) << "the first task's first call: a record of its own";
  ASSERT_TRUE(h.store.calls_claimed.empty()) << "the worker knew no prompt to claim it with";
  h.store.next_task();
  h.store.spec.text = next_text;
  h.io.restart();
}

TEST(TaskRunner, OnceTheWorkerKnowsTheFirstPromptTheClaimRecordsTheFirstCall) {
  // The first call's record rides on the claim's commit: the call is sent with no write of
  // its own, billed (should the worker die) at the prompt's tokens plus the text's.
  Harness h;
  const std::string short_text = "把周会改到晚上8点";
  const std::string long_text = "把周会改到晚上8点, and tell everyone on the team about it";
  learn_first_prompt(h, short_text);
  std::vector<std::size_t> recorded_at_send;
  h.model.on_call = [&h, &recorded_at_send] {
    recorded_at_send.push_back(h.store.in_flight.size());
  };
  script_task(h);
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "succeeded");
  ASSERT_EQ(h.store.calls_claimed.size(), 1u);
  EXPECT_EQ(recorded_at_send, (std::vector<std::size_t>{1, 1})) << "each recorded before it";
  EXPECT_EQ(h.store.calls_sent.size(), 1u) << "the first by the claim: no record of its own";
  EXPECT_EQ(h.store.calls_carried.size(), 2u) << "the second by the tool round, as before";
  EXPECT_TRUE(h.store.in_flight.empty()) << "their checkpoints settled the records";
  EXPECT_EQ(h.store.ledger.size(), 4u);
  const ports::CallSent first = h.store.calls_claimed[0];
  EXPECT_EQ(first.attempt, 1);
  EXPECT_EQ(first.step, 0);
  EXPECT_EQ(first.model, "m1");
  EXPECT_EQ(first.incarnation, h.store.incarnation);
  EXPECT_GT(first.input_tokens, react::estimate_tokens(short_text)) << "the prompt counted";
  EXPECT_EQ(first.cost, billing::format_micros(2 * first.input_tokens)) << "m1: 2 CNY a million";
  EXPECT_EQ(first.currency, "CNY");

  // The same prompt, a longer text: the estimate grows by the text's tokens only.
  h.store.next_task();
  h.store.spec.text = long_text;
  h.io.restart();
  script_task(h);
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  ASSERT_EQ(h.store.calls_claimed.size(), 2u);
  EXPECT_EQ(h.store.calls_claimed[1].input_tokens - first.input_tokens,
            react::estimate_tokens(long_text) - react::estimate_tokens(short_text));
  EXPECT_EQ(h.store.calls_sent.size(), 1u);
}

TEST(TaskRunner, AFirstCallTheClaimRecordedButTheRunNeverSentGoesWithTheEnd) {
  Harness h;
  learn_first_prompt(h, "把周会改到晚上8点");
  const int calls_before = h.model.calls;
  h.store.user_budget_micros = 1'000'000;  // 0.995 of 1 CNY spent: the call could pass it
  h.store.month_spent = {{"CNY", 995'000}};
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.calls, calls_before) << "stopped before the call";
  ASSERT_EQ(h.store.calls_claimed.size(), 1u);
  expect_ended_with(h, ErrorCode::kQuotaExceeded);
  EXPECT_EQ(h.store.unsent_ended, 1) << "the end removed the record";
  EXPECT_EQ(h.store.settled, 0) << "no write of its own";
  EXPECT_TRUE(h.store.in_flight.empty()) << "the scheduler has nothing to bill";
  EXPECT_TRUE(h.store.charges.empty());
}

TEST(TaskRunner, AWorkerThatDiesDuringAFirstCallTheClaimRecordedLeavesItForTheScheduler) {
  Harness h;
  learn_first_prompt(h, "把周会改到晚上8点");
  h.model.then_hang();
  h.model.on_call = [&h] { asio::post(h.io, [&h] { h.io.stop(); }); };  // the worker dies
  asio::co_spawn(h.io, h.runner.run(kTaskId, kUser, ""), asio::detached);
  h.io.run();
  ASSERT_EQ(h.store.calls_claimed.size(), 1u);
  const std::vector<ports::CallSent> billed = h.store.settle_lost_calls();
  ASSERT_EQ(billed.size(), 1u) << "the claim's record is durable";
  EXPECT_EQ(billed[0].step, 0);
  EXPECT_EQ(billed[0].input_tokens, h.store.calls_claimed[0].input_tokens);
  EXPECT_EQ(billed[0].cost, h.store.calls_claimed[0].cost);
}

TEST(TaskRunner, AClaimNotRunAfterAllSettlesTheFirstCallItRecorded) {
  Harness h;
  learn_first_prompt(h, "把周会改到晚上8点");
  const int calls_before = h.model.calls;
  h.store.on_claim = [&h] {  // a fence went up while the claim was on its way
    h.runner.fence();
    h.runner.unfence();
  };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_EQ(h.model.calls, calls_before);
  ASSERT_EQ(h.store.calls_claimed.size(), 1u);
  EXPECT_TRUE(h.store.in_flight.empty()) << "settled: nothing for the scheduler to bill";
  EXPECT_TRUE(h.store.charges.empty());
}

TEST(TaskRunner, AClaimInDoubtThatRecordedTheFirstCallSettlesTheRecordItsRunNeverSends) {
  // The claim committed (recording the first call) and its answer was lost: no run of this
  // worker sends that call, so its record must not wait for the scheduler to bill it.
  Harness h;
  learn_first_prompt(h, "把周会改到晚上8点");
  std::vector<ports::HeldTask> abandoned;
  h.runner.set_abandoned_handler([&](ports::HeldTask task) { abandoned.push_back(task); });
  h.store.lost_claim_answers = 1;
  EXPECT_EQ(h.run(), RunOutcome::kSkipped);
  ASSERT_EQ(h.store.calls_claimed.size(), 1u) << "the lost claim recorded it";
  ASSERT_EQ(abandoned.size(), 1u);
  EXPECT_EQ(abandoned[0].attempt, 1) << "handed back at the attempt it made";
  EXPECT_TRUE(h.store.in_flight.empty()) << "settled: nothing for the scheduler to bill";
  EXPECT_EQ(h.store.settled, 1);
  EXPECT_TRUE(h.store.charges.empty());
}

TEST(TaskRunner, AnAnswerWithoutUsageIsBilledFromItsEstimateAndFlagged) {
  Harness h;
  ModelReply estimated = finish_reply("done", 70, 9);
  estimated.usage_estimated = true;
  h.model.then(estimated);
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  ASSERT_EQ(h.store.ledger.size(), 1u);
  EXPECT_TRUE(h.store.ledger[0].ledger.usage_estimated);
  EXPECT_EQ(h.store.ledger[0].ledger.usage.input, 70);
  EXPECT_TRUE(h.store.charges.empty());
  EXPECT_NE(h.registry.render().find("agentfleet_model_usage_estimated_total{model=\"m1\"} 1"),
            std::string::npos);
}

}  // namespace
}  // namespace agentfleet::worker::runner_test
