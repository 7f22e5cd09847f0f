-- agentfleet: no-transaction
-- agentfleet schema, version 32: the two orders the API lists tasks in, each read from an
-- index instead of sorting every row it might show.
--
-- tasks_batch_line: a batch's tasks in the order of its upload's lines (migration 0031), for
-- GET /v1/batches/{id}/results; a task of an upload stored before version 31 has no line and
-- comes first, as line 0, in task-id order. Only an upload's tasks are in it.
-- tasks_created: all tasks, newest first, for the search of GET /v1/tasks across users (an
-- operator's); one user's are read from tasks_user_created, as before.
--
-- Each costs one index entry per task inserted (the first only for an upload's), written in
-- the insert's own commit; docs/performance.md has the measurement. A build cut short leaves
-- an index invalid and this version unrecorded: the next run drops it and builds it again.
DROP INDEX CONCURRENTLY IF EXISTS tasks_batch_line;
CREATE INDEX CONCURRENTLY tasks_batch_line
  ON tasks (batch_id, (coalesce(batch_line, 0)), task_id) WHERE batch_id IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS tasks_created;
CREATE INDEX CONCURRENTLY tasks_created ON tasks (created_at DESC, task_id DESC);
