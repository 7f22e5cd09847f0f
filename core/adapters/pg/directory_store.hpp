#pragma once
// Reads and writes of the API's reporting and tool routes: the success statistics of
// GET /v1/stats and the audit of POST /v1/tools/{name}:call. Blocking; call from the
// database pool's threads.

#include <pqxx/pqxx>

#include <cstdint>
#include <optional>
#include <string>

#include "core/ports/api_store.hpp"

namespace agentfleet::pg {

using ports::StatsQuery;

// {"tasks", "ended", "by_status": {...}, "success_rate" (succeeded / ended, null when none
// ended), "by_result_type": {...}, "by_strategy": {"react", "plan_execute", "default"},
// "duration_s": {"avg", "p95"} (started to finished, of the tasks that ran), "avg_steps",
// "avg_tool_calls", "tokens": {"input", "cached_input", "output"}, "cost": [{"currency",
// "cost"}]} over the tasks created in the window.
std::string stats_json(pqxx::connection& c, const StatsQuery& query);

// {"workers": [{"worker_id", "incarnation", "last_seen", "started_at", "in_flight",
// "capacity", "dispatch_lag", "draining"}] (those whose lease holds), "queued":
// {"interactive", "batch"}, "in_flight"} (sql/liveness.sql, fleet_view).
std::string fleet_json(pqxx::connection& c);

using ports::ToolAuditEntry;

// Inserts the row; its id.
std::int64_t insert_tool_audit(pqxx::connection& c, const ToolAuditEntry& entry);
// Completes a pending row with the call's outcome.
void finish_tool_audit(pqxx::connection& c, std::int64_t id, const std::string& outcome,
                       int http_status, int latency_ms, const std::string& error);

}  // namespace agentfleet::pg
