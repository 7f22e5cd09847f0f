-- The outbox (core/adapters/pg/outbox_relay): the relay's due rows (run by
-- dispatcher/dispatcher_service), locked while they are published, and the removal of
-- published rows (by the relay, and by the worker's run store for the result events it
-- published itself).

-- name: relay_next_due
-- In how many milliseconds the earliest outbox row falls due (0: one is due now; NULL: the
-- outbox is empty). Autocommitted, before relay_due's transaction: a look that finds nothing
-- due is one statement, and tells the relay when to look again.
SELECT CASE WHEN m.due IS NOT NULL
            THEN greatest(0, ceil(extract(epoch FROM m.due - now()) * 1000))::bigint END
FROM (SELECT min(publish_after) AS due FROM outbox) m

-- name: relay_due
-- Up to $1 due dispatch messages (topic $2) and up to $1 due other rows, each in id order:
-- dispatch messages never wait behind a flood of result events.
WITH dispatches AS (
  SELECT id, topic, message_key, payload, coalesce(traceparent, '') AS traceparent,
         coalesce(headers::text, '') AS headers FROM outbox
  WHERE topic = $2 AND publish_after <= now()
  ORDER BY topic, publish_after, id LIMIT $1
  FOR UPDATE SKIP LOCKED
), others AS (
  SELECT id, topic, message_key, payload, coalesce(traceparent, '') AS traceparent,
         coalesce(headers::text, '') AS headers FROM outbox
  WHERE topic <> $2 AND publish_after <= now()
  ORDER BY publish_after, id LIMIT $1
  FOR UPDATE SKIP LOCKED
)
SELECT * FROM dispatches UNION ALL SELECT * FROM others

-- name: outbox_delete
-- Removes the published rows whose ids are in the array $1 (bigint[] text). A row another
-- transaction holds is the relay's, publishing it: the relay deletes it, and waiting for it
-- here would hold every write batched with this one. The rows are locked once, by an
-- InitPlan, and deleted by their ids. Written as `id IN (SELECT ... FOR UPDATE SKIP LOCKED)`,
-- the deletes of a fleet started fresh made 640,000 index scans of the outbox in a flood's
-- first 8 s (until autovacuum first analyzed it) and ran for up to 0.8 s each; written so,
-- 44,000 in the whole run (docs/performance.md, 2026-12-05).
DELETE FROM outbox
WHERE id = ANY (ARRAY(SELECT id FROM outbox WHERE id = ANY ($1::bigint[]) FOR UPDATE SKIP LOCKED))
