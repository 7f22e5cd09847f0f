#include "core/adapters/pg/scheduler_session.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/adapters/pg/batch_store.hpp"
#include "core/adapters/pg/db_pool.hpp"
#include "core/adapters/pg/ended_tasks.hpp"
#include "core/adapters/pg/task_store.hpp"

namespace agentfleet::pg {

namespace {
// The session advisory lock that makes one replica the active scheduler.
constexpr const char* kTryLeader = "SELECT pg_try_advisory_lock(7311001)";
}  // namespace

SchedulerSession::SchedulerSession(SchedulerSessionOptions options)
    : options_(std::move(options)) {}

SchedulerSession::~SchedulerSession() = default;

pqxx::connection& SchedulerSession::session() {
  if (!connection_) {
    auto opened =
        open_connection(options_.url, options_.statement_timeout_ms, options_.connect_timeout_s);
    const auto armed = watchdog_.arm(
        opened->sock(),
        std::chrono::steady_clock::now() +
            std::chrono::milliseconds(
                std::max(2 * options_.statement_timeout_ms, options_.statement_timeout_ms + 5000)));
    pqxx::nontransaction(*opened).exec0("LISTEN agentfleet_work; SET idle_session_timeout = " +
                                        std::to_string(options_.leader_silence_s * 1000));
    connection_ = std::move(opened);
    leads_ = false;
  }
  return *connection_;
}

CallWatchdog::Armed SchedulerSession::arm() {
  return watchdog_.arm(session().sock(), std::chrono::steady_clock::now() +
                                             std::chrono::milliseconds(
                                                 std::max(2 * options_.statement_timeout_ms,
                                                          options_.statement_timeout_ms + 5000)));
}

bool SchedulerSession::try_lead() {
  pqxx::connection& c = session();
  if (leads_)
    return true;
  const auto armed = arm();
  leads_ = pqxx::nontransaction(c).exec1(kTryLeader)[0].as<bool>();
  // A standby hears every submission's NOTIFY too; libpq keeps them until consumed.
  c.get_notifs();
  return leads_;
}

void SchedulerSession::reset() {
  connection_.reset();
  leads_ = false;
}

void SchedulerSession::wait(std::chrono::milliseconds timeout, int wake_fd) {
  pqxx::connection* c = connection_.get();
  // A notification libpq already read during the last pass would not wake poll().
  if (c != nullptr && c->get_notifs() > 0)
    return;
  pollfd fds[2] = {{wake_fd, POLLIN, 0}, {c ? c->sock() : -1, POLLIN, 0}};
  const int ready = ::poll(fds, c && fds[1].fd >= 0 ? 2 : 1, static_cast<int>(timeout.count()));
  if (ready > 0 && (fds[0].revents & POLLIN)) {
    std::uint64_t count = 0;
    [[maybe_unused]] auto read = ::read(wake_fd, &count, sizeof count);
  }
  // Consumes the notifications that arrived; what they say does not matter.
  if (c != nullptr && ready > 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)))
    c->get_notifs();
}

void SchedulerSession::forget_heard() {
  if (connection_)
    connection_->get_notifs();
}

void SchedulerSession::refresh_plans() {
  const auto armed = arm();
  pqxx::nontransaction(session()).exec0("DISCARD PLANS");
}

ports::Housekeeping SchedulerSession::housekeep(const ports::SchedulerPass& pass) {
  const auto armed = arm();
  ports::Housekeeping done;
  pqxx::work tx(session());
  done.recovery = recover_tasks(tx, pass);
  done.expired = expire_queued(tx, pass.limit, pass.results_topic);
  done.swept = sweep_cancelled_batches(tx, pass.limit, pass.results_topic);
  forget_workers(tx);
  tx.commit();
  return done;
}

ports::FleetRoom SchedulerSession::read_fleet_room() {
  const auto armed = arm();
  pqxx::nontransaction reads(session());
  return pg::read_fleet_room(reads);
}

ports::Backlog SchedulerSession::read_backlog(int count_cap) {
  const auto armed = arm();
  pqxx::nontransaction reads(session());
  return pg::read_backlog(reads, count_cap);
}

std::map<std::string, std::int64_t> SchedulerSession::month_spend_micros(
    const std::vector<std::string>& users, const std::string& time_zone,
    const std::string& currency) {
  if (users.empty())
    return {};
  const auto armed = arm();
  pqxx::nontransaction reads(session());
  return pg::month_spend_micros(reads, users, time_zone, currency);
}

std::map<std::string, ports::RecentUsage> SchedulerSession::recent_usage(
    const std::vector<std::string>& users) {
  if (users.empty())
    return {};
  const auto armed = arm();
  pqxx::nontransaction reads(session());
  return pg::recent_usage(reads, users);
}

ports::PassWrites SchedulerSession::write_pass(const std::vector<ports::EndQueued>& end_queued,
                                               const std::vector<ports::DispatchGrant>& grants,
                                               const ports::SchedulerPass& pass) {
  ports::PassWrites done;
  if (end_queued.empty() && grants.empty())
    return done;
  const auto armed = arm();
  pqxx::work tx(session());
  for (const ports::EndQueued& end : end_queued) {
    const std::size_t ended =
        end_unstarted(tx, oldest_queued(tx, end.user_id, end.count), end.ending, pass.results_topic)
            .size();
    if (ended > 0)
      done.ended.emplace_back(end.user_id, ended);
  }
  done.dispatched = dispatch_grants(tx, grants, pass.dispatch_topic);
  tx.commit();
  return done;
}

}  // namespace agentfleet::pg
