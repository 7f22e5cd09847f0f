#include "core/adapters/pg/replication.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "core/adapters/log.hpp"

namespace agentfleet::pg {

ReplicationState judge_replication(const ReplicationSettings& s) {
  const bool waits_for_standby = s.synchronous_commit == "on" ||
                                 s.synchronous_commit == "remote_apply" ||
                                 s.synchronous_commit == "remote_write";
  if (s.synchronous_standby_names.empty()) {
    return {false,
            "commits do not wait for a standby (synchronous_standby_names is empty): a "
            "failover can lose committed steps"};
  }
  if (!waits_for_standby) {
    return {false, "commits do not wait for a standby (synchronous_commit is " +
                       s.synchronous_commit + "): a failover can lose committed steps"};
  }
  std::string standbys;
  if (s.standbys_hidden > 0 && s.standbys_in_sync == 0)
    standbys = "; which standbys are in sync is not visible to this role (grant pg_monitor)";
  else if (s.standbys_in_sync == 0)
    standbys = "; no standby is in sync now, so commits wait until one is";
  else
    standbys = "; " + std::to_string(s.standbys_in_sync) + " in sync now";
  return {true, "commits wait for a synchronous standby (synchronous_standby_names '" +
                    s.synchronous_standby_names + "', synchronous_commit " +
                    s.synchronous_commit + ")" + standbys};
}

std::optional<std::string> replication_refusal(const ReplicationState& state, bool required) {
  if (!required || state.synchronous)
    return std::nullopt;
  return state.detail + " (postgres.require_synchronous_replication is set)";
}

ReplicationSettings read_replication(pqxx::connection& c) {
  pqxx::nontransaction tx(c);
  const pqxx::row row = tx.exec1(
      "SELECT current_setting('synchronous_commit'), "
      "current_setting('synchronous_standby_names'), "
      "(SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')), "
      "(SELECT count(*) FROM pg_stat_replication WHERE sync_state IS NULL)");
  return ReplicationSettings{row[0].as<std::string>(), row[1].as<std::string>(),
                             row[2].as<std::int64_t>(), row[3].as<std::int64_t>()};
}

std::string ready_json(const ReplicationState& state) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("status");
  w.String("ready");
  w.Key("postgres");
  w.StartObject();
  w.Key("synchronous_replication");
  w.Bool(state.synchronous);
  w.Key("detail");
  w.String(state.detail.c_str(), static_cast<rapidjson::SizeType>(state.detail.size()));
  w.EndObject();
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

boost::asio::awaitable<Result<ReplicationState>> ReplicationWatch::check(DbPool& db) {
  auto read = co_await db.run([](pqxx::connection& c) { return read_replication(c); });
  if (!read.ok())
    co_return read.error();
  ReplicationState state = judge_replication(read.value());
  bool changed = false;
  {
    std::lock_guard lock(mutex_);
    changed = !last_ || *last_ != state;
    last_ = state;
  }
  if (changed)
    log::write(state.synchronous ? "info" : "warn", component_, "postgres: " + state.detail);
  co_return state;
}

std::optional<ReplicationState> ReplicationWatch::last() const {
  std::lock_guard lock(mutex_);
  return last_;
}

}  // namespace agentfleet::pg
