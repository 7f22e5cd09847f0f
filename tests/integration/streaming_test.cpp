// Model streaming on the embedded fleet (issue 18, item 3): a task on a model configured
// with `stream: true` runs through llm-sim's streamed answers (server-sent events written in
// pieces cut anywhere, tool-call arguments in interleaved fragments) like one on a model
// that answers whole, and its event stream gets the model's text while the model writes it.
// (The assembly of chunks, retries of a cut stream and the run's deltas are unit tests:
// chat_stream_test.cpp, model_client_test.cpp, task_runner_test.cpp.)

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>
#include <vector>

#include "tests/integration/fleet_client.hpp"
#include "tests/integration/topic_reader.hpp"

namespace agentfleet::test {
namespace {

using bhttp = boost::beast::http::verb;

std::string llm_sim() {
  return "http://127.0.0.1:" + env()["LLM_SIM_PORT"];
}

// The data.text of the task's delta events of `step`, in the order they were published.
std::vector<std::string> deltas_of(const std::vector<Letter>& letters, const std::string& task_id,
                                   int step) {
  std::vector<std::string> texts;
  for (const Letter& letter : letters) {
    rapidjson::Document e = parse(letter.value);
    if (str(e, "task_id") != task_id || str(e, "event") != "delta" || num(e, "step") != step)
      continue;
    texts.push_back(str(at(e, "data"), "text"));
  }
  return texts;
}

TEST(Streaming, AStreamingModelRunsTheTaskAndItsTextArrivesInPiecesAsItIsWritten) {
  const std::string user = "stream-" + run_tag();
  TopicReader events("agent.tasks.events");
  // The sample that moves a meeting: its first answer says what it will do, then searches.
  const std::string id = submit(R"({"user_id":")" + user +
                                R"(","text":"2月8日的会议改到晚上8点","model":"sim-stream-model",)"
                                R"("idempotency_key":"s-1"})");
  auto task = wait_terminal(id);
  ASSERT_EQ(str(task, "status"), "succeeded") << str(task, "error");
  EXPECT_GE(num(task, "steps"), 2);
  const auto& letters = events.read_until([&](const std::vector<Letter>& read) {
    for (const Letter& l : read) {
      if (l.value.find(id) != std::string::npos &&
          l.value.find("\"event\":\"done\"") != std::string::npos)
        return true;
    }
    return false;
  });
  const std::vector<std::string> pieces = deltas_of(letters, id, 0);
  ASSERT_GE(pieces.size(), 2u) << "the text came in pieces, not once whole";
  std::string joined;
  for (const auto& p : pieces)
    joined += p;
  EXPECT_EQ(joined, "先查找2月8日的会议。");

  // The step's answer is what a whole answer would have been: its call ran with its
  // arguments, and the tokens billed are llm-sim's, from the stream's usage chunk.
  const auto& trace = at(task, "trace");
  ASSERT_TRUE(trace.IsArray() && trace.Size() >= 1);
  EXPECT_EQ(str(trace[0], "content"), "先查找2月8日的会议。");
  EXPECT_EQ(pg_count("SELECT count(*) FROM usage_ledger WHERE task_id = $1::uuid AND "
                     "usage_estimated",
                     id),
            0)
      << "the usage chunk came";
  EXPECT_GT(num(at(task, "usage"), "input_tokens"), 0);
}

TEST(Streaming, AStreamCutInTheMiddleIsAskedAgainAndTheTaskStillSucceeds) {
  const std::string user = "stream-cut-" + run_tag();
  // llm-sim cuts the first answer of this scenario's first step half-way through its body.
  auto fault = fetch(llm_sim() + "/admin/faults", bhttp::post,
                     R"({"mode":"close_mid_response","scenario":"bench","step":0,"count":1})");
  ASSERT_EQ(fault.status, 201) << fault.body;
  const std::string id = submit(R"({"user_id":")" + user +
                                R"(","text":"bench: steps=2 calls=2","model":"sim-stream-model",)"
                                R"("idempotency_key":"s-2"})");
  auto task = wait_terminal(id);
  ASSERT_EQ(str(task, "status"), "succeeded") << str(task, "error");
  EXPECT_EQ(num(task, "tool_calls"), 4) << "both steps' two calls, assembled from fragments";
  EXPECT_EQ(pg_count("SELECT count(*) FROM usage_unreconciled WHERE task_id = $1::uuid AND "
                     "reason = 'connection_lost'",
                     id),
            1)
      << "the cut answer may have been charged: billed as unreconciled";
}

}  // namespace
}  // namespace agentfleet::test
