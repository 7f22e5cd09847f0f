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
  std::size_t claims = 0;
  {
    std::lock_guard lock(claiming_->mutex);
    for (const auto& [task_id, n] : claiming_->tasks)
      claims += static_cast<std::size_t>(n);
  }
  std::lock_guard lock(leases_mutex_);
  return leases_.size() + claims;
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
  if (run.unsent_call_step) {
    // Ended (or thrown out) between a tool round and the call its write recorded: the call
    // was never sent.
    try {
      co_await settle_unsent_call(run);
    } catch (const std::exception& e) {
      log::error("worker", run.log_context(),
                 std::string("could not settle the record of a call never sent: ") + e.what());
    }
  }
  bool refused = false;
  {
    // Only our own attempt: a newer attempt of the same task may run on this worker too.
    std::lock_guard lock(leases_mutex_);
    auto held = leases_.find(run.task_id);
    if (held != leases_.end() && held->second.attempt == run.claimed.attempt)
      leases_.erase(held);
    // A write the store refused, not a stop at the fence (the keeper collected the fenced
    // runs when it raised it; read under the lock the fence takes): this incarnation's lease
    // lapsed while the worker was stalled, or another attempt owns the task.
    refused = outcome == RunOutcome::kLeaseLost && !run.control->lease_lost;
  }
  // Still this worker's in the store, and nobody runs it: the lease keeper hands it back.
  // So is a refused run's attempt: the worker did not die, so the keeper hands it back under
  // the incarnation that claimed it, and the store does not charge it (a task another
  // incarnation runs at that attempt, or one that ended, is left alone).
  if ((outcome == RunOutcome::kStoreUnavailable || refused) && abandoned_)
    abandoned_(ports::HeldTask{run.task_id, run.claimed.attempt, run.incarnation});
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
  if (auto ended = co_await check_start(run))
    co_return *ended;
  Loop loop;
  if (auto ended = co_await start_strategy(run, loop))
    co_return *ended;
  for (;;) {
    if (std::holds_alternative<react::Finish>(loop.next) ||
        std::holds_alternative<react::Fail>(loop.next)) {
      co_return co_await conclude(run, loop.next);
    }
    // The step the run is at: the tool calls of the last model step (or a plan's tool step,
    // a step of its own), or the next model call.
    const auto* pending_tools = std::get_if<react::CallTools>(&loop.next);
    run.step = pending_tools != nullptr && (!pending_tools->own_checkpoint || loop.tool_row_written)
                   ? loop.step - 1
                   : loop.step;
    // A drain hands the task back at a checkpoint, but not between this run's model step
    // and its calls of a tool that is not idempotent: the next attempt could not send them
    // (it would report their outcome unknown), so they are sent first.
    const bool own_unsent_once_only =
        pending_tools != nullptr && !loop.replayed_calls &&
        std::any_of(pending_tools->calls.begin(), pending_tools->calls.end(),
                    [this](const ToolCall& c) { return not_idempotent_.count(c.name) > 0; });
    // A stop here leaves the next call unsent: a record written for it goes (with the end, or
    // settled when the run stops without one).
    if (auto stop = co_await stop_requested(run, !own_unsent_once_only)) {
      co_await settle_unsent_call(run);
      co_return *stop;
    }
    if (clock_.now() >= run.deadline) {  // the end removes the record of the next call
      co_return co_await finish(
          run, TaskStatus::kTimedOut, std::nullopt,
          "deadline of " + std::to_string(run.claimed.spec.timeout_s) + " s passed",
          ErrorCode::kDeadline);
    }
    std::optional<RunOutcome> ended;
    if (pending_tools != nullptr)
      ended = co_await tool_round(run, loop);
    else
      ended = co_await model_step(run, loop);
    if (ended)
      co_return *ended;
  }
}

asio::awaitable<RunOutcome> TaskRunner::conclude(Run& run, const react::Step& next) {
  if (const auto* finished = std::get_if<react::Finish>(&next)) {
    co_return co_await finish(run, TaskStatus::kSucceeded, finished->result, std::string(),
                              std::nullopt);
  }
  const auto& failed = std::get<react::Fail>(next);
  if (failed.reason == react::FailReason::kTruncated && run.capped_output) {
    // Cut at what the task's max_tokens left it, not at the model's own allowance.
    co_return co_await finish(
        run, TaskStatus::kFailed, std::nullopt,
        "the model's output was cut at the " + std::to_string(*run.capped_output) +
            " tokens the task's max_tokens of " + std::to_string(*run.claimed.spec.max_tokens) +
            " left it (" + std::to_string(run.totals.usage.input + run.totals.usage.output) +
            " tokens used)",
        ErrorCode::kMaxTokens);
  }
  co_return co_await finish(run, TaskStatus::kFailed, std::nullopt, failed.message,
                            react::error_code_of(failed.reason));
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
