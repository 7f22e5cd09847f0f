#!/usr/bin/env bash
# The chaos run in its short form (tools/chaos, docs/chaos.md): about 2,270 tasks from 70
# users, 1,500 of them in an overload phase (the standard task at 150/s for 10 s, far above
# what the fleet completes), while every kind of fault fires once (Kafka errors, a broker
# down, latency, moved leaders; llm-sim and tool-sim faults; SIGKILL and restart of workers
# and of the active dispatcher, SIGTERM of a worker, an immediate Postgres restart, a 20 s
# Postgres outage, a silent network between Postgres and a worker, and between Postgres
# and the active scheduler, through fault proxies), then the invariant checker. About 2
# minutes on 2 cores when every task ends; the tool's own bounds (5 minutes for the last
# tasks) keep a failing run under 9. Fails on any violation; the table says which.
#   chaos_test.sh BUILD_DIR RUN_DIR
# The seed is CHAOS_SEED, or the time; it is printed first, so that a failing run can be
# repeated with `tools/chaos --seed N --build-dir BUILD_DIR`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=$1
run_dir=$2
seed=${CHAOS_SEED:-$(($(date +%s) % 1000000))}
echo "chaos test: seed $seed (repeat with CHAOS_SEED=$seed or tools/chaos --seed $seed)"
rc=0
"$root/tools/chaos" --build-dir "$build_dir" --run-dir "$run_dir" --seed "$seed" || rc=$?
case $rc in
  0) echo "chaos test: no violation (seed $seed)" ;;
  1) echo "FAIL: the chaos run found a violation (seed $seed); records in $run_dir/chaos" >&2 ;;
  *) echo "FAIL: the chaos run could not be carried out (exit $rc, seed $seed); logs in $run_dir" >&2 ;;
esac
exit "$rc"
