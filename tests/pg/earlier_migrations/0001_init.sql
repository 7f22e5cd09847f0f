-- agentfleet schema, version 1: tasks, their steps (trace and checkpoints), the usage
-- ledger, per-user limits, batches, and the outbox the relays publish to Kafka.

CREATE TABLE tasks (
  task_id            uuid PRIMARY KEY,
  user_id            text        NOT NULL,
  text               text        NOT NULL,
  model              text        NOT NULL,
  tools              text[],                          -- allow-list; NULL = every tool
  timeout_s          integer     NOT NULL CHECK (timeout_s > 0),
  schedule_timeout_s integer     NOT NULL CHECK (schedule_timeout_s > 0),
  max_steps          integer     NOT NULL CHECK (max_steps > 0),
  priority           text        NOT NULL CHECK (priority IN ('interactive', 'batch')),
  idempotency_key    text,
  request_canonical  text        NOT NULL,            -- the effective request, for 409 checks
  batch_id           text,
  metadata           jsonb       NOT NULL DEFAULT '{}'::jsonb,
  traceparent        text,

  status             text        NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'dispatched', 'running', 'succeeded',
                                       'failed', 'timed_out', 'cancelled')),
  result_type        text        CHECK (result_type IN ('action_completed',
                                                        'need_clarification', 'error')),
  result_message     text,
  result_options     jsonb,
  error              text,

  attempt            integer     NOT NULL DEFAULT 0,  -- +1 on every claim: the lease fence
  worker_id          text,
  lease_until        timestamptz,
  cancel_requested   boolean     NOT NULL DEFAULT false,

  steps              integer     NOT NULL DEFAULT 0,
  tool_calls         integer     NOT NULL DEFAULT 0,
  input_tokens       bigint      NOT NULL DEFAULT 0,
  cached_input_tokens bigint     NOT NULL DEFAULT 0,
  output_tokens      bigint      NOT NULL DEFAULT 0,
  cost               numeric(20, 6) NOT NULL DEFAULT 0,
  currency           text,

  created_at         timestamptz NOT NULL DEFAULT now(),
  dispatched_at      timestamptz,
  started_at         timestamptz,
  deadline_at        timestamptz,                     -- set by the first claim
  finished_at        timestamptz
);

CREATE UNIQUE INDEX tasks_idempotency ON tasks (user_id, idempotency_key)
  WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_queued ON tasks (priority, created_at) WHERE status = 'queued';
CREATE INDEX tasks_running_lease ON tasks (lease_until) WHERE status = 'running';
CREATE INDEX tasks_user_created ON tasks (user_id, created_at DESC);
CREATE INDEX tasks_batch ON tasks (batch_id) WHERE batch_id IS NOT NULL;

-- One row per model call of a task: the model's reply (the checkpoint a resumed task
-- replays) and, once they ran, the tool calls with their results.
CREATE TABLE task_steps (
  task_id        uuid        NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
  step           integer     NOT NULL CHECK (step >= 0),
  attempt        integer     NOT NULL,
  model_reply    jsonb       NOT NULL,  -- content, reasoning, tool calls, finish reason, usage
  observations   jsonb,                 -- what the model was shown for each call
  trace          jsonb,                 -- per call: tool, arguments, truncated result, status, latency, time
  model_latency_ms integer   NOT NULL DEFAULT 0,
  created_at     timestamptz NOT NULL DEFAULT now(),
  tools_done_at  timestamptz,
  PRIMARY KEY (task_id, step)
);

-- The bill: one row per model call, never two (primary key).
CREATE TABLE usage_ledger (
  task_id             uuid        NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
  step                integer     NOT NULL,
  user_id             text        NOT NULL,
  batch_id            text,
  model               text        NOT NULL,
  input_tokens        bigint      NOT NULL CHECK (input_tokens >= 0),
  cached_input_tokens bigint      NOT NULL CHECK (cached_input_tokens >= 0),
  output_tokens       bigint      NOT NULL CHECK (output_tokens >= 0),
  reasoning_tokens    bigint      NOT NULL DEFAULT 0,
  cost                numeric(20, 6) NOT NULL CHECK (cost >= 0),
  currency            text        NOT NULL,
  called_at           timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (task_id, step)
);
CREATE INDEX usage_ledger_user_time ON usage_ledger (user_id, called_at);
CREATE INDEX usage_ledger_batch ON usage_ledger (batch_id) WHERE batch_id IS NOT NULL;

-- Per-user overrides of the tier defaults in configuration.
CREATE TABLE user_limits (
  user_id             text PRIMARY KEY,
  tier                text,
  max_concurrency     integer CHECK (max_concurrency > 0),
  requests_per_minute integer CHECK (requests_per_minute > 0),
  tokens_per_minute   bigint  CHECK (tokens_per_minute > 0),
  max_queued          integer CHECK (max_queued > 0),
  monthly_budget      numeric(20, 6) CHECK (monthly_budget >= 0),
  updated_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE batches (
  batch_id    text PRIMARY KEY,
  user_id     text        NOT NULL,
  total       integer     NOT NULL DEFAULT 0,
  cancelled   boolean     NOT NULL DEFAULT false,
  metadata    jsonb       NOT NULL DEFAULT '{}'::jsonb,
  created_at  timestamptz NOT NULL DEFAULT now()
);

-- Messages written in the same transaction as the state they announce; a relay publishes
-- rows whose publish_after has passed and deletes them once the broker has them.
CREATE TABLE outbox (
  id            bigserial PRIMARY KEY,
  topic         text        NOT NULL,
  message_key   text        NOT NULL,
  payload       text        NOT NULL,
  traceparent   text,
  publish_after timestamptz NOT NULL DEFAULT now(),
  created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_due ON outbox (publish_after, id);
