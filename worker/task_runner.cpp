#include "worker/task_runner.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <limits>
#include <set>

#include "core/adapters/log.hpp"
#include "core/codec/checkpoint_codec.hpp"
#include "core/codec/json_text.hpp"
#include "core/codec/openai_codec.hpp"
#include "core/codec/plan_codec.hpp"
#include "core/codec/task_codec.hpp"
#include "core/codec/tool_call_check.hpp"
#include "core/config/time_zone_loader.hpp"
#include "core/react/context_budget.hpp"
#include "core/react/prompt.hpp"

namespace agentfleet::worker {

namespace asio = boost::asio;
using TimePoint = limits::Clock::time_point;

namespace {
// A claim that failed on a store outage is tried again after 0.25, 0.5, 1, 2 and 4 s: long
// enough to ride out a Postgres restart.
constexpr int kClaimRetries = 5;
constexpr int kClaimRetryBaseMs = 250;
// A claim that arrives while the worker is fenced waits up to 30 s for a new incarnation.
constexpr int kFencedClaimWaits = 300;
constexpr int kFencedClaimWaitMs = 100;

// The dispatch message's traceparent goes on to the model and tool calls as a header: only a
// valid one, rebuilt as version 00 from its checked parts (a later version may append
// fields, which could hold anything, a line break included); anything else is none.
std::string traceparent_to_forward(std::string_view incoming) {
  const std::string_view trace = log::trace_id_of(incoming);
  if (trace.empty())
    return {};
  return "00-" + std::string(trace) + "-" + std::string(incoming.substr(36, 16)) + "-" +
         std::string(incoming.substr(53, 2));
}
}  // namespace

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
// {"text": ...}: the data of a `delta` event.
std::string text_event_json(std::string_view text) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("text");
  w.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

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

// First `limit` code points of `text`, for the trace.
std::string truncate_chars(const std::string& text, int limit) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      if (count == static_cast<std::size_t>(limit))
        return text.substr(0, i) + "…";
      ++count;
    }
  }
  return text;
}

// The error code of an observation's {"error":{"code":...}}, or `fallback`.
std::string error_code_of(const std::string& content, std::string fallback = "error") {
  rapidjson::Document error;
  if (codec::parse_json(error, content) && error.IsObject() && error.HasMember("error") &&
      error["error"].IsObject() && error["error"].HasMember("code") &&
      error["error"]["code"].IsString()) {
    return error["error"]["code"].GetString();
  }
  return fallback;
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

// What outside events ask of one run. Lives as long as the run or a call it abandoned.
struct RunControl {
  bool cancel = false;
  bool lease_lost = false;  // fenced: the worker can no longer prove it owns the task
  bool drain = false;
  // Its terminal write or hand-back is under way.
  bool ending = false;
  // The timer the run is waiting on right now (a model or tool call), cancelled to wake it.
  asio::steady_timer* waiting = nullptr;

  void wake() {
    if (waiting != nullptr)
      waiting->cancel();
  }
  bool interrupted() const { return cancel || lease_lost; }
};

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

// The tools a call offers, with the `tools` array a function-calling request writes for
// them, encoded once for every call that offers them.
struct TaskRunner::ToolSet {
  std::vector<ports::ToolSchema> schemas;
  std::string json;  // codec::encode_tools(schemas)
};

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

asio::awaitable<bool> TaskRunner::claimable(std::optional<std::uint64_t> lifted_after) {
  auto executor = co_await asio::this_coro::executor;
  // A fenced worker owns nothing until its lease keeper has a new incarnation: a message that
  // arrived meanwhile waits for it (its partition is paused), bounded.
  for (int waited = 0;; ++waited) {
    {
      std::lock_guard lock(leases_mutex_);
      const bool ready = !fenced_ && (!lifted_after || unfenced_ > *lifted_after);
      if (ready)
        co_return true;
      if (draining_ || waited == kFencedClaimWaits)
        co_return false;
    }
    asio::steady_timer pause(executor, std::chrono::milliseconds(kFencedClaimWaitMs));
    fence_waiters_.insert(&pause);  // unfence() wakes it
    boost::system::error_code ec;
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    fence_waiters_.erase(&pause);
  }
}

asio::awaitable<ClaimResult> TaskRunner::claim(std::string task_id, std::string user_id,
                                               std::string traceparent) {
  auto run = std::make_shared<Run>();
  run->task_id = std::move(task_id);
  run->user_id = std::move(user_id);
  run->traceparent = traceparent_to_forward(traceparent);
  auto executor = co_await asio::this_coro::executor;
  if (!co_await claimable(std::nullopt)) {
    log::warn("worker", run->log_context(), "not claimed: this worker is fenced");
    co_return ClaimResult{nullptr, RunOutcome::kStoreUnavailable};
  }
  std::uint64_t lifted = 0;
  // The fences raised before the claim last sent: one raised while it was in flight means
  // the incarnation it was made under may be gone.
  std::uint64_t fences_before = 0;
  {
    std::lock_guard lock(leases_mutex_);
    lifted = unfenced_;
    fences_before = fences_;
  }
  {
    std::lock_guard lock(claiming_->mutex);
    ++claiming_->tasks[run->task_id];
  }
  // Counted until this claim's answer is acted on (a claimed run is in leases_ by then).
  struct ClaimUnderWay {
    std::shared_ptr<Claiming> claiming;
    std::string task_id;
    ~ClaimUnderWay() {
      std::lock_guard lock(claiming->mutex);
      auto it = claiming->tasks.find(task_id);
      if (it != claiming->tasks.end() && --it->second <= 0)
        claiming->tasks.erase(it);
    }
  } under_way{claiming_, run->task_id};
  auto claim = co_await store_.claim(run->task_id);
  if (claim.ok() && claim.value().outcome == ports::ClaimOutcome::kNotLive) {
    // The claim ran after this incarnation's liveness lapsed (it waited in a silent
    // connection): it took nothing. Once the lease keeper holds a new incarnation, once more.
    log::warn("worker", run->log_context(),
              "not claimed: this worker's liveness lapsed before the claim ran; claiming again "
              "under its next incarnation");
    if (!co_await claimable(lifted)) {
      log::warn("worker", run->log_context(), "not claimed: no new incarnation came");
      co_return ClaimResult{nullptr, RunOutcome::kStoreUnavailable};
    }
    fences_before = fence_count();
    claim = co_await store_.claim(run->task_id);
  }
  // A claim that failed on a store outage (a Postgres restart) is tried again for a few
  // seconds: left alone, the task would wait in `dispatched` for the scheduler's
  // redispatch_after_s (a minute), its deadline running if an earlier attempt started it.
  // A claim whose commit was in doubt may have made the task this worker's without anyone
  // running it: such a task is reported abandoned, and the lease keeper hands it back if
  // this worker holds it. A retry that finds it run by this incarnation already (and by no
  // run or other claim of this worker) knows the attempt the lost answer made: handed back
  // at that attempt, the release counts even should the task be taken over before the
  // hand-back (its incarnation lapsing meanwhile). Else the attempt is unknown (-1).
  bool in_doubt = false;
  for (int retry = 0; !claim.ok() && claim.error().retryable() && retry < kClaimRetries; ++retry) {
    in_doubt = true;
    {
      std::lock_guard lock(leases_mutex_);
      if (draining_)
        break;
    }
    log::warn("worker", run->log_context(), "claim failed, trying again: " + claim.error().message);
    asio::steady_timer pause(executor, std::chrono::milliseconds(kClaimRetryBaseMs << retry));
    boost::system::error_code ec;
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    fences_before = fence_count();
    claim = co_await store_.claim(run->task_id);
  }
  if (in_doubt && abandoned_ &&
      (!claim.ok() || claim.value().outcome != ports::ClaimOutcome::kClaimed)) {
    ports::HeldTask doubtful{run->task_id, -1};
    bool report = true;
    if (claim.ok() && claim.value().outcome == ports::ClaimOutcome::kBusyOrDone &&
        claim.value().held_attempt > 0) {
      std::lock_guard lock(leases_mutex_);
      int claims = 0;
      {
        std::lock_guard counted(claiming_->mutex);
        claims = claiming_->tasks[run->task_id];
      }
      if (leases_.count(run->task_id)) {
        report = false;  // a run of this worker claimed it: the claim in doubt took nothing
      } else if (claims <= 1) {
        doubtful.attempt = claim.value().held_attempt;
        doubtful.incarnation = claim.value().incarnation;
      }
    }
    if (report)
      abandoned_(std::move(doubtful));
  }
  if (!claim.ok()) {
    log::error("worker", run->log_context(), "claim failed: " + claim.error().message);
    metrics_.claim(metrics::ClaimOutcome::kStoreUnavailable);
    co_return ClaimResult{nullptr, RunOutcome::kStoreUnavailable};
  }
  if (claim.value().outcome == ports::ClaimOutcome::kUnknown)
    co_return ClaimResult{nullptr, RunOutcome::kUnknownTask};
  if (claim.value().outcome == ports::ClaimOutcome::kNotLive) {
    // Still dispatched, no attempt spent: the scheduler dispatches it again once its
    // message is known lost.
    log::warn("worker", run->log_context(), "not claimed: this worker's liveness lapsed");
    metrics_.claim(metrics::ClaimOutcome::kStoreUnavailable);
    co_return ClaimResult{nullptr, RunOutcome::kStoreUnavailable};
  }
  if (claim.value().outcome != ports::ClaimOutcome::kClaimed) {
    log::info("worker", run->log_context(), "skipped: ended already, or run by another worker");
    metrics_.claim(metrics::ClaimOutcome::kSkipped);
    co_return ClaimResult{nullptr, RunOutcome::kSkipped};  // terminal, or owned elsewhere
  }
  run->claimed = std::move(*claim.value().task);
  run->incarnation = claim.value().incarnation;
  run->attempt = run->claimed.attempt;
  run->totals = run->claimed.totals;
  run->claimed_at = clock_.now();
  metrics_.claim(metrics::ClaimOutcome::kClaimed);
  if (run->claimed.attempt == 1)
    metrics_.queue_wait(run->claimed.spec.priority, run->claimed.queued_ms / 1000.0);
  run->deadline = clock_.now() + std::chrono::milliseconds(run->claimed.remaining_ms);
  log::info(
      "worker", run->log_context(),
      run->claimed.steps.empty()
          ? std::string("claimed")
          : "claimed, resuming after " + std::to_string(run->claimed.steps.size()) +
                (run->claimed.steps.size() == 1 ? " checkpointed step" : " checkpointed steps"));
  bool fenced_meanwhile = false;
  {
    std::lock_guard lock(leases_mutex_);
    // A fence raised while the claim was under way collected the runs it knew, not this one.
    fenced_meanwhile = fences_ != fences_before;
    if (!fenced_meanwhile) {
      run->control->drain = draining_;
      run->control->lease_lost = fenced_;
      leases_[run->task_id] = Held{run->claimed.attempt, run->control};
    }
  }
  if (fenced_meanwhile) {
    // Claimed under an incarnation that may be gone: not run, and handed back under the
    // incarnation that holds it, so that the attempt does not count as a crashed one.
    log::warn("worker", run->log_context(),
              "claimed just as this worker fenced itself: not run, handed back");
    if (abandoned_)
      abandoned_(ports::HeldTask{run->task_id, run->claimed.attempt, claim.value().incarnation});
    co_return ClaimResult{nullptr, RunOutcome::kLeaseLost};
  }
  co_return ClaimResult{std::move(run), RunOutcome::kFinished};
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

asio::awaitable<void> TaskRunner::bill_fenced_answer(Run& run, int step, TokenUsage usage,
                                                     bool estimated) {
  // Another attempt owns the task and will make this call again; this one was made and
  // charged all the same.
  LostCharge charge;
  charge.usage = usage;
  charge.estimated = estimated;
  charge.reason = ChargeLoss::kLeaseLost;
  std::vector<LostCharge> lost{charge};
  ports::Charges of_step = charges_of(run, step);
  of_step.settles_call = true;  // the checkpoint did not settle the call's record
  co_await bill_unreconciled(std::move(of_step), std::move(lost));
}

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

asio::awaitable<std::optional<Result<ModelReply>>> TaskRunner::call_model(
    Run& run, std::shared_ptr<const std::vector<Message>> messages, std::string messages_json,
    std::shared_ptr<const ToolSet> tools, TimePoint deadline, std::int64_t max_output_tokens) {
  // The call runs as its own coroutine owning what it reads, so that a cancellation can
  // stop waiting for it at once; an abandoned call ends at its own deadline.
  struct Call {
    std::shared_ptr<const std::vector<Message>> messages;
    std::string messages_json;
    std::shared_ptr<const ToolSet> tools;
    std::optional<Result<ModelReply>> reply;
    asio::steady_timer* waiter = nullptr;
    // Attempts the provider may have charged for whose answers are not the reply.
    std::vector<LostCharge> lost;
    // The run stopped waiting: the call bills what it cost itself when it ends.
    bool abandoned = false;
    ports::Charges step;  // the run's step, for that bill
    // A try was recorded before it was sent (ports::CallSent): the call's end settles it.
    bool recorded = false;
    // The store's answer when a try could not be recorded (and so was not sent).
    std::optional<Result<Status>> unrecorded;
  };
  auto call = std::make_shared<Call>();
  call->messages = std::move(messages);
  call->messages_json = std::move(messages_json);
  call->tools = std::move(tools);
  call->step = charges_of(run, run.step);
  auto executor = co_await asio::this_coro::executor;
  ports::ModelRequest request{run.claimed.spec.model, call->messages.get(), &call->tools->schemas,
                              call->messages_json,    call->tools->json,    deadline,
                              run.traceparent,        run.encoder.echo(),   &call->lost,
                              max_output_tokens};
  // A model that streams: its text reaches the task's event stream as the model writes it.
  // Not once the run stopped waiting (the run may be gone by then).
  request.on_text = [this, call, running = &run, step = run.step](std::string_view text) {
    if (call->abandoned)
      return;
    running->streamed_step = step;
    emit_progress(*running, "delta", step, {}, text_event_json(text));
  };
  request.call_id =
      run.task_id + ":" + std::to_string(run.claimed.attempt) + ":" + std::to_string(run.step);
  // Each try is recorded before it is sent, with the charges of the tries lost before it, so
  // that nothing it costs is lost with the worker (docs/billing.md, "Calls in flight when a
  // worker stops").
  request.before_send = [this, call, incarnation = run.incarnation](
                            std::int64_t input_tokens) -> asio::awaitable<Status> {
    if (!call->lost.empty()) {
      std::vector<LostCharge> earlier = std::move(call->lost);
      call->lost.clear();
      co_await bill_unreconciled(call->step, std::move(earlier));
    }
    TokenUsage estimate;
    estimate.input = input_tokens;
    const billing::Money cost = prices_.cost(call->step.model, estimate, clock_.wall_now());
    ports::CallSent sent{call->step.task_id,  call->step.attempt,
                         call->step.step,     call->step.user_id,
                         call->step.batch_id, call->step.model,
                         input_tokens,        billing::format_micros(cost.micros),
                         cost.currency,       incarnation};
    auto recorded = co_await store_.record_call(std::move(sent));
    if (recorded.ok() && recorded.value().ok()) {
      call->recorded = true;
      co_return ok_status();
    }
    Error why = recorded.ok() ? recorded.value().error() : recorded.error();
    call->unrecorded = std::move(recorded);
    co_return why;
  };
  asio::co_spawn(
      executor,
      [this, call, request = std::move(request),
       &model = model_]() mutable -> asio::awaitable<void> {
        auto reply = co_await model.complete(std::move(request));
        if (call->abandoned) {
          // Nobody reads the reply any more; what the call cost is billed all the same.
          std::vector<LostCharge> lost = std::move(call->lost);
          if (reply.ok()) {
            LostCharge answered;
            answered.usage = reply.value().usage;
            answered.estimated = reply.value().usage_estimated;
            answered.reason = ChargeLoss::kAbandoned;
            lost.push_back(answered);
          }
          ports::Charges of_call = call->step;
          of_call.settles_call = call->recorded;
          co_await bill_unreconciled(std::move(of_call), std::move(lost));
          co_return;
        }
        call->reply = std::move(reply);
        if (call->waiter != nullptr)
          call->waiter->cancel();
      },
      [call](std::exception_ptr error) {
        if (error && !call->reply) {
          call->reply = Result<ModelReply>(Error{ErrorKind::kTransient, "model call failed"});
          if (call->waiter != nullptr)
            call->waiter->cancel();
        }
      });
  // The call's own deadline bounds it; the timer is a backstop a little past it.
  const TimePoint backstop = deadline + std::chrono::seconds(1);
  asio::steady_timer timer(executor);
  call->waiter = &timer;
  run.control->waiting = &timer;
  while (!call->reply && !run.control->interrupted() && clock_.now() < backstop) {
    timer.expires_after(backstop - clock_.now());
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  call->waiter = nullptr;
  run.control->waiting = nullptr;
  if (!call->reply) {
    call->abandoned = true;
    co_return std::nullopt;
  }
  run.call_unrecorded = std::move(call->unrecorded);
  // An answer is billed by its checkpoint, which settles the call's record; a call that
  // failed settles it here, with what its last try may have cost (maybe nothing: the
  // provider refused it).
  ports::Charges of_call = call->step;
  of_call.settles_call = call->recorded && !call->reply->ok();
  if (!call->lost.empty() || of_call.settles_call)
    co_await bill_unreconciled(std::move(of_call), std::move(call->lost));
  co_return std::move(call->reply);
}

ports::Charges TaskRunner::charges_of(const Run& run, int step) {
  ports::Charges charges;
  charges.task_id = run.task_id;
  charges.attempt = run.claimed.attempt;
  charges.step = step;
  charges.user_id = run.claimed.spec.user_id;
  charges.batch_id = run.claimed.spec.batch_id;
  charges.model = run.claimed.spec.model;
  charges.traceparent = run.traceparent;
  return charges;
}

asio::awaitable<void> TaskRunner::bill_unreconciled(ports::Charges charges,
                                                    std::vector<LostCharge> lost) {
  if (lost.empty() && !charges.settles_call)
    co_return;
  const auto now = clock_.wall_now();
  std::string what;
  std::vector<std::int64_t> micros;
  for (const LostCharge& charge : lost) {
    const billing::Money cost = prices_.cost(charges.model, charge.usage, now);
    micros.push_back(cost.micros);
    what += (what.empty() ? "" : "; ") + std::string(to_string(charge.reason)) + " " +
            std::to_string(charge.usage.input) + "+" + std::to_string(charge.usage.output) +
            " tokens" + (charge.estimated ? " (estimated)" : "");
    charges.charges.push_back(
        ports::UnreconciledCharge{charge, billing::format_micros(cost.micros), cost.currency});
  }
  // The log line's context and the metrics outlive what the store is given: copies.
  const std::vector<ports::UnreconciledCharge> billed = charges.charges;
  const std::string task_id = charges.task_id;
  const std::string user_id = charges.user_id;
  const std::string batch_id = charges.batch_id;
  const std::string model = charges.model;
  const std::string traceparent = charges.traceparent;
  const log::TaskContext task{task_id,         user_id,      batch_id,
                              charges.attempt, charges.step, log::trace_id_of(traceparent)};
  auto recorded = co_await store_.record_charges(std::move(charges));
  if (recorded.ok() && !recorded.value().ok() &&
      recorded.value().error().kind == ErrorKind::kConflict) {
    // The call's record was gone: the scheduler billed it (its estimate) when this worker's
    // liveness lapsed. Billed once, not twice.
    if (!billed.empty())
      log::warn("worker", task,
                "model charges already billed by the scheduler (this worker's liveness had "
                "lapsed); not billed again: " +
                    what,
                {{"model", model}});
    co_return;
  }
  if (!recorded.ok() || !recorded.value().ok()) {
    const std::string why =
        !recorded.ok() ? recorded.error().message : recorded.value().error().message;
    log::error("worker", task, "unreconciled model charges not recorded (" + what + "): " + why,
               {{"model", model}});
    co_return;
  }
  if (billed.empty())
    co_return;
  for (std::size_t i = 0; i < billed.size(); ++i) {
    const ports::UnreconciledCharge& c = billed[i];
    metrics_.tokens(model, c.charge.usage);
    metrics_.cost(model, c.currency, micros[i]);
    metrics_.charge_unreconciled(model, c.charge.reason, c.charge.estimated);
  }
  log::info("worker", task, "unreconciled model charges billed: " + what, {{"model", model}});
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

billing::SpendDecision TaskRunner::spend_check(const Run& run, const config::ModelConfig& model,
                                               std::int64_t input_tokens) const {
  const TaskSpec& spec = run.claimed.spec;
  billing::SpendLimits limits;
  limits.max_tokens = spec.max_tokens;
  limits.max_cost_micros = spec.max_cost_micros;
  limits.budget_micros = run.budget_micros;
  limits.currency = exchange_.target();
  limits.month_zone = config_.billing.time_zone;
  billing::SpendSoFar spent;
  spent.task_tokens = run.totals.usage.input + run.totals.usage.output;
  spent.task_cost_micros = run.task_cost_micros;
  spent.month_micros = run.budget_spent_micros;
  billing::NextCall call;
  call.input_tokens = input_tokens;
  call.max_output_tokens = model.max_output_tokens;
  // The call at its most: the input as estimated and the whole output allowance, priced now.
  call.cost_micros = [&](std::int64_t input, std::int64_t output) {
    TokenUsage most;
    most.input = input;
    most.output = output;
    const billing::Money cost = prices_.cost(spec.model, most, clock_.wall_now());
    return exchange_.to_target(cost.micros, cost.currency)
        .value_or(std::numeric_limits<std::int64_t>::max());
  };
  return billing::check_spend(limits, spent, call);
}

asio::awaitable<TaskRunner::ToolsRun> TaskRunner::run_tools(Run& run, int step,
                                                            const react::CallTools& calls,
                                                            bool resumed, std::string* trace_json) {
  const TaskSpec& spec = run.claimed.spec;
  auto executor = co_await asio::this_coro::executor;
  struct Slot {
    ToolCall call;
    int index = 0;  // position among the assistant's tool calls: part of the idempotency key
    ports::ToolOutcome outcome;
    std::chrono::system_clock::time_point at;
    bool refused = false;  // never sent: permission or arguments
    bool unknown = false;  // an earlier attempt's call of a tool that is not idempotent
    bool sent = false;
    bool done = false;
  };
  // Shared with the call coroutines, which may outlive this one after an interruption.
  struct Batch {
    std::vector<Slot> slots;
    std::size_t pending = 0;
    asio::steady_timer* waiter = nullptr;
  };
  auto batch = std::make_shared<Batch>();
  for (std::size_t i = 0; i < calls.calls.size(); ++i) {
    batch->slots.push_back(Slot{calls.calls[i], calls.call_indices[i], {}, {}});
  }

  // Permission and arguments are checked before anything is sent; a refused or bad call
  // is the model's to fix.
  std::vector<std::size_t> to_call;
  for (std::size_t i = 0; i < batch->slots.size(); ++i) {
    Slot& slot = batch->slots[i];
    slot.at = clock_.wall_now();
    slot.outcome.observation.call_id = slot.call.id;
    slot.outcome.observation.tool = slot.call.name;
    auto schema = argument_schemas_.find(slot.call.name);
    if (auto refusal = codec::check_tool_call(
            slot.call, run.permitted,
            schema != argument_schemas_.end() ? schema->second.get() : nullptr)) {
      slot.outcome.observation.content = std::move(refusal->error_json);
      slot.refused = true;
      metrics_.tool_call(slot.call.name,
                         refusal->code == codec::kInvalidArguments
                             ? metrics::ToolOutcome::kInvalidArguments
                             : metrics::ToolOutcome::kRefused,
                         0);
      continue;
    }
    if (resumed && not_idempotent_.count(slot.call.name)) {
      // Sent again, it might act twice: the model is told to check before repeating it.
      slot.unknown = true;
      slot.outcome.observation.ok = false;
      slot.outcome.observation.content = react::tool_error_json(
          "outcome_unknown",
          "an earlier attempt of this task made this call and stopped before its answer was "
          "saved: it may or may not have taken effect. It was not sent again; check (for "
          "example by searching) before repeating it.");
      metrics_.tool_call(slot.call.name, metrics::ToolOutcome::kOutcomeUnknown, 0);
      const std::string key =
          run.task_id + ":" + std::to_string(step) + ":" + std::to_string(slot.index);
      log::warn("worker", run.log_context(),
                "tool call not sent again: an earlier attempt may have made it (outcome unknown)",
                {{"tool", slot.call.name}, {"idempotency_key", key}});
      continue;
    }
    to_call.push_back(i);
  }

  // At most max_tool_calls_per_step calls of one step run at once.
  const std::size_t window =
      static_cast<std::size_t>(std::max(1, config_.worker.max_tool_calls_per_step));
  const TimePoint backstop = run.deadline + std::chrono::seconds(1);
  asio::steady_timer timer(executor);
  ToolsRun ran;
  ran.complete = true;
  for (std::size_t begin = 0; begin < to_call.size() && ran.complete; begin += window) {
    const std::size_t end = std::min(to_call.size(), begin + window);
    batch->pending = end - begin;
    for (std::size_t k = begin; k < end; ++k) {
      const std::size_t i = to_call[k];
      Slot& slot = batch->slots[i];
      slot.sent = true;
      emit_progress(run, "action", step, slot.call.name, slot.call.arguments);
      ports::ToolInvocation invocation{
          run.task_id,
          spec.user_id,
          spec.metadata.device_id,
          slot.call.name,
          slot.call.arguments,
          run.task_id + ":" + std::to_string(step) + ":" + std::to_string(slot.index),
          run.deadline,
          run.traceparent,
          run.claimed.attempt};
      asio::co_spawn(
          executor, tools_.call(std::move(invocation)),
          [batch, i, &metrics = metrics_](std::exception_ptr error, ports::ToolOutcome out) {
            Slot& done = batch->slots[i];
            if (error) {
              out.observation.ok = false;
              out.observation.content = react::tool_error_json("internal", "tool call failed");
            }
            const bool timed_out = !out.observation.ok &&
                                   out.observation.content.find("\"timeout\"") != std::string::npos;
            metrics.tool_call(done.call.name,
                              out.observation.ok ? metrics::ToolOutcome::kOk
                              : timed_out        ? metrics::ToolOutcome::kTimeout
                                                 : metrics::ToolOutcome::kError,
                              std::chrono::duration<double>(out.latency).count());
            out.observation.call_id = done.call.id;
            out.observation.tool = done.call.name;
            done.outcome = std::move(out);
            done.done = true;
            if (--batch->pending == 0 && batch->waiter != nullptr)
              batch->waiter->cancel();
          });
    }
    batch->waiter = &timer;
    run.control->waiting = &timer;
    while (batch->pending > 0 && !run.control->interrupted() && clock_.now() < backstop) {
      timer.expires_after(backstop - clock_.now());
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    batch->waiter = nullptr;
    run.control->waiting = nullptr;
    // Interrupted, or past the deadline: what answered is kept (the caller saves it).
    ran.complete = batch->pending == 0;
  }

  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartArray();
  for (Slot& slot : batch->slots) {
    const ToolObservation& o = slot.outcome.observation;
    const bool refused = slot.refused;
    if (!refused && !slot.unknown && !slot.sent)
      continue;  // cut short before its window started: never sent, not shown
    if (!refused && !slot.unknown && !slot.done) {
      // Sent, and no answer before the run stopped: it may or may not have acted.
      w.StartObject();
      w.Key("call_id");
      w.String(slot.call.id.c_str());
      w.Key("tool");
      w.String(slot.call.name.c_str());
      w.Key("arguments");
      w.String(slot.call.arguments.c_str());
      w.Key("status");
      w.String("no_answer");
      w.Key("result");
      w.String(run.control->cancel ? "no answer before the task was cancelled"
                                   : "no answer before the task's deadline");
      w.Key("at");
      const std::string at = codec::format_rfc3339(slot.at);
      w.String(at.c_str());
      w.EndObject();
      continue;
    }
    if (slot.done)
      ++ran.answered;
    if (!o.ok && !slot.unknown) {
      const std::string code = error_code_of(o.content);
      if (refused) {
        log::info("worker", run.log_context(), "tool call refused",
                  {{"tool", slot.call.name}, {"code", code}});
      } else {
        const std::string excerpt = truncate_chars(o.content, 300);
        const std::string status = std::to_string(slot.outcome.http_status);
        log::warn("worker", run.log_context(), "tool call failed",
                  {{"tool", slot.call.name},
                   {"code", code},
                   {"http_status", status},
                   {"error", excerpt}});
      }
    }
    emit_progress(run, "execution", step, slot.call.name,
                  std::string("{\"ok\":") + (o.ok ? "true" : "false") + "}");
    w.StartObject();
    w.Key("call_id");
    w.String(slot.call.id.c_str());
    w.Key("tool");
    w.String(slot.call.name.c_str());
    w.Key("arguments");
    w.String(slot.call.arguments.c_str());
    w.Key("status");
    w.String(o.ok ? "ok" : refused ? "refused" : slot.unknown ? "outcome_unknown" : "error");
    w.Key("http_status");
    w.Int(slot.outcome.http_status);
    w.Key("result");
    const std::string shown = truncate_chars(o.content, config_.worker.trace_result_chars);
    w.String(shown.c_str());
    w.Key("latency_ms");
    w.Int64(slot.outcome.latency.count());
    w.Key("at");
    const std::string at = codec::format_rfc3339(slot.at);
    w.String(at.c_str());
    w.EndObject();
    ran.observations.push_back(o);
  }
  for (const ToolObservation& refused : calls.refused) {
    metrics_.tool_call(refused.tool, metrics::ToolOutcome::kRefused, 0);
    log::info("worker", run.log_context(), "tool call refused",
              {{"tool", refused.tool}, {"code", error_code_of(refused.content)}});
    // A refusal that names no tool (the synthetic call answering a react_json reply that
    // could not be read) shows its reason, the error code, where the tool would be.
    const std::string tool =
        refused.tool.empty() ? error_code_of(refused.content, "refused") : refused.tool;
    w.StartObject();
    w.Key("call_id");
    w.String(refused.call_id.c_str());
    w.Key("tool");
    w.String(tool.c_str());
    w.Key("status");
    w.String("refused");
    w.Key("result");
    const std::string shown = truncate_chars(refused.content, config_.worker.trace_result_chars);
    w.String(shown.c_str());
    w.EndObject();
  }
  w.EndArray();
  *trace_json = std::string(buffer.GetString(), buffer.GetSize());
  co_return ran;
}

asio::awaitable<RunOutcome> TaskRunner::finish(Run& run, TaskStatus status,
                                               std::optional<TaskResult> result, std::string error,
                                               std::optional<ErrorCode> code) {
  const TaskSpec& spec = run.claimed.spec;
  mark_ending(run);
  // Errors quote outside text (response excerpts); keep them storable.
  error = codec::sanitize_text(error);
  if (status == TaskStatus::kSucceeded)
    code.reset();
  else if (!code)
    code = ErrorCode::kInternal;
  // The result event, from the totals the run kept (what earlier attempts billed, plus each
  // model step it saved): the store writes it with the end, in the same statement.
  codec::ResultEvent event;
  event.task_id = run.task_id;
  event.user_id = spec.user_id;
  event.batch_id = spec.batch_id;
  event.status = status;
  event.result = result;
  event.error = error;
  event.error_code = code ? std::string(to_string(*code)) : std::string();
  event.attempt = run.claimed.attempt;
  event.steps = run.steps;
  event.tool_calls = run.tool_calls;
  event.usage = run.totals.usage;
  event.cost = billing::format_micros(run.totals.cost_micros);
  event.currency = run.totals.currency.empty() ? "CNY" : run.totals.currency;
  event.finished_at = codec::format_rfc3339(clock_.wall_now());
  const std::string event_json = codec::result_event_json(event);
  ports::TaskEnd end{run.task_id,  run.claimed.attempt, status,     result, error,
                     spec.user_id, run.traceparent,     event_json, code,   run.incarnation};
  // The answer that ended the task, if one did: its bill, should the end be fenced.
  std::optional<ports::ModelStep> last_step;
  if (run.final_step) {
    last_step = run.final_step;
    end.last_step = std::exchange(run.final_step, std::nullopt);
  }
  auto finished = co_await store_.finish(std::move(end));
  if (!finished.ok()) {
    // The last step, if any, was not written either: its call's record stays, billed when
    // this worker's incarnation ends (docs/billing.md).
    log::warn("worker", run.log_context(),
              "could not store the end " + std::string(to_string(status)) +
                  " (left for lease recovery): " + finished.error().message);
    co_return RunOutcome::kStoreUnavailable;
  }
  if (!finished.value().ok()) {
    log::warn("worker", run.log_context(),
              "lease taken over; the end " + std::string(to_string(status)) + " was not stored");
    if (last_step) {
      co_await bill_fenced_answer(run, last_step->step, last_step->ledger.usage,
                                  last_step->ledger.usage_estimated);
    }
    co_return RunOutcome::kLeaseLost;
  }
  const std::int64_t outbox_id = finished.value().value();
  if (ended_)
    ended_(run.task_id, run.traceparent);
  metrics_.task_finished(status, result ? std::optional(result->type) : std::nullopt, code,
                         std::chrono::duration<double>(clock_.now() - run.claimed_at).count());
  if (error.empty()) {
    log::info(
        "worker", run.log_context(),
        std::string("finished ") + std::string(to_string(status)) +
            (result ? std::string(" ") + std::string(to_string(result->type)) : std::string()));
  } else {
    log::write(status == TaskStatus::kFailed ? "warn" : "info", "worker", run.log_context(),
               std::string("finished ") + std::string(to_string(status)),
               {{"error", error}, {"error_code", std::string(to_string(*code))}});
  }
  if (status != TaskStatus::kSucceeded) {
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
    const std::string text = error.empty() ? std::string(to_string(status)) : error;
    const std::string_view code_text = to_string(*code);
    w.StartObject();
    w.Key("text");
    w.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
    w.Key("error_code");
    w.String(code_text.data(), static_cast<rapidjson::SizeType>(code_text.size()));
    w.EndObject();
    emit_progress(run, "error", run.steps, {}, std::string(buffer.GetString(), buffer.GetSize()));
  }
  emit_progress(run, "done", run.steps, {}, event_json);

  // Announce now; if this fails the relay publishes the outbox row after its delay.
  ports::Headers headers;
  if (!run.traceparent.empty())
    headers.emplace_back("traceparent", run.traceparent);
  ports::OutMessage announcement{config_.kafka.topics.results, spec.user_id, event_json, headers};
  Status published = co_await publisher_.publish(std::move(announcement));
  if (published.ok()) {
    store_.announced(outbox_id);
  } else {
    log::warn("worker", run.log_context(),
              "result event not published yet (the relay will): " + published.error().message);
  }
  co_return RunOutcome::kFinished;
}

void TaskRunner::emit_progress(Run& run, std::string event, int step, std::string tool,
                               std::string data_json) {
  // Progress is best effort (the result event and the row are the truth), so it is
  // produced without waiting for the broker. Data that is not a JSON object is wrapped.
  rapidjson::Document data;
  if (!codec::parse_json(data, data_json) || !data.IsObject()) {
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
    w.StartObject();
    w.Key("text");
    w.String(data_json.c_str());
    w.EndObject();
    data_json.assign(buffer.GetString(), buffer.GetSize());
  }
  codec::ProgressEvent progress{
      run.task_id,         run.claimed.spec.user_id, run.progress_seq++,
      run.claimed.attempt, std::move(event),         step,
      std::move(tool),     std::move(data_json),     codec::format_rfc3339(clock_.wall_now())};
  publisher_.post(ports::OutMessage{config_.kafka.topics.events,
                                    run.claimed.spec.user_id,
                                    codec::progress_event_json(progress),
                                    {}});
}

}  // namespace agentfleet::worker
