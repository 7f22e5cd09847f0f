#include "core/adapters/pg/usage_store.hpp"

#include "core/adapters/pg/sql.hpp"
#include "core/billing/money.hpp"

namespace agentfleet::pg {

UserOverrides read_overrides(const pqxx::row& r, int first) {
  UserOverrides o;
  o.tier = r[first].as<std::string>();
  if (!r[first + 1].is_null())
    o.max_concurrency = r[first + 1].as<int>();
  if (!r[first + 2].is_null())
    o.requests_per_minute = r[first + 2].as<int>();
  if (!r[first + 3].is_null())
    o.tokens_per_minute = r[first + 3].as<std::int64_t>();
  if (!r[first + 4].is_null())
    o.max_queued = r[first + 4].as<int>();
  // numeric(20, 6) and a text the table checks: what they hold parses.
  if (!r[first + 5].is_null())
    o.monthly_budget_micros = billing::parse_decimal_micros(r[first + 5].as<std::string>());
  if (!r[first + 6].is_null())
    o.tool_permission = parse_permission(r[first + 6].as<std::string>());
  return o;
}

std::optional<UserOverrides> get_user_overrides(pqxx::connection& c, const std::string& user_id) {
  pqxx::read_transaction tx(c);
  auto rows = exec_text(tx, "user_overrides", user_id);
  if (rows.empty())
    return std::nullopt;
  UserOverrides o = read_overrides(rows[0], 0);
  o.user_id = user_id;
  return o;
}

void put_user_overrides(pqxx::connection& c, const UserOverrides& o, KnownOverrides* known) {
  pqxx::work tx(c);
  std::optional<std::string> budget, permission;
  if (o.monthly_budget_micros)
    budget = billing::format_micros(*o.monthly_budget_micros);
  if (o.tool_permission)
    permission = to_string(*o.tool_permission);
  exec_text0(tx, "put_user_overrides", o.user_id, o.tier, o.max_concurrency, o.requests_per_minute,
             o.tokens_per_minute, o.max_queued, budget, permission);
  // The active scheduler reads limits every pass; wake it so a raise applies at once.
  exec_text(tx, "wake_scheduler");
  tx.commit();
  if (known)
    known->put(o.user_id, {o.tier, o.max_queued});
}

std::string usage_json(pqxx::connection& c, const UsageQuery& q) {
  pqxx::read_transaction tx(c);
  return exec_text1(tx, "usage", q.user_id, q.batch_id, q.from, q.to)[0].as<std::string>();
}

LiveTaskCounts count_live_tasks(pqxx::connection& c) {
  pqxx::read_transaction tx(c);
  LiveTaskCounts counts;
  const auto queued = exec_text1(tx, "count_queued");
  counts.queued_interactive = queued[0].as<std::int64_t>();
  counts.queued_batch = queued[1].as<std::int64_t>();
  const auto active = exec_text1(tx, "count_active");
  counts.dispatched = active[0].as<std::int64_t>();
  counts.running = active[1].as<std::int64_t>();
  return counts;
}

std::int64_t count_due_outbox(pqxx::connection& c) {
  pqxx::read_transaction tx(c);
  return exec_text1(tx, "count_due_outbox")[0].as<std::int64_t>();
}

}  // namespace agentfleet::pg
