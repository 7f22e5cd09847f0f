-- agentfleet: no-transaction
-- agentfleet schema, version 14: the scheduler ends a task handed back to the queue (it had
-- started: started_at is set) once its deadline passed, instead of leaving it to wait behind
-- the backlog until a worker claims it. It finds such tasks by this index, which holds the
-- few queued tasks that started. Built without blocking writes; a build that failed
-- part-way left an invalid index, which the first statement drops.
DROP INDEX CONCURRENTLY IF EXISTS tasks_handed_back_deadline;
CREATE INDEX CONCURRENTLY tasks_handed_back_deadline ON tasks (deadline_at)
  WHERE status = 'queued' AND started_at IS NOT NULL;
