DROP TABLE IF EXISTS mc;
CREATE TABLE mc (
 task_id uuid NOT NULL, attempt integer NOT NULL, step integer NOT NULL CHECK (step >= 0), incarnation bigint NOT NULL,
 user_id text NOT NULL, batch_id text, model text NOT NULL,
 input_tokens bigint NOT NULL CHECK (input_tokens >= 0), cached_input_tokens bigint NOT NULL DEFAULT 0 CHECK (cached_input_tokens >= 0),
 output_tokens bigint NOT NULL DEFAULT 0 CHECK (output_tokens >= 0), reasoning_tokens bigint NOT NULL DEFAULT 0,
 cost numeric(20,6) NOT NULL CHECK (cost >= 0), currency text NOT NULL, usage_estimated boolean NOT NULL DEFAULT true,
 sent_at timestamptz NOT NULL DEFAULT now(), answered_at timestamptz,
 model_reply jsonb, model_latency_ms integer NOT NULL DEFAULT 0, observations jsonb, trace jsonb, tools_done_at timestamptz, tool_calls integer NOT NULL DEFAULT 0,
 PRIMARY KEY (task_id, step)) WITH (fillfactor = 70);
CREATE INDEX mc_user_time ON mc (user_id, sent_at);
CREATE INDEX mc_batch ON mc (batch_id) WHERE batch_id IS NOT NULL;
INSERT INTO mc (task_id, attempt, step, incarnation, user_id, model, input_tokens, cost, currency)
SELECT task_id, 1, 0, 7, 'u1', 'm', 800, 0.001, 'USD' FROM tasks WHERE user_id = 'u1';
DELETE FROM model_calls_in_flight;
INSERT INTO model_calls_in_flight (task_id, attempt, step, incarnation, user_id, model, input_tokens, cost, currency)
SELECT task_id, 1, 0, 7, 'u1', 'm', 800, 0.001, 'USD' FROM tasks WHERE user_id = 'u1';
VACUUM ANALYZE mc; VACUUM ANALYZE model_calls_in_flight;
