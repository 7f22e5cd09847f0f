-- agentfleet: no-transaction
-- agentfleet schema, version 27: the index a session's latest task is found by (migration
-- 0026: by seq, then created_at, NULLs last), built without blocking reads or writes. The
-- index of version 6 (by created_at) stays while a version-25 dispatcher may still read by
-- it; a later version drops it. A build cut short leaves an invalid index and this version
-- unrecorded: the next run drops it and builds it again.
DROP INDEX CONCURRENTLY IF EXISTS tasks_session_seq;
CREATE INDEX CONCURRENTLY tasks_session_seq
  ON tasks (user_id, session_id, seq DESC NULLS LAST, created_at DESC)
  WHERE session_id IS NOT NULL;
