-- agentfleet: no-transaction
-- agentfleet schema, version 25: the index tasks_running_lease (lease_until of running
-- tasks, from version 1) goes. Tasks have been owned by a worker's incarnation and its
-- liveness since version 8; lease_until of a running task is set only by a version-7
-- worker, and the scheduler finds those tasks (worker_incarnation IS NULL) through
-- tasks_running_incarnation, which holds every running task. Profiles of the bench showed
-- the index never scanned, while every claim wrote an entry into it. Dropped without
-- blocking reads or writes; IF EXISTS, so a drop cut short is simply done again.
DROP INDEX CONCURRENTLY IF EXISTS tasks_running_lease;
