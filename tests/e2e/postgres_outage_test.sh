#!/usr/bin/env bash
# A Postgres outage of OUTAGE_S seconds (60 by default) while tasks run and submissions keep
# coming, over HTTP and over the Kafka submit topic. Nothing is lost: every task accepted
# before, and every submit-topic message produced during the outage, ends once and
# succeeded; no task is charged an attempt for the outage (its workers fenced themselves and
# handed their tasks back); and no submission path stays stalled: within 5 s of Postgres's
# return an HTTP submission is accepted and the messages produced meanwhile are stored.
#   postgres_outage_test.sh BUILD_DIR RUN_DIR [OUTAGE_S]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=$1
run_dir=$2
outage_s=${3:-60}
export AF_LOG_TAG=postgres-outage-test
source "$root/tools/lib/common.sh"
source "$root/tools/lib/fleet.sh"
source "$root/tests/e2e/lib.sh"

export LLM_SIM_LATENCY_MS=400
fleet_reset "$run_dir"
trap 'fleet_stop "$run_dir"' EXIT
fleet_start "$run_dir" "$build_dir" 2
e2e_wait_consuming "$run_dir" worker-1 worker-2
pg_port=$(cat "$run_dir/pg/port")

# Precondition, waited on: tasks are running when Postgres goes away.
e2e_submit_todos po 30 before 10 300
deadline=$(($(af_now_ms) + 30000))
until [[ $(psql_q "SELECT count(*) FROM tasks WHERE status = 'running'") -ge 3 ]]; do
  (($(af_now_ms) < deadline)) || fail "no tasks ran before the outage"
  sleep 0.05
done
"$root/tools/devpg" stop "$run_dir/pg" >/dev/null
down_at=$(af_now_ms)
af_log "Postgres stopped for $outage_s s"

# During the outage: submit-topic messages (kept, stored later) and HTTP submissions (503).
topic_messages=20
for ((i = 0; i < topic_messages; i++)); do
  printf 'po-topic-u%d:{"user_id":"po-topic-u%d","text":"今天下午去买东西","idempotency_key":"topic%d","timeout_s":300}\n' \
    "$((i % 5))" "$((i % 5))" "$i"
done | kcat -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -P -t agent.tasks.submit -K: -X message.timeout.ms=30000
code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 20 -X POST "$AGENTFLEET_URL/v1/tasks" \
  -H "Authorization: Bearer $AGENTFLEET_API_KEY" -d '{"user_id":"po-http","text":"x","idempotency_key":"refused"}' || true)
# The API promises a 503 (retry) while the store is away, never another answer or silence.
[[ "$code" == 503 ]] || fail "an HTTP submission during the outage answered $code (expected 503)"
# The outage's length is what this test is about: the rest of it is waited out.
while (($(af_now_ms) < down_at + outage_s * 1000)); do sleep 0.5; done
"$root/tools/devpg" start "$run_dir/pg" "$pg_port" >/dev/null
up_at=$(af_now_ms)
af_log "Postgres is back"

# Within 5 s: an HTTP submission is accepted, and the topic's messages are stored.
http_ms=""
until [[ -n "$http_ms" ]]; do
  code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 5 -X POST "$AGENTFLEET_URL/v1/tasks" \
    -H "Authorization: Bearer $AGENTFLEET_API_KEY" \
    -d '{"user_id":"po-http","text":"今天下午去买东西","idempotency_key":"after","timeout_s":300}' || true)
  if [[ "$code" == 201 || "$code" == 200 ]]; then http_ms=$(($(af_now_ms) - up_at)); fi
  (($(af_now_ms) < up_at + 30000)) || fail "no HTTP submission accepted within 30 s of Postgres's return"
  [[ -n "$http_ms" ]] || sleep 0.1
done
topic_ms=""
until [[ -n "$topic_ms" ]]; do
  stored=$(psql_q "SELECT count(*) FROM tasks WHERE user_id LIKE 'po-topic-%'" 2>/dev/null || echo 0)
  ((stored >= topic_messages)) && topic_ms=$(($(af_now_ms) - up_at))
  (($(af_now_ms) < up_at + 30000)) || fail "$stored of $topic_messages submit-topic messages stored 30 s after Postgres's return"
  [[ -n "$topic_ms" ]] || sleep 0.1
done
af_log "after the outage: HTTP accepted in $http_ms ms, the submit topic's messages stored in $topic_ms ms"
((http_ms <= 5000)) || fail "HTTP submissions stalled $http_ms ms past the outage; the bound is 5 s"
((topic_ms <= 5000)) || fail "the submit topic stalled $topic_ms ms past the outage; the bound is 5 s"

deadline=$(($(af_now_ms) + 240000))
while :; do
  open=$(psql_q "SELECT count(*) FROM tasks WHERE status NOT IN ('succeeded','failed','timed_out','cancelled')")
  ((open == 0)) && break
  (($(af_now_ms) < deadline)) || fail "$open tasks not terminal 240 s after the outage"
  sleep 0.5
done
total=$(psql_q "SELECT count(*) FROM tasks")
((total == 30 + topic_messages + 1)) || fail "$total tasks stored; expected $((30 + topic_messages + 1))"
bad=$(psql_q "SELECT count(*) FROM tasks WHERE status <> 'succeeded'")
((bad == 0)) || fail "$bad tasks did not succeed: $(psql_q "SELECT task_id, status, error FROM tasks WHERE status <> 'succeeded' LIMIT 5")"
charged=$(psql_q "SELECT count(*) FROM tasks WHERE attempt - releases > 1")
((charged == 0)) || fail "$charged tasks were charged an attempt for the outage: $(psql_q "SELECT task_id, attempt, releases FROM tasks WHERE attempt - releases > 1 LIMIT 5")"
e2e_check_ledger 2
e2e_wait_outbox_empty "the outage"
e2e_check_result_events "$total"
echo "postgres outage of $outage_s s: $total tasks succeeded once, none charged an attempt;" \
  "HTTP accepted ${http_ms} ms and the submit topic stored ${topic_ms} ms after Postgres's return"
