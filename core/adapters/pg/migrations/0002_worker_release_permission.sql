-- agentfleet schema, version 2.
-- A worker that drains (SIGTERM) hands its running tasks back instead of letting their
-- leases expire: `releases` counts those hand-backs, so they do not count as attempts
-- recovery gives up after (attempt - releases is the number of lost runs).
ALTER TABLE tasks ADD COLUMN releases integer NOT NULL DEFAULT 0;

-- Per-user override of the tier's tool permission level: the highest level of tool the
-- user's tasks may call (read < write < execute < admin).
ALTER TABLE user_limits ADD COLUMN tool_permission text
  CHECK (tool_permission IN ('read', 'write', 'execute', 'admin'));
