-- A worker's runs of tasks (adapters/pg/run_store). The claims, checkpoints and ends write
-- every write of their kind in a batch at once: $1 is a JSON array with one object per
-- write. Every write after the claim is fenced by (task_id, attempt, the claiming worker's
-- incarnation, status running): a row another attempt or another worker owns is left alone
-- and its task id is missing from the answer. Rows are
-- locked in task-id order. Each task is reached by its primary key from the request (a
-- LATERAL lookup per row): the planner cannot know how few rows a JSON array holds, and a
-- join would read every running task instead. The lookup names the primary key alone, and
-- the fence is checked on the row it found (OFFSET 0 keeps the planner from moving the
-- fence's conditions into the lookup): a plan made while `tasks` was new and never analyzed
-- (the generic plan a prepared statement keeps until an ANALYZE) would otherwise reach the
-- row through an index of running tasks (tasks_running_incarnation), reading every task the
-- worker runs for each row of a batch. A row that is no longer the writer's is then locked
-- before it is left alone, which only a stale writer pays. The hand-back of a draining worker
-- (still_ours, release) and the read of a follow-up's parent (parent, task_steps) are one
-- task's each.

-- fragment: ours_locked
-- The requests' tasks that are still theirs (the fence), each row locked, in task-id order.
  SELECT t.task_id FROM (SELECT * FROM req ORDER BY task_id) r
  CROSS JOIN LATERAL (
    SELECT x.task_id, x.attempt, x.status, x.worker_incarnation FROM tasks x
    WHERE x.task_id = r.task_id OFFSET 0 FOR UPDATE OF x
  ) t
  WHERE t.attempt = r.attempt AND t.status = 'running' AND t.worker_incarnation = r.incarnation

-- name: claim_tasks
-- Each task becomes the run of its worker and incarnation: status running, attempt + 1, the
-- deadline fixed at the first claim. It must be dispatched, or running under an owner that is
-- gone: an incarnation whose liveness lapsed, or (a task of a version-7 worker, which leases
-- each task) an expired task lease, and then only while attempt - releases < max_attempts.
-- The claimer's own incarnation must still hold its liveness: a claim sent just before the
-- worker's database path went silent may run only when the path comes back, after the
-- incarnation lapsed; it takes nothing (the worker claims again under its new incarnation),
-- instead of making the task the run of an owner already gone, whose recovery would cost
-- the task an attempt.
-- One row per requested task: claimed or not, whether it exists, what the run needs (the
-- checkpoints of earlier attempts, and what they billed: their ledger, which the row holds
-- only once the task ended), whether the claimer was live, and,
-- for a task not claimed, the attempt at which the claimer's own incarnation runs it already
-- (an earlier claim of it that committed though its answer was lost; NULL otherwise), and
-- the user's monthly budget override and the task's own spending limits (NULL: none), and
-- whether the claim recorded the run's first model call.
-- The first model call (step 0) of attempt 1 of a task with no parent is recorded here, in
-- the claim's commit, as record_calls records a call ($2: ports::FirstCallEstimate per model
-- and strategy): its input estimated as the prompt's tokens plus the text's, counted as
-- react::estimate_tokens counts them (a CJK code point a token, four other characters a
-- token), its cost rate x tokens / 10^12 micro-units rounded half up (billing::PriceTable).
-- Not for a task that ends before any call (cancel requested, waited past its schedule
-- timeout), nor for a model or strategy $2 does not name.
WITH req AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb)
    AS r(task_id uuid, worker_id text, incarnation bigint, max_attempts integer)
), locked AS (
  SELECT t.task_id FROM (SELECT * FROM req ORDER BY task_id) r
  CROSS JOIN LATERAL (
    SELECT x.task_id FROM tasks x
    WHERE x.task_id = r.task_id
      AND EXISTS (SELECT 1 FROM workers me
                  WHERE me.incarnation = r.incarnation AND me.lease_until > now())
      AND (x.status = 'dispatched'
           OR (x.status = 'running' AND x.attempt - x.releases < r.max_attempts
               AND ((x.worker_incarnation IS NULL AND x.lease_until < now())
                    OR (x.worker_incarnation IS NOT NULL
                        AND NOT EXISTS (SELECT 1 FROM workers w
                                        WHERE w.incarnation = x.worker_incarnation
                                          AND w.lease_until > now())))))
    FOR UPDATE OF x
  ) t
), claimed AS (
  UPDATE tasks t SET status = 'running', attempt = t.attempt + 1, worker_id = r.worker_id,
         worker_incarnation = r.incarnation, lease_until = NULL,
         started_at = coalesce(t.started_at, now()),
         deadline_at = coalesce(t.deadline_at, now() + make_interval(secs => t.timeout_s))
  FROM req r
  WHERE t.task_id = ANY (ARRAY(SELECT task_id FROM locked)) AND r.task_id = t.task_id
  RETURNING t.*
), known AS (
  SELECT r.task_id FROM req r
  CROSS JOIN LATERAL (SELECT 1 FROM tasks x WHERE x.task_id = r.task_id OFFSET 0) e
), first_calls AS (
  INSERT INTO model_calls_in_flight (task_id, attempt, step, incarnation, user_id, batch_id,
                                     model, input_tokens, cost, currency)
  SELECT c.task_id, c.attempt, 0, c.worker_incarnation, c.user_id, c.batch_id, c.model, n.input,
         round(n.input * f.rate / 1e12) / 1e6, f.currency
  FROM claimed c
  JOIN jsonb_to_recordset($2::jsonb)
    AS f(model text, strategy text, prompt bigint, rate numeric, currency text)
    ON f.model = c.model AND f.strategy = coalesce(c.strategy, '')
  CROSS JOIN LATERAL (
    SELECT length(regexp_replace(c.text, '[^\u1100-\u11FF\u2E80-\u9FFF\uAC00-\uD7AF\uF900-\uFAFF\uFE30-\uFE4F\uFF00-\uFFEF\U00020000-\U0003FFFF]', '', 'g')) AS cjk
  ) cj
  CROSS JOIN LATERAL (
    SELECT f.prompt + cj.cjk + (length(c.text) - cj.cjk + 3) / 4 AS input
  ) n
  WHERE c.attempt = 1 AND c.parent_task_id IS NULL AND NOT c.cancel_requested
    AND now() - c.created_at <= make_interval(secs => c.schedule_timeout_s)
  ON CONFLICT (task_id, attempt, step) DO NOTHING
  RETURNING task_id
)
SELECT r.task_id::text, c.task_id IS NOT NULL, k.task_id IS NOT NULL,
       c.user_id, c.text, c.model, array_to_json(c.tools)::text, c.timeout_s,
       c.schedule_timeout_s, c.max_steps, c.priority, coalesce(c.idempotency_key, ''),
       coalesce(c.batch_id, ''), c.metadata->>'device_id', c.metadata->>'time_zone',
       c.metadata->>'locale', c.attempt,
       (extract(epoch FROM c.deadline_at - now()) * 1000)::bigint, c.cancel_requested,
       (c.attempt = 1 AND now() - c.created_at > make_interval(secs => c.schedule_timeout_s)),
       coalesce(u.tier, ''), coalesce(u.tool_permission, ''),
       (extract(epoch FROM now() - c.created_at) * 1000)::bigint, coalesce(c.strategy, ''),
       coalesce(c.parent_task_id::text, ''), coalesce(c.session_id, ''),
       coalesce(b.input, c.input_tokens), coalesce(b.cached, c.cached_input_tokens),
       coalesce(b.output, c.output_tokens), (coalesce(b.cost, c.cost) * 1000000)::bigint,
       coalesce(b.currency, c.currency, ''),
       CASE WHEN c.attempt > 1 THEN
         (SELECT coalesce(json_agg(json_build_array(s.step, s.model_reply::text,
                                                    coalesce(s.observations::text, ''))
                                   ORDER BY s.step), '[]')::text
          FROM task_steps s WHERE s.task_id = c.task_id)
       END,
       EXISTS (SELECT 1 FROM workers me
               WHERE me.incarnation = r.incarnation AND me.lease_until > now()),
       (SELECT t.attempt
        FROM (SELECT x.attempt, x.status, x.worker_incarnation FROM tasks x
              WHERE x.task_id = r.task_id OFFSET 0) t
        WHERE t.status = 'running' AND t.worker_incarnation = r.incarnation),
       (u.monthly_budget * 1000000)::bigint, c.max_tokens, (c.max_cost * 1000000)::bigint,
       fc.task_id IS NOT NULL
FROM req r
LEFT JOIN claimed c ON c.task_id = r.task_id
LEFT JOIN known k ON k.task_id = r.task_id
LEFT JOIN first_calls fc ON fc.task_id = r.task_id
LEFT JOIN user_limits u ON u.user_id = c.user_id
LEFT JOIN LATERAL (
  SELECT sum(l.input_tokens) AS input, sum(l.cached_input_tokens) AS cached,
         sum(l.output_tokens) AS output, sum(l.cost) AS cost,
         (array_agg(l.currency ORDER BY l.step DESC))[1] AS currency
  FROM usage_ledger l WHERE l.task_id = c.task_id AND c.attempt > 1
) b ON true

-- name: save_model_steps
-- Each model call's checkpoint: its step row and its ledger row; the call's in-flight record
-- (record_calls) goes: the ledger bills it. The task's row is locked (the fence) but not
-- written: its running totals are derived from these rows until its end folds them in
-- (submission.sql, task_totals).
WITH req AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb)
    AS r(task_id uuid, attempt integer, incarnation bigint, step integer, reply jsonb,
         latency_ms integer, user_id text, batch_id text, model text, input bigint, cached bigint, output bigint,
         reasoning bigint, cost numeric, currency text, estimated boolean)
), ours AS (
{{ours_locked}}
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
SELECT task_id::text FROM ours

-- name: record_charges
-- Model calls the provider may have charged for that no checkpoint bills (ports::Charges: a
-- timeout, an unreadable answer, an answer the run stopped waiting for or could no longer
-- checkpoint), a usage_unreconciled row each. Not fenced: the charge happened whoever owns
-- the task now.
INSERT INTO usage_unreconciled (task_id, attempt, step, user_id, batch_id, model, input_tokens,
                                cached_input_tokens, output_tokens, reasoning_tokens,
                                usage_estimated, cost, currency, reason)
SELECT r.task_id, r.attempt, r.step, r.user_id, NULLIF(r.batch_id, ''), r.model, r.input, r.cached,
       r.output, r.reasoning, r.estimated, r.cost, r.currency, r.reason
FROM jsonb_to_recordset($1::jsonb)
  AS r(task_id uuid, attempt integer, step integer, user_id text, batch_id text, model text,
       input bigint, cached bigint, output bigint, reasoning bigint, estimated boolean,
       cost numeric, currency text, reason text)

-- name: settle_call
-- The end of a model call whose answer no checkpoint bills ($2, $3, $4: task, attempt,
-- step): its in-flight record goes, and its charges ($1, as in record_charges, maybe none)
-- are written only if the record was still there; gone, the scheduler billed the call
-- (sched_settle_calls) and it is not billed twice. Answers whether the record was there.
WITH gone AS (
  DELETE FROM model_calls_in_flight
  WHERE task_id = $2::uuid AND attempt = $3::integer AND step = $4::integer
  RETURNING 1
), billed AS (
  INSERT INTO usage_unreconciled (task_id, attempt, step, user_id, batch_id, model, input_tokens,
                                  cached_input_tokens, output_tokens, reasoning_tokens,
                                  usage_estimated, cost, currency, reason)
  SELECT r.task_id, r.attempt, r.step, r.user_id, NULLIF(r.batch_id, ''), r.model, r.input,
         r.cached, r.output, r.reasoning, r.estimated, r.cost, r.currency, r.reason
  FROM jsonb_to_recordset($1::jsonb)
    AS r(task_id uuid, attempt integer, step integer, user_id text, batch_id text, model text,
         input bigint, cached bigint, output bigint, reasoning bigint, estimated boolean,
         cost numeric, currency text, reason text)
  WHERE EXISTS (SELECT 1 FROM gone)
)
SELECT EXISTS (SELECT 1 FROM gone)

-- name: record_calls
-- Model calls about to be sent (ports::CallSent), each recorded with the estimate it is
-- billed at should its worker stop before its fate is written; a second try of a step keeps
-- the first record. Fenced like a checkpoint (without locking the task's row: a claim by
-- another attempt that commits meanwhile fences the call's checkpoint instead); the task ids
-- answered are the ones recorded.
WITH req AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb)
    AS r(task_id uuid, attempt integer, incarnation bigint, step integer, user_id text,
         batch_id text, model text, input bigint, cost numeric, currency text)
), ours AS (
  SELECT r.* FROM req r
  CROSS JOIN LATERAL (
    SELECT x.attempt, x.status, x.worker_incarnation FROM tasks x
    WHERE x.task_id = r.task_id OFFSET 0
  ) t
  WHERE t.attempt = r.attempt AND t.status = 'running' AND t.worker_incarnation = r.incarnation
), recorded AS (
  INSERT INTO model_calls_in_flight (task_id, attempt, step, incarnation, user_id, batch_id,
                                     model, input_tokens, cost, currency)
  SELECT task_id, attempt, step, incarnation, user_id, NULLIF(batch_id, ''), model, input, cost,
         currency
  FROM ours
  ON CONFLICT (task_id, attempt, step) DO NOTHING
)
SELECT task_id::text FROM ours

-- name: save_tool_results
-- Each step's tool results (what the model sees, and the trace) and the count of its calls
-- that ran, in the step's row (the task's row is locked, not written). Observations null:
-- the calls were cut short by the task's end (a cancel, the deadline), and only the trace
-- and the count of calls that answered are kept. Results
-- that lead to a model call carry its record (call_step not null: ports::ToolResults::
-- next_call), written as record_calls writes it, in the same fenced statement.
WITH req AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb)
    AS r(task_id uuid, attempt integer, incarnation bigint, step integer, observations jsonb,
         trace jsonb, executed integer, call_step integer, user_id text, batch_id text,
         model text, input bigint, cost numeric, currency text)
), ours AS (
{{ours_locked}}
), updated AS (
  UPDATE task_steps s SET observations = r.observations, trace = r.trace, attempt = r.attempt,
         tools_done_at = CASE WHEN r.observations IS NULL THEN s.tools_done_at ELSE now() END,
         tool_calls = r.executed
  FROM req r
  WHERE s.task_id = ANY (ARRAY(SELECT task_id FROM ours)) AND s.task_id = r.task_id
    AND s.step = r.step
), recorded AS (
  INSERT INTO model_calls_in_flight (task_id, attempt, step, incarnation, user_id, batch_id,
                                     model, input_tokens, cost, currency)
  SELECT r.task_id, r.attempt, r.call_step, r.incarnation, r.user_id, NULLIF(r.batch_id, ''),
         r.model, r.input, r.cost, r.currency
  FROM req r JOIN ours USING (task_id)
  WHERE r.call_step IS NOT NULL
  ON CONFLICT (task_id, attempt, step) DO NOTHING
)
SELECT task_id::text FROM ours

-- name: save_tool_steps
-- Each plan_execute tool step, recorded before its calls run: a step row with no model call
-- and no ledger row (the task's step count is derived from its step rows).
WITH req AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb)
    AS r(task_id uuid, attempt integer, incarnation bigint, step integer, calls jsonb)
), ours AS (
{{ours_locked}}
), step_rows AS (
  INSERT INTO task_steps (task_id, step, attempt, model_reply)
  SELECT r.task_id, r.step, r.attempt, r.calls FROM req r JOIN ours USING (task_id)
)
SELECT task_id::text FROM ours

-- name: finish_tasks
-- Each task's end and its result event in the outbox (published by the relay after
-- relay_delay_s unless the worker has published it and removed the row); the outbox row's id
-- per task. An end that carries the checkpoint of the model call that ended the task (step
-- not null: ports::TaskEnd::last_step) writes it as save_model_steps does, in the same
-- statement: its step row and ledger row, its in-flight record gone. The one update of the
-- task's row folds its running totals in (as fold_totals does in submission.sql), adding
-- the step this statement writes, which its own reads of the steps and ledger do not see.
-- The record of a call the run never sent (unsent_step not null: ports::TaskEnd::
-- unsent_call_step) goes with the end, billing nothing.
WITH req AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb)
    AS r(task_id uuid, attempt integer, incarnation bigint, status text, result_type text,
         message text, options jsonb, error text, error_code text, topic text, key text,
         payload text, traceparent text, relay_delay_s integer, step integer, reply jsonb,
         latency_ms integer, user_id text, batch_id text, model text, input bigint,
         cached bigint, output bigint, reasoning bigint, cost numeric, currency text,
         estimated boolean, unsent_step integer)
), ours AS (
{{ours_locked}}
), step_rows AS (
  INSERT INTO task_steps (task_id, step, attempt, model_reply, model_latency_ms)
  SELECT r.task_id, r.step, r.attempt, r.reply, r.latency_ms FROM req r JOIN ours USING (task_id)
  WHERE r.step IS NOT NULL
), ledger_rows AS (
  INSERT INTO usage_ledger (task_id, step, user_id, batch_id, model, input_tokens,
                            cached_input_tokens, output_tokens, reasoning_tokens, cost, currency,
                            usage_estimated)
  SELECT r.task_id, r.step, r.user_id, NULLIF(r.batch_id, ''), r.model, r.input, r.cached,
         r.output, r.reasoning, r.cost, r.currency, coalesce(r.estimated, false)
  FROM req r JOIN ours USING (task_id)
  WHERE r.step IS NOT NULL
), settled AS (
  DELETE FROM model_calls_in_flight c USING req r
  WHERE c.task_id = ANY (ARRAY(SELECT task_id FROM ours)) AND c.task_id = r.task_id
    AND c.attempt = r.attempt AND c.step IN (r.step, r.unsent_step)
), ended AS (
  UPDATE tasks t SET status = r.status, result_type = r.result_type,
         result_message = r.message, result_options = r.options, error = NULLIF(r.error, ''),
         error_code = NULLIF(r.error_code, ''), finished_at = now(), lease_until = NULL,
         steps = greatest(t.steps, s.steps, coalesce(r.step + 1, 0)),
         tool_calls = greatest(t.tool_calls, s.tool_calls),
         input_tokens = coalesce(l.input, t.input_tokens) + coalesce(r.input, 0),
         cached_input_tokens = coalesce(l.cached, t.cached_input_tokens) + coalesce(r.cached, 0),
         output_tokens = coalesce(l.output, t.output_tokens) + coalesce(r.output, 0),
         cost = coalesce(l.cost, t.cost) + coalesce(r.cost, 0),
         currency = coalesce(r.currency, l.currency, t.currency)
  FROM req r
  CROSS JOIN LATERAL (
    SELECT coalesce(max(x.step) + 1, 0) AS steps,
           coalesce(sum(x.tool_calls), 0)::integer AS tool_calls
    FROM task_steps x WHERE x.task_id = r.task_id
  ) s
  CROSS JOIN LATERAL (
    SELECT sum(x.input_tokens) AS input, sum(x.cached_input_tokens) AS cached,
           sum(x.output_tokens) AS output, sum(x.cost) AS cost,
           (array_agg(x.currency ORDER BY x.step DESC))[1] AS currency
    FROM usage_ledger x WHERE x.task_id = r.task_id
  ) l
  WHERE t.task_id = ANY (ARRAY(SELECT task_id FROM ours)) AND r.task_id = t.task_id
  RETURNING t.task_id
)
INSERT INTO outbox (topic, message_key, payload, traceparent, publish_after, task_id)
SELECT r.topic, r.key, r.payload, NULLIF(r.traceparent, ''),
       now() + make_interval(secs => r.relay_delay_s), r.task_id
FROM req r JOIN ended USING (task_id)
RETURNING task_id::text, id

-- name: still_ours
-- The fence of a single write: task $1 still runs at attempt $2 under worker incarnation $3
-- (its row locked until the transaction ends).
SELECT 1
FROM (SELECT attempt, status, worker_incarnation FROM tasks WHERE task_id = $1::uuid
      OFFSET 0 FOR UPDATE) t
WHERE t.attempt = $2 AND t.status = 'running' AND t.worker_incarnation = $3::bigint

-- name: release
-- Hands running task $1 back (a draining worker; after still_ours): queued again, lease
-- and owner cleared, releases + 1 so the hand-back does not count as a lost attempt. The
-- scheduler hears of it at the commit (it waits long while nothing is queued).
WITH released AS (
  UPDATE tasks SET status = 'queued', lease_until = NULL, worker_id = NULL,
         worker_incarnation = NULL, releases = releases + 1
  WHERE task_id = $1::uuid
  RETURNING 1
)
SELECT pg_notify('agentfleet_work', '') FROM released

-- name: parent
-- A follow-up's parent $1, only a task of user $2: its text, strategy ('' for none),
-- status, result ('' type: none; options as JSON text), error ('' for none) and tool
-- allow-list (JSON, NULL: every tool).
SELECT text, coalesce(strategy, ''), status, coalesce(result_type, ''),
       coalesce(result_message, ''), coalesce(result_options::text, '[]'), coalesce(error, ''),
       array_to_json(tools)::text
FROM tasks WHERE task_id = $1::uuid AND user_id = $2

-- name: task_steps
-- Task $1's checkpoints in step order: step, the model's reply and the observations ('':
-- its tools have not run).
SELECT step, model_reply::text, coalesce(observations::text, '') FROM task_steps
WHERE task_id = $1::uuid ORDER BY step
