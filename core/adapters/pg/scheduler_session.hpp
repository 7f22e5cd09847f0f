#pragma once
// The scheduler's store on Postgres (ports::SchedulerStore): one connection of its own,
// opened when needed, on which the scheduler lock is a session advisory lock (it lives and
// dies with the connection), LISTEN agentfleet_work hears submissions and limits changes
// from every replica (a submission's notification names its user and priority: "queued
// PRIORITY USER", migration 0029; any other payload is other work), and idle_session_timeout =
// leader_silence_s lets Postgres end the session when its path goes silent (another replica then
// takes the lock). Every call has a client-side deadline too (twice the statement timeout, at least
// five seconds more): a call the server never answers is cut by a CallWatchdog and fails.
//
// Its statements (sql/scheduler.sql) are also free functions of a transaction, below,
// exposed for the Postgres tests.
//
// Lifecycle: one per scheduler; the destructor closes the connection (and gives up the
// lock). Thread-safety: the scheduler's thread only.

#include <pqxx/pqxx>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

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
  bool wait(std::chrono::milliseconds timeout, int wake_fd) override;
  ports::Heard take_heard() override;
  void refresh_plans() override;
  ports::Housekeeping housekeep(const ports::SchedulerPass& pass) override;
  ports::Backlog read_backlog(int limit, int max_active) override;
  std::map<std::string, ports::SpendByCurrency> month_spend_micros(
      const std::vector<std::string>& users, const std::string& time_zone) override;
  std::map<std::string, ports::RecentUsage> recent_usage(
      const std::vector<std::string>& users) override;
  ports::PassWrites write_pass(const std::vector<ports::EndQueued>& end_queued,
                               const std::vector<ports::DispatchGrant>& grants,
                               const ports::SchedulerPass& pass) override;
  void record_waiting(const ports::WaitingChanges& changes) override;

 private:
  // The session, opened (with LISTEN and its idle timeout) when there is none.
  pqxx::connection& session();
  // The client-side deadline of one call on the session.
  CallWatchdog::Armed arm();

  class Listener;

  SchedulerSessionOptions options_;
  std::unique_ptr<pqxx::connection> connection_;
  std::unique_ptr<Listener> listener_;  // on connection_, gone before it
  bool leads_ = false;                  // this session holds the lock
  ports::Heard heard_;                  // what listener_ heard since take_heard()
  CallWatchdog watchdog_;
};

// What a notification on agentfleet_work says: a submission's ("queued PRIORITY USER"), or
// other work (Heard::other) for any other payload, an older version's empty one included.
void hear(std::string_view payload, ports::Heard& heard);

// ---- the statements of a pass, each in the caller's transaction --------------------

using ports::SchedulerPass;

// Recovery: tasks whose worker lease expired, and dispatched tasks unclaimed for
// `redispatch_after_s`, are dispatched again; tasks out of attempts end failed.
using ports::RecoveryReport;
RecoveryReport recover_tasks(pqxx::work& tx, const SchedulerPass& pass);

// Removes the rows of worker incarnations whose lease lapsed a minute ago and that own no
// running task any more.
void forget_workers(pqxx::work& tx);

// Queued tasks past a deadline end timed_out with their result events, at most `limit` of
// each kind: never started and past their queue deadline (created_at + schedule_timeout_s),
// error_code schedule_timeout; handed back after they started and past their execution
// deadline, error_code deadline.
struct Expired {
  int schedule_timeout = 0;
  int deadline = 0;
};
Expired expire_queued(pqxx::work& tx, int limit, const std::string& results_topic);
// Model calls whose worker stopped with them in flight (its incarnation no longer live, the
// task no longer its run), at most `limit`: each billed as an unreconciled charge
// (worker_lost) at the estimate recorded before it was sent. How many.
int settle_lost_calls(pqxx::work& tx, int limit);

// Every user with queued work: queued counts per priority, the exact count of dispatched +
// running tasks, the overrides; the capacity the live workers report and the fleet's active
// total (when anyone waits), all in one statement, which caps the queued counts at
// ports::backlog_count_cap(limit, max_active, that capacity, that active total) so that a
// long queue costs a pass no more than the work the pass can admit.
using ports::Backlog;
using ports::BacklogUser;
Backlog read_backlog(pqxx::transaction_base& tx, int limit, int max_active);

// Each user's cost per currency in the ledger (unreconciled charges included) since the
// start of this month in `time_zone`, in micro-units (users without calls are absent).
std::map<std::string, ports::SpendByCurrency> month_spend_micros(
    pqxx::transaction_base& tx, const std::vector<std::string>& users,
    const std::string& time_zone);

// Tokens (input + output) in the ledger and dispatches in the last minute, per user: where
// a new active scheduler starts its rate buckets.
using ports::RecentUsage;
std::map<std::string, RecentUsage> recent_usage(pqxx::transaction_base& tx,
                                                const std::vector<std::string>& users);

// Dispatches each grant's tasks (the user's oldest queued of that priority, skipping rows
// locked elsewhere) in one statement: status dispatched and the dispatch message in the
// outbox, due to the relay `handoff_s` later (SchedulerPass::handoff_s); each answered with
// its message. `tx` may be a nontransaction: the statement is then its own commit.
using ports::DispatchedTask;
std::vector<DispatchedTask> dispatch_grants(pqxx::transaction_base& tx,
                                            const std::vector<ports::DispatchGrant>& grants,
                                            const std::string& dispatch_topic, int handoff_s = 0);

// The user's oldest queued tasks, locked (skipping rows locked elsewhere), at most `limit`.
std::vector<std::string> oldest_queued(pqxx::work& tx, const std::string& user_id, int limit);

}  // namespace agentfleet::pg
