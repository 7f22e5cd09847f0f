-- agentfleet schema, version 13: a task's own spending limits, as submitted.
-- tasks.max_tokens: the most input and output tokens its model calls may use together;
-- tasks.max_cost: the most its model calls may cost, in the budget currency. NULL: no limit.
-- Nullable without a default, so adding them rewrites nothing; a version-12 dispatcher
-- inserts tasks without them. The checks are added NOT VALID (no scan of tasks under this
-- transaction's lock: every row there is NULL); new rows are checked.
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS max_tokens bigint;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS max_cost numeric(20, 6);
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_constraint
                 WHERE conrelid = 'tasks'::regclass AND conname = 'tasks_spend_limits_check') THEN
    ALTER TABLE tasks ADD CONSTRAINT tasks_spend_limits_check
      CHECK (max_tokens > 0 AND max_cost > 0) NOT VALID;
  END IF;
END $$;
