-- agentfleet schema, version 8: liveness per worker, admission by capacity, fewer checks.

-- One row per worker process (an incarnation: a restarted worker, even under the same id, is
-- a new one). Its lease keeper renews lease_until on a connection of its own; a running task
-- belongs to the incarnation that claimed it while that lease holds (and to its attempt), so
-- staying alive costs one small row whatever the number of tasks held. The same round trip
-- reports what the worker can take (capacity: its adaptive in-flight limit), what it runs,
-- and the dispatch messages waiting on its partitions; the scheduler admits into the
-- dispatch topic only what the live workers can start.
CREATE TABLE workers (
  incarnation   bigserial   PRIMARY KEY,
  worker_id     text        NOT NULL,
  lease_until   timestamptz NOT NULL,
  heartbeat_at  timestamptz NOT NULL DEFAULT now(),
  started_at    timestamptz NOT NULL DEFAULT now(),
  capacity      integer     NOT NULL DEFAULT 0 CHECK (capacity >= 0),
  running       integer     NOT NULL DEFAULT 0 CHECK (running >= 0),
  dispatch_lag  bigint      NOT NULL DEFAULT 0,
  draining      boolean     NOT NULL DEFAULT false
);
CREATE INDEX workers_lease ON workers (lease_until);

-- The incarnation that claimed a running task. Workers of version 7 leave it NULL and renew
-- tasks.lease_until instead; the scheduler recovers both kinds, so either version may run
-- beside the other while a deployment rolls. Workers of this version leave
-- tasks.lease_until NULL (a scheduler of version 7 then never takes their tasks over).
ALTER TABLE tasks ADD COLUMN worker_incarnation bigint;
-- A dead incarnation's tasks, found by index when recovery takes them over; and the few a
-- worker must stop because their cancellation was asked for.
CREATE INDEX tasks_running_incarnation ON tasks (worker_incarnation) WHERE status = 'running';
CREATE INDEX tasks_cancel_running ON tasks (worker_incarnation)
  WHERE status = 'running' AND cancel_requested;

-- A step row and a ledger row are written by the same statement that locks their task's row
-- (the fence); the foreign-key check each insert made on that row was a second look at it.
-- The cascade they gave is not used: tasks are never deleted row by row.
ALTER TABLE task_steps DROP CONSTRAINT IF EXISTS task_steps_task_id_fkey;
ALTER TABLE usage_ledger DROP CONSTRAINT IF EXISTS usage_ledger_task_id_fkey;

-- The relay publishes dispatch messages ahead of everything else: a mass ending (a batch
-- cancel writes thousands of result events at once) must not hold up the next task's start.
CREATE INDEX outbox_topic_due ON outbox (topic, publish_after, id);

-- The task a result event announces, so that a worker that ends many tasks in one statement
-- knows which outbox row is whose. NULL for the other rows (and for rows of version 7).
ALTER TABLE outbox ADD COLUMN task_id uuid;
