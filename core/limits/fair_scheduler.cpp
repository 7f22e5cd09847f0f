#include "core/limits/fair_scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace agentfleet::limits {
namespace {

constexpr std::chrono::milliseconds kMinute = std::chrono::minutes(1);
// Weight of a new task total in the running estimate: a few tasks move it, one outlier
// does not dominate it.
constexpr double kEstimateAlpha = 0.2;

int class_index(Priority priority) {
  return priority == Priority::kBatch ? 1 : 0;
}

double requests_capacity(const UserLimits& limits) {
  return limits.requests_per_minute > 0 ? static_cast<double>(limits.requests_per_minute) : 0;
}

double tokens_capacity(const UserLimits& limits) {
  return limits.tokens_per_minute > 0 ? static_cast<double>(limits.tokens_per_minute) : 0;
}

// A per-minute bucket from which `used` was taken just now. A request bucket never starts
// in debt (admissions above a lowered limit only wait for the refill); a token bucket may,
// since the tokens were really spent.
TokenBucket bucket_after_use(double capacity, double used, bool allow_debt, Clock::time_point now) {
  TokenBucket bucket(capacity, kMinute, now);
  if (capacity > 0 && used > 0)
    bucket.adjust(-(allow_debt ? used : std::min(used, capacity)), now);
  return bucket;
}

// What a bucket built for `old_capacity` has used, so a resized bucket keeps it. Nothing
// is known of an unlimited bucket's use.
double used_of(TokenBucket& bucket, double old_capacity, Clock::time_point now) {
  return old_capacity > 0 ? old_capacity - bucket.level(now) : 0;
}

// What a task is really charged in a token bucket: TokenBucket takes at most its capacity.
double charged_tokens(std::int64_t estimate, double capacity) {
  const double cost = static_cast<double>(std::max<std::int64_t>(estimate, 0));
  return capacity > 0 ? std::min(cost, capacity) : cost;
}

// One user of the pass, with the room it had at the start and what it was granted.
struct Candidate {
  const std::string* user_id = nullptr;
  TokenBucket* requests = nullptr;
  TokenBucket* tokens = nullptr;
  std::int64_t charge = 0;  // tokens per task
  int max_concurrency = 0;
  std::int64_t active = 0;
  int weight = 1;
  std::int64_t queued[2] = {0, 0};
  int granted[2] = {0, 0};
  int grant_index[2] = {-1, -1};  // into PassPlan::grants
  bool over_budget = false;

  std::int64_t queued_total() const { return queued[0] + queued[1]; }
  int granted_total() const { return granted[0] + granted[1]; }
  bool wants(int cls) const { return !over_budget && queued[cls] > granted[cls]; }
};

// The first limit (after the budget, handled apart) that keeps the user from one more
// task now; nullopt when it has room.
std::optional<ThrottleCause> limit_reached(const Candidate& c, Clock::time_point now) {
  if (c.max_concurrency <= 0 || c.active + c.granted_total() >= c.max_concurrency)
    return ThrottleCause::kConcurrency;
  if (c.requests->wait_for(1, now).count() > 0)
    return ThrottleCause::kRpm;
  if (c.tokens->wait_for(static_cast<double>(c.charge), now).count() > 0)
    return ThrottleCause::kTpm;
  return std::nullopt;
}

// Weighted round robin of one priority class over `budget` slots; returns the slots used.
// `candidates` are sorted by user id. The cursor (and the rest of its turn) carries the
// rotation from pass to pass.
int round_robin(std::vector<Candidate>& candidates, Priority priority, int budget,
                std::string& cursor, int& turn_left, std::vector<Grant>& grants,
                Clock::time_point now) {
  if (budget <= 0 || candidates.empty())
    return 0;
  const int cls = class_index(priority);
  const std::size_t n = candidates.size();
  const auto by_id = [](const Candidate& c, const std::string& id) { return *c.user_id < id; };
  auto at = std::lower_bound(candidates.begin(), candidates.end(), cursor, by_id);
  std::size_t start = 0;
  bool resume = false;  // the cursor user's turn was cut short by the slots: it goes on
  if (turn_left > 0 && at != candidates.end() && *at->user_id == cursor) {
    start = static_cast<std::size_t>(at - candidates.begin());
    resume = true;
  } else {
    if (at != candidates.end() && *at->user_id == cursor)
      ++at;
    start = at == candidates.end() ? 0 : static_cast<std::size_t>(at - candidates.begin());
  }

  std::vector<std::size_t> ring;
  ring.reserve(n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = (start + k) % n;
    if (candidates[i].wants(cls))
      ring.push_back(i);
  }
  resume = resume && !ring.empty() && ring.front() == start;

  int used = 0;
  bool first_round = true;
  while (!ring.empty() && used < budget) {
    std::vector<std::size_t> next;
    next.reserve(ring.size());
    for (std::size_t k = 0; k < ring.size() && used < budget; ++k) {
      Candidate& c = candidates[ring[k]];
      const int quantum =
          first_round && k == 0 && resume ? std::min(turn_left, c.weight) : c.weight;
      int took = 0;
      bool stopped = false;
      while (took < quantum && c.wants(cls) && used < budget) {
        if (limit_reached(c, now)) {
          stopped = true;
          break;
        }
        c.requests->try_acquire(1, now);
        c.tokens->try_acquire(static_cast<double>(c.charge), now);
        ++c.granted[cls];
        ++took;
        ++used;
      }
      if (took > 0) {
        if (c.grant_index[cls] < 0) {
          c.grant_index[cls] = static_cast<int>(grants.size());
          grants.push_back(Grant{*c.user_id, priority, 0});
        }
        grants[static_cast<std::size_t>(c.grant_index[cls])].tasks += took;
        cursor = *c.user_id;
        // Only the slots running out leaves a turn unfinished; a limit or an empty queue
        // ends it.
        turn_left = took < quantum && !stopped && c.wants(cls) ? quantum - took : 0;
      }
      if (!stopped && c.wants(cls))
        next.push_back(ring[k]);
    }
    first_round = false;
    ring = std::move(next);
  }
  return used;
}

}  // namespace

const char* wait_reason_name(WaitReason reason) {
  switch (reason) {
    case WaitReason::kConcurrency:
      return "concurrency";
    case WaitReason::kRequestsPerMinute:
      return "requests_per_minute";
    case WaitReason::kTokensPerMinute:
      return "tokens_per_minute";
    case WaitReason::kBudget:
      return "budget";
    case WaitReason::kFleetCapacity:
      return "fleet_capacity";
    case WaitReason::kBatchShare:
      return "batch_share";
    case WaitReason::kPassLimit:
      return "pass_limit";
  }
  return "pass_limit";
}

FairScheduler::UserState::UserState(const UserLimits& applied, Clock::time_point now)
    : limits(applied),
      requests(requests_capacity(applied), kMinute, now),
      tokens(tokens_capacity(applied), kMinute, now),
      last_seen(now) {}

FairScheduler::FairScheduler(FairSchedulerOptions options, const Clock& clock)
    : options_(options), clock_(clock) {}

FairScheduler::UserState& FairScheduler::state_for(const std::string& user_id,
                                                   const UserLimits& limits) {
  const auto now = clock_.now();
  auto it = users_.find(user_id);
  if (it == users_.end()) {
    UserState& created = users_.emplace(user_id, UserState(limits, now)).first->second;
    created.charged_per_task = estimate_of(created);
    return created;
  }
  UserState& state = it->second;
  // Limits changed at run time take effect now; what was used in the last minute stays
  // used, so a raise frees the difference and a cut holds the user back.
  const double old_requests = requests_capacity(state.limits);
  const double new_requests = requests_capacity(limits);
  if (old_requests != new_requests)
    state.requests = bucket_after_use(new_requests, used_of(state.requests, old_requests, now),
                                      /*allow_debt=*/false, now);
  const double old_tokens = tokens_capacity(state.limits);
  const double new_tokens = tokens_capacity(limits);
  if (old_tokens != new_tokens)
    state.tokens = bucket_after_use(new_tokens, used_of(state.tokens, old_tokens, now),
                                    /*allow_debt=*/true, now);
  state.limits = limits;
  return state;
}

std::int64_t FairScheduler::estimate_of(const UserState& state) const {
  if (!state.has_average)
    return std::max<std::int64_t>(options_.default_task_tokens, 1);
  return std::max<std::int64_t>(std::llround(state.average_tokens), 1);
}

PassPlan FairScheduler::plan(const std::vector<UserBacklog>& users, std::int64_t fleet_active,
                             std::int64_t fleet_capacity) {
  const auto now = clock_.now();
  PassPlan plan;

  // By user id, which is the round-robin order; a user listed twice counts once (the first).
  std::vector<const UserBacklog*> backlog;
  backlog.reserve(users.size());
  for (const auto& user : users)
    backlog.push_back(&user);
  std::stable_sort(backlog.begin(), backlog.end(), [](const UserBacklog* a, const UserBacklog* b) {
    return a->user_id < b->user_id;
  });
  backlog.erase(std::unique(backlog.begin(), backlog.end(),
                            [](const UserBacklog* a, const UserBacklog* b) {
                              return a->user_id == b->user_id;
                            }),
                backlog.end());

  std::vector<Candidate> candidates;
  candidates.reserve(backlog.size());
  for (const UserBacklog* user : backlog) {
    UserState& state = state_for(user->user_id, user->limits);
    state.last_seen = now;
    state.charged_per_task = estimate_of(state);
    Candidate c;
    c.user_id = &user->user_id;
    c.requests = &state.requests;
    c.tokens = &state.tokens;
    c.charge = state.charged_per_task;
    c.max_concurrency = user->limits.max_concurrency;
    c.active = std::max<std::int64_t>(user->active, 0);
    c.weight = std::max(user->limits.weight, 1);
    c.queued[0] = std::max<std::int64_t>(user->queued_interactive, 0);
    c.queued[1] = std::max<std::int64_t>(user->queued_batch, 0);
    c.over_budget = user->limits.monthly_budget_micros > 0 &&
                    user->spent_micros >= user->limits.monthly_budget_micros;
    candidates.push_back(c);
  }

  // Ending over-budget tasks is work of the pass: it takes from the pass limit, but not
  // from the fleet cap (those tasks never run).
  std::int64_t pass_room = std::max(options_.pass_limit, 0);
  for (const Candidate& c : candidates) {
    if (!c.over_budget || c.queued_total() == 0)
      continue;
    ++plan.throttled[static_cast<int>(ThrottleCause::kBudget)];
    const std::int64_t fail = std::min(c.queued_total(), pass_room);
    if (fail > 0)
      plan.over_budget.emplace_back(*c.user_id, static_cast<int>(fail));
    pass_room -= fail;
  }
  std::int64_t slots = pass_room;
  const std::int64_t active = std::max<std::int64_t>(fleet_active, 0);
  if (options_.max_active > 0)
    slots = std::min(slots, std::max<std::int64_t>(options_.max_active - active, 0));
  // What the workers can start now; the rest waits here, where it can be scheduled fairly.
  const bool capacity_binds =
      fleet_capacity >= 0 && std::max<std::int64_t>(fleet_capacity - active, 0) < slots;
  if (capacity_binds)
    slots = std::max<std::int64_t>(fleet_capacity - active, 0);
  plan.slots = static_cast<int>(slots);

  // Batch's guaranteed share, only when some batch work could use it now.
  int reserve = 0;
  const double share =
      std::clamp(std::isfinite(options_.batch_share) ? options_.batch_share : 0.0, 0.0, 1.0);
  if (plan.slots > 0 && share > 0 &&
      std::any_of(candidates.begin(), candidates.end(), [&](const Candidate& c) {
        return c.wants(class_index(Priority::kBatch)) && !limit_reached(c, now);
      })) {
    // Slightly below the product so that 10 * 0.3 = 3.0000000000000004 rounds up to 3.
    const double wanted = std::ceil(plan.slots * share * (1 - 1e-12));
    reserve = std::min(plan.slots, static_cast<int>(wanted));
  }

  const auto run = [&](Priority priority, int budget) {
    const int cls = class_index(priority);
    return round_robin(candidates, priority, budget, cursor_[cls], cursor_turn_left_[cls],
                       plan.grants, now);
  };
  // Interactive first, then batch (with its share and interactive's leftovers), then
  // interactive again with what batch left.
  int used = run(Priority::kInteractive, plan.slots - reserve);
  used += run(Priority::kBatch, plan.slots - used);
  run(Priority::kInteractive, plan.slots - used);

  // Held back by a limit: queued work, nothing granted, and a limit in the way; or, when the
  // workers' capacity was what ran out, that. Over-budget users were counted above.
  int granted = 0;
  for (const Grant& g : plan.grants)
    granted += g.tasks;
  const bool slots_used = granted >= plan.slots;
  // The fleet's room, not the pass limit, bounded the slots: the capacity the workers report
  // or the fleet's cap on active tasks.
  const bool fleet_full =
      capacity_binds || (options_.max_active > 0 &&
                         std::max<std::int64_t>(options_.max_active - active, 0) < pass_room);
  const bool interactive_served = std::any_of(candidates.begin(), candidates.end(),
                                              [](const Candidate& c) { return c.granted[0] > 0; });
  for (const Candidate& c : candidates) {
    for (const Priority priority : {Priority::kInteractive, Priority::kBatch}) {
      const int cls = class_index(priority);
      if (c.queued[cls] <= c.granted[cls])
        continue;
      WaitReason reason = WaitReason::kPassLimit;
      if (c.over_budget) {
        reason = WaitReason::kBudget;
      } else if (const auto cause = limit_reached(c, now)) {
        reason = *cause == ThrottleCause::kConcurrency ? WaitReason::kConcurrency
                 : *cause == ThrottleCause::kRpm       ? WaitReason::kRequestsPerMinute
                                                       : WaitReason::kTokensPerMinute;
      } else if (slots_used && priority == Priority::kBatch && interactive_served) {
        reason = WaitReason::kBatchShare;
      } else if (slots_used && fleet_full) {
        reason = WaitReason::kFleetCapacity;
      }
      plan.waiting.push_back(Waiting{*c.user_id, priority, reason});
    }
  }
  for (const Candidate& c : candidates) {
    if (c.over_budget || c.queued_total() == 0 || c.granted_total() > 0)
      continue;
    if (const auto cause = limit_reached(c, now))
      ++plan.throttled[static_cast<int>(*cause)];
    else if (capacity_binds && granted >= plan.slots)
      ++plan.throttled[static_cast<int>(ThrottleCause::kFleetCapacity)];
  }
  return plan;
}

std::int64_t FairScheduler::dispatched(const Grant& grant, int tasks) {
  auto it = users_.find(grant.user_id);
  if (it == users_.end())
    return estimate_tokens(grant.user_id);
  UserState& state = it->second;
  const auto now = clock_.now();
  state.last_seen = now;
  const int granted = std::max(grant.tasks, 0);
  const int unused = granted - std::clamp(tasks, 0, granted);
  if (unused > 0) {
    state.requests.adjust(unused, now);
    state.tokens.adjust(
        unused * charged_tokens(state.charged_per_task, tokens_capacity(state.limits)), now);
  }
  return state.charged_per_task;
}

void FairScheduler::reconcile(const std::string& user_id, std::int64_t estimated_tokens,
                              std::int64_t actual_tokens) {
  const auto now = clock_.now();
  auto it = users_.find(user_id);
  if (it == users_.end()) {
    // Not seen by this scheduler yet (e.g. dispatched by another replica): its limits are
    // unknown until its next pass, so only the estimate learns from the task.
    UserLimits unknown;
    unknown.requests_per_minute = 0;
    unknown.tokens_per_minute = 0;
    it = users_.emplace(user_id, UserState(unknown, now)).first;
  }
  UserState& state = it->second;
  state.last_seen = now;
  const std::int64_t actual = std::max<std::int64_t>(actual_tokens, 0);
  state.tokens.adjust(
      charged_tokens(estimated_tokens, tokens_capacity(state.limits)) - static_cast<double>(actual),
      now);
  if (state.has_average) {
    state.average_tokens += kEstimateAlpha * (static_cast<double>(actual) - state.average_tokens);
  } else {
    state.average_tokens = static_cast<double>(actual);
    state.has_average = true;
  }
}

std::int64_t FairScheduler::estimate_tokens(const std::string& user_id) const {
  const auto it = users_.find(user_id);
  if (it == users_.end())
    return std::max<std::int64_t>(options_.default_task_tokens, 1);
  return estimate_of(it->second);
}

void FairScheduler::seed_usage(const std::string& user_id, const UserLimits& limits,
                               std::int64_t admissions_last_minute,
                               std::int64_t tokens_last_minute) {
  const auto now = clock_.now();
  UserState& state = state_for(user_id, limits);
  state.requests =
      bucket_after_use(requests_capacity(limits),
                       static_cast<double>(std::max<std::int64_t>(admissions_last_minute, 0)),
                       /*allow_debt=*/false, now);
  state.tokens = bucket_after_use(
      tokens_capacity(limits), static_cast<double>(std::max<std::int64_t>(tokens_last_minute, 0)),
      /*allow_debt=*/true, now);
  state.last_seen = now;
}

void FairScheduler::forget_idle(Clock::duration idle_for) {
  const auto now = clock_.now();
  for (auto it = users_.begin(); it != users_.end();) {
    UserState& state = it->second;
    const double requests = requests_capacity(state.limits);
    const double tokens = tokens_capacity(state.limits);
    // A bucket below full still holds recent use or debt that must keep delaying the user.
    const bool full = (requests <= 0 || state.requests.level(now) >= requests) &&
                      (tokens <= 0 || state.tokens.level(now) >= tokens);
    if (now - state.last_seen > idle_for && full)
      it = users_.erase(it);
    else
      ++it;
  }
}

}  // namespace agentfleet::limits
