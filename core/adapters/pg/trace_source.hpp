#pragma once
// otlp::TraceSource over Postgres: an ended task's document (the API's, task_json) and the
// bills of its model calls (usage_ledger), read on a connection of its own, blocking (the
// exporter is a thread of its own). Statements: task_json (sql/submission.sql),
// task_step_costs (sql/usage.sql).
//
// Lifecycle: one per exporter. Thread-safety: read() from the exporter's thread only.

#include <optional>
#include <string>

#include "core/adapters/otlp/span_exporter.hpp"
#include "core/adapters/pg/db_pool.hpp"

namespace agentfleet::pg {

class TraceSource final : public otlp::TraceSource {
 public:
  TraceSource(const std::string& url, int statement_timeout_ms, int connect_timeout_s)
      : db_(url, 1, statement_timeout_ms, connect_timeout_s) {}

  Result<std::optional<otlp::TaskTrace>> read(const std::string& task_id) override;

 private:
  DbPool db_;
};

}  // namespace agentfleet::pg
