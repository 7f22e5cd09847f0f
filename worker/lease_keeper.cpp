#include "worker/lease_keeper.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "core/adapters/log.hpp"

namespace agentfleet::worker {

namespace asio = boost::asio;

namespace {
int whole_seconds(std::chrono::milliseconds d) {
  return static_cast<int>(std::max<std::int64_t>(1, (d.count() + 999) / 1000));
}
}  // namespace

LeaseKeeper::LeaseKeeper(asio::any_io_executor executor, ports::LivenessStore& store, Runs& runs,
                         const limits::Clock& clock, LeaseKeeperOptions options,
                         std::string worker_id, ReportSource report)
    : executor_(std::move(executor)),
      store_(store),
      runs_(runs),
      clock_(clock),
      options_(options),
      worker_id_(std::move(worker_id)),
      report_(std::move(report)),
      timer_(std::make_shared<asio::steady_timer>(executor_)) {}

LeaseKeeper::~LeaseKeeper() = default;

asio::awaitable<bool> LeaseKeeper::start() {
  const bool registered = co_await register_first();
  if (registered)
    asio::co_spawn(executor_, loop(), asio::detached);
  co_return registered;
}

asio::awaitable<bool> LeaseKeeper::register_first() {
  for (int failures = 0; !stopped_; ++failures) {
    ports::WorkerReport report = report_();
    report.lease_s = whole_seconds(options_.lease);
    const auto sent = clock_.now();
    auto registered = co_await store_.register_worker(worker_id_, report);
    if (registered.ok()) {
      incarnation_ = registered.value();
      renewed_at_ = sent;
      reported_ = report;
      ++counters_.incarnations;
      if (on_incarnation)
        on_incarnation(incarnation_);
      log::write("info", "worker",
                 "registered as incarnation " + std::to_string(incarnation_) + " of " + worker_id_);
      co_return true;
    }
    log::warn("worker", "could not register (trying again): " + registered.error().message);
    timer_->expires_after(std::chrono::milliseconds(std::min(5000, 100 << std::min(failures, 6))));
    boost::system::error_code ec;
    co_await timer_->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return false;
}

void LeaseKeeper::stop() {
  stopped_ = true;
  timer_->cancel();
}

asio::awaitable<void> LeaseKeeper::loop() {
  auto timer = timer_;  // outlives a stop() that cancels it
  while (!stopped_) {
    co_await step();
    timer->expires_after(options_.tick);
    boost::system::error_code ec;
    co_await timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<void> LeaseKeeper::step() {
  const auto now = clock_.now();
  if (!fenced_ && incarnation_ != 0 && now - renewed_at_ > options_.lease - options_.margin)
    raise_fence("no renewal held within the lease minus the margin");
  // One store call at a time; a call that hangs delays renewals, never the fence above.
  if (beating_ || stopped_)
    co_return;
  // A worker that runs nothing and has nothing to hand back asks the store only when its
  // report is due (the renewal every renew_every, a change of capacity, a drain): it has no
  // cancellations to read, and a lapse found a little later costs nothing, since a claim
  // takes nothing unless the claimer's incarnation is live when it runs.
  if (!fenced_ && incarnation_ != 0 && runs_.running() == 0 && to_hand_back_.empty() &&
      !report_due(report_(), now))
    co_return;
  beating_ = true;
  asio::co_spawn(
      executor_,
      [this]() -> asio::awaitable<void> {
        if (fenced_)
          co_await reincarnate();
        else
          co_await beat();
      },
      [this](std::exception_ptr) { beating_ = false; });
}

bool LeaseKeeper::report_due(const ports::WorkerReport& report,
                             limits::Clock::time_point now) const {
  if (now - renewed_at_ >= options_.renew_every || report.draining != reported_.draining)
    return true;
  // Capacity is what admission counts: a change of a tenth (and at least 2) is told at once.
  const int change = std::abs(report.capacity - reported_.capacity);
  return change >= 2 && change * 10 >= std::max(1, reported_.capacity);
}

asio::awaitable<void> LeaseKeeper::beat() {
  ports::WorkerReport report = report_();
  report.incarnation = incarnation_;
  report.lease_s = whole_seconds(options_.lease);
  const auto sent = clock_.now();
  report.renew = report_due(report, sent);
  auto answer = co_await store_.beat(report);
  ++counters_.beats;
  if (!answer.ok()) {
    ++counters_.beat_failures;
    log::warn("worker", "heartbeat failed (trying again): " + answer.error().message);
    co_return;
  }
  if (report.incarnation != incarnation_ || fenced_)
    co_return;  // the fence went up meanwhile: this answer is about the old incarnation
  if (!answer.value().alive) {
    raise_fence("the store says this incarnation's lease lapsed");
    co_return;
  }
  if (report.renew) {
    renewed_at_ = sent;
    reported_ = report;
  }
  for (const auto& task_id : answer.value().cancelled)
    runs_.cancel(task_id);
  co_await hand_back_every();
}

asio::awaitable<bool> LeaseKeeper::hand_back_every() {
  std::set<std::int64_t> owners;
  for (const auto& [owner, task] : to_hand_back_)
    owners.insert(owner);
  for (std::int64_t owner : owners) {
    if (owner != 0 && !co_await hand_back_pending(owner))
      co_return false;
  }
  co_return true;
}

asio::awaitable<bool> LeaseKeeper::hand_back_pending(std::int64_t incarnation) {
  std::vector<ports::HeldTask> tasks;
  std::vector<std::size_t> taken;
  std::set<std::string> running;
  std::set<std::pair<std::string, int>> sent;
  for (const auto& h : runs_.held())
    running.insert(h.task_id);
  for (std::size_t i = 0; i < to_hand_back_.size(); ++i) {
    const auto& [owner, task] = to_hand_back_[i];
    if (owner != incarnation)
      continue;
    taken.push_back(i);
    // A claim in doubt names no attempt: never a task a run of this worker holds now.
    if (task.attempt < 0 && running.count(task.task_id))
      continue;
    // Once per task and attempt: a hand-back of a task taken over meanwhile counts a release
    // each time it is made (two claims in doubt of one task report the same attempt).
    if (!sent.emplace(task.task_id, task.attempt).second)
      continue;
    tasks.push_back(task);
  }
  if (taken.empty())
    co_return true;
  if (!tasks.empty()) {
    auto handed = co_await store_.hand_back(incarnation, tasks);
    if (!handed.ok()) {
      log::warn("worker", "could not hand back " + std::to_string(tasks.size()) +
                              " tasks (trying again): " + handed.error().message);
      co_return false;
    }
    counters_.handed_back += static_cast<std::uint64_t>(handed.value());
    if (on_handed_back)
      on_handed_back(handed.value());
    log::write("info", "worker",
               "handed back " + std::to_string(handed.value()) + " of " +
                   std::to_string(tasks.size()) +
                   " tasks this worker stopped running (not counted as lost attempts)");
  }
  // Entries added while the hand-back ran stay for the next one.
  for (auto it = taken.rbegin(); it != taken.rend(); ++it)
    to_hand_back_.erase(to_hand_back_.begin() + static_cast<std::ptrdiff_t>(*it));
  co_return true;
}

asio::awaitable<void> LeaseKeeper::reincarnate() {
  const std::int64_t old = incarnation_;
  const bool handed = co_await hand_back_every();
  if (!handed)
    co_return;
  ports::WorkerReport report = report_();
  report.lease_s = whole_seconds(options_.lease);
  const auto sent = clock_.now();
  auto registered = co_await store_.register_worker(worker_id_, report);
  if (!registered.ok()) {
    log::warn("worker", "could not register anew (trying again): " + registered.error().message);
    co_return;
  }
  incarnation_ = registered.value();
  renewed_at_ = sent;
  reported_ = report;
  fenced_ = false;
  ++counters_.incarnations;
  runs_.unfence();
  if (on_incarnation)
    on_incarnation(incarnation_);
  if (on_fence)
    on_fence(false);
  log::write("warn", "worker",
             "fence lifted: registered as incarnation " + std::to_string(incarnation_) + " (was " +
                 std::to_string(old) + ")");
}

void LeaseKeeper::raise_fence(const char* why) {
  fenced_ = true;
  ++counters_.fences;
  const auto held = runs_.held();
  for (const auto& task : held)
    to_hand_back_.emplace_back(incarnation_, task);
  runs_.fence();
  if (on_incarnation)
    on_incarnation(0);  // no claims until a new incarnation
  if (on_fence)
    on_fence(true);
  log::write("warn", "worker",
             std::string("fenced: ") + why + "; stopped " + std::to_string(held.size()) +
                 " runs, which are handed back once the store answers again");
}

void LeaseKeeper::abandoned(ports::HeldTask task) {
  const std::int64_t owner = task.incarnation != 0 ? task.incarnation : incarnation_;
  task.incarnation = 0;
  // Bounded: a store that never comes back must not grow this without end.
  if (to_hand_back_.size() < 100000)
    to_hand_back_.emplace_back(owner, std::move(task));
}

asio::awaitable<int> LeaseKeeper::finish(std::vector<ports::HeldTask> remaining) {
  stop();
  for (auto& task : remaining)
    to_hand_back_.emplace_back(incarnation_, std::move(task));
  int handed = 0;
  std::set<std::int64_t> owners;
  for (const auto& [owner, task] : to_hand_back_)
    owners.insert(owner);
  for (std::int64_t owner : owners) {
    const auto before = counters_.handed_back;
    if (owner != 0)
      co_await hand_back_pending(owner);
    handed += static_cast<int>(counters_.handed_back - before);
  }
  if (incarnation_ != 0) {
    auto retired = co_await store_.retire(incarnation_);
    if (!retired.ok())
      log::warn("worker", "could not retire incarnation " + std::to_string(incarnation_) +
                              " (its lease lapses by itself): " + retired.error().message);
  }
  co_return handed;
}

}  // namespace agentfleet::worker
