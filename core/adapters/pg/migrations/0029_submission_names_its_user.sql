-- agentfleet schema, version 29: a submission's wake-up names its user and priority. The
-- scheduler heard every submission as an empty NOTIFY agentfleet_work and read the whole
-- backlog before it could admit the task: two round trips to Postgres (the read, then the
-- admission) on the critical path of every task. With the notification saying
-- 'queued PRIORITY USER', a scheduler that read the backlog recently and knows that user
-- admits the task from what it knows, in the admission's statement alone
-- (dispatcher/scheduler.hpp, "admitting what was heard").
--
-- agentfleet_submit is replaced (migration 0022 explains it) by the same function but for
-- its notification's payload: its insert stays alike with insert_tasks in
-- core/adapters/pg/sql/submission.sql (tests/unit/sql_files_test.cpp). Safe beside a
-- version-28 scheduler, which counts notifications and never reads what they say; a
-- version-29 scheduler takes an empty one (a version-28 batch move, hand-back or limits
-- change) as work it must read the backlog for.
CREATE OR REPLACE FUNCTION agentfleet_submit(p_task jsonb, p_user text, p_tier text,
                                             p_max_queued integer, p_limit bigint)
RETURNS TABLE (o_tier text, o_max_queued integer, o_queued bigint, o_task tasks,
               o_existing_id text, o_existing_canonical text, o_existing_status text,
               o_existing_batch text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_key text := NULLIF(p_task -> 0 ->> 'idempotency_key', '');
BEGIN
  PERFORM pg_advisory_xact_lock(7311002, hashtext(p_user));
  SELECT coalesce(l.tier, ''), l.max_queued INTO o_tier, o_max_queued
  FROM (SELECT 1) one LEFT JOIN user_limits l ON l.user_id = p_user;
  o_queued := 0;
  IF o_tier IS DISTINCT FROM p_tier OR o_max_queued IS DISTINCT FROM p_max_queued THEN
    RETURN NEXT;
    RETURN;
  END IF;
  IF p_limit >= 0 THEN
    o_queued := (SELECT count(*) FROM (SELECT 1 FROM tasks
                                       WHERE user_id = p_user AND status = 'queued'
                                       LIMIT p_limit + 1) q)
              + (SELECT count(*) FROM (SELECT 1 FROM tasks
                                       WHERE user_id = p_user AND status = 'staged'
                                       LIMIT p_limit + 1) s);
  END IF;
  IF p_limit < 0 OR o_queued < p_limit THEN
    INSERT INTO tasks (task_id, user_id, text, model, tools, timeout_s, schedule_timeout_s,
                       max_steps, priority, idempotency_key, request_canonical, batch_id,
                       metadata, traceparent, strategy, parent_task_id, session_id,
                       max_tokens, max_cost, status, retry_of)
    SELECT r.task_id, r.user_id, r.text, r.model,
           CASE WHEN r.tools IS NULL OR jsonb_typeof(r.tools) = 'null' THEN NULL
                ELSE ARRAY(SELECT jsonb_array_elements_text(r.tools)) END,
           r.timeout_s, r.schedule_timeout_s, r.max_steps, r.priority,
           NULLIF(r.idempotency_key, ''), r.request_canonical, NULLIF(r.batch_id, ''), r.metadata,
           NULLIF(r.traceparent, ''), NULLIF(r.strategy, ''),
           coalesce(NULLIF(r.parent_task_id, '')::uuid,
                    (SELECT p.task_id FROM tasks p
                     WHERE r.session_id <> '' AND p.user_id = r.user_id
                       AND p.session_id = r.session_id
                       AND (p.status <> 'staged' OR p.batch_id = NULLIF(r.batch_id, ''))
                     ORDER BY p.seq DESC NULLS LAST, p.created_at DESC LIMIT 1)),
           NULLIF(r.session_id, ''), r.max_tokens, r.max_cost, coalesce(r.status, 'queued'),
           NULLIF(r.retry_of, '')::uuid
    FROM jsonb_to_recordset(p_task) AS r(
      task_id uuid, user_id text, text text, model text, tools jsonb, timeout_s integer,
      schedule_timeout_s integer, max_steps integer, priority text, idempotency_key text,
      request_canonical text, batch_id text, metadata jsonb, traceparent text, strategy text,
      parent_task_id text, session_id text, max_tokens bigint, max_cost numeric, status text,
      retry_of text)
    ON CONFLICT (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING * INTO o_task;
    IF FOUND THEN
      PERFORM pg_notify('agentfleet_work', 'queued ' || o_task.priority || ' ' || p_user);
      RETURN NEXT;
      RETURN;
    END IF;
  END IF;
  IF v_key IS NOT NULL THEN
    SELECT t.task_id::text, t.request_canonical, t.status, coalesce(t.batch_id, '')
    INTO o_existing_id, o_existing_canonical, o_existing_status, o_existing_batch
    FROM tasks t WHERE t.user_id = p_user AND t.idempotency_key = v_key;
  END IF;
  RETURN NEXT;
END $$;
