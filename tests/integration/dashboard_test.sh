#!/usr/bin/env bash
# The Grafana dashboard and the alert rules of the Helm chart, end to end, against the
# shared integration fleet: Debian's Prometheus server (loopback, a free port, a temporary
# folder) scrapes the dispatcher and the workers every second and evaluates
# helm/agentfleet/files/prometheus/alerts.yaml; a mixed workload runs through the API and
# Kafka (successes, failures, a tool error, a scenario-scoped model fault, timeouts, a queue
# timeout, cancellations, throttles, a 429, dead letters, a batch, long polls, an event
# stream); then every query of every panel of
# helm/agentfleet/files/dashboards/agentfleet.json must return data and name only exported
# metrics, and every alert rule must evaluate with health "ok" (tests/integration/
# dashboard_check.py). Users are this run's own; limits are restored on exit and the model
# fault is scoped to one scenario and bounded in count and time, so other tests sharing the
# fleet are unaffected. Prometheus is always stopped by the trap.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export AF_LOG_TAG=dashboard-test
# shellcheck source=tools/lib/common.sh
source "$root/tools/lib/common.sh"
set -a
# shellcheck disable=SC1091
source "$AGENTFLEET_TEST_RUN_DIR/env"
set +a

dashboard=$root/helm/agentfleet/files/dashboards/agentfleet.json
rules=$root/helm/agentfleet/files/prometheus/alerts.yaml
check=$root/tests/integration/dashboard_check.py
for tool in prometheus promtool python3 kcat psql curl; do
  command -v "$tool" >/dev/null || { af_log "$tool is missing (tools/setup installs it)"; exit 1; }
done

t0=$(af_now_ms)
work=$(mktemp -d /tmp/agentfleet-dashboard.XXXXXX)
prom_pid=""
run=$(date +%s%N | tail -c 10)
user="dash-$run"                 # every user of this run starts with it
limited_users=()                 # users whose limits this run changed

# stop_prometheus: SIGTERM (which `timeout` passes on), then SIGKILL to both after 10 s.
stop_prometheus() {
  [[ -n "$prom_pid" ]] || return 0
  if kill -0 "$prom_pid" 2>/dev/null; then
    kill -TERM "$prom_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$prom_pid" 2>/dev/null || break; sleep 0.1; done
    pkill -KILL -P "$prom_pid" 2>/dev/null || true
    kill -KILL "$prom_pid" 2>/dev/null || true
  fi
  wait "$prom_pid" 2>/dev/null || true
  prom_pid=""
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_prometheus
  local u
  for u in "${limited_users[@]}"; do  # back to the tier's defaults
    curl -sS --max-time 5 -o /dev/null -X PUT -H "Authorization: Bearer $AGENTFLEET_API_KEY" \
      "$AGENTFLEET_URL/v1/users/$u/limits" --data-binary '{}' || true
  done
  if ((rc != 0)) && [[ -s "$work/prometheus.log" ]]; then
    af_log "last lines of Prometheus's log:"
    tail -n 20 "$work/prometheus.log" >&2
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' INT TERM

fail() {
  af_log "FAIL: $*"
  exit 1
}

# ---------------------------------------------------------------- Prometheus
hostport() {
  local rest=${1#*://}
  echo "${rest%%/*}"
}
targets=""
IFS=, read -ra worker_urls <<<"$AGENTFLEET_WORKER_METRICS_URLS"
for url in "${worker_urls[@]}"; do targets+="${targets:+, }'$(hostport "$url")'"; done
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - '$rules'
scrape_configs:
  - job_name: agentfleet-dispatcher
    static_configs:
      - targets: ['$(hostport "$AGENTFLEET_DISPATCHER_METRICS_URL")']
  - job_name: agentfleet-worker
    static_configs:
      - targets: [$targets]
EOF
promtool check config "$work/prometheus.yml" >/dev/null || fail "promtool check config failed"

# A free port may be taken before Prometheus binds it: try a few.
prom=""
for _ in 1 2 3; do
  port=$(af_free_port)
  # `timeout` bounds its life even if this script is killed before its trap runs.
  timeout 900 prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
    --storage.tsdb.retention.time=1d --web.listen-address="127.0.0.1:$port" \
    --log.level=warn >"$work/prometheus.log" 2>&1 &
  prom_pid=$!
  deadline=$(($(af_now_ms) + 20000))
  while kill -0 "$prom_pid" 2>/dev/null && (($(af_now_ms) < deadline)); do
    if curl -sf --max-time 1 "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1; then
      prom="http://127.0.0.1:$port"
      break 2
    fi
    sleep 0.1
  done
  stop_prometheus
done
[[ -n "$prom" ]] || fail "Prometheus did not start"
af_log "Prometheus $(prometheus --version 2>&1 | head -n 1 | cut -d' ' -f3) on $prom scrapes" \
  "the dispatcher and ${#worker_urls[@]} workers every second"
# The workload starts after a first scrape of every process, so every counter's increase
# shows in a rate.
python3 "$check" wait-targets "$prom" "$(date +%s.%N)" 20 || fail "Prometheus does not scrape the fleet"

# ---------------------------------------------------------------- the workload
# call METHOD PATH EXPECTED_CODE [BODY]: an API request with the admin key; prints the body.
call() {
  local method=$1 path=$2 expected=$3 body=${4:-} code
  local -a data=()
  [[ -n "$body" ]] && data=(--data-binary "$body")
  code=$(curl -sS --max-time 40 -o "$work/body" -w '%{http_code}' -X "$method" \
    -H "Authorization: Bearer $AGENTFLEET_API_KEY" -H 'Content-Type: application/json' \
    "${data[@]}" "$AGENTFLEET_URL$path") || fail "$method $path: curl failed"
  [[ "$code" == "$expected" ]] || fail "$method $path: HTTP $code, expected $expected: $(head -c 500 "$work/body")"
  cat "$work/body"
}
field() {
  python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}
# submit USER TEXT [EXTRA]: POST /v1/tasks; EXTRA adds fields (',"timeout_s":1'); prints the id.
submit() {
  call POST /v1/tasks 201 "{\"user_id\":\"$1\",\"text\":\"$2\"${3:-}}" | field task_id
}
limits() {
  limited_users+=("$1")
  call PUT "/v1/users/$1/limits" 200 "$2" >/dev/null
}
sql() {
  psql "$AGENTFLEET_PG_URL" -X -At -v ON_ERROR_STOP=1 -c "$1"
}
no_limits='"requests_per_minute":1000000,"tokens_per_minute":1000000000'

# Limits for the throttles: one task at a time; one task a minute and one queued (the
# next submission is refused 429); one token a minute (the first task runs, the next waits).
limits "$user-conc" "{\"max_concurrency\":1,$no_limits}"
limits "$user-rpm" '{"requests_per_minute":1,"max_queued":1,"tokens_per_minute":1000000000}'
limits "$user-tpm" '{"tokens_per_minute":1}'

# Two 500s for the scenario only this test uses here: retried, then the task goes on.
curl -sS --max-time 5 -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$LLM_SIM_PORT/admin/faults" \
  --data-binary '{"mode":"http_500","scenario":"move_named_meeting","count":2,"duration_s":30}' |
  grep -qx 201 || fail "llm-sim refused the fault"

ok=$(submit "$user-ok" "bench: steps=2 calls=2")
for _ in 1 2 3; do submit "$user-ok" "bench: steps=2 calls=2" >/dev/null; done
submit "$user-ok" "今天下午去买东西" >/dev/null                    # create_todo: action_completed
submit "$user-ok" "完成报告提交" >/dev/null                        # no such todo: result type error
submit "$user-ok" "将看板会议改到晚上8点" >/dev/null               # the model fault, then not found
submit "$user-react" "bench: steps=1 calls=1" ',"model":"sim-react-model"' >/dev/null
submit "$user-react" "bench: steps=1 calls=2" ',"model":"sim-react-model"' >/dev/null
submit "$user-tool" "明天下午3点开会，看板评审" >/dev/null          # one of the two conflicts: a tool error
submit "$user-tool" "明天下午3点开会，看板评审" >/dev/null
submit "$user-fail" "bench: steps=5 calls=1" ',"max_steps":2' >/dev/null   # failed
submit "$user-late" "slow: steps=5" ',"timeout_s":1' >/dev/null            # timed_out
for _ in 1 2 3; do submit "$user-conc" "slow: steps=1" >/dev/null; done   # concurrency throttles
submit "$user-conc" "bench: steps=1 calls=1" ',"schedule_timeout_s":1' >/dev/null  # expires queued
submit "$user-rpm" "bench: steps=1 calls=1" >/dev/null
rpm_queued=$(submit "$user-rpm" "bench: steps=1 calls=1")          # held back by rpm
call POST /v1/tasks 429 "{\"user_id\":\"$user-rpm\",\"text\":\"bench: steps=1 calls=1\"}" >/dev/null
submit "$user-tpm" "bench: steps=1 calls=1" >/dev/null
tpm_queued=$(submit "$user-tpm" "bench: steps=1 calls=1")          # held back by tpm
# Long enough to be running still when the cancel comes, however loaded the machine (30
# steps of 600 ms; it ends by the cancel): slow: steps=5 had ended first under a full
# suite's load.
running=$(submit "$user-cancel" "slow: steps=30" ',"max_steps":40,"timeout_s":120')
call POST "/v1/batches?user_id=$user-batch&priority=batch" 201 \
  "$(printf '{"user_id":"%s","text":"bench: steps=1 calls=1"}\n' "$user-batch" "$user-batch" "$user-batch")" >/dev/null
call POST /v1/tasks 400 "{\"user_id\":\"$user-bad\"}" >/dev/null
call GET /v1/tasks/00000000-0000-4000-8000-000000000000 404 >/dev/null

# Kafka: a submission and a message that is not JSON on the submit topic (dead-lettered by
# the dispatcher), and one that is not JSON on the dispatch topic (dead-lettered by a worker).
printf '{"user_id":"%s","text":"bench: steps=1 calls=1","idempotency_key":"%s"}\n' "$user-kafka" "$user-kafka" |
  timeout 20 kcat -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -P -t agent.tasks.submit -k "$user-kafka"
printf 'dashboard test: not json {\n' |
  timeout 20 kcat -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -P -t agent.tasks.submit -k "$user-kafka"
printf 'dashboard test: not json {\n' |
  timeout 20 kcat -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -P -t agent.tasks.dispatch -k "$user-kafka"

# A running task cancelled (202), queued ones cancelled (200).
started=""
for _ in $(seq 600); do
  [[ "$(sql "SELECT status FROM tasks WHERE task_id = '$running'")" == running ]] && { started=1; break; }
  sleep 0.1
done
[[ -n "$started" ]] || fail "task $running did not start running within 60 s"
call POST "/v1/tasks/$running/cancel" 202 >/dev/null
call POST "/v1/tasks/$rpm_queued/cancel" 200 >/dev/null
call POST "/v1/tasks/$tpm_queued/cancel" 200 >/dev/null

# A long poll, an event stream and the bill.
call GET "/v1/tasks/$ok?wait=20" 200 | field status | grep -qx succeeded || fail "task $ok did not succeed"
curl -sS -N --max-time 10 -H "Authorization: Bearer $AGENTFLEET_API_KEY" \
  "$AGENTFLEET_URL/v1/tasks/$ok/events" | grep -q '^event: done' || fail "no done event for $ok"
call GET "/v1/users/$user-ok/usage" 200 >/dev/null

# Every task of the run ended (the one kcat submitted included).
live_tasks="SELECT count(*) FILTER (WHERE status IN ('queued', 'dispatched', 'running')),
                   count(*) FILTER (WHERE user_id = '$user-kafka')
            FROM tasks WHERE user_id LIKE '$user-%'"
deadline=$(($(af_now_ms) + 60000))
until [[ "$(sql "$live_tasks")" == "0|1" ]]; do
  (($(af_now_ms) < deadline)) || fail "tasks still live after 60 s (live|kafka): $(sql "$live_tasks")"
  sleep 0.2
done
done_at=$(date +%s.%N)
outcomes=$(sql "SELECT status || ' ' || coalesce(result_type, '-') || ' ' || count(*)
                FROM tasks WHERE user_id LIKE '$user-%' GROUP BY status, result_type ORDER BY 1")
af_log "workload ended after $((($(af_now_ms) - t0) / 1000)) s: ${outcomes//$'\n'/, }"
for status in succeeded failed timed_out cancelled; do
  grep -q "^$status " <<<"$outcomes" || fail "no task ended $status: $outcomes"
done

# ---------------------------------------------------------------- the dashboard and the rules
# Scrapes after the end carry every count; then every panel and every rule is checked.
python3 "$check" wait-targets "$prom" "$done_at" 20 || fail "Prometheus did not scrape the end of the workload"
python3 "$check" live "$prom" "$dashboard" "$rules" 20 || fail "the dashboard or the alert rules failed (above)"
af_log "dashboard and alert rules checked against the fleet in $((($(af_now_ms) - t0) / 1000)) s"
