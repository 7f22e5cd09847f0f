#!/usr/bin/env bash
# Many tasks in flight on one worker: 2,000 tasks of the standard shape (three
# model calls, two tool calls) at 200 ms model latency go through ONE worker, which must
# hold at least 500 of them at once. The tasks are dispatched before the worker starts, so
# it meets the whole backlog; prints the figures (most running at once, resident memory,
# tasks per second) and checks every task succeeded with one ledger row per model call.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=$1
run_dir=$2
tasks=${IN_FLIGHT_TASKS:-2000}
want=${IN_FLIGHT_MIN:-500}
export AF_LOG_TAG=in-flight-test
source "$root/tools/lib/common.sh"
source "$root/tools/lib/fleet.sh"
source "$root/tests/e2e/lib.sh"

export LLM_SIM_LATENCY_MS=200
# This test is about capacity, not latency: 2,000 calls at once against a simulator on the
# same two cores (and, in CI, a sanitizer build of every process) queue for longer than the
# default 60 s call deadline, which would fail tasks for a reason the test does not measure.
export AGENTFLEET_MODEL_CALL_TIMEOUT_S=240
# For the same reason the worker's in-flight limit judges its database round trips against
# 1 s instead of 100 ms: 2,000 tasks starting at once on a sanitizer build on two cores make
# every round trip slow, and the test is about what one worker can hold, not how the limit
# adapts (tests/unit/concurrency_limit_test.cpp and the bench's overload scenario are).
export AGENTFLEET_ROUND_TRIP_TARGET_MS=1000
fleet_reset "$run_dir"
trap 'fleet_stop "$run_dir"' EXIT
fleet_start "$run_dir" "$build_dir" 0

"$build_dir/tools/loadgen/agentfleet-loadgen" --url "$AGENTFLEET_URL" --pg "$AGENTFLEET_PG_URL" \
  --tasks "$tasks" --users 100 --max-concurrency 20 --text "bench: steps=2 calls=1" --concurrency 16 \
  --task-timeout-s 300 --limit-s 600 --key-prefix inflight >"$run_dir/loadgen.out" 2>&1 &
loadgen=$!

# Wait (bounded) until the whole backlog is dispatched, then start the one worker.
deadline=$(($(af_now_ms) + 180000))
until [[ $(psql_q "SELECT count(*) FROM tasks WHERE status = 'dispatched'") == "$tasks" ]]; do
  (($(af_now_ms) < deadline)) || fail "the backlog was not dispatched within 180 s: $(cat "$run_dir/loadgen.out")"
  kill -0 "$loadgen" 2>/dev/null || fail "loadgen stopped early: $(cat "$run_dir/loadgen.out")"
  sleep 0.2
done
fleet_start_worker "$run_dir" "$build_dir" worker-1
worker_pid=$FLEET_LAST_PID
started=$(af_now_ms)

rc=0
wait "$loadgen" || rc=$?
cat "$run_dir/loadgen.out"
if ((rc != 0)); then
  # What a stall leaves to look at: where the unfinished tasks are, what the worker last
  # reported (dispatch_lag > 0 with nothing running: its consumer stopped reading), and the
  # Kafka client's warnings.
  echo "tasks by status:"
  psql_q "SELECT status, count(*) FROM tasks GROUP BY 1 ORDER BY 1"
  echo "workers (incarnation, capacity, running, dispatch_lag, heartbeat age):"
  psql_q "SELECT incarnation, capacity, running, dispatch_lag, now() - heartbeat_at FROM workers"
  echo "the worker's Kafka warnings and errors (last 20):"
  grep '"component":"kafka"' "$run_dir/logs/worker-1.log" | grep -v '"level":"debug"' | tail -n 20 || true
  fail "not every task ended (loadgen exit $rc)"
fi
figures=$(tail -n 1 "$run_dir/loadgen.out")
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" <<<"$figures"; }
max_running=$(field max_running)
succeeded=$(field succeeded)
peak_kb=$(awk '/^VmHWM/ {print $2}' "/proc/$worker_pid/status")
elapsed_ms=$(($(af_now_ms) - started))

echo "one worker: $tasks tasks, at most $max_running running at once; peak resident memory" \
  "$((peak_kb / 1024)) MiB ($((peak_kb / (max_running > 0 ? max_running : 1))) KiB per task in" \
  "flight, process included); all done $((elapsed_ms / 1000)) s after the worker started" \
  "($(awk -v n="$tasks" -v ms="$elapsed_ms" 'BEGIN {printf "%.0f", n * 1000 / ms}') tasks/s)"

if ((succeeded != tasks)); then
  echo "tasks that did not succeed, by status and error:"
  psql_q "SELECT status, coalesce(error_code, '-'), left(coalesce(error, '-'), 160), count(*)
          FROM tasks WHERE status <> 'succeeded' GROUP BY 1, 2, 3 ORDER BY 4 DESC LIMIT 20"
  fail "$succeeded of $tasks tasks succeeded"
fi
((max_running >= want)) || fail "at most $max_running tasks ran at once; want at least $want"
bad=$(psql_q "SELECT count(*) FROM tasks t WHERE t.steps <> 3 OR t.tool_calls <> 2
  OR (SELECT count(*) FROM usage_ledger l WHERE l.task_id = t.task_id) <> 3")
((bad == 0)) || fail "$bad tasks with the wrong steps, tool calls or ledger rows"
