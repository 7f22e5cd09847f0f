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
), done AS (
  UPDATE mc c SET model_reply = r.reply, model_latency_ms = r.latency_ms, input_tokens = r.input,
         cached_input_tokens = r.cached, output_tokens = r.output, reasoning_tokens = r.reasoning,
         cost = r.cost, currency = r.currency, usage_estimated = coalesce(r.estimated, false),
         answered_at = now()
  FROM req r
  WHERE c.task_id = ANY (ARRAY(SELECT task_id FROM ours)) AND c.task_id = r.task_id
    AND c.attempt = r.attempt AND c.step = r.step
)
SELECT task_id::text FROM ours;
ROLLBACK;
