#include "worker/task_runner.hpp"

#include <rapidjson/document.h>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <limits>
#include <set>

#include "core/adapters/log.hpp"
#include "core/codec/checkpoint_codec.hpp"
#include "core/codec/openai_codec.hpp"
#include "core/config/time_zone_loader.hpp"
#include "core/react/context_budget.hpp"
#include "worker/run_state.hpp"

namespace agentfleet::worker {

namespace asio = boost::asio;

std::string_view to_string(RunOutcome outcome) {
  switch (outcome) {
    case RunOutcome::kFinished:
      return "finished";
    case RunOutcome::kSkipped:
      return "skipped";
    case RunOutcome::kLeaseLost:
      return "lease_lost";
    case RunOutcome::kStoreUnavailable:
      return "store_unavailable";
    case RunOutcome::kReleased:
      return "released";
    case RunOutcome::kUnknownTask:
      return "unknown_task";
  }
  return "unknown";
}

namespace {
react::ResultMarkers make_markers(const config::ResultMarkers& m) {
  react::ResultMarkers markers;
  markers.action_completed = m.action_completed;
  markers.need_clarification = m.need_clarification;
  markers.error = m.error;
  markers.fallback = parse_result_type(m.fallback).value_or(ResultType::kActionCompleted);
  return markers;
}

react::PlanPolicy make_plan_policy(const config::PlanExecuteConfig& c) {
  react::PlanPolicy policy;
  policy.reflection =
      react::parse_reflection_schedule(c.reflection).value_or(react::ReflectionSchedule::kAtEnd);
  policy.pass_confidence = c.pass_confidence;
  policy.max_corrections = c.max_corrections;
  policy.weights = react::CriticWeights{c.weight_accuracy, c.weight_completeness,
                                        c.weight_relevance, c.weight_logic};
  return policy;
}
}  // namespace

TaskRunner::TaskRunner(const config::Config& config, std::string worker_id,
                       ports::ModelClient& model, ports::ToolClient& tools, ports::RunStore& store,
                       ports::Publisher& publisher, metrics::WorkerMetrics& metrics,
                       const limits::Clock& clock)
    : config_(config),
      worker_id_(std::move(worker_id)),
      model_(model),
      tools_(tools),
      store_(store),
      publisher_(publisher),
      metrics_(metrics),
      clock_(clock),
      prices_(config::price_table(config.billing)),
      exchange_(config::budget_exchange(config.billing)),
      markers_(make_markers(config.react.markers)),
      plan_policy_(make_plan_policy(config.plan_execute)),
      no_tools_(make_tool_set({})),
      finish_only_(make_tool_set({codec::finish_tool_schema()})) {
  for (const auto& tool : config.tools) {
    if (!tool.idempotent)
      not_idempotent_.insert(tool.name);
    rapidjson::Document schema;
    schema.Parse(tool.parameters_schema.c_str());
    argument_schemas_.emplace(tool.name, std::make_shared<codec::CompiledSchema>(schema));
  }
}

std::vector<ports::HeldTask> TaskRunner::held() const {
  std::lock_guard lock(leases_mutex_);
  std::vector<ports::HeldTask> held;
  held.reserve(leases_.size());
  for (const auto& [task_id, h] : leases_)
    held.push_back(ports::HeldTask{task_id, h.attempt});
  return held;
}

std::size_t TaskRunner::running() const {
  std::lock_guard lock(leases_mutex_);
  return leases_.size();
}

void TaskRunner::cancel(const std::string& task_id) {
  std::lock_guard lock(leases_mutex_);
  if (auto it = leases_.find(task_id); it != leases_.end()) {
    it->second.control->cancel = true;
    it->second.control->wake();
  }
}

void TaskRunner::fence() {
  std::lock_guard lock(leases_mutex_);
  fenced_ = true;
  ++fences_;
  for (auto& [task_id, held] : leases_) {
    held.control->lease_lost = true;
    held.control->wake();
  }
}

std::uint64_t TaskRunner::fence_count() const {
  std::lock_guard lock(leases_mutex_);
  return fences_;
}

void TaskRunner::unfence() {
  {
    std::lock_guard lock(leases_mutex_);
    fenced_ = false;
    ++unfenced_;
  }
  for (asio::steady_timer* waiting : fence_waiters_)
    waiting->cancel();
}

void TaskRunner::drain() {
  std::lock_guard lock(leases_mutex_);
  draining_ = true;
  for (auto& [task_id, held] : leases_)
    held.control->drain = true;
}

std::shared_ptr<const TaskRunner::ToolSet> TaskRunner::make_tool_set(
    std::vector<ports::ToolSchema> schemas) {
  auto set = std::make_shared<ToolSet>();
  set->json = codec::encode_tools(schemas);
  set->schemas = std::move(schemas);
  return set;
}

std::shared_ptr<const TaskRunner::ToolSet> TaskRunner::task_tool_set(
    std::vector<ports::ToolSchema> schemas) {
  std::string key;
  for (const auto& schema : schemas) {
    key += schema.name;
    key += '\n';
  }
  std::lock_guard lock(tool_sets_mutex_);
  auto found = tool_sets_.find(key);
  if (found != tool_sets_.end())
    return found->second;
  if (tool_sets_.size() >= kToolSetCacheSize)
    tool_sets_.clear();
  auto set = make_tool_set(std::move(schemas));
  tool_sets_.emplace(std::move(key), set);
  return set;
}

void TaskRunner::mark_ending(Run& run) {
  std::lock_guard lock(leases_mutex_);
  run.control->ending = true;
}

asio::awaitable<RunOutcome> TaskRunner::run(std::string task_id, std::string user_id,
                                            std::string traceparent) {
  ClaimResult claimed =
      co_await claim(std::move(task_id), std::move(user_id), std::move(traceparent));
  if (!claimed.run)
    co_return claimed.outcome;
  co_return co_await execute(std::move(claimed.run));
}

asio::awaitable<RunOutcome> TaskRunner::execute(std::shared_ptr<ClaimedRun> claimed) {
  Run& run = static_cast<Run&>(*claimed);
  RunOutcome outcome = RunOutcome::kFinished;
  std::string internal_error;
  try {
    outcome = co_await run_strategy(run);
  } catch (const std::exception& e) {
    internal_error = e.what();
  }
  if (!internal_error.empty()) {
    // The last backstop: record the failure instead of losing the task or the process.
    log::error("worker", run.log_context(), "task runner failed: " + internal_error);
    try {
      outcome = co_await finish(run, TaskStatus::kFailed, std::nullopt,
                                "internal error: " + internal_error, ErrorCode::kInternal);
    } catch (const std::exception& e) {
      // Not even that could be stored: stop holding the task, so it is handed back.
      log::error("worker", run.log_context(),
                 std::string("could not record the failure: ") + e.what());
      outcome = RunOutcome::kStoreUnavailable;
    }
  }
  {
    // Only our own attempt: a newer attempt of the same task may run on this worker too.
    std::lock_guard lock(leases_mutex_);
    auto held = leases_.find(run.task_id);
    if (held != leases_.end() && held->second.attempt == run.claimed.attempt)
      leases_.erase(held);
  }
  // Still this worker's in the store, and nobody runs it: the lease keeper hands it back.
  if (outcome == RunOutcome::kStoreUnavailable && abandoned_)
    abandoned_(ports::HeldTask{run.task_id, run.claimed.attempt});
  co_return outcome;
}

asio::awaitable<std::optional<RunOutcome>> TaskRunner::stop_requested(Run& run,
                                                                      bool at_checkpoint) {
  const RunControl& control = *run.control;
  if (control.lease_lost) {
    log::warn("worker", run.log_context(),
              "stopping without writing: this worker can no longer prove it owns the task");
    co_return RunOutcome::kLeaseLost;
  }
  if (control.cancel) {
    co_return co_await finish(run, TaskStatus::kCancelled, std::nullopt, "cancelled while running",
                              ErrorCode::kCancelled);
  }
  if (control.drain && at_checkpoint) {
    mark_ending(run);
    auto released = co_await store_.release(run.task_id, run.claimed.attempt, run.incarnation);
    if (!released.ok()) {
      // The lease expires; recovery resumes it.
      log::warn("worker", run.log_context(),
                "could not hand back (draining): " + released.error().message);
      co_return RunOutcome::kStoreUnavailable;
    }
    if (!released.value().ok())
      co_return RunOutcome::kLeaseLost;
    log::info("worker", run.log_context(),
              "handed back at step " + std::to_string(run.steps) + " (draining)");
    co_return RunOutcome::kReleased;
  }
  co_return std::nullopt;
}

asio::awaitable<RunOutcome> TaskRunner::run_strategy(Run& run) {
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
  // Shared with the model calls, which read its conversation (a call abandoned at a cancel
  // may outlive the run).
  const std::shared_ptr<react::Strategy> strategy_owner = std::move(made).value();
  react::Strategy& strategy = *strategy_owner;

  // Replay the checkpoints of earlier attempts: no model call and no bill for them.
  react::Step next = strategy.start();
  int step = 0;
  // The pending CallTools of a plan tool step already has its step row (written before
  // its calls ran); their results go into that row.
  bool tool_row_written = false;
  // A checkpoint the replay does not lead to (the strategy's settings changed since it was
  // written) ends the task rather than running steps again under new keys.
  auto diverged = [&](const ports::StepRecord& record) {
    return finish(run, TaskStatus::kFailed, std::nullopt,
                  "checkpoint " + std::to_string(record.step) +
                      " does not match the replay (the strategy or its settings changed since "
                      "it was written)",
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
        tool_row_written = true;  // its calls did not finish: they run again, same keys
        continue;
      }
      auto observations = codec::parse_observations_json(record.observations);
      if (!observations.ok()) {
        co_return co_await finish(run, TaskStatus::kFailed, std::nullopt,
                                  "unreadable checkpoint: " + observations.error().message,
                                  ErrorCode::kCheckpointMismatch);
      }
      next = strategy.on_tool_results(*calls, std::move(observations.value()));
      continue;
    }
    auto reply = codec::parse_model_reply_json(record.model_reply);
    if (!reply.ok()) {
      co_return co_await finish(run, TaskStatus::kFailed, std::nullopt,
                                "unreadable checkpoint: " + reply.error().message,
                                ErrorCode::kCheckpointMismatch);
    }
    if (!std::holds_alternative<react::CallModel>(next) ||
        role != (strategy.request().role == "react" ? std::string() : strategy.request().role)) {
      co_return co_await diverged(record);
    }
    next = strategy.on_model_reply(reply.value());
    if (!record.observations.empty()) {
      if (auto* calls = std::get_if<react::CallTools>(&next)) {
        auto observations = codec::parse_observations_json(record.observations);
        if (!observations.ok()) {
          co_return co_await finish(run, TaskStatus::kFailed, std::nullopt,
                                    "unreadable checkpoint: " + observations.error().message,
                                    ErrorCode::kCheckpointMismatch);
        }
        next = strategy.on_tool_results(*calls, std::move(observations.value()));
      }
    }
  }
  run.steps = step;
  run.tool_calls = strategy.tool_calls();
  // Calls the replay leads to whose step was written by an earlier attempt (a model step, or
  // a plan's tool step) were perhaps sent by it; a plan tool step not yet written was not.
  bool replayed_calls = false;
  if (const auto* calls = std::get_if<react::CallTools>(&next))
    replayed_calls = !calls->own_checkpoint || tool_row_written;

  // What a call offers: the task's tools (ReAct), only finish (the synthesizer), the plan
  // step's tool (an executor filling it in), or nothing.
  auto offered_tools = [this](const Run& r, const react::NextCall& call) {
    switch (call.tools) {
      case react::ToolOffer::kTaskTools:
        return r.schemas;
      case react::ToolOffer::kFinishOnly:
        return finish_only_;
      case react::ToolOffer::kStepTool: {
        std::vector<ports::ToolSchema> one;
        for (const auto& schema : r.schemas->schemas) {
          if (schema.name == call.tool)
            one.push_back(schema);
        }
        return make_tool_set(std::move(one));
      }
      case react::ToolOffer::kNone:
        break;
    }
    return no_tools_;
  };

  const config::ModelConfig& model = *config_.find_model(spec.model);
  // What one request may hold: the conversation sent is a trimmed copy (old tool outputs
  // first), never what is checkpointed.
  // A function-calling conversation is encoded once, each call appending what is new.
  const bool keep_encoded =
      codec::chat_protocol(model.protocol) == codec::ChatProtocol::kFunctionCalling;
  const std::int64_t tool_tokens =
      keep_encoded
          ? react::estimate_tokens(run.schemas->json)
          : codec::estimate_tool_tokens(run.schemas->schemas, codec::chat_protocol(model.protocol));
  const react::ContextBudget budget =
      react::context_budget(model.context_window_tokens, model.max_output_tokens, tool_tokens);
  for (;;) {
    if (auto* finished = std::get_if<react::Finish>(&next)) {
      co_return co_await finish(run, TaskStatus::kSucceeded, finished->result, std::string(),
                                std::nullopt);
    }
    if (auto* failed = std::get_if<react::Fail>(&next)) {
      if (failed->reason == react::FailReason::kTruncated && run.capped_output) {
        // Cut at what the task's max_tokens left it, not at the model's own allowance.
        co_return co_await finish(
            run, TaskStatus::kFailed, std::nullopt,
            "the model's output was cut at the " + std::to_string(*run.capped_output) +
                " tokens the task's max_tokens of " + std::to_string(*spec.max_tokens) +
                " left it (" + std::to_string(run.totals.usage.input + run.totals.usage.output) +
                " tokens used)",
            ErrorCode::kMaxTokens);
      }
      co_return co_await finish(run, TaskStatus::kFailed, std::nullopt, failed->message,
                                react::error_code_of(failed->reason));
    }
    // The step the run is at: the tool calls of the last model step (or a plan's tool step,
    // a step of its own), or the next model call.
    const auto* pending_tools = std::get_if<react::CallTools>(&next);
    run.step = pending_tools != nullptr && (!pending_tools->own_checkpoint || tool_row_written)
                   ? step - 1
                   : step;
    // A drain hands the task back at a checkpoint, but not between this run's model step
    // and its calls of a tool that is not idempotent: the next attempt could not send them
    // (it would report their outcome unknown), so they are sent first.
    const bool own_unsent_once_only =
        pending_tools != nullptr && !replayed_calls &&
        std::any_of(pending_tools->calls.begin(), pending_tools->calls.end(),
                    [this](const ToolCall& c) { return not_idempotent_.count(c.name) > 0; });
    if (auto stop = co_await stop_requested(run, !own_unsent_once_only))
      co_return *stop;
    if (clock_.now() >= run.deadline) {
      co_return co_await finish(run, TaskStatus::kTimedOut, std::nullopt,
                                "deadline of " + std::to_string(spec.timeout_s) + " s passed",
                                ErrorCode::kDeadline);
    }
    if (auto* calls = std::get_if<react::CallTools>(&next)) {
      if (calls->own_checkpoint && !tool_row_written) {
        // A plan tool step is recorded with its calls before they run, as a model step is,
        // so every side effect belongs to a checkpointed step.
        const std::string row = codec::tool_step_checkpoint_json(calls->calls);
        // Named, not a temporary in the co_await: GCC 12 destroys such temporaries twice.
        ports::ToolStep tool_step{run.task_id, run.claimed.attempt, step, row, run.incarnation};
        auto written = co_await store_.save_tool_step(std::move(tool_step));
        if (auto stop = co_await on_store_failure(run, written, "tool step"))
          co_return *stop;
        ++step;
        run.steps = step;
        run.step = step - 1;
        tool_row_written = true;
      }
      // A step whose tools ran before a crash but were not checkpointed runs them again
      // with the same idempotency keys, so their side effects happen once.
      const int tools_step = step - 1;
      std::string trace;
      ToolsRun ran = co_await run_tools(run, tools_step, *calls, replayed_calls, &trace);
      replayed_calls = false;  // every later call is this run's own
      if (!ran.complete) {
        if (run.control->lease_lost)
          co_return RunOutcome::kLeaseLost;  // another attempt owns it: nothing is written
        // Cut short by a cancel or the deadline: what the tools did before the end is in the
        // trace and the count (with no observations, so a replay would call them again, with
        // the same keys).
        ports::ToolResults done_so_far{run.task_id,    run.claimed.attempt, tools_step,
                                       std::string(),  std::move(trace),    ran.answered,
                                       run.incarnation};
        auto saved = co_await store_.save_tool_results(std::move(done_so_far));
        if (auto stop = co_await on_store_failure(run, saved, "tool results"))
          co_return *stop;
        run.tool_calls += ran.answered;
        if (auto stop = co_await stop_requested(run, false))
          co_return *stop;
        co_return co_await finish(
            run, TaskStatus::kTimedOut, std::nullopt,
            "deadline of " + std::to_string(spec.timeout_s) + " s passed during tool calls",
            ErrorCode::kDeadline);
      }
      const std::string obs_json = codec::observations_json(ran.observations);
      const int executed = static_cast<int>(calls->calls.size());
      ports::ToolResults results{run.task_id,    run.claimed.attempt, tools_step,
                                 obs_json,       std::move(trace),    executed,
                                 run.incarnation};
      auto saved = co_await store_.save_tool_results(std::move(results));
      if (auto stop = co_await on_store_failure(run, saved, "tool results"))
        co_return *stop;
      tool_row_written = false;
      next = strategy.on_tool_results(*calls, std::move(ran.observations));
      run.tool_calls = strategy.tool_calls();
      continue;
    }
    // CallModel.
    const auto call_deadline =
        std::min(run.deadline, clock_.now() + std::chrono::seconds(model.call_timeout_s));
    emit_progress(run, "step", step, {}, "{}");
    const auto started = clock_.now();
    const react::NextCall request = strategy.request();
    // What the call sends: the conversation as it is when it fits (held by the strategy,
    // which the call keeps alive), else a trimmed copy.
    std::shared_ptr<const std::vector<Message>> messages;
    std::string messages_json;
    std::int64_t input_tokens = tool_tokens;  // as estimated: the call's input
    if (keep_encoded)
      run.encoder.sync(request.conversation, *request.messages, model.reasoning_echo);
    if (keep_encoded && run.encoder.estimated_tokens() <= budget.max_tokens) {
      messages = std::shared_ptr<const std::vector<Message>>(strategy_owner, request.messages);
      messages_json = run.encoder.json();
      input_tokens += run.encoder.estimated_tokens();
    } else {
      react::FittedContext context = react::fit_context(*request.messages, budget);
      if (!context.fits) {
        log::warn("worker", run.log_context(),
                  "conversation exceeds the context budget even trimmed (" +
                      std::to_string(context.estimated_tokens) + " estimated tokens)");
      }
      messages = std::make_shared<const std::vector<Message>>(std::move(context.messages));
      input_tokens += context.estimated_tokens;
    }
    billing::SpendDecision spend = spend_check(run, model, input_tokens);
    if (spend.stop) {
      const ErrorCode code = *spend.stop == billing::SpendStop::kMaxTokens ? ErrorCode::kMaxTokens
                             : *spend.stop == billing::SpendStop::kMaxCost
                                 ? ErrorCode::kMaxCost
                                 : ErrorCode::kQuotaExceeded;
      co_return co_await finish(run, TaskStatus::kFailed, std::nullopt, std::move(spend.message),
                                code);
    }
    run.capped_output.reset();
    if (spend.capped)
      run.capped_output = spend.output_tokens;
    auto reply = co_await call_model(run, std::move(messages), std::move(messages_json),
                                     offered_tools(run, request), call_deadline,
                                     spend.capped ? spend.output_tokens : 0);
    if (!reply) {
      if (auto stop = co_await stop_requested(run, false))
        co_return *stop;
      // The call overran its own deadline (it should not: the client enforces it).
      if (call_deadline < run.deadline) {
        co_return co_await finish(run, TaskStatus::kFailed, std::nullopt,
                                  "the model call did not return within its " +
                                      std::to_string(model.call_timeout_s) + " s timeout",
                                  ErrorCode::kModelUnavailable);
      }
      co_return co_await finish(
          run, TaskStatus::kTimedOut, std::nullopt,
          "deadline of " + std::to_string(spec.timeout_s) + " s passed during a model call",
          ErrorCode::kDeadline);
    }
    const int latency_ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(clock_.now() - started).count());
    if (!reply->ok() && run.call_unrecorded) {
      // Not sent: the call could not be recorded first (the store failed, or the task is no
      // longer this attempt's).
      Result<Status> unrecorded = std::move(*run.call_unrecorded);
      run.call_unrecorded.reset();
      if (auto stop = co_await on_store_failure(run, unrecorded, "model call record"))
        co_return *stop;
    }
    if (!reply->ok()) {
      log::warn("worker", run.log_context(), "model call failed: " + reply->error().message,
                {{"model", spec.model}});
      // A call bounded by the task's deadline that gave up on time (it ran out, or the
      // provider asked for a wait past it) ends the task timed_out, not failed.
      const bool out_of_time =
          clock_.now() >= run.deadline ||
          (reply->error().kind == ErrorKind::kTimeout && call_deadline >= run.deadline);
      if (out_of_time) {
        // Said as it is: a call that gave up early (a Retry-After or a back-off longer than
        // the time left) says how much time was left, not that the deadline passed.
        const auto left =
            std::chrono::duration_cast<std::chrono::seconds>(run.deadline - clock_.now()).count();
        // Named, not a temporary in the co_await: GCC 12 destroys such temporaries twice.
        std::string message = left > 0 ? "gave up on a model call with " + std::to_string(left) +
                                             " s left before the deadline: "
                                       : std::string("deadline passed during a model call: ");
        message += reply->error().message;
        co_return co_await finish(run, TaskStatus::kTimedOut, std::nullopt, std::move(message),
                                  ErrorCode::kDeadline);
      }
      // The call's own timeout is not the task's deadline: the model did not answer in time.
      const ErrorCode code = reply->error().code.value_or(ErrorCode::kModelUnavailable);
      co_return co_await finish(run, TaskStatus::kFailed, std::nullopt,
                                "model call failed: " + reply->error().message,
                                code == ErrorCode::kDeadline ? ErrorCode::kModelUnavailable : code);
    }
    const ModelReply& answer = reply->value();
    const auto now = clock_.wall_now();
    const billing::Money cost = prices_.cost(spec.model, answer.usage, now);
    metrics_.tokens(spec.model, answer.usage);
    metrics_.cost(spec.model, cost.currency, cost.micros);
    if (answer.usage_estimated)
      metrics_.usage_estimated(spec.model);
    ports::LedgerRow ledger{spec.user_id,
                            spec.batch_id,
                            spec.model,
                            answer.usage,
                            billing::format_micros(cost.micros),
                            cost.currency,
                            answer.usage_estimated};
    const std::string reply_json =
        codec::model_reply_json(answer, request.role == "react" ? std::string() : request.role);
    ports::ModelStep model_step{run.task_id, run.claimed.attempt, step,           reply_json,
                                latency_ms,  std::move(ledger),   run.incarnation};
    next = strategy.on_model_reply(answer);
    if (std::holds_alternative<react::Finish>(next) || std::holds_alternative<react::Fail>(next)) {
      // The answer ends the task (the loop's next turn finishes it, before anything else):
      // its checkpoint rides on the end's commit.
      run.final_step = std::move(model_step);
    } else {
      auto saved = co_await store_.save_model_step(std::move(model_step));
      if (saved.ok() && !saved.value().ok())
        co_await bill_fenced_answer(run, step, answer.usage, answer.usage_estimated);
      if (auto stop = co_await on_store_failure(run, saved, "model step"))
        co_return *stop;
    }
    // Billed: the totals the result event reports (input, cached input and output, as the
    // task row sums them).
    run.totals.usage.input += answer.usage.input;
    run.totals.usage.cached_input += answer.usage.cached_input;
    run.totals.usage.output += answer.usage.output;
    run.totals.cost_micros += cost.micros;
    run.totals.currency = cost.currency;
    if (run.budget_micros > 0 || spec.max_cost_micros) {
      const std::int64_t in_budget = exchange_.to_target(cost.micros, cost.currency)
                                         .value_or(std::numeric_limits<std::int64_t>::max());
      if (__builtin_add_overflow(run.budget_spent_micros, in_budget, &run.budget_spent_micros))
        run.budget_spent_micros = std::numeric_limits<std::int64_t>::max();
      if (__builtin_add_overflow(run.task_cost_micros, in_budget, &run.task_cost_micros))
        run.task_cost_micros = std::numeric_limits<std::int64_t>::max();
    }
    if (!answer.content.empty() && run.streamed_step != step) {
      // The model's text of the step, always as {"text": ...} (react_json text is JSON too),
      // unless it came as a stream (then its pieces went out as they came).
      emit_progress(run, "delta", step, {}, text_event_json(answer.content));
    }
    ++step;
    run.steps = step;
  }
}

asio::awaitable<std::optional<RunOutcome>> TaskRunner::on_store_failure(Run& run,
                                                                        const Result<Status>& saved,
                                                                        const char* what) {
  if (saved.ok()) {
    if (saved.value().ok())
      co_return std::nullopt;
    co_return RunOutcome::kLeaseLost;
  }
  // A transient failure leaves the task to lease recovery, which resumes it from its last
  // checkpoint. Anything else would fail the same way again: end the task now.
  if (saved.error().retryable()) {
    log::warn("worker", run.log_context(),
              std::string("could not store ") + what +
                  " (left for lease recovery): " + saved.error().message);
    co_return RunOutcome::kStoreUnavailable;
  }
  log::error("worker", run.log_context(),
             std::string("could not store ") + what + ": " + saved.error().message);
  co_return co_await finish(
      run, TaskStatus::kFailed, std::nullopt,
      std::string("could not store the ") + what + ": " + saved.error().message,
      ErrorCode::kInternal);
}

}  // namespace agentfleet::worker
