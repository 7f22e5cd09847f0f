-- agentfleet schema, version 24: what became of a replayed dead letter. The dispatcher's
-- submit ingest writes a row when a replayed message (one with the dlq-replayed-from header)
-- reaches the store and makes its task or finds it made (a replay sent twice finds the task
-- the first made: a replay is keyed by where the message first came from). GET
-- /v1/dead-letters reads the rows of the letters it lists. One row per replayed message
-- (the replay's own topic, partition and offset), so a message read twice writes it once.
-- Replays are an operator's action (at most 1,000 a request): the table stays small and
-- has no other index. A version-23 dispatcher never reads or writes it.
CREATE TABLE IF NOT EXISTS dead_letter_replays (
  letter_topic text NOT NULL,
  letter_partition integer NOT NULL,
  letter_offset bigint NOT NULL,
  replay_topic text NOT NULL,
  replay_partition integer NOT NULL,
  replay_offset bigint NOT NULL,
  task_id uuid NOT NULL,
  created boolean NOT NULL,  -- false: the replay found the task an earlier one made
  replayed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (letter_topic, letter_partition, letter_offset, replay_topic, replay_partition,
               replay_offset)
);
