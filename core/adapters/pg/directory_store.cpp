#include "core/adapters/pg/directory_store.hpp"

#include "core/adapters/pg/sql.hpp"

namespace agentfleet::pg {

std::string fleet_json(pqxx::connection& c) {
  pqxx::read_transaction tx(c);
  return exec_named1(tx, "fleet_view")[0].as<std::string>();
}

std::string stats_json(pqxx::connection& c, const StatsQuery& q) {
  pqxx::read_transaction tx(c);
  // A task under way has its running totals from its steps and ledger (task_totals).
  static const std::string kStats = std::string(R"SQL(
WITH t AS (
  SELECT t.status, t.result_type, t.strategy, t.started_at, t.finished_at, n.*
  FROM tasks t
  CROSS JOIN LATERAL (SELECT )SQL") +
                                    sql::fragment("task_totals") + R"SQL() AS
    n(steps, tool_calls, input_tokens, cached_input_tokens, output_tokens, cost, currency)
  WHERE ($1 = '' OR t.user_id = $1) AND t.status <> 'staged'
    AND ($2 = '' OR t.created_at >= $2::timestamptz)
    AND ($3 = '' OR t.created_at < $3::timestamptz)
), ended AS (
  SELECT * FROM t WHERE status IN ('succeeded', 'failed', 'timed_out', 'cancelled')
), ran AS (
  SELECT extract(epoch FROM finished_at - started_at)::float8 AS seconds, steps, tool_calls
  FROM ended WHERE started_at IS NOT NULL AND finished_at IS NOT NULL
)
SELECT jsonb_build_object(
  'tasks', (SELECT count(*) FROM t),
  'ended', (SELECT count(*) FROM ended),
  'by_status', coalesce((SELECT jsonb_object_agg(status, n)
                         FROM (SELECT status, count(*) AS n FROM t GROUP BY status) s), '{}'),
  'success_rate', (SELECT CASE WHEN count(*) = 0 THEN NULL
                          ELSE round(count(*) FILTER (WHERE status = 'succeeded')::numeric
                                     / count(*), 4) END FROM ended),
  -- Done as asked: a task can succeed with an error answer or a question back.
  'action_completed_rate', (SELECT CASE WHEN count(*) = 0 THEN NULL
                                   ELSE round(count(*) FILTER (WHERE status = 'succeeded'
                                                AND result_type = 'action_completed')::numeric
                                              / count(*), 4) END FROM ended),
  'by_result_type', coalesce((SELECT jsonb_object_agg(result_type, n)
                              FROM (SELECT result_type, count(*) AS n FROM ended
                                    WHERE result_type IS NOT NULL GROUP BY result_type) r), '{}'),
  'by_strategy', coalesce((SELECT jsonb_object_agg(s, n)
                           FROM (SELECT coalesce(strategy, 'default') AS s, count(*) AS n
                                 FROM t GROUP BY 1) g), '{}'),
  'duration_s', (SELECT jsonb_build_object(
                   'avg', round(avg(seconds)::numeric, 3),
                   'p95', round((percentile_cont(0.95) WITHIN GROUP (ORDER BY seconds))::numeric, 3))
                 FROM ran),
  'avg_steps', (SELECT round(avg(steps)::numeric, 2) FROM ran),
  'avg_tool_calls', (SELECT round(avg(tool_calls)::numeric, 2) FROM ran),
  'tokens', (SELECT jsonb_build_object('input', coalesce(sum(input_tokens), 0),
                                       'cached_input', coalesce(sum(cached_input_tokens), 0),
                                       'output', coalesce(sum(output_tokens), 0)) FROM t),
  'cost', coalesce((SELECT jsonb_agg(jsonb_build_object(
                      'currency', currency, 'cost', to_char(cost, 'FM999999999999990.000000'))
                      ORDER BY currency)
                    FROM (SELECT currency, sum(cost) AS cost FROM t
                          WHERE currency IS NOT NULL GROUP BY currency) k), '[]'))::text)SQL";
  auto row = tx.exec_params1(kStats, q.user_id, q.from, q.to);
  return row[0].as<std::string>();
}

std::int64_t insert_tool_audit(pqxx::connection& c, const ToolAuditEntry& e) {
  pqxx::work tx(c);
  auto row = tx.exec_params1(
      "INSERT INTO tool_call_audit (caller, user_id, tool, arguments, idempotency_key, outcome, "
      "error, finished_at) VALUES ($1, $2, $3, $4::jsonb, $5, $6, NULLIF($7, ''), "
      "CASE WHEN $6 = 'pending' THEN NULL ELSE now() END) RETURNING id",
      e.caller, e.user_id, e.tool, e.arguments_json, e.idempotency_key, e.outcome, e.error);
  tx.commit();
  return row[0].as<std::int64_t>();
}

void finish_tool_audit(pqxx::connection& c, std::int64_t id, const std::string& outcome,
                       int http_status, int latency_ms, const std::string& error) {
  pqxx::work tx(c);
  tx.exec_params0(
      "UPDATE tool_call_audit SET outcome = $2, http_status = NULLIF($3, 0), latency_ms = $4, "
      "error = NULLIF($5, ''), finished_at = now() WHERE id = $1",
      id, outcome, http_status, latency_ms, error);
  tx.commit();
}

}  // namespace agentfleet::pg
