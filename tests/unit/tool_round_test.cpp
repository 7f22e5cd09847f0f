// A tool round (worker/tool_round.cpp): idempotency keys, calls an earlier attempt may have
// sent, calls cut short by a cancel or a fence, a drain before calls that are not idempotent.
// Fakes and harness: tests/unit/task_runner_harness.hpp.
#include "tests/unit/task_runner_harness.hpp"

#include <gtest/gtest.h>

namespace agentfleet::worker::runner_test {
namespace {

TEST(TaskRunner, IdempotencyKeysAreTheTaskTheStepAndTheCallIndexTheSameInEveryRun) {
  auto keys = [] {
    Harness h;
    h.model.then(calls_reply({call("a", "search_items", R"({"keyword":"x"})"),
                              call("b", "search_items", R"({"keyword":"y"})")}));
    h.model.then(calls_reply({call("c", "search_items", R"({"keyword":"z"})")}));
    h.model.then(finish_reply("done"));
    EXPECT_EQ(h.run(), RunOutcome::kFinished);
    return keys_of(h.tools.invocations);
  };
  const auto first = keys();
  EXPECT_EQ(first,
            (std::vector<std::string>{std::string(kTaskId) + ":0:0", std::string(kTaskId) + ":0:1",
                                      std::string(kTaskId) + ":1:0"}));
  EXPECT_EQ(keys(), first) << "a second run of the same answers sends the same keys";
}

TEST(TaskRunner, AResumedStepSendsNoCallOfAToolThatIsNotIdempotentAgain) {
  Harness h;
  // Attempt 1 saved step 0 and died while its calls ran: the search may be sent again under
  // its key; the create may have acted, and its service may keep no keys.
  h.store.attempt = 1;
  h.store.checkpoint(0,
                     calls_reply({call("c1", "search_items", R"({"keyword":"周会"})"),
                                  call("c2", "create_item", R"({"title":"周会"})")}),
                     std::nullopt);
  h.model.then(finish_reply("done"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  ASSERT_EQ(h.tools.invocations.size(), 1u);
  EXPECT_EQ(h.tools.invocations[0].tool, "search_items");
  EXPECT_EQ(h.tools.invocations[0].idempotency_key, std::string(kTaskId) + ":0:0");
  EXPECT_EQ(h.tools.invocations[0].attempt, 2) << "X-Task-Attempt: this run's attempt";
  // The model reads that the create's outcome is unknown, and the trace shows it.
  ASSERT_EQ(h.model.sent.size(), 1u);
  const Message& unknown = h.model.sent[0].back();
  EXPECT_EQ(unknown.role, Role::kTool);
  EXPECT_EQ(unknown.tool_call_id, "c2");
  EXPECT_NE(unknown.content.find(R"("code":"outcome_unknown")"), std::string::npos)
      << unknown.content;
  const std::string& trace = h.store.steps.at(0).trace;
  EXPECT_NE(trace.find(R"("status":"outcome_unknown")"), std::string::npos) << trace;
  EXPECT_NE(trace.find(R"("tool":"create_item")"), std::string::npos) << trace;
  EXPECT_EQ(h.store.status, "succeeded");

  // The same step written by this run (no earlier attempt) sends both.
  Harness fresh;
  fresh.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})"),
                                call("c2", "create_item", R"({"title":"周会"})")}));
  fresh.model.then(finish_reply("done"));
  EXPECT_EQ(fresh.run(), RunOutcome::kFinished);
  EXPECT_EQ(fresh.tools.invocations.size(), 2u);
  EXPECT_EQ(fresh.tools.invocations[1].attempt, 1);
}

TEST(TaskRunner, ADrainBetweenAModelStepAndItsNonIdempotentCallsSendsThemFirst) {
  // Handed back before its create was sent, the task's next attempt could only report the
  // create's outcome unknown: the drain waits for the step's calls, then hands it back.
  Harness h;
  h.model.then(calls_reply({call("c1", "create_item", R"({"title":"x"})")}));
  h.model.then(finish_reply("done"));
  h.model.on_call = [&h] { h.runner.drain(); };
  EXPECT_EQ(h.run(), RunOutcome::kReleased);
  ASSERT_EQ(h.tools.invocations.size(), 1u) << "the create was sent before the hand-back";
  EXPECT_EQ(h.store.releases, 1);
  EXPECT_EQ(h.model.calls, 1) << "handed back at the checkpoint after the calls";
  EXPECT_FALSE(h.store.steps.at(0).record.observations.empty()) << "its answer is saved";
}

TEST(TaskRunner, ToolResultsThatCameBeforeACancelAreSavedToTheTraceAndCounted) {
  Harness h;
  // Two calls of one step: search_items answers, create_item never does; the cancel comes
  // while create_item is under way.
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})"),
                            call("c2", "create_item", R"({"title":"周会"})")}));
  h.tools.hangs = {"create_item"};
  h.tools.on_hang = [&h] { asio::post(h.io, [&h] { h.runner.cancel(kTaskId); }); };
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "cancelled");
  expect_ended_with(h, ErrorCode::kCancelled);
  EXPECT_EQ(h.tools.invocations.size(), 2u);
  EXPECT_EQ(h.store.tool_calls, 1) << "the call that answered is counted";
  const auto& row = h.store.steps.at(0);
  EXPECT_TRUE(row.record.observations.empty()) << "a replay would call them again";
  EXPECT_NE(row.trace.find(R"("tool":"search_items")"), std::string::npos) << row.trace;
  EXPECT_NE(row.trace.find(R"("status":"ok")"), std::string::npos) << row.trace;
  EXPECT_NE(row.trace.find(R"("status":"no_answer")"), std::string::npos) << row.trace;
  EXPECT_NE(row.trace.find("no answer before the task was cancelled"), std::string::npos);
  EXPECT_NE(h.store.ended->result_event.find(R"("tool_calls":1)"), std::string::npos)
      << h.store.ended->result_event;
}

TEST(TaskRunner, AFenceDuringToolCallsStopsWithoutWritingWhatTheyAnswered) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})"),
                            call("c2", "create_item", R"({"title":"周会"})")}));
  h.tools.hangs = {"create_item"};
  h.tools.on_hang = [&h] { asio::post(h.io, [&h] { h.runner.fence(); }); };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_EQ(h.store.tool_calls, 0);
  EXPECT_TRUE(h.store.steps.at(0).trace.empty());
  EXPECT_FALSE(h.store.ended);
}

}  // namespace
}  // namespace agentfleet::worker::runner_test
