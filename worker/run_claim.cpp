// The attempt and its claim: the task made this worker's (lease, attempt, incarnation), a
// claim retried through a store outage, a claim in doubt reported for hand-back.
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>

#include "core/adapters/log.hpp"
#include "core/react/context_budget.hpp"
#include "worker/run_state.hpp"
#include "worker/task_runner.hpp"

namespace agentfleet::worker {

namespace asio = boost::asio;

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
  bool in_doubt = false;
  auto answer = co_await claim_in_store(*run, lifted, fences_before, in_doubt);
  if (!answer)
    co_return ClaimResult{nullptr, RunOutcome::kStoreUnavailable};
  Result<ports::Claim>& claim = *answer;
  if (in_doubt && abandoned_ &&
      (!claim.ok() || claim.value().outcome != ports::ClaimOutcome::kClaimed)) {
    if (const int attempt = report_claim_in_doubt(*run, claim); attempt == 1) {
      // That claim may have recorded the task's first call, which no run of it will send:
      // the record goes (nothing billed; none there, nothing happens).
      ports::Charges unsent;
      unsent.task_id = run->task_id;
      unsent.attempt = attempt;
      unsent.step = 0;
      unsent.user_id = run->user_id;
      unsent.traceparent = run->traceparent;
      unsent.settles_call = true;
      std::vector<LostCharge> nothing;
      co_await bill_unreconciled(std::move(unsent), std::move(nothing));
    }
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
  ClaimResult taken = take_claim(run, std::move(claim.value()), fences_before);
  if (!taken.run)  // not run after all: the first call's record, if the claim wrote one, goes
    co_await settle_unsent_call(*run);
  co_return taken;
}

std::shared_ptr<const ports::FirstCallEstimates> TaskRunner::first_call_estimates() const {
  std::lock_guard lock(first_calls_mutex_);
  if (first_call_prompts_.empty())
    return nullptr;
  const auto now = clock_.wall_now();
  auto estimates = std::make_shared<ports::FirstCallEstimates>();
  for (const auto& [of, prompt_tokens] : first_call_prompts_) {
    ports::FirstCallEstimate estimate{of.first, of.second, prompt_tokens, 0,
                                      prices_.cost(of.first, TokenUsage{}, now).currency};
    // As billing::PriceTable::cost prices input tokens (no price: they cost nothing).
    if (const billing::Price* price = prices_.find(of.first, now))
      estimate.rate = price->input_per_million_micros * prices_.multiplier_micros(*price, now);
    estimates->push_back(std::move(estimate));
  }
  return estimates;
}

void TaskRunner::learn_first_call(const Run& run, std::int64_t input_tokens) {
  const TaskSpec& spec = run.claimed.spec;
  if (run.claimed.attempt != 1 || !spec.parent_task_id.empty() || !run.claimed.steps.empty())
    return;
  const std::int64_t prompt_tokens = input_tokens - react::estimate_tokens(spec.text);
  if (prompt_tokens < 0 || !config_.find_model(spec.model))
    return;
  const std::string strategy = spec.strategy ? std::string(to_string(*spec.strategy)) : "";
  std::lock_guard lock(first_calls_mutex_);
  first_call_prompts_[{spec.model, strategy}] = prompt_tokens;
}

asio::awaitable<std::optional<Result<ports::Claim>>> TaskRunner::claim_in_store(
    Run& run, std::uint64_t lifted, std::uint64_t& fences_before, bool& in_doubt) {
  auto executor = co_await asio::this_coro::executor;
  auto claim = co_await store_.claim(run.task_id, first_call_estimates());
  if (claim.ok() && claim.value().outcome == ports::ClaimOutcome::kNotLive) {
    // The claim ran after this incarnation's liveness lapsed (it waited in a silent
    // connection): it took nothing. Once the lease keeper holds a new incarnation, once more.
    log::warn("worker", run.log_context(),
              "not claimed: this worker's liveness lapsed before the claim ran; claiming again "
              "under its next incarnation");
    if (!co_await claimable(lifted)) {
      log::warn("worker", run.log_context(), "not claimed: no new incarnation came");
      co_return std::nullopt;
    }
    fences_before = fence_count();
    claim = co_await store_.claim(run.task_id, first_call_estimates());
  }
  // A claim that failed on a store outage (a Postgres restart) is tried again for a few
  // seconds: left alone, the task would wait in `dispatched` for the scheduler's
  // redispatch_after_s (a minute), its deadline running if an earlier attempt started it.
  for (int retry = 0; !claim.ok() && claim.error().retryable() && retry < kClaimRetries; ++retry) {
    in_doubt = true;
    {
      std::lock_guard lock(leases_mutex_);
      if (draining_)
        break;
    }
    log::warn("worker", run.log_context(), "claim failed, trying again: " + claim.error().message);
    asio::steady_timer pause(executor, std::chrono::milliseconds(kClaimRetryBaseMs << retry));
    boost::system::error_code ec;
    co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    fences_before = fence_count();
    claim = co_await store_.claim(run.task_id, first_call_estimates());
  }
  co_return claim;
}

int TaskRunner::report_claim_in_doubt(const Run& run, const Result<ports::Claim>& claim) {
  // A claim whose commit was in doubt may have made the task this worker's without anyone
  // running it: such a task is reported abandoned, and the lease keeper hands it back if
  // this worker holds it. A retry that finds it run by this incarnation already (and by no
  // run or other claim of this worker) knows the attempt the lost answer made: handed back
  // at that attempt, the release counts even should the task be taken over before the
  // hand-back (its incarnation lapsing meanwhile). Else the attempt is unknown (-1).
  ports::HeldTask doubtful{run.task_id, -1};
  bool report = true;
  if (claim.ok() && claim.value().outcome == ports::ClaimOutcome::kBusyOrDone &&
      claim.value().held_attempt > 0) {
    std::lock_guard lock(leases_mutex_);
    int claims = 0;
    {
      std::lock_guard counted(claiming_->mutex);
      claims = claiming_->tasks[run.task_id];
    }
    if (leases_.count(run.task_id)) {
      report = false;  // a run of this worker claimed it: the claim in doubt took nothing
    } else if (claims <= 1) {
      doubtful.attempt = claim.value().held_attempt;
      doubtful.incarnation = claim.value().incarnation;
    }
  }
  if (!report)
    return 0;
  const int attempt = doubtful.attempt;
  abandoned_(std::move(doubtful));
  return std::max(attempt, 0);
}

ClaimResult TaskRunner::take_claim(std::shared_ptr<Run> run, ports::Claim claim,
                                   std::uint64_t fences_before) {
  run->claimed = std::move(*claim.task);
  run->incarnation = claim.incarnation;
  run->attempt = run->claimed.attempt;
  run->totals = run->claimed.totals;
  run->claimed_at = clock_.now();
  if (run->claimed.first_call_recorded)
    run->unsent_call_step = 0;  // the claim recorded the first call (step 0)
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
      abandoned_(ports::HeldTask{run->task_id, run->claimed.attempt, claim.incarnation});
    return ClaimResult{nullptr, RunOutcome::kLeaseLost};
  }
  return ClaimResult{std::move(run), RunOutcome::kFinished};
}

}  // namespace agentfleet::worker
