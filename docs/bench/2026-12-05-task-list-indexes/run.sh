#!/usr/bin/env bash
# The write cost of migration 0032's two indexes: one task per commit (a submission) and a
# slice of 1,000 tasks of one batch per commit (a batch upload's), with the indexes and without,
# alternating, on a private Postgres 15 holding the whole schema (migrations 0001-0032).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
work=$(mktemp -d)
chmod 755 "$work"  # devpg runs Postgres as the postgres user
dir=$work/pg
url=$($root/tools/devpg start $dir | tail -n 1)
for f in $root/core/adapters/pg/migrations/*.sql; do psql "$url" -X -q -v ON_ERROR_STOP=1 -f "$f" >/dev/null; done
cat >$work/one.sql <<'SQL'
INSERT INTO tasks (task_id, user_id, text, model, timeout_s, schedule_timeout_s, max_steps, priority, request_canonical, status)
VALUES (gen_random_uuid(), 'u' || (random() * 100)::int, '今天下午去买东西', 'sim-model', 30, 60, 10, 'interactive', '{}', 'succeeded');
SQL
cat >$work/slice.sql <<'SQL'
INSERT INTO tasks (task_id, user_id, text, model, timeout_s, schedule_timeout_s, max_steps, priority, request_canonical, status, batch_id, batch_line)
SELECT gen_random_uuid(), 'ub', '今天下午去买东西', 'sim-model', 30, 60, 10, 'batch', '{}', 'succeeded', 'b-' || pg_backend_pid() || '-' || txid_current(), g
FROM generate_series(1, 1000) g;
SQL
with() {
  psql "$url" -X -q -c "CREATE INDEX IF NOT EXISTS tasks_batch_line ON tasks (batch_id, (coalesce(batch_line, 0)), task_id) WHERE batch_id IS NOT NULL" \
    -c "CREATE INDEX IF NOT EXISTS tasks_created ON tasks (created_at DESC, task_id DESC)"
}
without() { psql "$url" -X -q -c "DROP INDEX IF EXISTS tasks_batch_line" -c "DROP INDEX IF EXISTS tasks_created"; }
for round in 1 2 3; do
  for mode in without with; do
    $mode
    one=$(/usr/lib/postgresql/15/bin/pgbench "$url" -n -c 4 -j 2 -T 15 -f $work/one.sql 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    slice=$(/usr/lib/postgresql/15/bin/pgbench "$url" -n -c 2 -j 2 -T 15 -f $work/slice.sql 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    rows=$(psql "$url" -X -At -c "SELECT count(*) FROM tasks")
    echo "round $round $mode: one-task commits/s $one, 1000-task slices/s $slice (tasks in table: $rows)"
  done
done
$root/tools/devpg stop $dir
rm -rf "$work"
