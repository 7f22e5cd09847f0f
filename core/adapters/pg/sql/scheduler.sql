-- The active scheduler's statements (dispatcher/scheduler): the upkeep of the workers'
-- liveness rows.

-- name: forget_workers
-- Rows of incarnations whose lease lapsed a minute ago and that own no running task any
-- more (recovery has taken their tasks over).
DELETE FROM workers w
WHERE w.lease_until < now() - interval '1 minute'
  AND NOT EXISTS (SELECT 1 FROM tasks t
                  WHERE t.status = 'running' AND t.worker_incarnation = w.incarnation)
