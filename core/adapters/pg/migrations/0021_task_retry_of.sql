-- agentfleet schema, version 21: a task made by POST /v1/tasks/{id}/retry (`agentctl
-- retry`) names the task it retries, so that a user, the console and the bill can follow a
-- retried task to its retries and back.
--
-- tasks.retry_of: the task this one retries (NULL: not a retry). A nullable column without
-- a default: no table rewrite. A version-20 dispatcher names its insert's columns and never
-- this one, so both may run side by side (its tasks are not retries).
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS retry_of uuid;
