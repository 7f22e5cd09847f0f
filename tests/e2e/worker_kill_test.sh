#!/usr/bin/env bash
# SIGKILL of a worker that holds running tasks loses nothing (invariant 1), bills no model
# call twice (3) and repeats no tool side effect (4). The fleet is this test's own, with a
# 4 s lease so the dispatcher's recovery re-dispatches quickly; the survivor resumes the
# tasks from their checkpoints with the same idempotency keys.
#   worker_kill_test.sh BUILD_DIR RUN_DIR model   the kill lands while tasks wait on a slow
#                                                 model (300 ms a call)
#   worker_kill_test.sh BUILD_DIR RUN_DIR tool    the kill lands while create_item calls
#                                                 are in flight (1.5 s each); create_item is
#                                                 not idempotent, so a resumed step does not
#                                                 send it again: the model reads that its
#                                                 outcome is unknown (docs/tools.md)
#   worker_kill_test.sh BUILD_DIR RUN_DIR plan    plan_execute tasks (the plan_todo scenario:
#                                                 six model calls, four tool steps of 1.5 s);
#                                                 the kill lands in the middle of a plan; here
#                                                 create_item is configured idempotent, so
#                                                 resumed steps re-send their calls with their
#                                                 original keys
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=$1
run_dir=$2
mode=${3:-model}
export AF_LOG_TAG=worker-kill-test-$mode
source "$root/tools/lib/common.sh"
source "$root/tools/lib/fleet.sh"
source "$root/tests/e2e/lib.sh"

export AGENTFLEET_LEASE_S=4 AGENTFLEET_HEARTBEAT_S=1
case "$mode" in
  model) export LLM_SIM_LATENCY_MS=300 ;;
  tool | plan) export LLM_SIM_LATENCY_MS=50 TOOL_SIM_LATENCY=fixed:1500 ;;
  *) echo "usage: worker_kill_test.sh BUILD_DIR RUN_DIR model|tool|plan" >&2; exit 2 ;;
esac
fleet_reset "$run_dir"
if [[ "$mode" == plan ]]; then
  # The embedded default with create_item marked idempotent (its service keeps keys); the
  # prompt file it names is found beside the original.
  mkdir -p "$run_dir"
  awk -v dir="$root/config/" '/^  - name: /{tool=$3} tool == "create_item" && /^    idempotent: false$/ {
         sub(/false/, "true")} /^  system_prompt_file: [^\/]/ {sub(/: /, ": " dir)} {print}' \
    "$root/config/agentfleet.yaml" >"$run_dir/agentfleet.yaml"
  grep -A12 -- '- name: create_item' "$run_dir/agentfleet.yaml" | grep -q 'idempotent: true' ||
    fail "could not mark create_item idempotent in the test's configuration"
  export FLEET_CONFIG="$run_dir/agentfleet.yaml"
fi
trap 'fleet_stop "$run_dir"' EXIT
fleet_start "$run_dir" "$build_dir" 2
e2e_wait_consuming "$run_dir" worker-1 worker-2

# 40 tasks from 20 users (keys spread over the partitions), each creating one todo: two
# model calls and one tool call with a side effect.
# plan: 20 plan_execute tasks, one per user, each creating one todo.
if [[ "$mode" == plan ]]; then
  tasks=20
  e2e_submit_plan_todos kill "$tasks" p 120
  todo_title=整理周报
  model_calls=6
else
  tasks=40
  # A deadline far from what a resumed task needs (lease expiry, the dead member's session
  # timeout and rebalance, the rest of its steps): the kill, not the clock, is under test.
  e2e_submit_todos kill "$tasks" k 20 120
  todo_title=去买东西
  model_calls=2
fi

# Kill the worker running the most tasks, as soon as it runs some (in tool mode: as soon as
# some of its tasks have a checkpointed model step whose tool calls have not finished).
if [[ "$mode" == tool ]]; then
  in_flight_where="status = 'running' AND EXISTS (SELECT 1 FROM task_steps s
    WHERE s.task_id = tasks.task_id AND s.observations IS NULL)"
elif [[ "$mode" == plan ]]; then
  # Planned and into its steps: a tool step (1.5 s) is running or about to.
  in_flight_where="status = 'running' AND EXISTS (SELECT 1 FROM task_steps s
    WHERE s.task_id = tasks.task_id AND s.model_reply->>'role' = 'planner')"
else
  in_flight_where="status = 'running'"
fi
victim=$(e2e_busiest_worker "$in_flight_where")
pid=$(awk -v name="$victim" '$2 == name {print $1}' "$run_dir/pids")
kill -KILL "$pid"
# What the victim held at the kill, counted after it: a dead worker's rows stay as they
# were until their leases expire (3-4 s), whereas counted before the kill its tasks could
# still move on in between.
held=$(psql_q "SELECT count(*) FROM tasks WHERE status = 'running' AND worker_id = '$victim'")
in_tools=$(psql_q "SELECT count(*) FROM tasks WHERE $in_flight_where AND worker_id = '$victim'
                   AND EXISTS (SELECT 1 FROM task_steps s WHERE s.task_id = tasks.task_id
                               AND s.observations IS NULL)")
af_log "killed $victim (pid $pid) while it ran $held tasks, $in_tools of them in tool calls"
((held > 0)) || fail "$victim held no running task at the kill, so the kill tests nothing"

e2e_wait_terminal "the kill"

# Invariant 1: every task ended, and (the model and tools being healthy) succeeded. In tool
# mode, a task whose create the victim had in flight was not sent again: its model read
# "outcome_unknown" and reported an error (llm-sim's create_todo does not check first).
[[ $(psql_q "SELECT count(*) FROM tasks") == "$tasks" ]] || fail "task count changed"
unknown=$(psql_q "SELECT count(DISTINCT task_id) FROM task_steps
                  WHERE trace @> '[{\"tool\": \"create_item\", \"status\": \"outcome_unknown\"}]'")
bad=$(psql_q "SELECT count(*) FROM tasks WHERE status <> 'succeeded' OR (result_type <> 'action_completed'
              AND NOT EXISTS (SELECT 1 FROM task_steps s WHERE s.task_id = tasks.task_id AND s.trace @>
                '[{\"tool\": \"create_item\", \"status\": \"outcome_unknown\"}]'))")
((bad == 0)) || fail "$bad tasks did not succeed: $(psql_q "SELECT task_id, status, result_type, error FROM tasks WHERE status <> 'succeeded' OR result_type <> 'action_completed'")"
errors=$(psql_q "SELECT count(*) FROM tasks WHERE result_type <> 'action_completed'")
((errors == unknown)) || fail "$errors tasks reported an error, $unknown had a create of unknown outcome"
resumed=$(psql_q "SELECT count(*) FROM tasks WHERE attempt > 1")
((resumed > 0)) || fail "no task was resumed, so the kill tested nothing"

# Invariant 3: one ledger row per model call, steps numbered 0..n-1, task totals = ledger
# (plan_execute's tool steps are steps without a model call, and without a ledger row).
e2e_check_ledger "$model_calls"

# Invariant 4: one todo per task in tool-sim, whatever was replayed.
stats=$(curl -sS --max-time 10 "$TOOL_SIM_URL/stats")
created=$(e2e_count_todos kill 20 "$todo_title")
if [[ "$mode" == plan ]]; then
  ((unknown == 0)) || fail "$unknown tasks reported a create of unknown outcome; create_item is idempotent here"
  ((created == tasks)) || fail "tool-sim holds $created todos for $tasks tasks ($stats)"
else
  # A create not sent again acted once if the victim's request had reached tool-sim (which
  # runs a call whose client died), else not at all: never twice.
  ((created <= tasks && created >= tasks - unknown)) ||
    fail "tool-sim holds $created todos for $tasks tasks, $unknown of unknown outcome ($stats)"
fi
twice=$(curl -sS --max-time 10 "$TOOL_SIM_URL/records" | grep -o '"idempotency_key":"[^"]*"' | sort | uniq -d | wc -l)
((twice == 0)) || fail "$twice idempotency keys executed twice in tool-sim"

# Every task announced once at least (at-least-once; the relay may repeat after a kill). A
# result the victim committed but had not published is sent by the relay 10 s later: read
# the topic once the outbox is empty.
e2e_wait_outbox_empty "the kill"
e2e_check_result_events "$tasks"

if [[ "$mode" == tool ]]; then
  # Every step the victim left in its calls resumed without sending its create again.
  ((in_tools > 0)) || fail "no tool call was in flight at the kill"
  ((unknown >= in_tools)) ||
    fail "$in_tools tasks were in tool calls at the kill, only $unknown reported an unknown outcome"
  echo "worker kill during tool calls: $in_tools tasks were in tool calls; $unknown creates not" \
    "sent again (outcome_unknown), $errors tasks reported it"
elif [[ "$mode" == plan ]]; then
  replays=$(sed -n 's/.*"duplicates":\([0-9]*\).*/\1/p' <<<"$stats")
  echo "worker kill in plans: tool-sim replayed ${replays:-?} calls by their idempotency keys"
fi
echo "worker kill ($mode): $held tasks held by the killed worker, $resumed resumed, all $tasks ended;"
echo "  ledger rows = model calls, $created todos for $tasks tasks; tool-sim: $stats"
