#!/usr/bin/env bash
# The benchmark's smoke run (tools/bench --smoke, docs/performance.md): every scenario at a
# token size on the build under test. No figure is judged (the sanitizer build on a busy CI
# machine says nothing about speed); the test asserts that the benchmark still works: each
# scenario ran and measured something real, the table names every scenario, and the JSON and
# the plot were written. One figure is judged, because it does not depend on speed: the write
# budget scenario fails when a task writes more rows or commits than docs/architecture.md says.
#   bench_smoke_test.sh BUILD_DIR OUT_DIR
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=$1
out=$2
rm -rf "$out"
# The table goes beside the run's folder: its parent may not exist yet when this test is the
# first e2e test of a fresh tree.
mkdir -p "$(dirname "$out")"
# The benchmark stops its fleets itself (also on SIGTERM); should it be killed outright,
# whatever it left running is stopped here.
stop_fleets() {
  local dir
  for dir in "$out"/fleet-*; do
    [[ -d "$dir" ]] && bash -c 'source "$1/tools/lib/common.sh"; source "$1/tools/lib/fleet.sh"; fleet_stop "$2"' \
      _ "$root" "$dir" >/dev/null 2>&1
  done
  return 0
}
trap stop_fleets EXIT
rc=0
"$root/tools/bench/bench" --smoke --build-dir "$build_dir" --out "$out" | tee "$out.table" || rc=$?
[[ $rc -eq 0 ]] || { echo "FAIL: tools/bench --smoke exited $rc" >&2; exit 1; }
for scenario in throughput "in flight" latency fairness recovery budget; do
  grep -q "^| $scenario |" "$out.table" || { echo "FAIL: the table has no $scenario row" >&2; exit 1; }
done
grep -q '<polyline' "$out/bench.svg" || { echo "FAIL: the plot has no data line" >&2; exit 1; }
python3 - "$out/bench.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
problems = []
def need(ok, what):
    if not ok:
        problems.append(what)
need("errors" not in r, f"scenario errors: {r.get('errors')}")
t = r.get("throughput", {})
need(t.get("max_succeeded_per_s", 0) > 0, "throughput: nothing succeeded")
step = (t.get("steps") or [{}])[0]
need(step.get("succeeded") == step.get("tasks"), f"throughput: not every task succeeded: {step}")
e2e = t.get("end_to_end", {})
need(e2e.get("n") == 50 and e2e.get("missing") == 0,
     f"throughput: end to end is not of every task, each with its result event: {e2e}")
need(step.get("cpu_ms_per_task", {}).get("worker", 0) > 0 and
     step.get("cpu_ms_per_task", {}).get("postgres", 0) > 0, f"throughput: no CPU measured: {step}")
i = r.get("inflight", {})
need(i.get("max_in_flight", 0) > 0 and i.get("kib_per_in_flight_task") is not None,
     f"inflight: nothing in flight or no memory figure: {i}")
for s in r.get("latency", {}).get("steps", []) or [{}]:
    for key in ("submit_to_first_model_request", "tool_round_trip_overhead",
                "last_model_answer_to_finish_row", "last_model_answer_to_result_event"):
        need(s.get(key, {}).get("n", 0) > 0, f"latency: no samples of {key}")
    for stage, figures in s.get("critical_path", {"(none)": {}}).items():
        need(figures.get("n", 0) > 0, f"latency: no samples of the critical path's {stage}")
f = r.get("fairness", {})
need(f.get("b_queue_wait_ms", {}).get("n", 0) > 0, f"fairness: B ran nothing: {f}")
need(0 < f.get("highest_running", {}).get("A (limit 10)", 0) <= 10,
     f"fairness: A's running count was never sampled within its limit: {f}")
c = r.get("recovery", {})
need(c.get("held_by_killed_worker", 0) > 0 and c.get("all_finished_s") is not None,
     f"recovery: no task held, or not all finished: {c}")
need(c.get("failed", 1) == 0, f"recovery: tasks failed: {c}")
b = r.get("budget", {})
need(b.get("tasks", 0) > 0 and b.get("rows_per_task", {}).get("tasks", {}).get("inserted") == 1.0
     and b.get("commits_per_task", 0) > 0,
     f"budget: rows and commits per task not measured: { {k: b.get(k) for k in ('tasks', 'commits_per_task')} }")
if problems:
    print("FAIL: " + "\n      ".join(problems), file=sys.stderr)
    sys.exit(1)
print("bench smoke: every scenario measured")
PY
