# shellcheck shell=bash
# Steps the e2e scripts share; source after tools/lib/common.sh and fleet.sh, once
# fleet_start has exported AGENTFLEET_PG_URL, AGENTFLEET_URL and TOOL_SIM_URL. Every wait
# is bounded and fails the test with what it waited for.

psql_q() { psql "$AGENTFLEET_PG_URL" -X -At -v ON_ERROR_STOP=1 -c "$1"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# e2e_wait_consuming RUN_DIR WORKER...: until each worker has joined the group (30 s).
e2e_wait_consuming() {
  local run_dir=$1 worker deadline
  shift
  for worker in "$@"; do
    deadline=$(($(af_now_ms) + 30000))
    until grep -q '"msg":"worker .* consuming' "$run_dir/logs/$worker.log"; do
      (($(af_now_ms) < deadline)) || fail "$worker did not start"
      sleep 0.1
    done
  done
}

# e2e_post_task JSON KEY: POST /v1/tasks, which must answer 201.
e2e_post_task() {
  local code
  code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 -X POST "$AGENTFLEET_URL/v1/tasks" \
    -H "Authorization: Bearer $AGENTFLEET_API_KEY" -d "$1")
  [[ "$code" == 201 ]] || fail "submit $2 answered $code"
}

# e2e_submit_todos USER_PREFIX COUNT KEY_PREFIX [USERS] [TIMEOUT_S]: COUNT tasks
# "今天下午去买东西" (two model calls, one create_item) from users USER_PREFIX-u0.. (20 by
# default, so the keys spread over the partitions).
e2e_submit_todos() {
  local prefix=$1 count=$2 key=$3 users=${4:-20} timeout_s=${5:-120} i
  for ((i = 0; i < count; i++)); do
    e2e_post_task "{\"user_id\":\"$prefix-u$((i % users))\",\"text\":\"今天下午去买东西\",\"idempotency_key\":\"$key$i\",\"timeout_s\":$timeout_s}" "$key$i"
  done
}

# e2e_submit_plan_todos USER_PREFIX COUNT KEY_PREFIX [TIMEOUT_S]: COUNT plan_execute tasks
# "计划：创建待办「整理周报」" (llm-sim's plan_todo: a replan, six model calls, four tool steps,
# one todo) from users USER_PREFIX-u0.., one task each.
e2e_submit_plan_todos() {
  local prefix=$1 count=$2 key=$3 timeout_s=${4:-120} i
  for ((i = 0; i < count; i++)); do
    e2e_post_task "{\"user_id\":\"$prefix-u$i\",\"text\":\"计划：创建待办「整理周报」\",\"strategy\":\"plan_execute\",\"idempotency_key\":\"$key$i\",\"timeout_s\":$timeout_s}" "$key$i"
  done
}

# e2e_busiest_worker WHERE: the worker holding the most tasks matching WHERE, as soon as
# there is one (30 s).
e2e_busiest_worker() {
  local where=$1 victim="" deadline=$(($(af_now_ms) + 30000))
  while [[ -z "$victim" ]]; do
    victim=$(psql_q "SELECT worker_id FROM tasks WHERE $where
                     GROUP BY worker_id ORDER BY count(*) DESC LIMIT 1")
    if [[ -z "$victim" ]]; then
      (($(af_now_ms) < deadline)) || fail "no task started running"
      sleep 0.05
    fi
  done
  echo "$victim"
}

# e2e_wait_terminal WHAT: until every task is terminal (120 s).
e2e_wait_terminal() {
  local open deadline=$(($(af_now_ms) + 120000))
  while :; do
    open=$(psql_q "SELECT count(*) FROM tasks WHERE status NOT IN ('succeeded','failed','timed_out','cancelled')")
    ((open == 0)) && return 0
    (($(af_now_ms) < deadline)) || fail "$open tasks not terminal 120 s after $1"
    sleep 0.2
  done
}

# e2e_wait_outbox_empty WHAT: until the outbox is empty (60 s), so that every result event
# of an ended task is on the results topic: a worker publishes after its finish commits and
# a result it could not confirm (killed, say) is sent by a dispatcher's relay 10 s later.
# Read the topic after this, not as soon as the rows are terminal.
e2e_wait_outbox_empty() {
  local left deadline=$(($(af_now_ms) + 60000))
  while :; do
    left=$(psql_q "SELECT count(*) FROM outbox")
    ((left == 0)) && return 0
    (($(af_now_ms) < deadline)) || fail "$left outbox rows still unpublished 60 s after $1"
    sleep 0.2
  done
}

# e2e_check_result_events TASKS: the results topic holds an event for exactly TASKS tasks,
# and a task announced more than once (the relay may send a result again after a kill:
# at-least-once) was announced alike each time: two different results for one task are
# a violation, not a duplicate. Read once the outbox is empty (e2e_wait_outbox_empty).
e2e_check_result_events() {
  local verdict
  verdict=$(timeout 30 kcat -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -C -t agent.tasks.results -e -q \
    -f '%s\n' | python3 -c '
import json, sys
seen = {}
for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    event = json.loads(line)
    seen.setdefault(event["task_id"], set()).add(json.dumps(event, sort_keys=True))
differ = [t for t, events in seen.items() if len(events) > 1]
print(len(seen), len(differ), " ".join(differ[:3]))
')
  local tasks differ which
  read -r tasks differ which <<<"$verdict"
  ((differ == 0)) || fail "$differ tasks have result events that differ (e.g. $which)"
  ((tasks == $1)) || fail "result events for $tasks of $1 tasks"
}

# e2e_check_ledger MODEL_CALLS: invariant 3 for every task: step rows numbered 0..n-1, one
# ledger row for each step row of a model call and none for the others (plan_execute's tool
# steps), totals equal to the ledger, MODEL_CALLS model calls each.
e2e_check_ledger() {
  local bad
  bad=$(psql_q "SELECT count(*) FROM tasks t WHERE
    (SELECT count(*) FROM task_steps s WHERE s.task_id = t.task_id) <> t.steps
    OR (SELECT coalesce(max(step), -1) FROM task_steps s WHERE s.task_id = t.task_id) <> t.steps - 1
    OR EXISTS (SELECT 1 FROM task_steps s FULL JOIN usage_ledger l USING (task_id, step)
               WHERE coalesce(s.task_id, l.task_id) = t.task_id
                 AND (s.task_id IS NULL OR l.task_id IS NULL) <> (s.model_reply->>'kind' IS NOT DISTINCT FROM 'tool_step'))
    OR (SELECT count(*) FROM usage_ledger l WHERE l.task_id = t.task_id) <> $1
    OR t.cost <> (SELECT coalesce(sum(cost), 0) FROM usage_ledger l WHERE l.task_id = t.task_id)")
  ((bad == 0)) || fail "$bad tasks whose steps, ledger and totals disagree"
}

# e2e_count_todos USER_PREFIX [USERS] [TITLE]: the todos titled TITLE ("去买东西" by default)
# tool-sim holds for those users.
e2e_count_todos() {
  local prefix=$1 users=${2:-20} title=${3:-去买东西} u n created=0
  for ((u = 0; u < users; u++)); do
    n=$(curl -sS --max-time 10 "$TOOL_SIM_URL/items?user_id=$prefix-u$u" | grep -o "\"title\":\"$title\"" | wc -l)
    created=$((created + n))
  done
  echo "$created"
}
