-- The active scheduler's statements (adapters/pg/scheduler_session, run by
-- dispatcher/scheduler): recovery and queue deadlines, what the fleet can start and who
-- waits, the ledger's spend and recent usage, the admissions, and the upkeep of the workers'
-- liveness rows. The statements every pass runs are prepared; their cached plans are dropped
-- every second (SchedulerSession::refresh_plans). The rare ones (sched_recent_*,
-- sched_oldest_queued) go as text.
-- What a dispatch writes to the outbox and answers is written once, in the fragment
-- dispatch_marked.
-- Written out more than once, kept alike (tests/unit/sql_files_test.cpp checks that they
-- are): "the owner is gone" (sched_exhausted, sched_recover); the marking of picked tasks
-- (sched_recover, sched_admit); the RETURNING list of tasks that end here (sched_exhausted,
-- sched_expire: kEndedColumns of ended_tasks.cpp, which announce_ended() reads).

-- fragment: dispatch_marked
-- How a statement that dispatches tasks ends (sched_recover, sched_admit), after an
-- `UPDATE tasks t SET status = 'dispatched' ... FROM picked` in a CTE named marked, in a
-- statement whose CTE `args` says the dispatch topic (`topic`) and in how many seconds the
-- relay may publish the messages (`handoff_s`: 0, at once; more, the scheduler hands them to
-- its relay as soon as it commits, and the rows are only a fallback until then). It writes
-- each task's dispatch message to the outbox (its payload codec::parse_dispatch_message
-- reads; the header codec::kNeedsHeader, what the task needs of its worker, which
-- codec::unmet_needs checks: the strategy it asked for, whether it follows a parent, whether
-- it has spending limits), and answers per task: the status it was picked in, its priority,
-- user, id, seconds since it was submitted, whether this is its first dispatch, its
-- traceparent, and its outbox row's id, payload and needs header.
  RETURNING t.task_id, t.user_id, t.priority, t.traceparent, t.dispatched_at, t.created_at,
            t.attempt, picked.status AS was,
            concat_ws(' ', 'strategy:' || t.strategy,
                      CASE WHEN t.parent_task_id IS NOT NULL THEN 'feature:follow_up' END,
                      CASE WHEN t.max_tokens IS NOT NULL OR t.max_cost IS NOT NULL
                           THEN 'feature:spend_limits' END) AS needs
), announced AS (
  INSERT INTO outbox (topic, message_key, payload, traceparent, headers, publish_after)
  SELECT a.topic, m.task_id::text,
         '{"version":1,"task_id":"' || m.task_id || '","user_id":' || to_json(m.user_id) ||
         ',"priority":"' || m.priority || '","dispatched_at":"' ||
         to_char(m.dispatched_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || '"}',
         m.traceparent,
         CASE WHEN m.needs <> '' THEN jsonb_build_object('agentfleet-needs', m.needs)
              ELSE '{}'::jsonb END,
         now() + make_interval(secs => a.handoff_s)
  FROM marked m CROSS JOIN args a
  RETURNING id, message_key, payload
)
SELECT m.was, m.priority, m.user_id, m.task_id::text,
       extract(epoch FROM m.dispatched_at - m.created_at)::float8, m.attempt = 0,
       coalesce(m.traceparent, ''), a.id, a.payload, m.needs
FROM marked m JOIN announced a ON a.message_key = m.task_id::text

-- name: sched_exhausted
-- Recovery gives up on running tasks whose owner is gone (the incarnation that claimed it
-- no longer holds its liveness, or, a task of a version-7 worker, which leased each task,
-- its own lease expired) and that are out of attempts ($2: max_attempts); at most $1. They
-- end failed, their running totals folded in; the columns of their result events.
UPDATE tasks t SET status = 'failed', finished_at = statement_timestamp(), lease_until = NULL,
       error_code = 'attempts_exhausted',
       error = 'gave up after ' || (attempt - releases) || ' attempts: every worker that ran it stopped '
               'before it finished',
       {{fold_totals}}
WHERE t.task_id IN (SELECT task_id FROM tasks t
                  WHERE status = 'running' AND attempt - releases >= $2
                    AND ((t.worker_incarnation IS NULL AND t.lease_until < now())
                         OR t.worker_incarnation IN (SELECT incarnation FROM workers
                                                     WHERE lease_until < now()))
                  ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING
  task_id::text, user_id, coalesce(batch_id, ''), coalesce(error, ''), coalesce(error_code, ''),
  status, attempt, steps, tool_calls, input_tokens, cached_input_tokens, output_tokens,
  to_char(cost, 'FM999999999999990.000000'), coalesce(currency, 'CNY'),
  coalesce(traceparent, ''), coalesce(result_type, ''), coalesce(result_message, ''),
  coalesce(result_options, '[]'::jsonb)::text

-- name: sched_recover
-- Recovery, up to $1 tasks (oldest first, rows locked elsewhere skipped), dispatched again:
-- running ones whose owner is gone (as in sched_exhausted) with
-- attempts left ($3: max_attempts), and dispatched ones unclaimed for $2 seconds
-- (redispatch_after_s) whose message is really lost, not waiting: at least one live
-- worker, and every live worker that consumes has reported since the task was dispatched
-- that nothing is left to read on its partitions. A message behind a paused worker is not
-- sent twice, unless it waited five times $2: the backstop for a consumer that reports a
-- lag it never reads (the capacity the scheduler admits against bounds the real waits to
-- seconds). Running tasks are taken only while $4 (recover_lapsed): not for one lease after
-- the store came back from an outage.
-- Each picked task is marked dispatched (its lease and owner cleared), its dispatch message
-- written to the outbox for topic $5, due at once, and answered as dispatch_marked says.
-- The time is the statement's, not the pass transaction's start: a task committed while the
-- pass ran is never dispatched "before" it was created.
WITH args AS (
  SELECT $5::text AS topic, 0::float8 AS handoff_s
), picked AS (
  SELECT task_id, status FROM tasks t
  WHERE (status = 'running' AND $4::boolean AND attempt - releases < $3
         AND ((t.worker_incarnation IS NULL AND t.lease_until < now())
              OR t.worker_incarnation IN (SELECT incarnation FROM workers
                                          WHERE lease_until < now())))
     OR (status = 'dispatched' AND dispatched_at < now() - make_interval(secs => $2)
         AND EXISTS (SELECT 1 FROM workers w WHERE w.lease_until > now() AND NOT w.draining)
         AND NOT EXISTS (SELECT 1 FROM workers w
                         WHERE w.lease_until > now() AND NOT w.draining
                           AND (w.dispatch_lag > 0 OR w.heartbeat_at < t.dispatched_at)))
     OR (status = 'dispatched' AND dispatched_at < now() - make_interval(secs => $2 * 5))
  ORDER BY created_at
  LIMIT $1
  FOR UPDATE SKIP LOCKED
), marked AS (
  UPDATE tasks t SET status = 'dispatched', dispatched_at = statement_timestamp(),
         lease_until = NULL, worker_incarnation = NULL
  FROM picked
  WHERE t.task_id = ANY (ARRAY(SELECT task_id FROM picked)) AND t.task_id = picked.task_id
{{dispatch_marked}}

-- name: sched_expire
-- Queued tasks past a deadline, at most $1 of each kind, end timed_out: those never started
-- past their queue deadline (created_at + schedule_timeout_s) with error_code
-- schedule_timeout; those handed back to the queue after they started (a draining or fenced
-- worker) past their execution deadline (fixed at the first claim) with error_code
-- deadline, their running totals folded in. The columns of their result events.
WITH waited AS (
  SELECT task_id FROM tasks
  WHERE status = 'queued' AND started_at IS NULL AND queue_deadline_at < now()
  ORDER BY queue_deadline_at LIMIT $1 FOR UPDATE SKIP LOCKED
), handed_back AS (
  SELECT task_id FROM tasks
  WHERE status = 'queued' AND started_at IS NOT NULL AND deadline_at < now()
  ORDER BY deadline_at LIMIT $1 FOR UPDATE SKIP LOCKED
)
UPDATE tasks t SET status = 'timed_out', finished_at = statement_timestamp(),
       error_code = CASE WHEN t.started_at IS NULL THEN 'schedule_timeout' ELSE 'deadline' END,
       error = CASE WHEN t.started_at IS NULL
                    THEN 'waited in the queue longer than schedule_timeout_s (' ||
                         t.schedule_timeout_s || ' s)'
                    ELSE 'deadline of ' || t.timeout_s || ' s passed while it waited to run again '
                         '(its worker had handed it back)' END,
       {{fold_totals}}
WHERE t.task_id IN (SELECT task_id FROM waited UNION ALL SELECT task_id FROM handed_back)
RETURNING
  task_id::text, user_id, coalesce(batch_id, ''), coalesce(error, ''), coalesce(error_code, ''),
  status, attempt, steps, tool_calls, input_tokens, cached_input_tokens, output_tokens,
  to_char(cost, 'FM999999999999990.000000'), coalesce(currency, 'CNY'),
  coalesce(traceparent, ''), coalesce(result_type, ''), coalesce(result_message, ''),
  coalesce(result_options, '[]'::jsonb)::text

-- name: sched_settle_calls
-- Model calls left in flight by a worker that stopped (run.sql record_calls): its incarnation
-- no longer holds its liveness, and the task is no longer that incarnation's run at that
-- attempt (so no checkpoint of it can still be written), at most $1, oldest first, rows a
-- worker is settling skipped. Each is billed as an unreconciled charge, reason worker_lost,
-- at the estimate recorded before it was sent, and its record goes (whoever deletes the
-- record bills the call: run.sql settle_call). Records of deleted tasks go unbilled. How
-- many were billed.
WITH lost AS (
  SELECT c.task_id, c.attempt, c.step FROM model_calls_in_flight c
  WHERE NOT EXISTS (SELECT 1 FROM workers w
                    WHERE w.incarnation = c.incarnation AND w.lease_until > now())
    AND NOT EXISTS (SELECT 1 FROM tasks t
                    WHERE t.task_id = c.task_id AND t.status = 'running'
                      AND t.attempt = c.attempt AND t.worker_incarnation = c.incarnation)
  ORDER BY c.sent_at LIMIT $1 FOR UPDATE OF c SKIP LOCKED
), gone AS (
  DELETE FROM model_calls_in_flight c USING lost l
  WHERE c.task_id = l.task_id AND c.attempt = l.attempt AND c.step = l.step
  RETURNING c.*
), billed AS (
  INSERT INTO usage_unreconciled (task_id, attempt, step, user_id, batch_id, model, input_tokens,
                                  cached_input_tokens, output_tokens, reasoning_tokens,
                                  usage_estimated, cost, currency, reason)
  SELECT g.task_id, g.attempt, g.step, g.user_id, g.batch_id, g.model, g.input_tokens, 0, 0, 0,
         true, g.cost, g.currency, 'worker_lost'
  FROM gone g
  WHERE EXISTS (SELECT 1 FROM tasks t WHERE t.task_id = g.task_id)
  RETURNING 1
)
SELECT count(*)::integer FROM billed

-- name: sched_backlog
-- Every user with queued work, in user order: queued counts per priority, the exact count
-- of dispatched and running tasks, the 7 override columns (as read_overrides() reads them);
-- and with every row (computed once) what the fleet can start now: the live workers that
-- take work, the capacity they report, every user's dispatched and running tasks, and the
-- cap the queued counts stop at, one more than a pass could admit: the least of $1 (the
-- scheduler batch), the capacity reported (when a worker reports) and $2 (max_active_tasks,
-- when above 0), each less the active tasks; at least 1 (ports::backlog_count_cap). With no
-- user's work queued, one row whose user is NULL carries those figures (tasks may be under
-- way). A skip scan of tasks_queued_user finds each user in one index probe.
WITH RECURSIVE room AS (
  SELECT (SELECT count(*) FROM workers WHERE lease_until > now() AND NOT draining) AS live,
         (SELECT coalesce(sum(capacity), 0) FROM workers
          WHERE lease_until > now() AND NOT draining) AS capacity,
         (SELECT count(*) FROM tasks WHERE status IN ('dispatched', 'running')) AS active
), cap AS (
  SELECT GREATEST(LEAST($1::bigint,
                        CASE WHEN live > 0 THEN capacity - active ELSE $1::bigint END,
                        CASE WHEN $2::bigint > 0 THEN $2::bigint - active ELSE $1::bigint END),
                  0) + 1 AS n
  FROM room
), users AS (
  (SELECT user_id FROM tasks WHERE status = 'queued' ORDER BY user_id LIMIT 1)
  UNION ALL
  SELECT (SELECT t.user_id FROM tasks t WHERE t.status = 'queued' AND t.user_id > u.user_id
          ORDER BY t.user_id LIMIT 1)
  FROM users u WHERE u.user_id IS NOT NULL
)
SELECT u.user_id,
  (SELECT count(*) FROM (SELECT 1 FROM tasks q WHERE q.status = 'queued' AND q.user_id = u.user_id
                         AND q.priority = 'interactive' LIMIT (SELECT n FROM cap)) qi),
  (SELECT count(*) FROM (SELECT 1 FROM tasks q WHERE q.status = 'queued' AND q.user_id = u.user_id
                         AND q.priority = 'batch' LIMIT (SELECT n FROM cap)) qb),
  (SELECT count(*) FROM tasks a WHERE a.user_id = u.user_id
                                  AND a.status IN ('dispatched', 'running')),
  coalesce(l.tier, ''), l.max_concurrency, l.requests_per_minute, l.tokens_per_minute,
  l.max_queued, l.monthly_budget::text, l.tool_permission,
  r.live, r.capacity, r.active, c.n
FROM room r CROSS JOIN cap c
LEFT JOIN users u ON u.user_id IS NOT NULL
LEFT JOIN user_limits l ON l.user_id = u.user_id
ORDER BY u.user_id

-- name: sched_month_spend
-- Each user's (of the JSON array $1) cost per currency in the ledger, unreconciled charges
-- included, since the start of this month in time zone $2, in micro-units; users without
-- calls are absent. The scheduler converts each currency into the budget currency.
SELECT user_id, currency, (sum(cost) * 1000000)::bigint FROM (
  SELECT user_id, currency, cost FROM usage_ledger
  WHERE user_id = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)))
    AND called_at >= date_trunc('month', now() AT TIME ZONE $2) AT TIME ZONE $2
  UNION ALL
  SELECT user_id, currency, cost FROM usage_unreconciled
  WHERE user_id = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)))
    AND called_at >= date_trunc('month', now() AT TIME ZONE $2) AT TIME ZONE $2
) spent
GROUP BY user_id, currency

-- name: sched_recent_tokens
-- Tokens (input + output) in the ledger in the last minute, per user of the JSON array $1:
-- with sched_recent_admissions, where a new active scheduler starts their rate buckets.
SELECT user_id, sum(input_tokens + output_tokens)::bigint FROM usage_ledger
WHERE user_id = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)))
  AND called_at > now() - interval '1 minute'
GROUP BY user_id

-- name: sched_recent_admissions
-- Dispatches in the last minute, per user of the JSON array $1 (see sched_recent_tokens).
SELECT user_id, count(*) FROM tasks
WHERE user_id = ANY(ARRAY(SELECT jsonb_array_elements_text($1::jsonb)))
  AND dispatched_at > now() - interval '1 minute'
GROUP BY user_id

-- name: sched_admit
-- Dispatches each grant of the JSON array $1 ({user_id, priority, n}): the user's n oldest
-- queued tasks of that priority, a row another transaction holds (a cancel in progress)
-- skipped, not waited for. Marked and answered as in sched_recover, their dispatch messages
-- for topic $2, due to the relay in $3 seconds (the hand-off, dispatch_marked). The picked
-- tasks are marked through their ids as an array (as in sched_recover): the planner guesses a
-- JSON array holds 100 grants, and joined with a guess of that many rows the update read all
-- of `tasks` in a hash join.
WITH args AS (
  SELECT $2::text AS topic, $3::float8 AS handoff_s
), picked AS (
  SELECT p.task_id, 'queued'::text AS status
  FROM jsonb_to_recordset($1::jsonb) AS g(user_id text, priority text, n integer)
  CROSS JOIN LATERAL (
    SELECT t.task_id FROM tasks t
    WHERE t.status = 'queued' AND t.user_id = g.user_id AND t.priority = g.priority
      -- A task of a cancelled batch is left to the cancel, unless it was running when the
      -- batch was cancelled and came back to the queue since (handed back by a fenced or
      -- draining worker, after the cancel had finished with the batch): dispatched, its
      -- claim finds cancel_requested and ends it cancelled.
      AND (t.cancel_requested OR t.batch_id IS NULL
           OR NOT coalesce((SELECT b.cancelled FROM batches b
                            WHERE b.batch_id = t.batch_id AND b.user_id = t.user_id), false))
      -- A follow-up waits until its parent has ended: with dispatch keyed by task, no
      -- partition order keeps it behind its parent (nor, within a batch, the order its
      -- tasks move into the queue: a parent may still be staged). Looked up only for a
      -- follow-up: as a plain NOT EXISTS the planner may join it as an anti-join over every
      -- unfinished task.
      -- Both lookups are scalar subqueries, one row each by its key: an EXISTS here is planned,
      -- once `tasks` has statistics of a deep backlog, as a hash of every unfinished task (and
      -- every cancelled batch) built in every pass; under 100,000 queued tasks the admission
      -- then took 137 ms a pass (the median of the passes over 100 ms; docs/performance.md,
      -- 2026-12-03).
      AND (t.parent_task_id IS NULL
           OR coalesce((SELECT p.status NOT IN ('staged', 'queued', 'dispatched', 'running')
                        FROM tasks p WHERE p.task_id = t.parent_task_id), true))
    ORDER BY t.created_at
    LIMIT g.n
    FOR UPDATE SKIP LOCKED) p
), marked AS (
  UPDATE tasks t SET status = 'dispatched', dispatched_at = statement_timestamp()
  FROM picked
  WHERE t.task_id = ANY (ARRAY(SELECT task_id FROM picked)) AND t.task_id = picked.task_id
{{dispatch_marked}}

-- name: sched_oldest_queued
-- User $1's oldest queued tasks, at most $2, locked (rows locked elsewhere skipped): those
-- a pass ends unstarted (ports::EndQueued) before it admits.
SELECT task_id::text FROM tasks WHERE status = 'queued' AND user_id = $1
ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED

-- name: forget_workers
-- Rows of incarnations whose lease lapsed a minute ago and that own no running task any
-- more (recovery has taken their tasks over).
DELETE FROM workers w
WHERE w.lease_until < now() - interval '1 minute'
  AND NOT EXISTS (SELECT 1 FROM tasks t
                  WHERE t.status = 'running' AND t.worker_incarnation = w.incarnation)

-- name: sched_waiting
-- Why queued tasks wait: rows of the JSON array $1 ({user_id, priority, reason}) written
-- (`since` kept while the reason stays), rows of the JSON array $2 ({user_id, priority})
-- deleted, and, when $3, every row not in $1 deleted too (a new term starts over). The
-- deletes and the writes never touch the same row.
WITH put AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb) AS r(user_id text, priority text, reason text)
), gone AS (
  DELETE FROM waiting_reasons w
  WHERE (w.user_id, w.priority) IN (SELECT g.user_id, g.priority
                                    FROM jsonb_to_recordset($2::jsonb) AS g(user_id text,
                                                                             priority text))
     OR ($3::boolean AND (w.user_id, w.priority) NOT IN (SELECT user_id, priority FROM put))
  RETURNING 1
), written AS (
  INSERT INTO waiting_reasons (user_id, priority, reason)
  SELECT user_id, priority, reason FROM put
  ON CONFLICT (user_id, priority) DO UPDATE SET reason = EXCLUDED.reason, since = now()
  WHERE waiting_reasons.reason <> EXCLUDED.reason
  RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM written)
