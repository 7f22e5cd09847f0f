-- agentfleet schema, version 4: agent strategies.

-- The strategy a task asked for, react or plan_execute; NULL: its user's tier's, else
-- task_defaults.strategy, chosen by the worker when the task runs.
ALTER TABLE tasks ADD COLUMN strategy text CHECK (strategy IN ('react', 'plan_execute'));
