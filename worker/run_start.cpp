// The start of a run: the checks before its first call, its budget and tools, a follow-up's
// history from its parent, the strategy the task runs and the replay of its checkpoints.
#include <algorithm>
#include <limits>
#include <set>

#include "core/adapters/log.hpp"
#include "core/codec/checkpoint_codec.hpp"
#include "core/codec/openai_codec.hpp"
#include "core/codec/plan_codec.hpp"
#include "core/config/time_zone_loader.hpp"
#include "core/react/context_budget.hpp"
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

asio::awaitable<std::optional<RunOutcome>> TaskRunner::check_start(Run& run) {
  const TaskSpec& spec = run.claimed.spec;
  if (run.claimed.cancel_requested) {
    co_return co_await finish(run, TaskStatus::kCancelled, std::nullopt, "cancelled before it ran",
                              ErrorCode::kCancelled);
  }
  if (run.claimed.schedule_expired) {
    co_return co_await finish(run, TaskStatus::kTimedOut, std::nullopt,
                              "waited in the queue longer than schedule_timeout_s (" +
                                  std::to_string(spec.schedule_timeout_s) + ")",
                              ErrorCode::kScheduleTimeout);
  }
  if (!config_.find_model(spec.model)) {
    co_return co_await finish(run, TaskStatus::kFailed, std::nullopt,
                              "unknown model '" + spec.model + "'", ErrorCode::kUnknownModel);
  }
  // The tier may have changed since the submission was checked, and batch lines are not.
  if (std::string refusal = config_.model_refusal(run.claimed.user_tier, spec.model);
      !refusal.empty()) {
    co_return co_await finish(run, TaskStatus::kFailed, std::nullopt, std::move(refusal),
                              ErrorCode::kModelNotAllowed);
  }
  // A budget is held before every model call (see spend_check), from the month's spend as
  // it is now.
  run.budget_micros = config_.monthly_budget_micros_for(run.claimed.user_tier,
                                                        run.claimed.user_monthly_budget_micros);
  if (run.budget_micros > 0) {
    auto spent = co_await store_.month_spend(spec.user_id, config_.billing.time_zone);
    if (!spent.ok()) {
      log::warn("worker", run.log_context(),
                "could not read the month's spend for the budget (left for lease recovery): " +
                    spent.error().message);
      co_return RunOutcome::kStoreUnavailable;
    }
    run.budget_spent_micros = exchange_.sum(spent.value());
  }
  if (spec.max_cost_micros && run.claimed.totals.cost_micros > 0) {
    run.task_cost_micros =
        exchange_.to_target(run.claimed.totals.cost_micros, run.claimed.totals.currency)
            .value_or(std::numeric_limits<std::int64_t>::max());
  }

  // The tools this task may use: its allow-list within the registry, plus `finish`. Tools
  // above the user's permission level are not offered; if the model calls one anyway, the
  // call is refused and the model reads why.
  const config::Permission permission =
      config_.tool_permission_for(run.claimed.user_tier, run.claimed.user_tool_permission);
  std::vector<ports::ToolSchema> schemas;
  for (const auto& tool : config_.tools) {
    if (spec.tools &&
        std::find(spec.tools->begin(), spec.tools->end(), tool.name) == spec.tools->end()) {
      continue;
    }
    run.allowed.insert(tool.name);
    if (tool.permission <= permission) {
      run.permitted.insert(tool.name);
      schemas.push_back(ports::ToolSchema{tool.name, tool.description, tool.parameters_schema});
    }
  }
  schemas.push_back(codec::finish_tool_schema());
  run.schemas = task_tool_set(std::move(schemas));
  co_return std::nullopt;
}

asio::awaitable<std::optional<RunOutcome>> TaskRunner::start_strategy(Run& run, Loop& loop) {
  const TaskSpec& spec = run.claimed.spec;
  const std::string zone_name =
      spec.metadata.time_zone.empty() ? config_.task_defaults.time_zone : spec.metadata.time_zone;
  const auto zone = config::load_time_zone(zone_name);
  react::PromptValues values{to_local(zone.zone, clock_.wall_now()), zone.found ? zone_name : "UTC",
                             spec.metadata.locale};
  std::vector<Message> history;
  if (!spec.parent_task_id.empty()) {
    auto loaded = co_await load_history(run);
    if (!loaded.ok()) {
      if (loaded.error().retryable()) {
        log::warn(
            "worker", run.log_context(),
            "could not read the parent task (left for lease recovery): " + loaded.error().message);
        co_return RunOutcome::kStoreUnavailable;
      }
      co_return co_await finish(run, TaskStatus::kFailed, std::nullopt, loaded.error().message,
                                ErrorCode::kParentUnavailable);
    }
    history = std::move(loaded.value());
  }
  auto made = make_strategy(run, values, std::move(history));
  if (!made.ok())
    co_return co_await finish(run, TaskStatus::kFailed, std::nullopt, made.error().message,
                              made.error().code.value_or(ErrorCode::kUnsupportedStrategy));
  loop.strategy = std::move(made).value();
  if (auto ended = co_await replay_checkpoints(run, loop))
    co_return *ended;

  const config::ModelConfig& model = *config_.find_model(spec.model);
  loop.model = &model;
  loop.keep_encoded = codec::chat_protocol(model.protocol) == codec::ChatProtocol::kFunctionCalling;
  loop.tool_tokens =
      loop.keep_encoded
          ? react::estimate_tokens(run.schemas->json)
          : codec::estimate_tool_tokens(run.schemas->schemas, codec::chat_protocol(model.protocol));
  loop.budget =
      react::context_budget(model.context_window_tokens, model.max_output_tokens, loop.tool_tokens);
  co_return std::nullopt;
}

asio::awaitable<std::optional<RunOutcome>> TaskRunner::replay_checkpoints(Run& run, Loop& loop) {
  // Replay the checkpoints of earlier attempts: no model call and no bill for them.
  react::Strategy& strategy = *loop.strategy;
  react::Step& next = loop.next;
  next = strategy.start();
  int step = 0;
  // A checkpoint the replay does not lead to (the strategy's settings changed since it was
  // written) ends the task rather than running steps again under new keys.
  auto diverged = [&](const ports::StepRecord& record) {
    return finish(run, TaskStatus::kFailed, std::nullopt,
                  "checkpoint " + std::to_string(record.step) +
                      " does not match the replay (the strategy or its settings changed since "
                      "it was written)",
                  ErrorCode::kCheckpointMismatch);
  };
  auto unreadable = [&](const Error& error) {
    return finish(run, TaskStatus::kFailed, std::nullopt, "unreadable checkpoint: " + error.message,
                  ErrorCode::kCheckpointMismatch);
  };
  for (const ports::StepRecord& record : run.claimed.steps) {
    step = record.step + 1;
    const std::string role = codec::checkpoint_role(record.model_reply);
    if (role == "tool_step") {
      // A plan step's tool call, a checkpoint of its own, with the calls it was made for.
      auto* calls = std::get_if<react::CallTools>(&next);
      auto recorded = codec::parse_model_reply_json(record.model_reply);
      const bool same =
          calls != nullptr && calls->own_checkpoint && recorded.ok() &&
          recorded.value().tool_calls.size() == calls->calls.size() &&
          std::equal(calls->calls.begin(), calls->calls.end(), recorded.value().tool_calls.begin(),
                     [](const ToolCall& a, const ToolCall& b) {
                       return a.name == b.name && a.arguments == b.arguments;
                     });
      if (!same)
        co_return co_await diverged(record);
      if (record.observations.empty()) {
        loop.tool_row_written = true;  // its calls did not finish: they run again, same keys
        continue;
      }
      auto observations = codec::parse_observations_json(record.observations);
      if (!observations.ok())
        co_return co_await unreadable(observations.error());
      next = strategy.on_tool_results(*calls, std::move(observations.value()));
      continue;
    }
    auto reply = codec::parse_model_reply_json(record.model_reply);
    if (!reply.ok())
      co_return co_await unreadable(reply.error());
    if (!std::holds_alternative<react::CallModel>(next) ||
        role != (strategy.request().role == "react" ? std::string() : strategy.request().role)) {
      co_return co_await diverged(record);
    }
    next = strategy.on_model_reply(reply.value());
    if (!record.observations.empty()) {
      if (auto* calls = std::get_if<react::CallTools>(&next)) {
        auto observations = codec::parse_observations_json(record.observations);
        if (!observations.ok())
          co_return co_await unreadable(observations.error());
        next = strategy.on_tool_results(*calls, std::move(observations.value()));
      }
    }
  }
  loop.step = step;
  run.steps = step;
  run.tool_calls = strategy.tool_calls();
  // Calls the replay leads to whose step was written by an earlier attempt (a model step, or
  // a plan's tool step) were perhaps sent by it; a plan tool step not yet written was not.
  if (const auto* calls = std::get_if<react::CallTools>(&next))
    loop.replayed_calls = !calls->own_checkpoint || loop.tool_row_written;
  co_return std::nullopt;
}

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
