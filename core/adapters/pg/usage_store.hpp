#pragma once
// What the users and the fleet use and may use: usage from the ledger (GET /v1/usage), each
// user's limit overrides (GET/PUT /v1/users/{id}/limits; the scheduler reads them with its
// backlog), and the live tasks and due outbox rows behind the dispatcher's gauges. The
// statements of sql/usage.sql as functions of a pqxx::connection (run them through DbPool;
// ApiStore does for the dispatcher), each in a transaction of its own.
//
// Thread-safety: as the connection given (one caller at a time).

#include <pqxx/pqxx>

#include <cstdint>
#include <optional>
#include <string>

#include "core/adapters/pg/submission_store.hpp"
#include "core/ports/scheduler_store.hpp"

namespace agentfleet::pg {

using ports::UserOverrides;
// Reads the 7 override columns starting at `first`: tier (text, '' for none),
// max_concurrency, requests_per_minute, tokens_per_minute, max_queued, monthly_budget (text),
// tool_permission.
UserOverrides read_overrides(const pqxx::row& row, int first);

// GET/PUT /v1/users/{id}/limits: the user's override row (nullopt: none), and its
// replacement (every field as given; nullopt clears it). A put wakes the scheduler and, once
// committed, tells `known` (this replica's submissions then believe the new overrides at once
// instead of learning them from a refused first submission).
std::optional<UserOverrides> get_user_overrides(pqxx::connection& c, const std::string& user_id);
void put_user_overrides(pqxx::connection& c, const UserOverrides& overrides,
                        KnownOverrides* known = nullptr);

using ports::UsageQuery;
std::string usage_json(pqxx::connection& c, const UsageQuery& query);

using ports::LiveTaskCounts;
LiveTaskCounts count_live_tasks(pqxx::connection& c);
// Outbox rows due for publishing (publish_after passed) and not yet published.
std::int64_t count_due_outbox(pqxx::connection& c);

}  // namespace agentfleet::pg
