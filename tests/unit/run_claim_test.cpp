// The attempt and its claim (worker/run_claim.cpp), and the run's start (worker/run_start.cpp):
// claims under a fence, after a lapse, in doubt; a resumed task's replay; the checks before the
// first call.
// Fakes and harness: tests/unit/task_runner_harness.hpp.
#include "tests/unit/task_runner_harness.hpp"

#include <gtest/gtest.h>

namespace agentfleet::worker::runner_test {
namespace {

TEST(TaskRunner, AResumedTaskNeverCallsOrBillsASavedModelStepAgain) {
  Harness h;
  // Attempt 1 saved step 0 with its tool results and step 1 without (the worker died while
  // its tool call ran).
  h.store.attempt = 1;
  h.store.checkpoint(0, calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}),
                     R"([{"call_id":"c1","tool":"search_items","ok":true,"content":"{}"}])");
  h.store.checkpoint(1, calls_reply({call("c2", "search_items", R"({"keyword":"周会"})")}),
                     std::nullopt);
  h.model.then(finish_reply("done"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.attempt, 2);
  EXPECT_EQ(h.model.calls, 1) << "only the step after the checkpoints is asked of the model";
  ASSERT_EQ(h.store.ledger.size(), 1u) << "the saved steps are not billed again";
  EXPECT_EQ(h.store.ledger[0].step, 2);
  // Step 0's tools are not run again; step 1's run again under the key the first attempt
  // used, so a tool service that saw it answers from its record.
  EXPECT_EQ(keys_of(h.tools.invocations), std::vector<std::string>{std::string(kTaskId) + ":1:0"});
  EXPECT_EQ(h.store.status, "succeeded");
  // The model saw the whole conversation: system, user, and both replayed steps.
  ASSERT_EQ(h.model.sent_messages.size(), 1u);
  EXPECT_EQ(h.model.sent_messages[0], 6u);
}

TEST(TaskRunner, AModelTheUsersTierDoesNotAllowIsNeverCalled) {
  // The tier changed after the submission was checked (or the task came in a batch).
  Harness h;
  h.store.user_tier = "m2-only";
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.calls, 0);
  expect_ended_with(h, ErrorCode::kModelNotAllowed);
  EXPECT_EQ(h.store.ended->error, "model 'm1' is not allowed for tier 'm2-only' (allowed: m2)");
}

TEST(TaskRunner, AUserWithoutABudgetIsNotAskedForTheirSpend) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}));
  h.model.then(finish_reply("done"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "succeeded");
  EXPECT_EQ(h.store.spend_reads, 0) << "the tier's budget is 0: none";
}

TEST(TaskRunner, AFencedRunnerClaimsNothingUntilTheFenceIsLifted) {
  Harness h;
  h.runner.fence();
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}));
  h.model.then(finish_reply("done"));
  std::optional<RunOutcome> outcome;
  asio::co_spawn(h.io, h.runner.run(kTaskId, kUser, ""),
                 [&](std::exception_ptr, RunOutcome o) { outcome = o; });
  h.io.poll();  // the claim waits for the fence
  EXPECT_FALSE(outcome.has_value());
  EXPECT_EQ(h.store.claims, 0);
  h.runner.unfence();
  h.io.run();
  EXPECT_EQ(outcome, RunOutcome::kFinished);
  EXPECT_EQ(h.store.claims, 1);
  EXPECT_EQ(h.store.status, "succeeded");
}

TEST(TaskRunner, AClaimThatRanAfterTheLivenessLapsedIsMadeAgainUnderTheNextIncarnation) {
  Harness h;
  h.store.not_live_claims = 1;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}));
  h.model.then(finish_reply("done"));
  std::optional<RunOutcome> outcome;
  asio::co_spawn(h.io, h.runner.run(kTaskId, kUser, ""),
                 [&](std::exception_ptr, RunOutcome o) { outcome = o; });
  h.io.poll();
  EXPECT_FALSE(outcome.has_value()) << "it waits for a new incarnation";
  EXPECT_EQ(h.store.claims, 1);
  h.runner.fence();  // the lease keeper finds the lapse and registers anew
  h.io.restart();
  h.io.poll();
  EXPECT_EQ(h.store.claims, 1) << "not under the old incarnation again";
  h.runner.unfence();
  h.io.restart();
  h.io.run();
  EXPECT_EQ(outcome, RunOutcome::kFinished);
  EXPECT_EQ(h.store.claims, 2);
  EXPECT_EQ(h.store.attempt, 1) << "no attempt spent on the refused claim";
  EXPECT_EQ(h.store.status, "succeeded");
}

TEST(TaskRunner, AClaimAnsweredAfterAFenceWentUpIsNotRunAndIsHandedBackUnderItsIncarnation) {
  // The fence collected the runs the worker knew; this claim was still on its way to the
  // store. Its incarnation may lapse: run, it could be taken over mid-call; left alone, its
  // recovery would cost the task an attempt that no crash lost.
  Harness h;
  std::vector<ports::HeldTask> abandoned;
  h.runner.set_abandoned_handler([&](ports::HeldTask task) { abandoned.push_back(task); });
  h.model.then(finish_reply("done"));
  h.store.on_claim = [&h] {
    h.runner.fence();
    h.runner.unfence();  // the keeper even registered anew before the answer came
  };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_EQ(h.model.calls, 0);
  EXPECT_TRUE(h.runner.held().empty());
  ASSERT_EQ(abandoned.size(), 1u);
  EXPECT_EQ(abandoned[0].task_id, kTaskId);
  EXPECT_EQ(abandoned[0].attempt, 1);
  EXPECT_EQ(abandoned[0].incarnation, 7) << "handed back by the incarnation that claimed it";
}

TEST(TaskRunner, AClaimInDoubtThatCommittedIsHandedBackAtTheAttemptItMade) {
  // The claim committed and its answer was lost; the retry finds the task run by this
  // incarnation at attempt 1 and no run of it here. Handed back at attempt 1 (not "attempt
  // unknown"), the release counts even if the task is taken over before the hand-back.
  Harness h;
  std::vector<ports::HeldTask> abandoned;
  h.runner.set_abandoned_handler([&](ports::HeldTask task) { abandoned.push_back(task); });
  h.store.lost_claim_answers = 1;
  EXPECT_EQ(h.run(), RunOutcome::kSkipped);
  EXPECT_EQ(h.store.claims, 2);
  EXPECT_EQ(h.model.calls, 0) << "not run: its answer never came";
  ASSERT_EQ(abandoned.size(), 1u);
  EXPECT_EQ(abandoned[0].task_id, kTaskId);
  EXPECT_EQ(abandoned[0].attempt, 1);
  EXPECT_EQ(abandoned[0].incarnation, 7);
}

TEST(TaskRunner, AClaimInDoubtOfATaskAnotherRunHereHoldsHandsNothingBack) {
  // The claim in doubt took nothing; a second dispatch message of the task was claimed by
  // another run of this worker meanwhile, which still runs it when the retry comes. The
  // retry finds the task run by this incarnation, but by that run: nothing is handed back.
  Harness h;
  std::vector<ports::HeldTask> abandoned;
  h.runner.set_abandoned_handler([&](ports::HeldTask task) { abandoned.push_back(task); });
  h.store.claim_error = Error{ErrorKind::kTransient, "postgres connection: reset"};
  h.model.then_hang();  // the other run is in its model call
  std::optional<RunOutcome> first;
  asio::co_spawn(h.io, h.runner.run(kTaskId, kUser, ""), [&](std::exception_ptr, RunOutcome o) {
    first = o;
    h.io.stop();
  });
  h.io.poll();  // its claim failed; it waits to try again
  ASSERT_FALSE(first.has_value());
  h.store.claim_error.reset();
  asio::co_spawn(h.io, h.runner.run(kTaskId, kUser, ""), asio::detached);
  h.io.run();
  EXPECT_EQ(first, RunOutcome::kSkipped);
  EXPECT_EQ(h.store.attempt, 1);
  EXPECT_EQ(h.runner.held().size(), 1u) << "the other run holds it";
  EXPECT_TRUE(abandoned.empty()) << "never handed back from under the run that holds it";
}

TEST(TaskRunner, AClaimStillUnderWayWhenTheWorkerStopsMayBeDestroyedAfterTheRunner) {
  // The worker stops its io_context after the drain; a claim still waiting to be tried again
  // is destroyed with the io_context, after the runner (run_worker declares the io_context
  // first). Nothing it destroys may touch the runner (AddressSanitizer would report it).
  Harness h;  // the collaborators; the runner and io_context below are destroyed in that order
  auto io = std::make_unique<asio::io_context>();
  auto runner = std::make_unique<TaskRunner>(h.config, "worker-test", h.model, h.tools, h.store,
                                             h.publisher, h.metrics, h.clock);
  h.store.claim_error = Error{ErrorKind::kTransient, "postgres connection: reset"};
  asio::co_spawn(*io, runner->run(kTaskId, kUser, ""), asio::detached);
  io->poll();  // the claim failed and waits to be tried again
  EXPECT_EQ(h.store.claims, 1);
  runner.reset();
  io.reset();  // destroys the suspended claim
  EXPECT_EQ(h.store.claims, 1);
}

TEST(TaskRunner, ATaskTheStoreDoesNotKnowIsReportedAsSuch) {
  Harness h;
  h.store.spec.task_id = "other";
  std::optional<RunOutcome> outcome;
  asio::co_spawn(h.io, h.runner.run("00000000-0000-4000-8000-0000000000ff", kUser, ""),
                 [&](std::exception_ptr, RunOutcome o) { outcome = o; });
  h.io.run();
  EXPECT_EQ(outcome, RunOutcome::kUnknownTask);
  EXPECT_EQ(h.model.calls, 0);
}

}  // namespace
}  // namespace agentfleet::worker::runner_test
