-- agentfleet schema, version 22: a submission in one statement. A task's submission took
-- four round trips to Postgres (BEGIN, the user's lock with their overrides, the count and
-- the insert, COMMIT), because a statement's snapshot is taken when it starts: one that took
-- the lock and then counted would not see the submission it waited for. A function runs
-- each of its statements on a snapshot of its own, so agentfleet_submit() takes the lock,
-- then counts and inserts seeing every submission before it, in one autocommitted
-- statement (pg::insert_task). On the critical path of every task.
--
-- agentfleet_submit(task, user, tier, max_queued, limit): `task` is the one-element JSON
-- array insert_tasks takes; `tier` and `max_queued` are the user's overrides as the caller
-- believes them ('' and NULL: none), and `limit` the queue limit it derived from them (-1:
-- none). Under user `user`'s submission lock (the one insert_tasks' callers take), it reads
-- the overrides; when they are not what the caller believed, it answers them and stores
-- nothing (the caller derives its limit and model check again and calls once more).
-- Otherwise it counts the user's queued and staged tasks (each up to limit + 1), inserts the
-- task when there is room and its idempotency key is not taken, wakes the scheduler, and
-- answers: the overrides, the count, the row inserted (NULL: none), and, when nothing was
-- inserted and the task has a key, the task that key names (id, canonical request, status,
-- batch; NULL: none).
--
-- A new function: a version-21 dispatcher never calls it, and both may run side by side
-- (they take the same lock). Its insert is the insert_tasks statement of
-- core/adapters/pg/sql/submission.sql (tests/unit/sql_files_test.cpp checks they are alike):
-- a change to that insert is a new migration that replaces this function.
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
                     ORDER BY p.created_at DESC LIMIT 1)),
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
      PERFORM pg_notify('agentfleet_work', '');
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
