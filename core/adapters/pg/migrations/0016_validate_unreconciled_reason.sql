-- agentfleet schema, version 16: validates the reason check 0015 added NOT VALID.
-- VALIDATE CONSTRAINT scans usage_unreconciled under a SHARE UPDATE EXCLUSIVE lock, which
-- lets reads and writes go on; on a constraint already valid it does nothing.
ALTER TABLE usage_unreconciled VALIDATE CONSTRAINT usage_unreconciled_reason_known;
