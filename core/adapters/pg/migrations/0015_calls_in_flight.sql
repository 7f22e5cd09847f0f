-- agentfleet schema, version 15: a model call in flight when its worker dies is billed.
-- Before it sends a model call, a worker records it here with what the call is estimated to
-- cost as input (the estimate an answer lost on the way is billed at). The row goes when the
-- call's fate is written: with its step's checkpoint (the ledger bills the answer), or with
-- the charges of a call whose answer was lost to the task, or of one the provider refused
-- (nothing to bill). A row left behind by a worker that stopped (its incarnation no longer
-- holds its liveness, and the task is no longer its run) is billed by the scheduler as an
-- unreconciled charge, reason worker_lost. Whoever deletes the row bills the call: never
-- both. No foreign key: its check would lock the task's row against the checkpoints' FOR
-- UPDATE; rows of deleted tasks are dropped by the scheduler.
CREATE TABLE IF NOT EXISTS model_calls_in_flight (
  task_id      uuid        NOT NULL,
  attempt      integer     NOT NULL,
  step         integer     NOT NULL,
  incarnation  bigint      NOT NULL,
  user_id      text        NOT NULL,
  batch_id     text,
  model        text        NOT NULL,
  input_tokens bigint      NOT NULL CHECK (input_tokens >= 0),
  cost         numeric(20, 6) NOT NULL CHECK (cost >= 0),
  currency     text        NOT NULL,
  sent_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (task_id, attempt, step)
);

-- The reasons an unreconciled charge may give, with worker_lost. Added NOT VALID (no scan
-- under this transaction's lock; it allows every value the old check did), validated by 0016;
-- a version-14 worker writes only the old reasons.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_constraint
                 WHERE conrelid = 'usage_unreconciled'::regclass
                   AND conname = 'usage_unreconciled_reason_known') THEN
    ALTER TABLE usage_unreconciled ADD CONSTRAINT usage_unreconciled_reason_known
      CHECK (reason IN ('timeout', 'connection_lost', 'unreadable', 'abandoned', 'lease_lost',
                        'worker_lost')) NOT VALID;
  END IF;
END $$;
ALTER TABLE usage_unreconciled DROP CONSTRAINT IF EXISTS usage_unreconciled_reason_check;
