-- agentfleet schema, version 19: a batch's staged tasks are moved into the queue (or
-- deleted) in task id order from where the last slice stopped, never re-reading the rows
-- moved before (by tasks_batch, on batch_id and task_id): a 1,000,000-task batch is a
-- thousand slices of the same cost, not a thousand slices each longer than the last.
--
-- batches.settled_through: the last task id a slice moved or deleted (NULL: from the
-- first). Kept in the batch row so that the scheduler, finishing a move its uploader did
-- not, goes on from the same place. A version-18 dispatcher ignores it and moves from the
-- first task each slice, as it did: both are correct.
ALTER TABLE batches ADD COLUMN IF NOT EXISTS settled_through uuid;
