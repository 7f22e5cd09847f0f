#include "core/adapters/pg/trace_source.hpp"

#include "core/adapters/pg/sql.hpp"
#include "core/adapters/pg/submission_store.hpp"

namespace agentfleet::pg {

Result<std::optional<otlp::TaskTrace>> TraceSource::read(const std::string& task_id) {
  return db_.run_blocking([&](pqxx::connection& c) -> std::optional<otlp::TaskTrace> {
    auto json = task_json(c, task_id);
    if (!json)
      return std::nullopt;
    otlp::TaskTrace trace;
    trace.task_json = std::move(*json);
    pqxx::read_transaction tx(c);
    for (const auto& row : exec_named(tx, "task_step_costs", task_id)) {
      trace.costs[row[0].as<int>()] = codec::StepCost{
          row[1].as<std::string>(), row[2].as<std::string>(), row[3].as<std::string>()};
    }
    return trace;
  });
}

}  // namespace agentfleet::pg
