-- agentfleet schema, version 31: a batch upload's task knows its line (tasks.batch_line: its
-- number among the upload's task lines, from 1, as the upload's errors number them
-- (/line/N: blank lines are not tasks and are not counted); NULL for a task of no upload, or
-- of one stored before this version). A
-- batch's results name each task's line and come in the order of the lines (the index of
-- migration 0032), so a client maps every result to its input.
--
-- The column is added without a default: the table is not rewritten, and the row of a task
-- is as wide as before but for the four bytes of an upload's task. It is written by the
-- insert that writes the row, never by a statement of its own.
--
-- agentfleet_submit is replaced (migration 0022 explains it) by the same function whose
-- insert names the column: it stays alike with insert_tasks in
-- core/adapters/pg/sql/submission.sql (tests/unit/sql_files_test.cpp). A single submission
-- has no line; the function reads one only to stay alike. Safe beside a version-30
-- dispatcher, which names its columns and never batch_line: its uploads' tasks have no line,
-- and their results come after the numbered ones (line 0) in task-id order, as before.
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS batch_line integer;

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
                       max_tokens, max_cost, status, retry_of, batch_line)
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
           NULLIF(r.retry_of, '')::uuid, NULLIF(r.batch_line, 0)
    FROM jsonb_to_recordset(p_task) AS r(
      task_id uuid, user_id text, text text, model text, tools jsonb, timeout_s integer,
      schedule_timeout_s integer, max_steps integer, priority text, idempotency_key text,
      request_canonical text, batch_id text, metadata jsonb, traceparent text, strategy text,
      parent_task_id text, session_id text, max_tokens bigint, max_cost numeric, status text,
      retry_of text, batch_line integer)
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
