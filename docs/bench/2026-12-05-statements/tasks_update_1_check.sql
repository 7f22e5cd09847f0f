BEGIN;
UPDATE t1 SET status='running', attempt=attempt+1, worker_incarnation=8, started_at=now() WHERE task_id='11111111-1111-1111-1111-111111111111'::uuid;
ROLLBACK;
