-- agentfleet schema, version 5: the audit of direct tool calls (POST /v1/tools/{name}:call).

-- One row per call, written before the tool is called ('pending') and completed with its
-- outcome; refusals (permission, arguments) are rows too.
CREATE TABLE tool_call_audit (
  id              bigserial   PRIMARY KEY,
  at              timestamptz NOT NULL DEFAULT now(),
  caller          text        NOT NULL,  -- the API key's name, or gateway:<user>
  user_id         text        NOT NULL,
  tool            text        NOT NULL,
  arguments       jsonb       NOT NULL,
  idempotency_key text        NOT NULL,
  outcome         text        NOT NULL
                  CHECK (outcome IN ('pending', 'ok', 'error', 'refused', 'invalid_arguments')),
  http_status     integer,
  latency_ms      integer,
  error           text,
  finished_at     timestamptz
);
CREATE INDEX tool_call_audit_user_time ON tool_call_audit (user_id, at);
