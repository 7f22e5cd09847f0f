-- agentfleet schema, version 17: a batch upload is committed slice by slice as it arrives,
-- its tasks `staged` (the scheduler looks only at queued, dispatched and running tasks)
-- until the upload is sealed; no transaction stays open while a client sends.
--
-- batches.upload_deadline: NULL once every task of the batch is in the queue (and for every
-- batch a version-16 dispatcher writes, whose tasks are queued by the upload's one
-- transaction). While the upload runs it is renewed by each slice; a batch not sealed by
-- then was abandoned (its replica died), and the scheduler deletes its staged tasks and the
-- batch. Once sealed, it is how long the uploader has to move the staged tasks into the
-- queue before the scheduler finishes the move for it.
ALTER TABLE batches ADD COLUMN IF NOT EXISTS upload_deadline timestamptz;
ALTER TABLE batches ADD COLUMN IF NOT EXISTS sealed boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS batches_uploading ON batches (upload_deadline)
  WHERE upload_deadline IS NOT NULL;

-- The statuses a task may have, with staged. Added NOT VALID (no scan under this
-- transaction's lock; it allows every value the old check did), validated by 0018; a
-- version-16 dispatcher writes only the old statuses.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_constraint
                 WHERE conrelid = 'tasks'::regclass AND conname = 'tasks_status_known') THEN
    ALTER TABLE tasks ADD CONSTRAINT tasks_status_known
      CHECK (status IN ('staged', 'queued', 'dispatched', 'running', 'succeeded', 'failed',
                        'timed_out', 'cancelled')) NOT VALID;
  END IF;
END $$;
ALTER TABLE tasks DROP CONSTRAINT IF EXISTS tasks_status_check;
