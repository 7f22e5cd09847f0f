-- The active scheduler's statements (dispatcher/scheduler): admission by capacity and the
-- upkeep of the workers' liveness rows.

-- name: fleet_capacity
-- The live workers that take work, and how many tasks they can run at once between them.
SELECT count(*), coalesce(sum(capacity), 0)::bigint FROM workers
WHERE lease_until > now() AND NOT draining

-- name: fleet_active
-- Every user's dispatched and running tasks (from the partial index alone).
SELECT count(*) FROM tasks WHERE status IN ('dispatched', 'running')

-- name: forget_workers
-- Rows of incarnations whose lease lapsed a minute ago and that own no running task any
-- more (recovery has taken their tasks over).
DELETE FROM workers w
WHERE w.lease_until < now() - interval '1 minute'
  AND NOT EXISTS (SELECT 1 FROM tasks t
                  WHERE t.status = 'running' AND t.worker_incarnation = w.incarnation)
