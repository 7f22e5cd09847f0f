-- agentfleet schema, version 23: a task's running totals are derived from its step rows and
-- its ledger while it runs, and folded into its row once, at its end; a model step and a
-- tool round no longer rewrite the task's row.
--
-- task_steps.tool_calls: how many of the step's tool calls ran (written by the tool round
-- into the step's row, which it updates anyway). A column with a constant default: no table
-- rewrite. A version-22 worker names its insert's columns and never this one, and keeps
-- updating tasks.steps and tasks.tool_calls itself: a version-23 reader takes the greater of
-- the row's count and the steps' sum, so both may run side by side.
ALTER TABLE task_steps ADD COLUMN IF NOT EXISTS tool_calls integer NOT NULL DEFAULT 0;
