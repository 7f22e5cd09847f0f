-- What the users and the fleet use and may use (adapters/pg/usage_store, run by the
-- dispatcher through pg::ApiStore): usage from the ledger (GET /v1/usage), each user's limit
-- overrides (GET/PUT /v1/users/{id}/limits), the live tasks and due outbox rows behind the
-- dispatcher's gauges. All go as text (exec_text): rare, or (usage) with filters that are
-- empty or not, whose plan should follow the arguments.

-- name: usage
-- Usage from the ledger per model and currency (calls, tasks, tokens, cost) and totals per
-- currency, as JSON {"models": [...], "totals": [...]}, for user $1 and/or batch $2 ('':
-- any), over [$3, $4) (RFC 3339 timestamps; '': unbounded). Unreconciled charges (calls
-- whose answers were lost to their tasks, usage_unreconciled) are part of it, and counted
-- apart too, as are calls billed from an estimate.
WITH billed AS (
  SELECT model, currency, task_id, input_tokens, cached_input_tokens, output_tokens, cost,
         false AS unreconciled, usage_estimated
  FROM usage_ledger
  WHERE ($1 = '' OR user_id = $1) AND ($2 = '' OR batch_id = $2)
    AND ($3 = '' OR called_at >= $3::timestamptz) AND ($4 = '' OR called_at < $4::timestamptz)
  UNION ALL
  SELECT model, currency, task_id, input_tokens, cached_input_tokens, output_tokens, cost,
         true, usage_estimated
  FROM usage_unreconciled
  WHERE ($1 = '' OR user_id = $1) AND ($2 = '' OR batch_id = $2)
    AND ($3 = '' OR called_at >= $3::timestamptz) AND ($4 = '' OR called_at < $4::timestamptz)
), calls AS (
  SELECT model, currency, count(*) AS calls, count(DISTINCT task_id) AS tasks,
         count(*) FILTER (WHERE unreconciled) AS unreconciled_calls,
         coalesce(sum(cost) FILTER (WHERE unreconciled), 0) AS unreconciled_cost,
         count(*) FILTER (WHERE usage_estimated) AS estimated_calls,
         sum(input_tokens) AS input_tokens, sum(cached_input_tokens) AS cached_input_tokens,
         sum(output_tokens) AS output_tokens, sum(cost) AS cost
  FROM billed
  GROUP BY model, currency
)
SELECT jsonb_build_object(
  'models', coalesce((SELECT jsonb_agg(jsonb_build_object(
      'model', model, 'currency', currency, 'calls', calls, 'tasks', tasks,
      'input_tokens', input_tokens, 'cached_input_tokens', cached_input_tokens,
      'output_tokens', output_tokens,
      'cost', to_char(cost, 'FM999999999999990.000000'),
      'unreconciled_calls', unreconciled_calls,
      'unreconciled_cost', to_char(unreconciled_cost, 'FM999999999999990.000000'),
      'estimated_calls', estimated_calls) ORDER BY model, currency) FROM calls),
    '[]'::jsonb),
  'totals', coalesce((SELECT jsonb_agg(jsonb_build_object(
      'currency', currency, 'calls', calls, 'input_tokens', input_tokens,
      'cached_input_tokens', cached_input_tokens, 'output_tokens', output_tokens,
      'cost', to_char(cost, 'FM999999999999990.000000'),
      'unreconciled_calls', unreconciled_calls,
      'unreconciled_cost', to_char(unreconciled_cost, 'FM999999999999990.000000'),
      'estimated_calls', estimated_calls) ORDER BY currency)
    FROM (SELECT currency, sum(calls) AS calls, sum(input_tokens) AS input_tokens,
                 sum(cached_input_tokens) AS cached_input_tokens,
                 sum(output_tokens) AS output_tokens, sum(cost) AS cost,
                 sum(unreconciled_calls) AS unreconciled_calls,
                 sum(unreconciled_cost) AS unreconciled_cost,
                 sum(estimated_calls) AS estimated_calls
          FROM calls GROUP BY currency) t), '[]'::jsonb))::text

-- name: user_overrides
-- User $1's override row: the 7 columns read_overrides() reads (tier '' for none).
SELECT coalesce(tier, ''), max_concurrency, requests_per_minute, tokens_per_minute,
       max_queued, monthly_budget::text, tool_permission
FROM user_limits WHERE user_id = $1

-- name: put_user_overrides
-- Replaces user $1's override row with the fields given (tier '' and NULLs: no override).
INSERT INTO user_limits (user_id, tier, max_concurrency, requests_per_minute, tokens_per_minute,
                         max_queued, monthly_budget, tool_permission, updated_at)
VALUES ($1, NULLIF($2, ''), $3, $4, $5, $6, $7::numeric, $8, now())
ON CONFLICT (user_id) DO UPDATE SET
  tier = EXCLUDED.tier, max_concurrency = EXCLUDED.max_concurrency,
  requests_per_minute = EXCLUDED.requests_per_minute,
  tokens_per_minute = EXCLUDED.tokens_per_minute, max_queued = EXCLUDED.max_queued,
  monthly_budget = EXCLUDED.monthly_budget, tool_permission = EXCLUDED.tool_permission,
  updated_at = now()

-- name: wake_scheduler
-- Wakes the active scheduler (on any replica) when the transaction commits.
SELECT pg_notify('agentfleet_work', '')

-- name: count_queued
-- Queued tasks by priority (interactive, batch): the queued rows read once (with a backlog
-- of 100,000 that read is most of the cost of the gauges).
SELECT count(*) FILTER (WHERE priority = 'interactive'),
       count(*) FILTER (WHERE priority = 'batch')
FROM tasks WHERE status = 'queued'

-- name: count_active
-- Dispatched and running tasks, read through their partial index.
SELECT count(*) FILTER (WHERE status = 'dispatched'),
       count(*) FILTER (WHERE status = 'running')
FROM tasks WHERE status IN ('dispatched', 'running')

-- name: count_due_outbox
-- Outbox rows due for publishing (publish_after passed) and not yet published.
SELECT count(*) FROM outbox WHERE publish_after <= now()

-- name: task_step_costs
-- The bill of each model call of task $1 (its trace's spans carry them): step, model, cost
-- as decimal text, currency.
SELECT step, model, to_char(cost, 'FM999999999999990.000000'), currency
FROM usage_ledger WHERE task_id = $1::uuid ORDER BY step
