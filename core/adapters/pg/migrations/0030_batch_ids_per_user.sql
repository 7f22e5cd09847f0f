-- agentfleet: no-transaction
-- agentfleet schema, version 30: a batch's id is its user's. Two users may each have a batch
-- named "nightly"; one user has at most one batch of a name.
--
-- batches.batch_id stays the row's primary key, unique across users, because a version-29
-- dispatcher creates batches with ON CONFLICT (batch_id), which needs that key. A
-- version-30 dispatcher stores a batch under its name when no batch has that key yet (every
-- batch stored so far), else under the name, the unit separator (0x1f, which no batch id may
-- contain) and the user id; its tasks, ledger rows and calls carry that key, and every
-- answer shows the name (the key up to the separator). This index keeps a name to one batch
-- per user and finds a name's batches for a caller acting for several users.
--
-- A build cut short leaves the index invalid and this version unrecorded: the next run drops
-- it and builds it again.
DROP INDEX CONCURRENTLY IF EXISTS batches_name_user;
CREATE UNIQUE INDEX CONCURRENTLY batches_name_user
  ON batches (split_part(batch_id, E'\x1f', 1), user_id);
