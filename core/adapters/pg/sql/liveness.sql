-- A worker's liveness (adapters/pg/liveness_store): its row in `workers`, renewed on a
-- connection of its own; the cancellations of its running tasks on the same round trip.

-- name: worker_register
-- A new incarnation of worker $1; its lease runs $2 seconds from now.
INSERT INTO workers (worker_id, lease_until, capacity, running, dispatch_lag, draining)
VALUES ($1, now() + make_interval(secs => $2::integer), $3::integer, $4::integer, $5::bigint,
        $6::boolean)
RETURNING incarnation

-- name: worker_report
-- Renews the lease of incarnation $1 (only while it still holds: a lapsed incarnation owns
-- nothing any more) and writes what it can take; whether it held, and its running tasks whose
-- cancellation was asked for.
WITH renewed AS (
  UPDATE workers SET lease_until = now() + make_interval(secs => $2::integer),
         heartbeat_at = now(), capacity = $3::integer, running = $4::integer,
         dispatch_lag = $5::bigint, draining = $6::boolean
  WHERE incarnation = $1::bigint AND lease_until > now()
  RETURNING incarnation
)
SELECT EXISTS (SELECT 1 FROM renewed),
       ARRAY(SELECT task_id::text FROM tasks
             WHERE worker_incarnation = $1::bigint AND status = 'running' AND cancel_requested)

-- name: worker_poll
-- Between reports: whether incarnation $1 still holds, and its cancellations.
SELECT coalesce((SELECT lease_until > now() FROM workers WHERE incarnation = $1::bigint), false),
       ARRAY(SELECT task_id::text FROM tasks
             WHERE worker_incarnation = $1::bigint AND status = 'running' AND cancel_requested)

-- name: worker_hand_back
-- Tasks incarnation $1 held at the attempts in $2 (JSON [{task_id, attempt}]; attempt -1:
-- a claim whose outcome was in doubt, any attempt) and no longer runs. One still its own goes
-- back to the queue; one taken over meanwhile (its lease had lapsed: dispatched again, or
-- claimed by a later attempt) keeps its new owner. Either way releases + 1: the worker did
-- not crash, so the attempt is not counted against max_attempts (also when the later attempt
-- has ended since: its count of attempts stays true). A task another incarnation runs at the
-- same attempt, or one that ended at this attempt, is left alone. The scheduler is woken when
-- any went back to the queue.
WITH held AS (
  SELECT * FROM jsonb_to_recordset($2::jsonb) AS h(task_id uuid, attempt integer)
), judged AS (
  SELECT t.task_id,
         (t.status = 'running' AND t.worker_incarnation = $1::bigint
          AND (h.attempt < 0 OR t.attempt = h.attempt)) AS mine,
         (h.attempt >= 0 AND (t.attempt > h.attempt
                              OR (t.attempt = h.attempt
                                  AND t.status IN ('queued', 'dispatched')))) AS taken
  FROM tasks t JOIN held h ON h.task_id = t.task_id
  ORDER BY t.task_id
  FOR UPDATE OF t
), changed AS (
  UPDATE tasks t SET
    status = CASE WHEN j.mine THEN 'queued' ELSE t.status END,
    worker_id = CASE WHEN j.mine THEN NULL ELSE t.worker_id END,
    worker_incarnation = CASE WHEN j.mine THEN NULL ELSE t.worker_incarnation END,
    releases = t.releases + 1
  FROM judged j
  WHERE t.task_id = j.task_id AND (j.mine OR j.taken)
  RETURNING j.mine
), woken AS (
  SELECT pg_notify('agentfleet_work', '') FROM (SELECT 1 FROM changed WHERE mine LIMIT 1) q
)
SELECT (SELECT count(*) FROM changed WHERE mine)::integer, (SELECT count(*) FROM woken)

-- name: worker_retire
-- A worker that stops: its lease ends now, it can take nothing more. What it still holds is
-- recovered at once; the scheduler removes the row once it holds nothing.
UPDATE workers SET lease_until = now(), capacity = 0, draining = true, heartbeat_at = now()
WHERE incarnation = $1::bigint

-- name: fleet_view
-- GET /v1/fleet: the live workers (lease held), each with up to 10 of the tasks it runs (the
-- longest running first; tasks_running_incarnation), the queued tasks by priority, the users
-- with the most queued tasks (20) with the reason their tasks wait (the scheduler's, per user
-- and priority; tasks_queued_user), and the tasks in flight (dispatched or running), as JSON
-- text. Each count reads a partial index.
SELECT jsonb_build_object(
  'workers', (SELECT coalesce(jsonb_agg(jsonb_build_object(
      'worker_id', w.worker_id, 'incarnation', w.incarnation, 'last_seen', w.heartbeat_at,
      'started_at', w.started_at, 'in_flight', w.running, 'capacity', w.capacity,
      'dispatch_lag', w.dispatch_lag, 'draining', w.draining,
      'tasks', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'task_id', r.task_id, 'user_id', r.user_id, 'started_at', r.started_at)
                   ORDER BY r.started_at), '[]'::jsonb)
                FROM (SELECT t.task_id, t.user_id, t.started_at FROM tasks t
                      WHERE t.status = 'running' AND t.worker_incarnation = w.incarnation
                      ORDER BY t.started_at LIMIT 10) r))
      ORDER BY w.worker_id, w.incarnation), '[]'::jsonb)
    FROM workers w WHERE w.lease_until > now()),
  'queue_by_user', (SELECT coalesce(jsonb_agg(jsonb_build_object(
      'user_id', q.user_id, 'priority', q.priority, 'queued', q.n,
      'waiting_reason', coalesce(wr.reason, 'scheduling'))
      ORDER BY q.n DESC, q.user_id, q.priority), '[]'::jsonb)
    FROM (SELECT user_id, priority, count(*) AS n FROM tasks WHERE status = 'queued'
          GROUP BY user_id, priority ORDER BY count(*) DESC, user_id, priority LIMIT 20) q
    LEFT JOIN waiting_reasons wr ON wr.user_id = q.user_id AND wr.priority = q.priority),
  'queued', jsonb_build_object(
      'interactive', (SELECT count(*) FROM tasks
                      WHERE status = 'queued' AND priority = 'interactive'),
      'batch', (SELECT count(*) FROM tasks WHERE status = 'queued' AND priority = 'batch')),
  'in_flight', (SELECT count(*) FROM tasks WHERE status = 'dispatched')
               + (SELECT count(*) FROM tasks WHERE status = 'running'))::text
