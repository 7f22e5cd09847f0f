-- agentfleet schema, version 7: room on the pages of the rows a task updates.

-- A running task's row is updated at every step (its totals), by every heartbeat (its
-- lease) and at its end; a step row once more when its tool results arrive. With full
-- pages each update writes the new row version to another page and a new entry into every
-- index of the table; with room left on the page, Postgres keeps the new version beside
-- the old one (a heap-only tuple) whenever no indexed column changed, and prunes the old
-- versions when it next reads the page. Applies to pages written from now on.
ALTER TABLE tasks SET (fillfactor = 50);
ALTER TABLE task_steps SET (fillfactor = 70);
