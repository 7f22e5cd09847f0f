#pragma once
// The scheduler's store on Postgres (ports::SchedulerStore): one connection of its own,
// opened when needed, on which the scheduler lock is a session advisory lock (it lives and
// dies with the connection), LISTEN agentfleet_work hears submissions and limits changes
// from every replica, and idle_session_timeout = leader_silence_s lets Postgres end the
// session when its path goes silent (another replica then takes the lock). Every call has
// a client-side deadline too (twice the statement timeout, at least five seconds more): a
// call the server never answers is cut by a CallWatchdog and fails.
//
// Lifecycle: one per scheduler; the destructor closes the connection (and gives up the
// lock). Thread-safety: the scheduler's thread only.

#include <pqxx/pqxx>

#include <chrono>
#include <memory>
#include <string>

#include "core/adapters/pg/call_watchdog.hpp"
#include "core/ports/scheduler_store.hpp"

namespace agentfleet::pg {

struct SchedulerSessionOptions {
  std::string url;
  int statement_timeout_ms = 5000;
  int connect_timeout_s = 5;
  int leader_silence_s = 10;
};

class SchedulerSession final : public ports::SchedulerStore {
 public:
  explicit SchedulerSession(SchedulerSessionOptions options);
  ~SchedulerSession() override;

  bool try_lead() override;
  void reset() override;
  void wait(std::chrono::milliseconds timeout, int wake_fd) override;
  void forget_heard() override;
  void refresh_plans() override;
  ports::Housekeeping housekeep(const ports::SchedulerPass& pass) override;
  ports::FleetRoom read_fleet_room() override;
  ports::Backlog read_backlog(int count_cap) override;
  std::map<std::string, std::int64_t> month_spend_micros(const std::vector<std::string>& users,
                                                         const std::string& time_zone,
                                                         const std::string& currency) override;
  std::map<std::string, ports::RecentUsage> recent_usage(
      const std::vector<std::string>& users) override;
  ports::PassWrites write_pass(const std::vector<ports::EndQueued>& end_queued,
                               const std::vector<ports::DispatchGrant>& grants,
                               const ports::SchedulerPass& pass) override;

 private:
  // The session, opened (with LISTEN and its idle timeout) when there is none.
  pqxx::connection& session();
  // The client-side deadline of one call on the session.
  CallWatchdog::Armed arm();

  SchedulerSessionOptions options_;
  std::unique_ptr<pqxx::connection> connection_;
  bool leads_ = false;  // this session holds the lock
  CallWatchdog watchdog_;
};

}  // namespace agentfleet::pg
