-- agentfleet: no-transaction
-- agentfleet schema, version 18: a user's staged tasks count against their max_queued (an
-- upload's tasks hold their room from the slice that stores them), found by this index,
-- which holds only the tasks of uploads under way. Built without blocking writes; a build
-- that failed part-way left an invalid index, which the first statement drops. Then the
-- status check 0017 added NOT VALID is validated: VALIDATE CONSTRAINT scans tasks under a
-- SHARE UPDATE EXCLUSIVE lock, which lets reads and writes go on.
DROP INDEX CONCURRENTLY IF EXISTS tasks_staged_user;
CREATE INDEX CONCURRENTLY tasks_staged_user ON tasks (user_id) WHERE status = 'staged';
ALTER TABLE tasks VALIDATE CONSTRAINT tasks_status_known;
