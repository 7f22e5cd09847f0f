-- agentfleet schema, version 20: why queued tasks wait. The active scheduler writes, per
-- user and priority with queued tasks it did not admit, the limit that held them (the API's
-- `waiting_reason`: concurrency, requests_per_minute, tokens_per_minute, budget,
-- fleet_capacity, batch_share, pass_limit), only when a pass finds it changed; a new term
-- starts the table over. The API joins it to a queued task by (user_id, priority).
--
-- A new table: a version-19 dispatcher neither reads nor writes it (its tasks show no
-- reason), and a version-20 one reading it while a version-19 scheduler leads finds no
-- rows, or stale ones, until a version-20 replica leads (a queued task without a row shows
-- `scheduling`).
CREATE TABLE IF NOT EXISTS waiting_reasons (
  user_id text NOT NULL,
  priority text NOT NULL CHECK (priority IN ('interactive', 'batch')),
  reason text NOT NULL,
  since timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (user_id, priority)
);
