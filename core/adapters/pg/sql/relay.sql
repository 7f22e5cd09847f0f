-- The outbox relay (core/adapters/pg/outbox_relay, run by dispatcher/dispatcher_service): due
-- rows, locked while they are published.

-- name: relay_due
-- Up to $1 due dispatch messages (topic $2) and up to $1 due other rows, each in id order:
-- dispatch messages never wait behind a flood of result events.
WITH dispatches AS (
  SELECT id, topic, message_key, payload, coalesce(traceparent, '') AS traceparent FROM outbox
  WHERE topic = $2 AND publish_after <= now()
  ORDER BY topic, publish_after, id LIMIT $1
  FOR UPDATE SKIP LOCKED
), others AS (
  SELECT id, topic, message_key, payload, coalesce(traceparent, '') AS traceparent FROM outbox
  WHERE topic <> $2 AND publish_after <= now()
  ORDER BY publish_after, id LIMIT $1
  FOR UPDATE SKIP LOCKED
)
SELECT * FROM dispatches UNION ALL SELECT * FROM others
