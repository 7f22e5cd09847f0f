-- A task's submission and the API's reads and writes of it (adapters/pg/submission_store,
-- run by the dispatcher's API and submit ingest through pg::ApiStore): the submission in one
-- statement, a batch upload's inserts and queue check, GET /v1/tasks[/{id}], the event
-- stream's replay of a task under way, POST /v1/tasks/{id}/cancel, a follow-up's parent.
-- A submission (one statement) and task_json are prepared; the other reads, the cancel and
-- the parent lookup go as text (exec_text): list_tasks and find_parent have filters that
-- are empty or not, whose plan should follow the arguments.
-- A task the API shows is read as the columns of the fragment task_row, which
-- codec::TaskRow holds (pg::read_task_row); the codec writes its JSON (codec/task_json).
-- The insert of tasks from JSON is written out twice (insert_tasks here, and the function
-- agentfleet_submit of migration 0022 that submit calls): keep the pair alike
-- (tests/unit/sql_files_test.cpp checks that they are); a change to the insert is a new
-- migration that replaces the function.

-- fragment: task_totals
-- Of the task row `t`: its steps, the tool calls that ran, its input, cached input and output
-- tokens, its cost (numeric(20, 6)) and currency. A task that has ended keeps them on its row
-- (each statement that ends a task folds them in: the fragment fold_totals); one under way
-- (claimed at least once and not ended) has them from its step rows and its ledger, which
-- its model steps and tool rounds write instead of rewriting the task's row. The greater of
-- the row's counts and the steps' holds for a task a version-22 worker runs, which still
-- counts on the row (migration 0023); its ledger is the same either way.
CASE WHEN t.finished_at IS NULL AND t.attempt > 0
     THEN greatest(t.steps, (SELECT coalesce(max(s.step) + 1, 0) FROM task_steps s
                             WHERE s.task_id = t.task_id))
     ELSE t.steps END,
CASE WHEN t.finished_at IS NULL AND t.attempt > 0
     THEN greatest(t.tool_calls, (SELECT coalesce(sum(s.tool_calls), 0)::integer
                                  FROM task_steps s WHERE s.task_id = t.task_id))
     ELSE t.tool_calls END,
CASE WHEN t.finished_at IS NULL AND t.attempt > 0
     THEN (SELECT coalesce(sum(l.input_tokens), 0)::bigint FROM usage_ledger l
           WHERE l.task_id = t.task_id)
     ELSE t.input_tokens END,
CASE WHEN t.finished_at IS NULL AND t.attempt > 0
     THEN (SELECT coalesce(sum(l.cached_input_tokens), 0)::bigint FROM usage_ledger l
           WHERE l.task_id = t.task_id)
     ELSE t.cached_input_tokens END,
CASE WHEN t.finished_at IS NULL AND t.attempt > 0
     THEN (SELECT coalesce(sum(l.output_tokens), 0)::bigint FROM usage_ledger l
           WHERE l.task_id = t.task_id)
     ELSE t.output_tokens END,
CASE WHEN t.finished_at IS NULL AND t.attempt > 0
     THEN (SELECT coalesce(sum(l.cost), 0)::numeric(20, 6) FROM usage_ledger l
           WHERE l.task_id = t.task_id)
     ELSE t.cost END,
CASE WHEN t.finished_at IS NULL AND t.attempt > 0
     THEN coalesce((SELECT l.currency FROM usage_ledger l WHERE l.task_id = t.task_id
                    ORDER BY l.step DESC LIMIT 1), t.currency)
     ELSE t.currency END

-- fragment: fold_totals
-- The SET list of an UPDATE of tasks `t` that ends it (every statement that ends a task but
-- the worker's own end, finish_tasks, which adds the step it writes): its running totals,
-- as task_totals derives them, written into its row. A task never claimed has none: the
-- reads are skipped (attempt 0).
steps = greatest(t.steps, (SELECT coalesce(max(s.step) + 1, 0) FROM task_steps s
                           WHERE s.task_id = t.task_id AND t.attempt > 0)),
tool_calls = greatest(t.tool_calls, (SELECT coalesce(sum(s.tool_calls), 0)::integer
                                     FROM task_steps s
                                     WHERE s.task_id = t.task_id AND t.attempt > 0)),
(input_tokens, cached_input_tokens, output_tokens, cost, currency) = (
  SELECT coalesce(sum(l.input_tokens), t.input_tokens),
         coalesce(sum(l.cached_input_tokens), t.cached_input_tokens),
         coalesce(sum(l.output_tokens), t.output_tokens), coalesce(sum(l.cost), t.cost),
         coalesce((array_agg(l.currency ORDER BY l.step DESC))[1], t.currency)
  FROM usage_ledger l WHERE l.task_id = t.task_id AND t.attempt > 0)

-- fragment: task_row
-- Of the task row `t`, in the order pg::read_task_row reads them (core/adapters/pg/task_row.cpp):
-- what it is, how it ended, why it waits (whether it is queued behind a parent that has not
-- ended, and the reason the scheduler stored for its user and priority; codec::waiting_reason
-- picks), its attempt and running totals (task_totals), and its times as JSON literals. No
-- comment at its end: the statements go on after it on the same line ({{task_row}},), and a
-- comment there would hide the rest of that line.
{{task_row_head}}, {{task_totals}}, {{task_row_times}}

-- fragment: task_row_inserted
-- task_row of a task the statement itself inserted (submit): it has run no step, so its
-- totals are its row's. Reading them as task_totals does would make the submission's plan
-- depend on the sizes of task_steps and usage_ledger, and Postgres then plans it at every
-- call (measured: 2,288 plans for 2,400 submissions).
{{task_row_head}},
t.steps, t.tool_calls, t.input_tokens, t.cached_input_tokens, t.output_tokens, t.cost, t.currency,
{{task_row_times}}

-- fragment: task_row_head
-- task_row up to its attempt. Its trace id is the traceparent's (stored as version 00, whose
-- trace id is its characters 4 to 35: SubmissionRules builds every one it stores).
t.task_id::text, t.user_id, t.text, t.model, to_jsonb(t.tools)::text, t.priority, t.status,
t.timeout_s, t.schedule_timeout_s, t.max_steps, t.strategy, t.idempotency_key, t.batch_id,
t.parent_task_id::text, t.session_id, t.retry_of::text, t.batch_line,
NULLIF(substr(t.traceparent, 4, 32), ''), t.max_tokens,
to_char(t.max_cost, 'FM999999999999990.000000'), t.metadata::text,
t.result_type, t.result_message, coalesce(t.result_options, '[]'::jsonb)::text,
t.error, t.error_code, t.cancel_requested,
t.status = 'queued' AND t.parent_task_id IS NOT NULL AND EXISTS (
  SELECT 1 FROM tasks p WHERE p.task_id = t.parent_task_id
    AND p.status IN ('staged', 'queued', 'dispatched', 'running')),
CASE WHEN t.status = 'queued' THEN (SELECT w.reason FROM waiting_reasons w
                                    WHERE w.user_id = t.user_id AND w.priority = t.priority) END,
t.attempt

-- fragment: task_row_times
-- task_row's times.
to_json(t.created_at)::text, to_json(t.dispatched_at)::text, to_json(t.started_at)::text,
to_json(t.finished_at)::text

-- name: submit
-- One submission of user $2 (the task as the one-element JSON array $1 that insert_tasks
-- takes), in one autocommitted statement: agentfleet_submit() (migration 0022, which says
-- what it does) takes the user's submission lock, reads their overrides, and, when they are
-- what the caller believed ($3: tier, '' for none; $4: max_queued as text, '' for none), counts
-- their queue up to the limit $5 (-1: none), inserts the task when there is room and its key
-- is not taken, and wakes the scheduler. The answer: the overrides found, the count, the new
-- task's id (NULL: nothing stored), the task its key names when nothing was stored (id,
-- canonical request, status, batch; NULL: none), and the new task's task_row_inserted (read
-- from the row the function inserted: this statement's own snapshot predates it).
SELECT s.o_tier, s.o_max_queued, s.o_queued, (s.o_task).task_id::text, s.o_existing_id,
       s.o_existing_canonical, s.o_existing_status, s.o_existing_batch,
       {{task_row_inserted}}
FROM agentfleet_submit($1::jsonb, $2, $3, NULLIF($4, '')::integer, $5::bigint) s
LEFT JOIN LATERAL (SELECT (s.o_task).*) t ON true

-- name: insert_tasks
-- Tasks from the JSON array $1 (one object per task, ids set; see tasks_json() in
-- submission_store.cpp), any number in one statement; the queue deadline is set by a
-- trigger, and a task whose (user, idempotency key) is taken is skipped. The ids inserted.
-- A session's latest task is the one inserted last (migration 0026: by seq, which the rows
-- of one insert take in their order), never one staged by another upload (it may yet be
-- deleted). It cannot be a row of the same statement: a caller chains those itself.
INSERT INTO tasks (task_id, user_id, text, model, tools, timeout_s, schedule_timeout_s,
                   max_steps, priority, idempotency_key, request_canonical, batch_id,
                   metadata, traceparent, strategy, parent_task_id, session_id,
                   max_tokens, max_cost, status, retry_of, batch_line)
SELECT r.task_id, r.user_id, r.text, r.model,
       CASE WHEN r.tools IS NULL OR jsonb_typeof(r.tools) = 'null' THEN NULL
            ELSE ARRAY(SELECT jsonb_array_elements_text(r.tools)) END,
       r.timeout_s, r.schedule_timeout_s, r.max_steps, r.priority,
       NULLIF(r.idempotency_key, ''), r.request_canonical, NULLIF(r.batch_id, ''), r.metadata,
       NULLIF(r.traceparent, ''), NULLIF(r.strategy, ''),
       coalesce(NULLIF(r.parent_task_id, '')::uuid,
                (SELECT p.task_id FROM tasks p
                 WHERE r.session_id <> '' AND p.user_id = r.user_id
                   AND p.session_id = r.session_id
                   AND (p.status <> 'staged' OR p.batch_id = NULLIF(r.batch_id, ''))
                 ORDER BY p.seq DESC NULLS LAST, p.created_at DESC LIMIT 1)),
       NULLIF(r.session_id, ''), r.max_tokens, r.max_cost, coalesce(r.status, 'queued'),
       NULLIF(r.retry_of, '')::uuid, NULLIF(r.batch_line, 0)
FROM jsonb_to_recordset($1::jsonb) AS r(
  task_id uuid, user_id text, text text, model text, tools jsonb, timeout_s integer,
  schedule_timeout_s integer, max_steps integer, priority text, idempotency_key text,
  request_canonical text, batch_id text, metadata jsonb, traceparent text, strategy text,
  parent_task_id text, session_id text, max_tokens bigint, max_cost numeric, status text,
  retry_of text, batch_line integer)
ON CONFLICT (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING task_id::text

-- name: follow_duplicates
-- Tasks of user $1 chained to a task an insert skipped as a duplicate (insert_tasks): each
-- ($2, JSON [{child, key}]) follows the task its parent's idempotency key names instead.
UPDATE tasks c SET parent_task_id = e.task_id
FROM jsonb_to_recordset($2::jsonb) AS r(child uuid, key text)
JOIN tasks e ON e.user_id = $1 AND e.idempotency_key = r.key
WHERE c.task_id = r.child AND c.user_id = $1

-- name: queue_lock
-- Serializes user $1's submissions until the transaction ends: the lock agentfleet_submit takes.
SELECT pg_advisory_xact_lock(7311002, hashtext($1))

-- name: queue_overrides
-- User $1's tier ('' for none) and max_queued (NULL for none), when they have overrides.
SELECT coalesce(tier, ''), max_queued FROM user_limits WHERE user_id = $1

-- name: queue_count
-- User $1's queued tasks, with the staged tasks of their uploads under way, each counted up
-- to $2 + 1: a deep queue costs no more than a full one.
SELECT (SELECT count(*) FROM (SELECT 1 FROM tasks WHERE user_id = $1 AND status = 'queued'
                              LIMIT $2::bigint + 1) q)
       + (SELECT count(*) FROM (SELECT 1 FROM tasks WHERE user_id = $1 AND status = 'staged'
                                LIMIT $2::bigint + 1) s)

-- name: seal_count
-- User $1's queued tasks, with the staged tasks of batch $3 (the upload being sealed) and of
-- their sealed batches still moving into the queue, each counted up to $2 + 1. The staged
-- tasks of their other uploads under way are not: each is checked at its own seal, so two
-- uploads that fit one after the other do not refuse each other.
SELECT (SELECT count(*) FROM (SELECT 1 FROM tasks WHERE user_id = $1 AND status = 'queued'
                              LIMIT $2::bigint + 1) q)
       + (SELECT count(*) FROM (SELECT 1 FROM tasks
                                WHERE user_id = $1 AND status = 'staged'
                                  AND batch_id IN (SELECT batch_id FROM batches
                                                   WHERE upload_deadline IS NOT NULL
                                                     AND user_id = $1
                                                     AND (sealed OR batch_id = $3))
                                LIMIT $2::bigint + 1) s)

-- name: task_json
-- Task $1 as the API shows it: its task_row, then its trace (per step and attempt the
-- model's reply, its tool calls and their results, and whether the step's bill is an
-- estimate because the provider sent no usage: the ledger's usage_estimated, null for a
-- step that made no model call; a JSON array), read in the caller's transaction (a task
-- inserted there is seen).
SELECT {{task_row}},
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
           'step', s.step, 'attempt', s.attempt,
           'role', CASE WHEN s.model_reply->>'kind' = 'tool_step' THEN '"tool"'::jsonb
                        ELSE s.model_reply->'role' END,
           'content', s.model_reply->'content', 'reasoning', s.model_reply->'reasoning',
           'tool_calls', coalesce(s.trace, '[]'::jsonb), 'usage', s.model_reply->'usage',
           'usage_estimated', (SELECT l.usage_estimated FROM usage_ledger l
                               WHERE l.task_id = s.task_id AND l.step = s.step),
           'model_latency_ms', s.model_latency_ms, 'at', s.created_at) ORDER BY s.step),
           '[]'::jsonb)
        FROM task_steps s WHERE s.task_id = t.task_id)::text
FROM tasks t WHERE t.task_id = $1::uuid AND t.status <> 'staged'

-- name: task_history
-- What an event stream replays for task $1, already under way: its task_row (user, status,
-- the result and error when it ended, usage and cost), then per step the model's text, its
-- tool calls and (once they ran) their trace (a JSON array).
SELECT {{task_row}},
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
           'step', s.step, 'content', coalesce(s.model_reply->>'content', ''),
           'tool_calls', coalesce(s.model_reply->'tool_calls', '[]'::jsonb),
           'trace', s.trace) ORDER BY s.step), '[]'::jsonb)
        FROM task_steps s WHERE s.task_id = t.task_id)::text
FROM tasks t WHERE t.task_id = $1::uuid AND t.status <> 'staged'

-- name: ended_of_user
-- Of the task ids in the JSON array $2, those of user $1 that have ended (a results stream
-- passes on a result event only when the row says so). One id per row.
SELECT task_id::text FROM tasks
WHERE task_id = ANY(ARRAY(SELECT jsonb_array_elements_text($2::jsonb))::uuid[])
  AND user_id = $1 AND status IN ('succeeded', 'failed', 'timed_out', 'cancelled')

-- fragment: task_filter
-- The tasks GET /v1/tasks searches, of the task row `t`: of user $1 ('': see $2), of the users
-- of the JSON array $2 ('[]': every user), of status $3, of the batch of key $4, of result type
-- $5, of error code $6, of model $7, of session $8, whose text holds $9 (ignoring case),
-- created at or after $10 and before $11 (timestamps); each '' for any. Never a task still
-- staged by its upload. No comment at its end: a statement goes on after it.
($1 = '' OR t.user_id = $1)
AND ($2::jsonb = '[]'::jsonb
     OR t.user_id = ANY(ARRAY(SELECT jsonb_array_elements_text($2::jsonb))))
AND ($3 = '' OR t.status = $3) AND t.status <> 'staged'
AND ($4 = '' OR t.batch_id = $4)
AND ($5 = '' OR t.result_type = $5)
AND ($6 = '' OR t.error_code = $6)
AND ($7 = '' OR t.model = $7)
AND ($8 = '' OR t.session_id = $8)
AND ($9 = '' OR strpos(lower(t.text), lower($9)) > 0)
AND ($10 = '' OR t.created_at >= NULLIF($10, '')::timestamptz)
AND ($11 = '' OR t.created_at < NULLIF($11, '')::timestamptz)

-- name: list_tasks
-- GET /v1/tasks: the tasks of the filter task_filter ($1 to $11), newest first, created
-- before task $12 (a cursor: the last id of the previous page; '': from the newest), at most
-- $13. The task_row of each; the API shows its summary (no trace). One user's are read from
-- tasks_user_created, every user's from tasks_created (migration 0032); each filter is
-- planned with its arguments (exec_text), so a filter left empty costs nothing.
SELECT {{task_row}}
FROM tasks t
WHERE {{task_filter}}
  AND ($12 = '' OR (t.created_at, t.task_id) <
       (SELECT b.created_at, b.task_id FROM tasks b WHERE b.task_id = NULLIF($12, '')::uuid))
ORDER BY t.created_at DESC, t.task_id DESC
LIMIT $13::int

-- name: count_tasks
-- How many tasks the filter task_filter ($1 to $11) finds, counted up to $12 (a search over
-- millions stops there: the count is then at least that).
SELECT count(*) FROM (SELECT 1 FROM tasks t WHERE {{task_filter}} LIMIT $12::int) found

-- name: cancel_status
-- Task $1's status, its row locked until the cancel commits.
SELECT status FROM tasks WHERE task_id = $1::uuid AND status <> 'staged' FOR UPDATE

-- name: cancel_request
-- Marks task $1 to be cancelled: its worker stops it, a dispatch message on its way skips it.
UPDATE tasks SET cancel_requested = true WHERE task_id = $1::uuid

-- name: tasks_in_id_range
-- The tasks whose ids lie from $1 to $2 (the ids a short prefix stands for), in id order,
-- at most $3: their ids and users. On the primary key.
SELECT task_id::text, user_id FROM tasks
WHERE task_id BETWEEN $1::uuid AND $2::uuid AND status <> 'staged'
ORDER BY task_id LIMIT $3::int

-- name: retry_source
-- What POST /v1/tasks/{id}/retry copies of task $1: its user, status, the canonical form
-- of its request, and the parent it followed ('' for none).
SELECT user_id, status, request_canonical, coalesce(parent_task_id::text, '')
FROM tasks WHERE task_id = $1::uuid AND status <> 'staged'

-- name: find_parent
-- The parent a submission of user $1 names: task $2, or (when $2 is '') session $3's latest
-- task (the one inserted last: migration 0026). A task with idempotency key $4 (the submission itself, sent again) is not its own
-- parent. Its id and status.
SELECT task_id::text, status FROM tasks
WHERE user_id = $1 AND (($2 <> '' AND task_id = NULLIF($2, '')::uuid)
                        OR ($2 = '' AND session_id = $3))
  AND ($4 = '' OR idempotency_key IS DISTINCT FROM $4) AND status <> 'staged'
ORDER BY seq DESC NULLS LAST, created_at DESC LIMIT 1

-- name: record_replay
-- A replayed dead letter reached the store (migration 0024): the letter (topic $1,
-- partition $2, offset $3), the replayed message ($4, $5, $6), the task it made ($8: true)
-- or found (false), $7. Written once per replayed message.
INSERT INTO dead_letter_replays (letter_topic, letter_partition, letter_offset, replay_topic,
                                 replay_partition, replay_offset, task_id, created)
VALUES ($1, $2::integer, $3::bigint, $4, $5::integer, $6::bigint, $7::uuid, $8::boolean)
ON CONFLICT DO NOTHING

-- name: letter_replays
-- Of the letters of topic $1 at partitions $2 and offsets $3 (arrays, pairwise), those whose
-- replays reached the store: the task (the first replay's; every replay of a letter is
-- keyed alike, so they name one task), when the first arrived, how many arrived, how many
-- made the task.
SELECT r.letter_partition, r.letter_offset,
       (array_agg(r.task_id::text ORDER BY r.replayed_at, r.replay_offset))[1],
       to_char(min(r.replayed_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
       count(*), count(*) FILTER (WHERE r.created)
FROM dead_letter_replays r
JOIN unnest($2::integer[], $3::bigint[]) AS l(p, o)
  ON r.letter_partition = l.p AND r.letter_offset = l.o
WHERE r.letter_topic = $1
GROUP BY r.letter_partition, r.letter_offset
