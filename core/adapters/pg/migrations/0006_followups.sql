-- agentfleet schema, version 6: follow-up tasks.

-- The task whose conversation a task continues (NULL: none), and the session it belongs
-- to. No foreign key: a parent is read only when it is the same user's (the worker checks),
-- and a parent deleted later leaves its follow-ups as they are.
ALTER TABLE tasks ADD COLUMN parent_task_id uuid;
ALTER TABLE tasks ADD COLUMN session_id text;
-- A session's latest task, for a submission that names the session only.
CREATE INDEX tasks_session ON tasks (user_id, session_id, created_at DESC)
  WHERE session_id IS NOT NULL;
