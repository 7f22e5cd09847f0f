-- agentfleet: no-transaction
-- agentfleet schema, version 28: a sealed batch moves into the queue in the order of its
-- lines. Its staged tasks are moved (or deleted) by seq, the number each task takes from
-- one sequence as its row is inserted (migration 0026: an upload's lines in line order),
-- from where the last slice stopped, through this index, which holds only the tasks of
-- uploads under way; before, they went in task-id order, which is random.
--
-- batches.settled_through_seq: the seq of the last task a slice moved or deleted (NULL: from
-- the first). A version-27 dispatcher goes on keeping its own cursor, settled_through (task
-- ids); each starts from the first when the other's slice moved the batch last: both are
-- correct (0019).
--
-- Staged tasks inserted before version 26 have no number: they are given one, in task-id
-- order (since version 26 every insert takes one, a version-25 dispatcher's by the
-- column's default). A build of the index cut short leaves it invalid and this version
-- unrecorded: the next run drops it and builds it again; the statements before are safe to
-- run again.
ALTER TABLE batches ADD COLUMN IF NOT EXISTS settled_through_seq bigint;
UPDATE tasks t SET seq = n.seq
FROM (SELECT o.task_id, nextval('tasks_seq') AS seq
      FROM (SELECT task_id FROM tasks WHERE status = 'staged' AND seq IS NULL
            ORDER BY task_id) o) n
WHERE t.task_id = n.task_id AND t.seq IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS tasks_staged_batch_seq;
CREATE INDEX CONCURRENTLY tasks_staged_batch_seq ON tasks (batch_id, seq) WHERE status = 'staged';
