-- agentfleet schema, version 3: the fair scheduler, budgets, batches.

-- When a queued task stops waiting: created_at + schedule_timeout_s, fixed at submission
-- (by a trigger, whoever inserts) so the scheduler finds the expired ones by index.
ALTER TABLE tasks ADD COLUMN queue_deadline_at timestamptz;
UPDATE tasks SET queue_deadline_at = created_at + make_interval(secs => schedule_timeout_s);
ALTER TABLE tasks ALTER COLUMN queue_deadline_at SET NOT NULL;
CREATE FUNCTION tasks_set_queue_deadline() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.queue_deadline_at := NEW.created_at + make_interval(secs => NEW.schedule_timeout_s);
  RETURN NEW;
END $$;
CREATE TRIGGER tasks_queue_deadline BEFORE INSERT ON tasks
  FOR EACH ROW EXECUTE FUNCTION tasks_set_queue_deadline();

-- A machine-readable reason next to `error`: quota_exceeded, schedule_timeout, ...
ALTER TABLE tasks ADD COLUMN error_code text;

-- The scheduler walks the users with queued work (a skip scan of this index), takes each
-- user's oldest tasks of a priority, and counts each user's dispatched + running tasks.
DROP INDEX tasks_queued;
CREATE INDEX tasks_queued_user ON tasks (user_id, priority, created_at) WHERE status = 'queued';
CREATE INDEX tasks_queue_deadline ON tasks (queue_deadline_at)
  WHERE status = 'queued' AND started_at IS NULL;
CREATE INDEX tasks_active_user ON tasks (user_id) WHERE status IN ('dispatched', 'running');
-- A batch's tasks in id order (its results, page by page) with their status and result
-- type (its counts, from the index alone).
DROP INDEX tasks_batch;
CREATE INDEX tasks_batch ON tasks (batch_id, task_id) INCLUDE (user_id, status, result_type)
  WHERE batch_id IS NOT NULL;

-- A batch belongs to one user; its tasks carry its id.
ALTER TABLE batches ADD COLUMN priority text NOT NULL DEFAULT 'batch'
  CHECK (priority IN ('interactive', 'batch'));
ALTER TABLE batches ADD COLUMN cancelled_at timestamptz;
CREATE INDEX batches_user ON batches (user_id, created_at DESC);
-- The scheduler admits no task of a cancelled batch and ends its queued ones.
CREATE INDEX batches_cancelled ON batches (batch_id) WHERE cancelled;
