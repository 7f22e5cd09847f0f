#!/usr/bin/env bash
# The active scheduler's path to Postgres goes silent without closing (a blackhole: no FIN,
# no RST, nothing answers). Postgres ends the silent session after leader_silence_s (10 s),
# which releases the scheduler lock; the standby replica takes over and admits work within
# 15 s of the silence; the silent replica gives the lock up on its side too (its pass gets no
# answer within the client-side deadline). Every task still ends once. Prints the takeover.
#   leader_blackhole_test.sh BUILD_DIR RUN_DIR
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=$1
run_dir=$2
export AF_LOG_TAG=leader-blackhole-test
source "$root/tools/lib/common.sh"
source "$root/tools/lib/fleet.sh"
source "$root/tests/e2e/lib.sh"

export LLM_SIM_LATENCY_MS=50
fleet_reset "$run_dir"
trap 'fleet_stop "$run_dir"' EXIT
fleet_start "$run_dir" "$build_dir" 1
e2e_wait_consuming "$run_dir" worker-1
first_pid=$(awk '$2 == "dispatcher" {print $1}' "$run_dir/pids")

is_leader() { curl -sS --max-time 5 "$1/metrics" 2>/dev/null | grep -q '^agentfleet_scheduler_is_leader 1'; }
wait_leader() {  # METRICS_URL WHAT BOUND_MS
  local deadline=$(($(af_now_ms) + $3))
  until is_leader "$1"; do
    (($(af_now_ms) < deadline)) || fail "$2 did not become the scheduler"
    sleep 0.05
  done
}

# A replica whose every Postgres connection goes through a fault proxy becomes the leader:
# the first replica stops (cleanly, releasing the lock) once the proxied one is up.
pg_port=$(cat "$run_dir/pg/port")
fleet_start_faultproxy "$run_dir" "$build_dir" pg-proxy-dispatcher "127.0.0.1:$pg_port"
proxy_control=$FLEET_LAST_PROXY_CONTROL
proxied_url=${AGENTFLEET_PG_URL/:$pg_port\//:$FLEET_LAST_PROXY_PORT/}
[[ "$proxied_url" != "$AGENTFLEET_PG_URL" ]] || fail "could not point the URL at the proxy"
AGENTFLEET_PG_URL=$proxied_url fleet_start_dispatcher "$run_dir" "$build_dir" dispatcher-proxied
proxied_metrics=$FLEET_LAST_METRICS_URL
kill -TERM "$first_pid"
wait_leader "$proxied_metrics" "the proxied replica" 30000
# The standby, connected directly; tasks are submitted through it.
fleet_start_dispatcher "$run_dir" "$build_dir" dispatcher-standby
standby_metrics=$FLEET_LAST_METRICS_URL
export AGENTFLEET_URL=$FLEET_LAST_URL
is_leader "$standby_metrics" && fail "the standby says it is the scheduler while the leader is fine"
e2e_submit_todos lb-before 5 before 5 120
e2e_wait_terminal "the tasks before the fault"

# The leader's path goes silent; work keeps arriving through the standby.
fleet_fault "$proxy_control" blackhole >/dev/null
silent_at=$(af_now_ms)
e2e_submit_todos lb-after 10 after 5 120
deadline=$((silent_at + 30000))
until [[ $(psql_q "SELECT count(*) FROM tasks WHERE user_id LIKE 'lb-after-%' AND status <> 'queued'") -gt 0 ]]; do
  (($(af_now_ms) < deadline)) || fail "nothing was admitted within 30 s of the leader going silent"
  sleep 0.05
done
admitted_ms=$(($(af_now_ms) - silent_at))
# Only the standby can have admitted it (the leader's statements reach nobody): it says so
# (its metrics answer within a few seconds on a busy machine).
wait_leader "$standby_metrics" "the standby, which admitted work," 10000
af_log "the standby admitted work ${admitted_ms} ms after the leader's connection went silent"
((admitted_ms <= 15000)) || fail "the takeover took ${admitted_ms} ms; the bound is 15 s"
holders=$(psql_q "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 7311001 AND granted")
((holders == 1)) || fail "$holders sessions hold the scheduler lock"

# The silent replica notices on its own and stops scheduling.
deadline=$(($(af_now_ms) + 30000))
until grep -q 'lost the scheduler lock' "$run_dir/logs/dispatcher-proxied.log"; do
  (($(af_now_ms) < deadline)) || fail "the silent replica never gave the lock up"
  sleep 0.1
done
fleet_fault "$proxy_control" pass >/dev/null
e2e_wait_terminal "the takeover"
bad=$(psql_q "SELECT count(*) FROM tasks WHERE status <> 'succeeded'")
((bad == 0)) || fail "$bad tasks did not succeed"
[[ $(psql_q "SELECT count(*) FROM tasks") == 15 ]] || fail "task count is not 15"
e2e_check_ledger 2
is_leader "$proxied_metrics" && fail "the formerly silent replica says it is the scheduler again"
echo "leader blackhole: the standby admitted work ${admitted_ms} ms after the leader's" \
  "connection went silent; 15 tasks succeeded once each"
