#!/usr/bin/env bash
# agentctl tail --task against the embedded fleet (the ctest fixture): two followers of a
# task attached while it waits in the queue print its events live, as the replay of its
# history prints them; a task that fails says why; an unknown task exits 3. It waits for the
# dispatcher's gauge of open event streams to count its two followers, so it runs apart
# from the other tests that open or close event streams (RESOURCE_LOCK, CMakeLists.txt).
#
#   agentctl_follow_test.sh PATH/TO/agentctl   (AGENTFLEET_TEST_RUN_DIR names the fleet's folder)
set -euo pipefail
# shellcheck source=tests/integration/agentctl_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/agentctl_lib.sh"

echo "== tail --task: live and replayed events read the same"
# The followed task waits in the queue behind another task of its user (one task at a
# time), which holds the slot until the followers are attached and is then cancelled: what
# they print is live, not a replay of its history, however long attaching them takes.
ctl 0 limits set "$ut" --max-concurrency 1
ctl 0 submit --user "$ut" --timeout-s 120 --max-steps 50 "slow: steps=45"  # about 28 s
blocker=$out
deadline=$(($(now_ms) + 20000))
until ctl 0 --json status "$blocker" && grep -qE '"status":"(dispatched|running)"' <<<"$out"; do
  (($(now_ms) < deadline)) || fail "the blocking task was not dispatched: $out"
  sleep 0.1
done
ctl 0 submit --user "$ut" "slow: steps=2"
live_task=$out
# Event streams open on the dispatcher (its gauge), so the followers' attachment is seen.
open_streams() {
  curl -sS --max-time 5 "$AGENTFLEET_DISPATCHER_METRICS_URL/metrics" |
    awk '/^agentfleet_api_open_waits\{kind="event_stream"\}/ {print int($2)}'
}
streams_before=$(open_streams)
bounded_ctl tail --task "$live_task" --timeout-s 40 >"$tmp/live.out" 2>"$tmp/live.err" &
live_pid=$!
bounded_ctl --json tail --task "$live_task" --timeout-s 40 >"$tmp/live.json" 2>"$tmp/live.json.err" &
live_json_pid=$!
bg_pids="$live_pid $live_json_pid"
deadline=$(($(now_ms) + 20000))
until (($(open_streams) >= streams_before + 2)); do
  (($(now_ms) < deadline)) || fail "the two followers did not attach within 20 s"
  sleep 0.05
done
ctl 0 --json status "$live_task"
has "$out" '"status":"queued"'
ctl 0 cancel "$blocker"
wait "$live_pid" || fail "the live follower exited $?: $(cat "$tmp/live.err")"
wait "$live_json_pid" || fail "the live --json follower exited $?: $(cat "$tmp/live.json.err")"
bg_pids=""
ctl 0 limits set "$ut" --clear
live=$(cat "$tmp/live.out")
has "$live" "step 0"
has "$live" "  call search_items"
has "$live" "  search_items: ok"
has "$(tail -n 1 <<<"$live")" "done: succeeded action_completed: slow 完成"
# Live-shaped: the worker's done, a progress event (event, seq) carrying the result; a
# replayed done is the task's history.
tail -n 1 "$tmp/live.json" | python3 -c 'import json, sys
e = json.loads(sys.stdin.read())
assert e["event"] == "done" and e["data"]["event"] == "done" and "seq" in e["data"], e' ||
  fail "the first follower did not see the task live: $(tail -n 1 "$tmp/live.json")"
ctl 0 tail --task "$live_task" --timeout-s 20
[[ "$out" == "$live" ]] || fail "replayed events differ from the live ones:"$'\n'"$live"$'\n---\n'"$out"
ctl 0 --json tail --task "$live_task" --timeout-s 20
has "$(tail -n 1 <<<"$out")" '{"event":"done"'
has "$(tail -n 1 <<<"$out")" '"steps":['
ctl 0 submit --user "$ut" --max-steps 1 "bench: steps=3 calls=1"
ctl 1 tail --task "$out" --timeout-s 30
has "$out" "error (max_steps): reached max_steps (1)"
has "$out" "done: failed"
ctl 3 tail --task "$missing"

echo "agentctl tail --task: the live and the replayed events read the same"
