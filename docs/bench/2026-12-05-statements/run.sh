#!/usr/bin/env bash
# The statement measurements of docs/performance.md ("Where a statement's time goes",
# 2026-12-05): a private dev cluster migrated by BUILD_DIR's dispatcher, one running task
# (nine for the batch of eight), then pgbench on each script of this folder.
#   docs/bench/2026-12-05-statements/run.sh [BUILD_DIR]    (default build/release)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
PB=${PG_BIN:-/usr/lib/postgresql/15/bin}/pgbench
dir=$(mktemp -d)
chmod 755 "$dir"
trap '"$root/tools/devpg" stop "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
U=$("$root/tools/devpg" start "$dir" | tail -1)
AGENTFLEET_PG_URL=$U "$build/dispatcher/agentfleet-dispatcher" --config "$root/config/agentfleet.yaml" migrate >/dev/null
psql -q "$U" -c "INSERT INTO tasks (task_id, user_id, text, model, timeout_s, schedule_timeout_s, max_steps,
  priority, request_canonical, status, attempt, worker_incarnation, queue_deadline_at)
  SELECT ('11111111-1111-1111-1111-11111111111' || g)::uuid, 'u1', '今天下午去买东西', 'm', 60, 60, 10,
         'interactive', 'x', 'running', 1, 7, now() + interval '1 hour' FROM generate_series(1, 9) g"
psql -q "$U" -f "$here/one_row_table.sql" -f "$here/checks_tables.sql" 2>/dev/null
# The parameters: one model call's checkpoint as JSON (1 row and 8 rows) and as arrays.
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
reply = {"role": "assistant", "content": "I will search for the items first.",
         "tool_calls": [{"id": "call_1", "type": "function", "function": {
             "name": "search_items",
             "arguments": json.dumps({"query": "今天下午 买东西", "limit": 10}, ensure_ascii=False)}}]}
def row(g):
    return {"task_id": "11111111-1111-1111-1111-11111111111%d" % g, "attempt": 1, "incarnation": 7,
            "step": 0, "reply": reply, "latency_ms": 12, "user_id": "u1", "batch_id": "", "model": "m",
            "input": 812, "cached": 0, "output": 64, "reasoning": 0, "cost": 0.001234,
            "currency": "USD", "estimated": False}
def lit(s): return '"' + s.replace('\\', '\\\\').replace('"', '\\"') + '"'
for n, rows in (("1", [row(1)]), ("8", [row(g) for g in range(2, 10)])):
    open("%s/json%s" % (d, n), "w").write(json.dumps(rows, ensure_ascii=False))
    col = lambda f: "{" + ",".join(f(r) for r in rows) + "}"
    args = {"t": col(lambda r: r["task_id"]), "a": col(lambda r: "1"), "i": col(lambda r: "7"),
            "s": col(lambda r: "0"), "r": col(lambda r: lit(json.dumps(r["reply"], ensure_ascii=False))),
            "l": col(lambda r: "12"), "u": col(lambda r: "u1"), "bt": col(lambda r: '""'),
            "m": col(lambda r: "m"), "in": col(lambda r: "812"), "c": col(lambda r: "0"),
            "o": col(lambda r: "64"), "rs": col(lambda r: "0"), "co": col(lambda r: "0.001234"),
            "cu": col(lambda r: "USD"), "e": col(lambda r: "f")}
    open("%s/arrays%s" % (d, n), "w").write("\n".join("%s=%s" % kv for kv in args.items()))
PY
bench() {  # NAME MODE SCRIPT [pgbench -D ...]
  local name=$1 mode=$2 script=$3
  shift 3
  for run in 1 2 3; do
    printf '%-44s %s\n' "$name" "$(PGOPTIONS="-c plan_cache_mode=$mode" "$PB" -n -M prepared -T 5 -c 1 \
      -f "$here/$script" "$@" "$U" 2>&1 | sed -n 's/^latency average = //p')"
  done
}
arrays() { local a=() l; while IFS= read -r l; do a+=(-D "$l"); done <"$dir/arrays$1"; printf '%s\n' "${a[@]}"; }
mapfile -t A1 < <(arrays 1)
mapfile -t A8 < <(arrays 8)
bench "floor (BEGIN; SELECT 1; ROLLBACK)" auto floor.sql
bench "checkpoint, JSON" force_generic_plan checkpoint_json.sql -D "p=$(cat "$dir/json1")"
bench "checkpoint, arrays" force_generic_plan checkpoint_arrays.sql "${A1[@]}"
bench "checkpoint, 8 rows, JSON" force_generic_plan checkpoint_json.sql -D "p=$(cat "$dir/json8")"
bench "checkpoint, 8 rows, arrays" force_generic_plan checkpoint_arrays.sql "${A8[@]}"
bench "checkpoint, JSON, custom plans" force_custom_plan checkpoint_json.sql -D "p=$(cat "$dir/json1")"
bench "checkpoint, arrays, custom plans" force_custom_plan checkpoint_arrays.sql "${A1[@]}"
bench "checkpoint, one-row shape" force_generic_plan checkpoint_one_row.sql -D "p=$(cat "$dir/json1")"
bench "record" force_generic_plan record.sql
bench "record, one-row shape" force_generic_plan record_one_row.sql
bench "tasks update, 8 checks" force_generic_plan tasks_update_8_checks.sql
bench "tasks update, 1 check" force_generic_plan tasks_update_1_check.sql
bench "tasks update, no check" force_generic_plan tasks_update_no_check.sql
# Machine CPU a transaction, client included: a durable commit against a rollback.
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
for script in commit.sql rollback.sql; do
  a=$(busy)
  n=$("$PB" -n -M prepared -T 5 -c 1 -f "$here/$script" "$U" 2>&1 |
    sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
  b=$(busy)
  printf '%-44s %s ms of CPU a transaction\n' "$script" \
    "$(python3 -c "print(round(($b - $a) * 10 / $n, 3))")"
done
