-- agentfleet schema, version 9: what three migrations gained after they were first applied.
--
-- 0001, 0003 and 0004 were edited after they had landed. A database that applied an earlier
-- text (schema_migrations keeps its checksum, which the migrator accepts for these three
-- only) lacks what the edit added; this gives it the same schema as a database that applied
-- the edited texts, where every statement below finds its object already in place.

-- 0001: recovery finds dispatched tasks by index.
CREATE INDEX IF NOT EXISTS tasks_dispatched ON tasks (dispatched_at) WHERE status = 'dispatched';

-- 0003: a batch cancel cut short is finished by the scheduler's sweep (drained_at), which
-- finds such batches by index. batches is small (one row per upload): rebuilt in place.
ALTER TABLE batches ADD COLUMN IF NOT EXISTS drained_at timestamptz;
DO $$
BEGIN
  IF pg_get_indexdef('batches_cancelled'::regclass) NOT LIKE '%drained_at IS NULL%' THEN
    DROP INDEX batches_cancelled;
    CREATE INDEX batches_cancelled ON batches (cancelled_at)
      WHERE cancelled AND drained_at IS NULL;
  END IF;
END $$;

-- 0004: plan_only, the strategy of a POST /v1/plan task. Added NOT VALID (no scan of tasks
-- while this transaction holds its lock: the rows there satisfy the narrower check it
-- replaces); 0010 validates it without blocking writes.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_constraint
                 WHERE conrelid = 'tasks'::regclass AND conname = 'tasks_strategy_check'
                   AND pg_get_constraintdef(oid) LIKE '%plan_only%') THEN
    ALTER TABLE tasks DROP CONSTRAINT IF EXISTS tasks_strategy_check;
    ALTER TABLE tasks ADD CONSTRAINT tasks_strategy_check
      CHECK (strategy IN ('react', 'plan_execute', 'plan_only')) NOT VALID;
  END IF;
END $$;
