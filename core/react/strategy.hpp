#pragma once
// What the task runner drives: an agent strategy as a state machine over model replies and
// tool results. `react` (ReactLoop, the default) and `plan_execute` (PlanExecute) implement
// it. The runner asks `request()` what the next model call sends, performs each Step, and
// feeds the outcome back; a resumed task is rebuilt by feeding its checkpoints again, so a
// strategy must be a deterministic function of the replies and results it was given.
//
// Thread-compatible: one instance per run, used by one strand at a time.

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/react/react_loop.hpp"

namespace agentfleet::react {

// The tools a model call offers.
enum class ToolOffer {
  kTaskTools,   // the task's tools and `finish` (ReAct)
  kFinishOnly,  // only `finish` (plan_execute's synthesizer)
  kStepTool,    // only NextCall::tool (plan_execute's executor filling in a tool step)
  kNone,        // none (planner, executor, critic: they answer in text or JSON)
};

struct NextCall {
  const std::vector<Message>* messages = nullptr;  // valid until the next call on the strategy
  ToolOffer tools = ToolOffer::kTaskTools;
  std::string role;  // "react", "planner", "executor", "critic", "synthesizer": for logs
  std::string tool;  // kStepTool: the one tool offered
  // Nonzero: `messages` is a list that only grows by appending for as long as this number
  // stays the same (so its encoding can be kept and appended to, codec::ConversationEncoder);
  // 0: a list built anew for the call.
  std::uint64_t conversation = 0;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // The first step: CallModel, or Fail when nothing can run.
  virtual Step start() = 0;
  // What the CallModel step the runner is about to perform sends.
  virtual NextCall request() const = 0;
  virtual Step on_model_reply(const ModelReply& reply) = 0;
  virtual Step on_tool_results(const CallTools& step, std::vector<ToolObservation> results) = 0;
  // Tool calls run so far (refusals excluded).
  virtual int tool_calls() const = 0;
};

// ReactLoop and its state as a Strategy.
class ReactStrategy final : public Strategy {
 public:
  // `history`: a follow-up's earlier conversation (ReactLoop::start).
  ReactStrategy(Limits limits, ResultMarkers markers, std::set<std::string> allowed_tools,
                std::string system_prompt, std::string user_text,
                std::vector<Message> history = {});
  Step start() override { return CallModel{}; }
  NextCall request() const override {
    // One conversation, appended to for the whole run.
    return NextCall{&state_.messages, ToolOffer::kTaskTools, "react", {}, 1};
  }
  Step on_model_reply(const ModelReply& reply) override {
    return loop_.on_model_reply(state_, reply);
  }
  Step on_tool_results(const CallTools& step, std::vector<ToolObservation> results) override {
    return loop_.on_tool_results(state_, step, std::move(results));
  }
  int tool_calls() const override { return state_.tool_calls; }

 private:
  ReactLoop loop_;
  ReactState state_;
};

}  // namespace agentfleet::react
