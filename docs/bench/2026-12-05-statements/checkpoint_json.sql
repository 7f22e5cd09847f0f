BEGIN;
WITH req AS (
  SELECT * FROM jsonb_to_recordset(:p::jsonb)
    AS r(task_id uuid, attempt integer, incarnation bigint, step integer, reply jsonb,
         latency_ms integer, user_id text, batch_id text, model text, input bigint, cached bigint, output bigint,
         reasoning bigint, cost numeric, currency text, estimated boolean)
), ours AS (
  SELECT t.task_id FROM (SELECT * FROM req ORDER BY task_id) r
  CROSS JOIN LATERAL (
    SELECT x.task_id, x.attempt, x.status, x.worker_incarnation FROM tasks x
    WHERE x.task_id = r.task_id OFFSET 0 FOR UPDATE OF x
  ) t
  WHERE t.attempt = r.attempt AND t.status = 'running' AND t.worker_incarnation = r.incarnation
), step_rows AS (
  INSERT INTO task_steps (task_id, step, attempt, model_reply, model_latency_ms)
  SELECT r.task_id, r.step, r.attempt, r.reply, r.latency_ms FROM req r JOIN ours USING (task_id)
), ledger_rows AS (
  INSERT INTO usage_ledger (task_id, step, user_id, batch_id, model, input_tokens,
                            cached_input_tokens, output_tokens, reasoning_tokens, cost, currency,
                            usage_estimated)
  SELECT r.task_id, r.step, r.user_id, NULLIF(r.batch_id, ''), r.model, r.input, r.cached,
         r.output, r.reasoning, r.cost, r.currency, coalesce(r.estimated, false)
  FROM req r JOIN ours USING (task_id)
), settled AS (
  DELETE FROM model_calls_in_flight c USING req r
  WHERE c.task_id = ANY (ARRAY(SELECT task_id FROM ours)) AND c.task_id = r.task_id
    AND c.attempt = r.attempt AND c.step = r.step
)
SELECT task_id::text FROM ours;
ROLLBACK;
