-- agentfleet schema, version 10: validates the strategy check 0009 may have added NOT VALID.
-- VALIDATE CONSTRAINT scans tasks under a SHARE UPDATE EXCLUSIVE lock, which lets reads and
-- writes go on; on a constraint already valid it does nothing.
ALTER TABLE tasks VALIDATE CONSTRAINT tasks_strategy_check;
