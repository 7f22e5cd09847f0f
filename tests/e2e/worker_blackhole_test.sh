#!/usr/bin/env bash
# A worker's path to Postgres goes silent without closing while it runs tasks. It fences
# itself (no renewal of its liveness within the lease less the margin: it stops calling
# models and tools), recovery gives its tasks to the other worker, and once the path is back
# it hands back what it held: a task taken over meanwhile keeps its new owner, and no task is
# charged an attempt for it (attempt - releases stays 1). Every task ends once, no tool side
# effect happens twice, no model call is billed twice.
#   worker_blackhole_test.sh BUILD_DIR RUN_DIR
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=$1
run_dir=$2
export AF_LOG_TAG=worker-blackhole-test
source "$root/tools/lib/common.sh"
source "$root/tools/lib/fleet.sh"
source "$root/tests/e2e/lib.sh"

export AGENTFLEET_LEASE_S=6 AGENTFLEET_HEARTBEAT_S=1 LLM_SIM_LATENCY_MS=300
fleet_reset "$run_dir"
trap 'fleet_stop "$run_dir"' EXIT
fleet_start "$run_dir" "$build_dir" 1
pg_port=$(cat "$run_dir/pg/port")
fleet_start_faultproxy "$run_dir" "$build_dir" pg-proxy-worker-2 "127.0.0.1:$pg_port"
proxy_control=$FLEET_LAST_PROXY_CONTROL
AGENTFLEET_PG_URL=${AGENTFLEET_PG_URL/:$pg_port\//:$FLEET_LAST_PROXY_PORT/} \
  fleet_start_worker "$run_dir" "$build_dir" worker-2
e2e_wait_consuming "$run_dir" worker-1 worker-2

# Precondition, waited on: worker-2 runs tasks when its path goes silent. Tasks keep
# arriving (one user each) until it holds some, bounded by time, not by a count: a worker
# that joined second gets its partitions only once the group has rebalanced (up to the
# session timeout), and a fast machine submits many tasks before that. They arrive six at a
# time, so that each worker holds several at once however slowly this loop goes round (one
# at a time, a loaded machine submitted too slowly for 3 to overlap in 60 s).
i=0
deadline=$(($(af_now_ms) + 60000))
until [[ $(psql_q "SELECT count(*) FROM tasks WHERE status = 'running' AND worker_id = 'worker-2'") -ge 3 ]]; do
  (($(af_now_ms) < deadline)) || fail "worker-2 never ran 3 tasks at once"
  for _ in 1 2 3 4 5 6; do
    e2e_post_task "{\"user_id\":\"wb-u$i\",\"text\":\"今天下午去买东西\",\"idempotency_key\":\"wb$i\",\"timeout_s\":120}" "wb$i"
    i=$((i + 1))
  done
  ((i < 1000)) || fail "1000 tasks submitted and worker-2 still runs fewer than 3"
  sleep 0.05
done
fleet_fault "$proxy_control" blackhole >/dev/null
held=$(psql_q "SELECT string_agg(task_id::text || ':' || attempt, ' ') FROM tasks
               WHERE status = 'running' AND worker_id = 'worker-2'")
af_log "worker-2's path to Postgres is silent; it held: $held"

deadline=$(($(af_now_ms) + 20000))
until grep -q '"msg":"fenced' "$run_dir/logs/worker-2.log"; do
  (($(af_now_ms) < deadline)) || fail "worker-2 did not fence itself within 20 s"
  sleep 0.1
done
# Its tasks are taken over (the other worker runs them) while it is still cut off.
deadline=$(($(af_now_ms) + 30000))
for entry in $held; do
  id=${entry%%:*}
  until [[ $(psql_q "SELECT count(*) FROM tasks WHERE task_id = '$id' AND (status <> 'running' OR worker_id <> 'worker-2')") == 1 ]]; do
    (($(af_now_ms) < deadline)) || fail "task $id was not taken over while worker-2 was cut off"
    sleep 0.1
  done
done
fleet_fault "$proxy_control" pass >/dev/null
deadline=$(($(af_now_ms) + 40000))
until grep -q '"msg":"fence lifted' "$run_dir/logs/worker-2.log"; do
  (($(af_now_ms) < deadline)) || fail "worker-2 did not come back after its path did"
  sleep 0.1
done

e2e_wait_terminal "the blackhole"
tasks=$i
bad=$(psql_q "SELECT count(*) FROM tasks WHERE status <> 'succeeded'")
((bad == 0)) || fail "$bad tasks did not succeed: $(psql_q "SELECT task_id, status, error FROM tasks WHERE status <> 'succeeded' LIMIT 5")"
charged=$(psql_q "SELECT count(*) FROM tasks WHERE attempt - releases > 1")
((charged == 0)) || fail "$charged tasks were charged an attempt for the blackhole: $(psql_q "SELECT task_id, attempt, releases FROM tasks WHERE attempt - releases > 1 LIMIT 5")"
e2e_check_ledger 2
# A create that worker-2 had checkpointed but whose answer it could not save is not sent
# again by the attempt that resumes it (create_item is not idempotent): it acted once if
# worker-2's request reached tool-sim, else not at all; never twice.
unknown=$(psql_q "SELECT count(DISTINCT task_id) FROM task_steps
                  WHERE trace @> '[{\"tool\": \"create_item\", \"status\": \"outcome_unknown\"}]'")
created=$(e2e_count_todos wb "$tasks")
((created <= tasks && created >= tasks - unknown)) ||
  fail "$created todos for $tasks tasks, $unknown of unknown outcome: a side effect happened twice or not at all"
twice=$(curl -sS --max-time 10 "$TOOL_SIM_URL/records" | grep -o '"idempotency_key":"[^"]*"' | sort | uniq -d | wc -l)
((twice == 0)) || fail "$twice idempotency keys executed twice in tool-sim"
echo "worker blackhole: worker-2 fenced itself, its $(wc -w <<<"$held") tasks were taken over," \
  "it came back and handed them back; $tasks tasks succeeded once ($unknown creates of unknown" \
  "outcome not sent again), none charged an attempt"
