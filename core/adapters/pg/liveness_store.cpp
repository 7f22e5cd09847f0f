#include "core/adapters/pg/liveness_store.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "core/adapters/pg/sql.hpp"

namespace agentfleet::pg {

namespace asio = boost::asio;

namespace {
std::vector<std::string> text_array(const pqxx::field& field) {
  std::vector<std::string> out;
  auto parser = field.as_array();
  for (auto item = parser.get_next(); item.first != pqxx::array_parser::done;
       item = parser.get_next()) {
    if (item.first == pqxx::array_parser::string_value)
      out.push_back(item.second);
  }
  return out;
}

std::string held_json(const std::vector<ports::HeldTask>& tasks) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartArray();
  for (const auto& task : tasks) {
    w.StartObject();
    w.Key("task_id");
    w.String(task.task_id.data(), static_cast<rapidjson::SizeType>(task.task_id.size()));
    w.Key("attempt");
    w.Int(task.attempt);
    w.EndObject();
  }
  w.EndArray();
  return std::string(buffer.GetString(), buffer.GetSize());
}
}  // namespace

asio::awaitable<Result<std::int64_t>> LivenessStore::register_worker(std::string worker_id,
                                                                     ports::WorkerReport report) {
  co_return co_await pool_.run([&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    return exec_named1(tx, "worker_register", worker_id, report.lease_s, report.capacity,
                       report.running, report.dispatch_lag, report.draining)[0]
        .as<std::int64_t>();
  });
}

asio::awaitable<Result<ports::Heartbeat>> LivenessStore::beat(ports::WorkerReport report) {
  co_return co_await pool_.run([&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    // A report renews the lease and writes what the worker can take; a poll only reads. Each
    // brings back the cancellations of the worker's running tasks.
    const pqxx::row row =
        report.renew
            ? exec_named1(tx, "worker_report", report.incarnation, report.lease_s, report.capacity,
                          report.running, report.dispatch_lag, report.draining)
            : exec_named1(tx, "worker_poll", report.incarnation);
    ports::Heartbeat heartbeat;
    heartbeat.alive = row[0].as<bool>();
    heartbeat.cancelled = text_array(row[1]);
    return heartbeat;
  });
}

asio::awaitable<Result<int>> LivenessStore::hand_back(std::int64_t incarnation,
                                                      std::vector<ports::HeldTask> tasks) {
  if (tasks.empty())
    co_return 0;
  const std::string held = held_json(tasks);
  co_return co_await pool_.run([&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    return exec_named1(tx, "worker_hand_back", incarnation, held)[0].as<int>();
  });
}

asio::awaitable<Status> LivenessStore::retire(std::int64_t incarnation) {
  auto done = co_await pool_.run([&](pqxx::connection& c) {
    pqxx::nontransaction tx(c);
    exec_named0(tx, "worker_retire", incarnation);
    return true;
  });
  if (!done.ok())
    co_return done.error();
  co_return ok_status();
}

}  // namespace agentfleet::pg
