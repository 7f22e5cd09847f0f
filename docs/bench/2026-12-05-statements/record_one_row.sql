BEGIN;
INSERT INTO mc (task_id, attempt, step, incarnation, user_id, model, input_tokens, cost, currency) VALUES ('11111111-1111-1111-1111-111111111111', 1, 1, 7, 'u1', 'm', 900, 0.001, 'USD');
ROLLBACK;
