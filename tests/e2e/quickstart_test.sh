#!/usr/bin/env bash
# The README's first command as a new user runs it, on the sanitizer build: tools/quickstart
# --keep runs the samples, prints tables no wider than 120 columns and u1's key, keeps the
# fleet up, and a SIGTERM stops all of it (Postgres and the waiting sleep included), a second
# SIGTERM during the stop too.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=$1
run_dir=$2
source "$root/tools/lib/common.sh"
source "$root/tests/e2e/lib.sh"

rm -rf "$run_dir"
mkdir -p "$run_dir"
log="$run_dir/quickstart.log"
AGENTFLEET_QUICKSTART_BUILD=$(basename "$build_dir") AGENTFLEET_QUICKSTART_RUN_DIR="$run_dir/fleet" \
  setsid "$root/tools/quickstart" --keep >"$log" 2>&1 &
quickstart=$!
# Whatever happens, nothing of the fleet outlives the test.
cleanup() {
  kill -TERM "$quickstart" 2>/dev/null || true
  source "$root/tools/lib/fleet.sh"
  fleet_stop "$run_dir/fleet" >/dev/null 2>&1 || true
}
trap cleanup EXIT

deadline=$(($(af_now_ms) + 300000))
until grep -q "The fleet is running" "$log"; do
  kill -0 "$quickstart" 2>/dev/null || fail "the quickstart ended early:"$'\n'"$(cat "$log")"
  (($(af_now_ms) < deadline)) || fail "the quickstart did not finish its samples in 300 s"
  sleep 1
done
cat "$log"

# It says the first build takes minutes before it builds.
[[ $(head -n 1 "$log") == *"the first build takes about 15 minutes"* ]] ||
  fail "the first line does not say that the build takes minutes: $(head -n 1 "$log")"
# Every sample ended as it should, in a table that fits 120 columns (wide characters count
# two) as does every table line.
[[ $(grep -c "(8 rows)" "$log") == 2 ]] || fail "the results and answers do not list the 8 tasks"
[[ $(grep -c "^ [0-9a-f]\{8\} | u[12] .* | succeeded |" "$log") == 8 ]] ||
  fail "not every sample succeeded"
python3 - "$log" <<'PY' || fail "a table line is wider than 120 columns"
import sys, unicodedata
def width(line):
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)
table = False
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.rstrip("\n")
    if line in ("Results", "Bill per user") or line.startswith("Bill of u1"):
        table = True
    elif line.startswith("The fleet is running"):
        table = False
    if table and width(line) > 120:
        print(f"{width(line)} columns: {line}")
        sys.exit(1)
PY
# A newcomer sees the traces arrive: the spans the workers exported reached the bundled OTLP
# receiver, and the first task's trace page (the link the console shows) holds its spans.
grep -Eq "^  [1-9][0-9]* spans of [1-9][0-9]* traces reached the bundled OTLP receiver" "$log" ||
  fail "no spans reached the OTLP receiver"
trace_url=$(sed -n 's/^  curl -s \(http:[^ ]*\/traces\/[0-9a-f]\{32\}\)$/\1/p' "$log")
[[ -n "$trace_url" ]] || fail "no trace link is printed"
trace=$(curl -sS --max-time 10 "$trace_url") || fail "the trace link does not answer"
grep -q '"name": "task"' <<<"$trace" || fail "the trace page holds no task span: $trace"
# u1's key, as the README hands it out.
grep -q "KEY='Authorization: Bearer af-dev-u1-key'" "$log" || fail "u1's key is not handed out"
grep -q "AGENTFLEET_API_KEY=af-dev-u1-key" "$log" || fail "agentctl is not set up with u1's key"

# What is running now: the fleet's processes, Postgres, the script's sleep.
pids=$(awk '{print $1}' "$run_dir/fleet/pids")
postgres=$(head -n 1 "$run_dir/fleet/pg/data/postmaster.pid")
# The sleep it waits on starts just after the lines above are printed.
deadline=$(($(af_now_ms) + 10000))
until naps=$(pgrep -P "$quickstart" -x sleep); do
  (($(af_now_ms) < deadline)) || fail "the quickstart is not waiting on a sleep 10 s after its URLs"
  sleep 0.1
done
[[ -n "$postgres" ]] || fail "no Postgres found"

# Running, not a zombie waiting to be reaped (its parent, the quickstart, is gone).
running() { [[ -r /proc/$1/stat ]] && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }
# A second SIGTERM while it stops must not cut the stop short (Postgres would be left).
kill -TERM "$quickstart"
# The handler has run once the sleep it kills is gone; then the stop is under way.
deadline=$(($(af_now_ms) + 10000))
while running "$naps"; do
  (($(af_now_ms) < deadline)) || fail "the sleep $naps still runs 10 s after SIGTERM"
  sleep 0.1
done
kill -TERM "$quickstart" 2>/dev/null || true
# The fleet's own stop allows a worker's drain 35 s, then the rest.
deadline=$(($(af_now_ms) + 120000))
while kill -0 "$quickstart" 2>/dev/null; do
  (($(af_now_ms) < deadline)) || fail "the quickstart did not stop within 120 s of SIGTERM"
  sleep 0.2
done
for pid in $pids $postgres $naps; do
  if running "$pid"; then
    fail "process $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)) outlived the quickstart"
  fi
done
echo "PASS: the quickstart ran the samples and stopped everything on SIGTERM"
