-- agentfleet schema, version 12: every provider charge is billed.
-- usage_ledger.usage_estimated: the provider sent no usage with the answer; the row's tokens
-- are the worker's estimate. A constant default: adding it rewrites nothing, and a
-- version-11 worker's rows read as reported.
ALTER TABLE usage_ledger ADD COLUMN IF NOT EXISTS usage_estimated boolean NOT NULL DEFAULT false;

-- Model calls the provider may have charged for that no checkpoint bills, because their
-- answer was lost to the task: a timeout or a lost connection after the request was sent, a
-- 2xx that is not a chat completion, an answer that came after the run stopped waiting (a
-- cancel, a fence, the call's own deadline) or that the run could no longer checkpoint (its
-- lease was lost). Each with the provider's usage
-- when it came, else an estimate from the request. Part of the bill (GET /v1/usage) and of
-- the monthly spend a budget is held against; not of the task's own totals.
CREATE TABLE IF NOT EXISTS usage_unreconciled (
  id                  bigserial   PRIMARY KEY,
  task_id             uuid        NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
  attempt             integer     NOT NULL,
  step                integer     NOT NULL,
  user_id             text        NOT NULL,
  batch_id            text,
  model               text        NOT NULL,
  input_tokens        bigint      NOT NULL CHECK (input_tokens >= 0),
  cached_input_tokens bigint      NOT NULL CHECK (cached_input_tokens >= 0),
  output_tokens       bigint      NOT NULL CHECK (output_tokens >= 0),
  reasoning_tokens    bigint      NOT NULL DEFAULT 0,
  usage_estimated     boolean     NOT NULL,
  cost                numeric(20, 6) NOT NULL CHECK (cost >= 0),
  currency            text        NOT NULL,
  reason              text        NOT NULL
                      CHECK (reason IN ('timeout', 'connection_lost', 'unreadable', 'abandoned',
                                        'lease_lost')),
  called_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS usage_unreconciled_user_time ON usage_unreconciled (user_id, called_at);
CREATE INDEX IF NOT EXISTS usage_unreconciled_task ON usage_unreconciled (task_id);
