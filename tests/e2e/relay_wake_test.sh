#!/usr/bin/env bash
# The outbox relay publishes a dispatch message as soon as the scheduler has committed it,
# not at its next poll: with the poll set to 60 s, three tasks submitted one after another
# (each after the previous one ended) all succeed within 30 s. Without the wake-up each
# would wait for a poll of its own after the previous one's, at least 60 s per task.
#   relay_wake_test.sh BUILD_DIR RUN_DIR
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=$1
run_dir=$2
export AF_LOG_TAG=relay-wake
source "$root/tools/lib/common.sh"
source "$root/tools/lib/fleet.sh"
source "$root/tests/e2e/lib.sh"
fleet_reset "$run_dir"
trap 'fleet_stop "$run_dir"' EXIT
AGENTFLEET_RELAY_INTERVAL_MS=60000 fleet_start "$run_dir" "$build_dir" 1
e2e_wait_consuming "$run_dir" worker-1

started=$(af_now_ms)
for i in 1 2 3; do
  body=$(curl -sS --max-time 10 -X POST "$AGENTFLEET_URL/v1/tasks" \
    -H "Authorization: Bearer $AGENTFLEET_API_KEY" \
    -d "{\"user_id\":\"relay-u\",\"text\":\"bench: steps=1 calls=1\",\"idempotency_key\":\"relay-$i\",\"priority\":\"interactive\"}")
  task=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["task_id"])' "$body") ||
    fail "submit $i: $body"
  status=""
  while [[ "$status" != succeeded ]]; do
    (($(af_now_ms) - started < 30000)) || fail "task $i ($task) is still '$status' after 30 s: the relay waited for its poll"
    status=$(curl -sS --max-time 15 -H "Authorization: Bearer $AGENTFLEET_API_KEY" \
      "$AGENTFLEET_URL/v1/tasks/$task?wait=5" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')
    [[ "$status" =~ ^(failed|timed_out|cancelled)$ ]] && fail "task $i ended $status"
  done
  echo "task $i succeeded $(($(af_now_ms) - started)) ms after the first submission"
done
echo "relay wake: three tasks in a row succeeded with a 60 s relay poll"
