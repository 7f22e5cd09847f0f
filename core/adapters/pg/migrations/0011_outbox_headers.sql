-- agentfleet schema, version 11: headers of an outbox message beyond its traceparent, as a
-- JSON object of name to value (a dispatch message's `agentfleet-needs`: what its task
-- needs of the worker that runs it). Nullable without a default, so adding it rewrites
-- nothing; a version-10 dispatcher, which writes and relays no headers, runs beside it
-- unchanged.
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS headers jsonb;
