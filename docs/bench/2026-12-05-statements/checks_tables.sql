-- Copies of tasks with its 8 check constraints (t8), one constraint of all eight (t1), none (t0).
DROP TABLE IF EXISTS t8, t1, t0;
CREATE TABLE t8 (LIKE tasks INCLUDING ALL);
CREATE TABLE t1 (LIKE tasks INCLUDING ALL);
CREATE TABLE t0 (LIKE tasks INCLUDING ALL);
INSERT INTO t8 SELECT * FROM tasks; INSERT INTO t1 SELECT * FROM tasks; INSERT INTO t0 SELECT * FROM tasks;
DO $$ DECLARE c record; BEGIN
 FOR c IN SELECT conname FROM pg_constraint WHERE conrelid='t1'::regclass AND contype='c' LOOP EXECUTE format('ALTER TABLE t1 DROP CONSTRAINT %I', c.conname); END LOOP;
 FOR c IN SELECT conname FROM pg_constraint WHERE conrelid='t0'::regclass AND contype='c' LOOP EXECUTE format('ALTER TABLE t0 DROP CONSTRAINT %I', c.conname); END LOOP;
END $$;
ALTER TABLE t1 ADD CONSTRAINT t1_all CHECK (max_steps > 0 AND priority IN ('interactive','batch') AND result_type IN ('action_completed','need_clarification','error') AND schedule_timeout_s > 0 AND status IN ('staged','queued','dispatched','running','succeeded','failed','timed_out','cancelled') AND strategy IN ('react','plan_execute','plan_only') AND timeout_s > 0 AND ((max_tokens > 0) AND (max_cost > 0)));
