#!/usr/bin/env bash
# SIGKILL of the active dispatcher (the replica holding the scheduler's advisory lock)
# while tasks are queued: the other replica takes the lock over within seconds, its
# scheduler admits the rest under the same per-user limits, and every task still ends
# exactly once (one terminal status, one de-duplicated result event, one ledger row per
# model call). Prints how long the takeover took.
#
# The backlog at the kill is held by the users' limits, not by racing the workers: one
# task a minute per user, so the active replica admits one task of each user and the rest
# stay queued however fast or slow the machine is. After the kill the limit is raised
# through the surviving replica, whose scheduler must take over to admit them.
#   dispatcher_kill_test.sh BUILD_DIR RUN_DIR
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=$1
run_dir=$2
export AF_LOG_TAG=dispatcher-kill-test
source "$root/tools/lib/common.sh"
source "$root/tools/lib/fleet.sh"
source "$root/tests/e2e/lib.sh"

export LLM_SIM_LATENCY_MS=200
fleet_reset "$run_dir"
trap 'fleet_stop "$run_dir"' EXIT
fleet_start "$run_dir" "$build_dir" 2
first_url=$AGENTFLEET_URL
first_metrics=$AGENTFLEET_DISPATCHER_METRICS_URL
fleet_start_dispatcher "$run_dir" "$build_dir" dispatcher-2
second_url=$FLEET_LAST_URL
second_metrics=$FLEET_LAST_METRICS_URL
e2e_wait_consuming "$run_dir" worker-1 worker-2

is_leader() { curl -sS --max-time 5 "$1/metrics" | grep -q '^agentfleet_scheduler_is_leader 1'; }
# The leader: whichever replica's metrics say so (30 s).
deadline=$(($(af_now_ms) + 30000))
leader=""
while [[ -z "$leader" ]]; do
  if is_leader "$first_metrics"; then leader=first; elif is_leader "$second_metrics"; then leader=second; fi
  [[ -n "$leader" ]] && break
  (($(af_now_ms) < deadline)) || fail "no replica became the scheduler"
  sleep 0.1
done
if [[ "$leader" == first ]]; then
  victim=dispatcher survivor=dispatcher-2 survivor_url=$second_url survivor_metrics=$second_metrics
else
  victim=dispatcher-2 survivor=dispatcher survivor_url=$first_url survivor_metrics=$first_metrics
fi
is_leader "$survivor_metrics" && fail "both replicas say they are the scheduler"

# set_limits USER JSON: PUT /v1/users/USER/limits through the replica that survives.
set_limits() {
  local code
  code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 -X PUT \
    -H "Authorization: Bearer $AGENTFLEET_API_KEY" "$survivor_url/v1/users/$1/limits" -d "$2")
  [[ "$code" == 200 ]] || fail "setting the limits of $1 answered $code"
}

# 60 tasks of 10 users (dk-u*) limited to one task at a time and one task a minute,
# submitted through the replica that survives (two model calls of 200 ms and one tool
# call each): the active scheduler admits one task of each user and holds the other 50
# back until the limit is raised after the kill. The users of the work that arrives
# during the takeover (dk2-u*) have one task at a time only. A sampler watches
# invariant 5 through the takeover.
for ((u = 0; u < 10; u++)); do
  set_limits "dk-u$u" '{"max_concurrency":1,"requests_per_minute":1}'
  set_limits "dk2-u$u" '{"max_concurrency":1,"requests_per_minute":10000}'
done
(
  while :; do
    psql_q "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM tasks
            WHERE status IN ('dispatched', 'running') GROUP BY user_id) s" || true
    sleep 0.02
  done
) >"$run_dir/active.samples" 2>/dev/null &
sampler=$!
trap 'kill $sampler 2>/dev/null || true; fleet_stop "$run_dir"' EXIT
AGENTFLEET_URL=$survivor_url e2e_submit_todos dk 60 dk 10 120
# The active replica's scheduler is at work: it has admitted a task of every user (60 s).
admitted="SELECT count(DISTINCT user_id) FROM tasks WHERE user_id LIKE 'dk-u%' AND status <> 'queued'"
deadline=$(($(af_now_ms) + 60000))
until (($(psql_q "$admitted") == 10)); do
  (($(af_now_ms) < deadline)) || fail "the active scheduler admitted tasks of only $(psql_q "$admitted") of 10 users in 60 s"
  sleep 0.1
done
pid=$(awk -v name="$victim" '$2 == name {print $1}' "$run_dir/pids")
killed_at=$(af_now_ms)
kill -KILL "$pid"
queued=$(psql_q "SELECT count(*) FROM tasks WHERE status = 'queued'")
af_log "killed the active dispatcher ($victim, pid $pid) with $queued tasks still queued"
((queued > 0)) || fail "nothing was queued at the kill, so the takeover admitted nothing"

# Through the survivor: the held users' limit is raised (still one task at a time), and
# more work arrives during the takeover. Only a scheduler on the survivor can admit any
# of it now.
for ((u = 0; u < 10; u++)); do
  set_limits "dk-u$u" '{"max_concurrency":1,"requests_per_minute":10000}'
done
AGENTFLEET_URL=$survivor_url e2e_submit_todos dk2 40 dk2 10 120
deadline=$(($(af_now_ms) + 30000))
until is_leader "$survivor_metrics"; do
  (($(af_now_ms) < deadline)) || fail "the surviving replica did not take over within 30 s"
  sleep 0.05
done
# The takeover's moment is the survivor's own log line (the submissions above took a
# while); the polling above only bounds it.
took_over=$(grep '"msg":"this replica is now the active scheduler"' "$run_dir/logs/$survivor.log" |
  tail -n 1 | sed -n 's/^{"ts":"\([^"]*\)".*/\1/p')
[[ -n "$took_over" ]] || fail "the survivor is the scheduler but did not log when it took over"
takeover_ms=$(($(date -u -d "$took_over" +%s%3N) - killed_at))

e2e_wait_terminal "the dispatcher kill"
kill "$sampler" 2>/dev/null || true
most=$(sort -n "$run_dir/active.samples" | tail -n 1)
((most == 1)) || fail "a user had ${most:-no samples of} tasks dispatched or running at once; the limit is 1"

# Invariant 1 and 2: every task ended once, succeeded, announced (de-duplicated) once.
[[ $(psql_q "SELECT count(*) FROM tasks") == 100 ]] || fail "task count is not 100"
bad=$(psql_q "SELECT count(*) FROM tasks WHERE status <> 'succeeded'")
((bad == 0)) || fail "$bad tasks did not succeed: $(psql_q "SELECT task_id, status, error FROM tasks WHERE status <> 'succeeded' LIMIT 5")"
e2e_check_ledger 2
# Every result event is on the topic once the outbox (the worker's unconfirmed publishes,
# the relay's) is empty.
e2e_wait_outbox_empty "the dispatcher kill"
e2e_check_result_events 100
echo "dispatcher kill: the other replica took the scheduler over in ${takeover_ms} ms, with $queued" \
  "tasks queued; all 100 tasks succeeded once, with one result event each and one ledger row" \
  "per model call; no user ever had more than 1 task dispatched or running"
