#pragma once
// The state of one run of worker/task_runner: what outside events ask of it (RunControl),
// what it holds between its steps (TaskRunner::Run), the tool sets its calls offer. Shared
// by the runner's files only (task_runner.cpp, run_claim.cpp, run_start.cpp, model_step.cpp,
// tool_round.cpp, run_end.cpp); nothing else includes it.

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <boost/asio/steady_timer.hpp>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/adapters/log.hpp"
#include "core/codec/openai_codec.hpp"
#include "core/react/context_budget.hpp"
#include "worker/task_runner.hpp"

namespace agentfleet::worker {

using TimePoint = limits::Clock::time_point;

// {"text": ...}: the data of a `delta` event.
inline std::string text_event_json(std::string_view text) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("text");
  w.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

// What outside events ask of one run. Lives as long as the run or a call it abandoned.
struct RunControl {
  bool cancel = false;
  bool lease_lost = false;  // fenced: the worker can no longer prove it owns the task
  bool drain = false;
  // Its terminal write or hand-back is under way.
  bool ending = false;
  // The timer the run is waiting on right now (a model or tool call), cancelled to wake it.
  boost::asio::steady_timer* waiting = nullptr;

  void wake() {
    if (waiting != nullptr)
      waiting->cancel();
  }
  bool interrupted() const { return cancel || lease_lost; }
};

// The tools a call offers, with the `tools` array a function-calling request writes for
// them, encoded once for every call that offers them.
struct TaskRunner::ToolSet {
  std::vector<ports::ToolSchema> schemas;
  std::string json;  // codec::encode_tools(schemas)
};

struct TaskRunner::Run : ClaimedRun {
  std::string user_id;  // from the dispatch message; the claimed row's afterwards
  std::string traceparent;
  ports::ClaimedTask claimed;
  // The worker incarnation the claim was made under: with the attempt, the fence of its
  // writes.
  std::int64_t incarnation = 0;
  int step = -1;  // the ReAct step the run is at (a model call or its tool calls)
  TimePoint deadline;
  TimePoint claimed_at;
  std::shared_ptr<RunControl> control = std::make_shared<RunControl>();
  std::shared_ptr<const ToolSet> schemas;  // the task's tools and finish
  // The conversation's `messages` array, kept across its model calls (function calling).
  codec::ConversationEncoder encoder;
  std::set<std::string> allowed;    // the task's allow-list within the registry
  std::set<std::string> permitted;  // of those, the tools the user's permission level allows
  int progress_seq = 0;
  int steps = 0;
  int tool_calls = 0;
  ports::TaskTotals totals;  // billed so far: earlier attempts' and this run's saved steps
  // The user's monthly budget (0: none) and their spend this month: what the store said
  // when the run began plus what this run's calls cost since, both in the budget currency.
  std::int64_t budget_micros = 0;
  std::int64_t budget_spent_micros = 0;
  // What the task's billed calls cost, every attempt's, in the budget currency (kept when
  // it has a max_cost).
  std::int64_t task_cost_micros = 0;
  // The output allowance of the last model call, when the task's max_tokens capped it.
  std::optional<std::int64_t> capped_output;
  // The last step whose text was streamed to the task's event stream as it came.
  int streamed_step = -1;
  // Set when the last model call was not sent because it could not be recorded first (the
  // store's answer: an error, or the fence).
  std::optional<Result<Status>> call_unrecorded;
  // The step of a model call whose record was written before the run sent it (by the claim,
  // for the first call, or by the tool round before it), while the call is not sent yet:
  // should the run stop first (or throw), the record goes with its end or is settled,
  // nothing billed.
  std::optional<int> unsent_call_step;
  // The checkpoint of a model call whose answer ends the task: written with the end, in its
  // commit (ports::TaskEnd::last_step), not in one of its own.
  std::optional<ports::ModelStep> final_step;

  // What every log line about this run carries.
  log::TaskContext log_context() const {
    return log::TaskContext{task_id,
                            claimed.spec.user_id.empty() ? user_id : claimed.spec.user_id,
                            claimed.spec.batch_id,
                            claimed.attempt,
                            step,
                            log::trace_id_of(traceparent)};
  }
};

// What a model call sends: the conversation (the strategy's own, or a trimmed copy), its
// encoding when the run keeps one, and its input tokens as estimated.
struct TaskRunner::CallInput {
  std::shared_ptr<const std::vector<Message>> messages;
  std::string messages_json;
  std::int64_t tokens = 0;
};

// A model call made ready to send: what the strategy asks, what the call sends, and what the
// spend check allows it (TaskRunner::prepare_call).
struct TaskRunner::PreparedCall {
  react::NextCall request;
  CallInput input;
  billing::SpendDecision spend;
};

// Where a run's strategy is between its steps (TaskRunner::run_strategy and its parts).
struct TaskRunner::Loop {
  // Shared with the model calls, which read its conversation (a call abandoned at a cancel
  // may outlive the run).
  std::shared_ptr<react::Strategy> strategy;
  react::Step next;  // what the strategy asks for next
  int step = 0;      // the number of the next step's checkpoint
  // The pending CallTools of a plan tool step already has its step row (written before its
  // calls ran); their results go into that row.
  bool tool_row_written = false;
  // The pending calls' step was written by an earlier attempt, which may have sent them.
  bool replayed_calls = false;
  const config::ModelConfig* model = nullptr;  // the task's
  // A function-calling conversation is encoded once, each call appending what is new.
  bool keep_encoded = false;
  std::int64_t tool_tokens = 0;  // what the offered tools add to a call's input, estimated
  // What one request may hold: the conversation sent is a trimmed copy (old tool outputs
  // first), never what is checkpointed.
  react::ContextBudget budget;
  // The next model call, prepared by the tool round before it.
  std::optional<PreparedCall> prepared;
};

}  // namespace agentfleet::worker
