// The start of a run: a follow-up's history from its parent, the strategy the task runs.
#include <algorithm>
#include <set>

#include "core/codec/checkpoint_codec.hpp"
#include "core/codec/openai_codec.hpp"
#include "core/codec/plan_codec.hpp"
#include "core/react/prompt.hpp"
#include "worker/run_state.hpp"
#include "worker/task_runner.hpp"

namespace agentfleet::worker {

namespace asio = boost::asio;

namespace {
// The conversation a follow-up starts with: its parent's text, its ReAct turns with every
// call answered (rebuilt from its checkpoints; a plan_execute parent gives its text only),
// and its answer as an assistant message (the result with its options, or how it ended).
std::vector<Message> parent_conversation(const ports::ParentTask& parent,
                                         const config::Config& config,
                                         const react::ResultMarkers& markers) {
  std::vector<Message> history;
  const bool planned =
      parent.strategy == AgentStrategy::kPlanExecute ||
      std::any_of(parent.steps.begin(), parent.steps.end(), [](const ports::StepRecord& r) {
        return !codec::checkpoint_role(r.model_reply).empty();
      });
  if (planned || parent.steps.empty()) {
    history.push_back(Message{Role::kUser, parent.text, {}, {}, {}});
  } else {
    // The ReAct conversation as its checkpoints rebuild it, every call with its result.
    std::set<std::string> allowed;
    for (const auto& tool : config.tools) {
      if (!parent.tools ||
          std::find(parent.tools->begin(), parent.tools->end(), tool.name) != parent.tools->end()) {
        allowed.insert(tool.name);
      }
    }
    const react::ReactLoop loop(react::Limits{static_cast<int>(parent.steps.size()) + 1,
                                              config.react.tool_result_context_chars},
                                markers, allowed);
    react::ReactState state = loop.start({}, parent.text);
    for (const ports::StepRecord& record : parent.steps) {
      auto reply = codec::parse_model_reply_json(record.model_reply);
      if (!reply.ok())
        break;
      react::Step next = loop.on_model_reply(state, reply.value());
      auto* calls = std::get_if<react::CallTools>(&next);
      auto observations = codec::parse_observations_json(record.observations);
      if (calls == nullptr || record.observations.empty() || !observations.ok())
        break;
      loop.on_tool_results(state, *calls, std::move(observations.value()));
    }
    history.assign(std::make_move_iterator(state.messages.begin() + 1),
                   std::make_move_iterator(state.messages.end()));
    // A last assistant turn whose calls have no results (the finish, or calls cut short)
    // gives way to the answer below.
    if (!history.empty() && history.back().role == Role::kAssistant &&
        !history.back().tool_calls.empty()) {
      history.pop_back();
    }
  }
  std::string answer;
  if (parent.result) {
    const auto& list =
        parent.result->type == ResultType::kActionCompleted     ? markers.action_completed
        : parent.result->type == ResultType::kNeedClarification ? markers.need_clarification
                                                                : markers.error;
    answer = (list.empty() ? std::string() : list.front() + " ") + parent.result->message;
    for (std::size_t i = 0; i < parent.result->options.size(); ++i)
      answer += "\n" + std::to_string(i + 1) + ". " + parent.result->options[i];
  } else if (is_terminal(parent.status)) {
    answer = "（该任务以 " + std::string(to_string(parent.status)) + " 结束" +
             (parent.error.empty() ? std::string() : "：" + parent.error) + "）";
  } else {
    answer = "（该任务尚未结束）";
  }
  history.push_back(Message{Role::kAssistant, std::move(answer), {}, {}, {}});
  return history;
}
}  // namespace

asio::awaitable<Result<std::vector<Message>>> TaskRunner::load_history(Run& run) {
  const TaskSpec& spec = run.claimed.spec;
  auto parent = co_await store_.load_parent(spec.parent_task_id, spec.user_id);
  if (!parent.ok())
    co_return parent.error();
  if (!parent.value()) {
    // Only the same user's tasks are parents: another user's is as unknown as none.
    co_return Error{ErrorKind::kNotFound,
                    "no task " + spec.parent_task_id + " of this user to continue"};
  }
  co_return parent_conversation(*parent.value(), config_, markers_);
}

Result<std::unique_ptr<react::Strategy>> TaskRunner::make_strategy(
    const Run& run, const react::PromptValues& values, std::vector<Message> history) const {
  const TaskSpec& spec = run.claimed.spec;
  // A task that names none runs its tier's strategy; a resumed one the strategy its
  // checkpoints were written by (the tier or its strategy may have changed since).
  AgentStrategy kind = parse_agent_strategy(config_.strategy_for(run.claimed.user_tier))
                           .value_or(AgentStrategy::kReact);
  if (spec.strategy) {
    kind = *spec.strategy;
  } else if (!run.claimed.steps.empty()) {
    kind = codec::checkpoint_role(run.claimed.steps.front().model_reply).empty()
               ? AgentStrategy::kReact
               : AgentStrategy::kPlanExecute;
  }
  if (kind == AgentStrategy::kReact) {
    return std::unique_ptr<react::Strategy>(std::make_unique<react::ReactStrategy>(
        react::Limits{spec.max_steps, config_.react.tool_result_context_chars}, markers_,
        run.allowed, react::render_system_prompt(config_.react.system_prompt, values), spec.text,
        std::move(history)));
  }
  const config::ModelConfig& model = *config_.find_model(spec.model);
  if (codec::chat_protocol(model.protocol) != codec::ChatProtocol::kFunctionCalling) {
    return Error{ErrorKind::kInvalid,
                 "strategy plan_execute needs a model that calls functions "
                 "(protocol function_calling); model '" +
                     spec.model + "' uses " + model.protocol};
  }
  // The planner sees the tools the user may call (finish is the synthesizer's alone).
  std::vector<ports::ToolSchema> tools;
  for (const auto& schema : run.schemas->schemas) {
    if (schema.name != kFinishTool)
      tools.push_back(schema);
  }
  return std::unique_ptr<react::Strategy>(std::make_unique<react::PlanExecute>(
      react::PlanExecuteLimits{spec.max_steps, config_.react.tool_result_context_chars,
                               kind == AgentStrategy::kPlanOnly},
      plan_policy_, markers_, std::move(tools), codec::plan_parsers(), values, spec.text, history));
}

}  // namespace agentfleet::worker
