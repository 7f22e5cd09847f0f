#include "core/adapters/pg/scheduler_session.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "core/adapters/pg/batch_store.hpp"
#include "core/adapters/pg/db_pool.hpp"
#include "core/adapters/pg/ended_tasks.hpp"
#include "core/adapters/pg/sql.hpp"
#include "core/adapters/pg/usage_store.hpp"
#include "core/codec/task_codec.hpp"

namespace agentfleet::pg {

namespace {
// The session advisory lock that makes one replica the active scheduler.
constexpr const char* kTryLeader = "SELECT pg_try_advisory_lock(7311001)";
// What the scheduler hears work on, and the prefix of a submission's notification.
constexpr const char* kWorkChannel = "agentfleet_work";
constexpr std::string_view kQueued = "queued ";
// Submissions heard between two passes beyond this are only "other work": the pass reads
// the backlog anyway.
constexpr std::size_t kMaxHeard = 1000;
}  // namespace

void hear(std::string_view payload, ports::Heard& heard) {
  if (payload.substr(0, kQueued.size()) == kQueued) {
    payload.remove_prefix(kQueued.size());
    const std::size_t space = payload.find(' ');
    const std::optional<Priority> priority =
        space == std::string_view::npos ? std::nullopt : parse_priority(payload.substr(0, space));
    if (priority && space + 1 < payload.size() && heard.submitted.size() < kMaxHeard) {
      heard.submitted.emplace_back(std::string(payload.substr(space + 1)), *priority);
      return;
    }
  }
  heard.other = true;
}

// Collects what the session hears into SchedulerSession::heard_ (libpq hands notifications
// over when the connection reads, during any call or get_notifs()).
class SchedulerSession::Listener final : public pqxx::notification_receiver {
 public:
  Listener(pqxx::connection_base& c, ports::Heard& heard)
      : pqxx::notification_receiver(c, kWorkChannel), heard_(heard) {}
  void operator()(const std::string& payload, int) override { hear(payload, heard_); }

 private:
  ports::Heard& heard_;
};

SchedulerSession::SchedulerSession(SchedulerSessionOptions options)
    : options_(std::move(options)) {}

SchedulerSession::~SchedulerSession() = default;

pqxx::connection& SchedulerSession::session() {
  if (!connection_) {
    auto opened = open_connection(options_.url, options_.statement_timeout_ms,
                                  options_.connect_timeout_s, PlanCache::kGeneric);
    const auto armed = watchdog_.arm(
        opened->sock(),
        std::chrono::steady_clock::now() +
            std::chrono::milliseconds(
                std::max(2 * options_.statement_timeout_ms, options_.statement_timeout_ms + 5000)));
    pqxx::nontransaction(*opened).exec0("SET idle_session_timeout = " +
                                        std::to_string(options_.leader_silence_s * 1000));
    heard_ = {};
    listener_ = std::make_unique<Listener>(*opened, heard_);  // LISTEN agentfleet_work
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
  // A standby hears every submission's NOTIFY too; libpq keeps them until consumed. A new
  // term starts from a read of the backlog, not from what was heard.
  c.get_notifs();
  heard_ = {};
  return leads_;
}

void SchedulerSession::reset() {
  listener_.reset();
  connection_.reset();
  heard_ = {};
  leads_ = false;
}

bool SchedulerSession::wait(std::chrono::milliseconds timeout, int wake_fd) {
  pqxx::connection* c = connection_.get();
  // A notification libpq already read during the last pass would not wake poll().
  if (c != nullptr && (c->get_notifs() > 0 || !heard_.empty()))
    return true;
  pollfd fds[2] = {{wake_fd, POLLIN, 0}, {c ? c->sock() : -1, POLLIN, 0}};
  const int ready = ::poll(fds, c && fds[1].fd >= 0 ? 2 : 1, static_cast<int>(timeout.count()));
  bool woken = false;
  if (ready > 0 && (fds[0].revents & POLLIN)) {
    std::uint64_t count = 0;
    [[maybe_unused]] auto read = ::read(wake_fd, &count, sizeof count);
    woken = true;
  }
  // Takes in the notifications that arrived (the listener keeps what they say).
  if (c != nullptr && ready > 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)))
    woken = c->get_notifs() > 0 || woken;
  return woken;
}

ports::Heard SchedulerSession::take_heard() {
  if (connection_)
    connection_->get_notifs();
  return std::exchange(heard_, {});
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
  const Expired expired = expire_queued(tx, pass.limit, pass.results_topic);
  done.expired = expired.schedule_timeout;
  done.expired_deadline = expired.deadline;
  done.swept = sweep_cancelled_batches(tx, pass.limit, pass.results_topic);
  done.staged = sweep_staged_batches(tx, pass.limit);
  done.calls_settled = settle_lost_calls(tx, pass.limit);
  forget_workers(tx);
  tx.commit();
  return done;
}

ports::Backlog SchedulerSession::read_backlog(int limit, int max_active) {
  const auto armed = arm();
  pqxx::nontransaction reads(session());
  return pg::read_backlog(reads, limit, max_active);
}

std::map<std::string, ports::SpendByCurrency> SchedulerSession::month_spend_micros(
    const std::vector<std::string>& users, const std::string& time_zone) {
  if (users.empty())
    return {};
  const auto armed = arm();
  pqxx::nontransaction reads(session());
  return pg::month_spend_micros(reads, users, time_zone);
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
  if (end_queued.empty()) {
    // The common pass: one statement, its own commit.
    pqxx::nontransaction tx(session());
    done.dispatched = dispatch_grants(tx, grants, pass.dispatch_topic, pass.handoff_s);
    return done;
  }
  pqxx::work tx(session());
  for (const ports::EndQueued& end : end_queued) {
    const std::size_t ended =
        end_unstarted(tx, oldest_queued(tx, end.user_id, end.count), end.ending, pass.results_topic)
            .size();
    if (ended > 0)
      done.ended.emplace_back(end.user_id, ended);
  }
  done.dispatched = dispatch_grants(tx, grants, pass.dispatch_topic, pass.handoff_s);
  tx.commit();
  return done;
}

void SchedulerSession::record_waiting(const ports::WaitingChanges& changes) {
  if (!changes.replace && changes.set.empty() && changes.cleared.empty())
    return;
  const auto armed = arm();
  const auto string = [](rapidjson::Writer<rapidjson::StringBuffer>& w, std::string_view text) {
    w.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
  };
  rapidjson::StringBuffer set_buffer, cleared_buffer;
  rapidjson::Writer<rapidjson::StringBuffer> set(set_buffer), cleared(cleared_buffer);
  set.StartArray();
  for (const ports::WaitingRow& row : changes.set) {
    set.StartObject();
    set.Key("user_id");
    string(set, row.user_id);
    set.Key("priority");
    string(set, to_string(row.priority));
    set.Key("reason");
    string(set, row.reason);
    set.EndObject();
  }
  set.EndArray();
  cleared.StartArray();
  for (const auto& [user_id, priority] : changes.cleared) {
    cleared.StartObject();
    cleared.Key("user_id");
    string(cleared, user_id);
    cleared.Key("priority");
    string(cleared, to_string(priority));
    cleared.EndObject();
  }
  cleared.EndArray();
  pqxx::nontransaction tx(session());
  exec_named(tx, "sched_waiting", std::string(set_buffer.GetString(), set_buffer.GetSize()),
             std::string(cleared_buffer.GetString(), cleared_buffer.GetSize()), changes.replace);
}

namespace {
// The rows sched_recover and sched_admit answer with (the fragment dispatch_marked): the
// status each task was picked in, its priority, user, id, seconds since it was submitted,
// whether this is its first dispatch, its traceparent, and its dispatch message (outbox id,
// payload, needs header) for `topic`.
std::vector<DispatchedTask> read_dispatched(const pqxx::result& rows, const std::string& topic) {
  std::vector<DispatchedTask> out;
  out.reserve(rows.size());
  for (const auto& row : rows) {
    DispatchedTask d;
    d.was = row[0].as<std::string>();
    d.priority = parse_priority(row[1].as<std::string>()).value_or(Priority::kInteractive);
    d.user_id = row[2].as<std::string>();
    d.task_id = row[3].as<std::string>();
    d.queued_s = row[4].as<double>();
    d.first = row[5].as<bool>();
    d.traceparent = row[6].as<std::string>();
    d.outbox_id = row[7].as<std::int64_t>();
    d.message.topic = topic;
    d.message.key = d.task_id;
    d.message.value = row[8].as<std::string>();
    if (!d.traceparent.empty())
      d.message.headers.emplace_back("traceparent", d.traceparent);
    if (std::string needs = row[9].as<std::string>(); !needs.empty())
      d.message.headers.emplace_back(std::string(codec::kNeedsHeader), std::move(needs));
    out.push_back(std::move(d));
  }
  return out;
}

// Ends the tasks recovery has given up on, each with its result event, in `tx`.
int fail_exhausted(pqxx::work& tx, const SchedulerPass& pass) {
  auto rows = exec_named(tx, "sched_exhausted", pass.limit, pass.max_attempts);
  announce_ended(tx, rows, pass.results_topic);
  return static_cast<int>(rows.size());
}
}  // namespace

RecoveryReport recover_tasks(pqxx::work& tx, const SchedulerPass& pass) {
  RecoveryReport report;
  if (pass.recover_lapsed)
    report.exhausted = fail_exhausted(tx, pass);
  auto recovered = exec_named(tx, "sched_recover", pass.limit, pass.redispatch_after_s,
                              pass.max_attempts, pass.recover_lapsed, pass.dispatch_topic);
  for (const auto& task : read_dispatched(recovered, pass.dispatch_topic)) {
    ++(task.was == "running" ? report.lease_expired : report.redispatched);
    report.tasks.push_back({task.task_id, task.user_id, task.traceparent, task.was == "running"});
  }
  return report;
}

int settle_lost_calls(pqxx::work& tx, int limit) {
  return exec_named1(tx, "sched_settle_calls", limit)[0].as<int>();
}

void forget_workers(pqxx::work& tx) {
  exec_named0(tx, "forget_workers");
}

Expired expire_queued(pqxx::work& tx, int limit, const std::string& results_topic) {
  // The statement finds its tasks by the two deadline indexes, which hold them in deadline
  // order. With statistics taken before a flood filled the queue (autovacuum takes the next
  // up to a minute later, and may have taken the last while a batch was still staged), the
  // queue's own index looks empty: the planner then read every queued task and sorted them
  // to find the few handed back (100,000 in 30-100 ms, at every housekeeping). Planned
  // without sorts, only the ordered indexes serve it, whatever the statistics say.
  tx.exec0("SET LOCAL enable_sort = off");
  auto rows = exec_named(tx, "sched_expire", limit);
  tx.exec0("SET LOCAL enable_sort TO DEFAULT");
  announce_ended(tx, rows, results_topic);
  Expired expired;
  for (const auto& row : rows)
    ++(row[4].as<std::string>() == "deadline" ? expired.deadline : expired.schedule_timeout);
  return expired;
}

Backlog read_backlog(pqxx::transaction_base& tx, int limit, int max_active) {
  auto rows = exec_named(tx, "sched_backlog", limit, max_active);
  Backlog backlog;
  backlog.users.reserve(rows.size());
  for (const auto& r : rows) {
    if (r[0].is_null())
      continue;  // nobody's work is queued: the row carries only the fleet's figures
    BacklogUser user;
    user.user_id = r[0].as<std::string>();
    user.queued_interactive = r[1].as<std::int64_t>();
    user.queued_batch = r[2].as<std::int64_t>();
    user.active = r[3].as<int>();
    user.overrides = read_overrides(r, 4);
    user.overrides.user_id = user.user_id;
    backlog.users.push_back(std::move(user));
  }
  if (!rows.empty()) {
    // None reporting: unknown, as with workers of version 7, which report nothing.
    const auto& r = rows[0];
    backlog.fleet_capacity = r[11].as<std::int64_t>() > 0 ? r[12].as<std::int64_t>() : -1;
    backlog.fleet_active = r[13].as<std::int64_t>();
    backlog.count_cap = r[14].as<std::int64_t>();
  }
  return backlog;
}

std::map<std::string, ports::SpendByCurrency> month_spend_micros(
    pqxx::transaction_base& tx, const std::vector<std::string>& users,
    const std::string& time_zone) {
  std::map<std::string, ports::SpendByCurrency> spent;
  if (users.empty())
    return spent;
  auto rows = exec_named(tx, "sched_month_spend", json_string_array(users), time_zone);
  for (const auto& row : rows)
    spent[row[0].as<std::string>()][row[1].as<std::string>()] = row[2].as<std::int64_t>();
  return spent;
}

std::map<std::string, RecentUsage> recent_usage(pqxx::transaction_base& tx,
                                                const std::vector<std::string>& users) {
  std::map<std::string, RecentUsage> usage;
  if (users.empty())
    return usage;
  const std::string ids = json_string_array(users);
  for (const auto& row : exec_text(tx, "sched_recent_tokens", ids))
    usage[row[0].as<std::string>()].tokens = row[1].as<std::int64_t>();
  for (const auto& row : exec_text(tx, "sched_recent_admissions", ids))
    usage[row[0].as<std::string>()].admissions = row[1].as<std::int64_t>();
  return usage;
}

std::vector<DispatchedTask> dispatch_grants(pqxx::transaction_base& tx,
                                            const std::vector<ports::DispatchGrant>& grants,
                                            const std::string& dispatch_topic, int handoff_s) {
  if (grants.empty())
    return {};
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartArray();
  for (const auto& grant : grants) {
    w.StartObject();
    w.Key("user_id");
    w.String(grant.user_id.data(), static_cast<rapidjson::SizeType>(grant.user_id.size()));
    w.Key("priority");
    const std::string_view priority = to_string(grant.priority);
    w.String(priority.data(), static_cast<rapidjson::SizeType>(priority.size()));
    w.Key("n");
    w.Int(grant.tasks);
    w.EndObject();
  }
  w.EndArray();
  return read_dispatched(
      exec_named(tx, "sched_admit", std::string(buffer.GetString(), buffer.GetSize()),
                 dispatch_topic, handoff_s),
      dispatch_topic);
}

std::vector<std::string> oldest_queued(pqxx::work& tx, const std::string& user_id, int limit) {
  std::vector<std::string> ids;
  for (const auto& row : exec_text(tx, "sched_oldest_queued", user_id, limit))
    ids.push_back(row[0].as<std::string>());
  return ids;
}

}  // namespace agentfleet::pg
