#!/usr/bin/env bash
# Scheduler admissions per second: the embedded stack without workers (so nothing but the
# scheduler touches the queue), USERS users with a queued batch of TASKS each, then every
# limit lifted at once so only the scheduler's own speed counts. Prints admissions per
# second from the tasks' dispatched_at times and the pass durations from the metrics.
#   tools/bench/scheduler_admissions.sh [BUILD_DIR] [USERS] [TASKS_PER_USER]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=${1:-$root/build/release}
users=${2:-50}
per_user=${3:-400}
run_dir=$root/run/bench-scheduler
export AF_LOG_TAG=bench-scheduler
source "$root/tools/lib/common.sh"
source "$root/tools/lib/fleet.sh"
psql_q() { psql "$AGENTFLEET_PG_URL" -X -At -v ON_ERROR_STOP=1 -c "$1"; }

fleet_reset "$run_dir"
trap 'fleet_stop "$run_dir"' EXIT
fleet_start "$run_dir" "$build_dir" 0
auth="Authorization: Bearer $AGENTFLEET_API_KEY"
total=$((users * per_user))
limits() {  # USER RPM: the user's limits, with RPM requests (tasks started) per minute
  curl -sS -f -o /dev/null --max-time 10 -X PUT -H "$auth" "$AGENTFLEET_URL/v1/users/$1/limits" \
    -d "{\"max_concurrency\":$per_user,\"requests_per_minute\":$2,\"tokens_per_minute\":1000000000000,\"max_queued\":$per_user}"
}
# The backlog first, held back by one start per minute per user; then the limit is lifted
# and the scheduler alone decides how fast it all goes.
for ((u = 0; u < users; u++)); do limits "bench-u$u" 1; done
body=$(mktemp)
for ((u = 0; u < users; u++)); do
  : >"$body"
  for ((i = 0; i < per_user; i++)); do
    printf '{"user_id":"bench-u%d","text":"bench: steps=1 calls=1"}\n' "$u" >>"$body"
  done
  curl -sS -f -o /dev/null --max-time 60 -X POST -H "$auth" --data-binary "@$body" \
    "$AGENTFLEET_URL/v1/batches?user_id=bench-u$u"
done
rm -f "$body"
lifted=$(psql_q "SELECT now()")
for ((u = 0; u < users; u++)); do limits "bench-u$u" 1000000000; done
deadline=$(($(af_now_ms) + 300000))
while (($(psql_q "SELECT count(*) FROM tasks WHERE status = 'queued'") > 0)); do
  (($(af_now_ms) < deadline)) || { echo "not all dispatched in 300 s" >&2; exit 1; }
  sleep 0.2
done
read -r admitted span < <(psql_q "SELECT count(*), extract(epoch FROM max(dispatched_at) - '$lifted')
  FROM tasks WHERE dispatched_at >= '$lifted'" | tr '|' ' ')
metrics=$(curl -sS --max-time 10 "$AGENTFLEET_DISPATCHER_METRICS_URL/metrics")
passes=$(awk '/^agentfleet_scheduler_pass_duration_seconds_count/ {print $2}' <<<"$metrics")
pass_sum=$(awk '/^agentfleet_scheduler_pass_duration_seconds_sum/ {print $2}' <<<"$metrics")
awk -v n="$admitted" -v span="$span" -v passes="$passes" -v sum="$pass_sum" -v users="$users" 'BEGIN {
  printf "scheduler: %d queued tasks of %d users dispatched in %.2f s after their limit was lifted: %.0f admissions/s\n", n, users, span, n / span;
  printf "  %d scheduler passes in all, mean pass %.1f ms\n", passes, 1000 * sum / passes;
}'
