#!/usr/bin/env bash
# agentctl against the embedded fleet (the ctest fixture): every subcommand, what it prints
# and the exit code scripts rely on. Users and batches are this run's own (ctl-*-<run>),
# limits changed here are cleared again, so the shared fleet is left as it was. Every wait
# is bounded: each agentctl run by `timeout` (90 s at most) and by the script's own budget,
# which ends before the ctest TIMEOUT (500 s) with a message naming the step. Following a
# task's events live (`tail --task`) is agentctl_follow_test.sh: it waits on a fleet-wide
# gauge, which ties it to the tests that open event streams, and this one to none.
#
#   agentctl_test.sh PATH/TO/agentctl      (AGENTFLEET_TEST_RUN_DIR names the fleet's folder)
set -euo pipefail
# The script's budget: about 160 s alone on an idle 2-core machine, 359-371 s inside the
# whole suite there while the tsan and fuzz trees build beside ctest (docs/testing.md).
budget_s=480
# shellcheck source=tests/integration/agentctl_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/agentctl_lib.sh"

echo "== help and bad flags (exit 2)"
ctl 0 --help
for c in submit status wait cancel retry list tail "batch submit" "batch status" "batch results" \
  "batch cancel" "batch retry" usage "limits get" "limits set" "dlq list" "dlq replay"; do
  has "$out" "  $c"
  # shellcheck disable=SC2086
  bounded_ctl $c --help | grep -q "usage: agentctl $c" || fail "$c --help"
done
has "$out" "7  unreachable"
ctl 2 frobnicate
one_error_line
has "$err" "unknown command 'frobnicate'"
ctl 2 stauts "$missing"
has "$err" "did you mean 'status'?"
ctl 2 list --usr "$u1"
has "$err" "did you mean '--user'?"
ctl 0 --version
[[ "$out" =~ ^agentctl\ [0-9]+\.[0-9]+\.[0-9]+\ \( ]] || fail "--version printed '$out'"
ctl 2 status
one_error_line
ctl 2 list --user "$u1" --limit zero
has "$err" "--limit needs an integer"
ctl 2 submit --user "$u1"
has "$err" "the text is required"
ctl 2 list --user "$u1" --status sleeping
ctl 2 submit x --user "$u1" --priority urgent

echo "== submit --wait: succeeded (0), failed and timed_out (1)"
ctl 0 submit --user "$u1" --wait --wait-timeout-s 30 "bench: steps=1 calls=1"
has "$out" "succeeded"
has "$out" "action_completed: bench 完成"
has "$out" "cost"
ctl 1 submit --user "$u1" --max-steps 1 --wait --wait-timeout-s 30 "bench: steps=3 calls=1"
has "$out" "status     failed"
has "$out" "max_steps"
ctl 1 submit --user "$u1" --timeout-s 1 --wait --wait-timeout-s 30 "slow: steps=20"
has "$out" "status     timed_out"
ctl 1 submit --user "$u1" --max-cost 0.000001 --wait --wait-timeout-s 30 "bench: steps=1 calls=1"
has "$out" "status     failed"
has "$out" "error      max_cost: the next model call could pass the task's max_cost"
has "$out" "limits     max_cost 0.000001"
ctl 5 submit --user "$u1" --max-cost 0 "bench: steps=1 calls=1"
has "$err" "/max_cost"
ctl 2 submit --user "$u1" --max-tokens 0 "bench: steps=1 calls=1"

echo "== submit, status, wait, list, --json"
ctl 0 submit --user "$u1" --idempotency-key "k-$run" "bench: steps=2 calls=1"
task=$out
[[ ${#task} == 36 ]] || fail "submit printed '$task', not a task id"
ctl 0 submit --user "$u1" --idempotency-key "k-$run" "bench: steps=2 calls=1"
[[ "$out" == "$task" ]] || fail "the same idempotency key gave another task"
has "$err" "submitted before"
ctl 0 wait "$task" --trace --wait-timeout-s 30
has "$out" "task       $task"
has "$out" "trace:"
has "$out" "search_items"
ctl 0 status "$task"
has "$out" "status     succeeded"
lacks "$out" "trace:"
[[ "$out" =~ trace\ id\ +[0-9a-f]{32} ]] || fail "status shows no trace id: $out"
ctl 0 status "$task" --trace
has "$out" "step 1"
ctl 0 --json status "$task"
has "$out" "\"task_id\":\"$task\""
ctl 0 list --user "$u1"
has "$out" "TASK"
has "$out" "$task"
ctl 0 list --user "$u1" --limit 2 --json
[[ $(grep -o '"task_id"' <<<"$out" | wc -l) == 2 ]] || fail "list --limit 2 gave: $out"
ctl 0 list --user "$u1" --status timed_out
has "$out" "timed_out"
lacks "$out" "succeeded"
# Without --idempotency-key, agentctl makes one up: a submit whose answer was lost can be
# run again with it.
ctl 0 submit --user "$u1" "bench: steps=1 calls=1"
ctl 0 --json status "$out"
[[ "$out" =~ \"idempotency_key\":\"agentctl-[0-9a-f-]{36}\" ]] || fail "no key of agentctl's own: $out"

echo "== cancel"
ctl 0 submit --user "$u1" --timeout-s 120 "slow: steps=20"
slow=$out
ctl 0 cancel "$slow"
has "$out" "$slow"
ctl 1 wait "$slow" --wait-timeout-s 30
has "$out" "status     cancelled"
ctl 5 cancel "$task"
one_error_line
has "$err" "409 already_ended"

echo "== retry (and a short id)"
ctl 0 status "${task:0:8}"
has "$out" "$task"
ctl 0 retry "$task" --idempotency-key "retry-$run"
again=$out
[[ ${#again} == 36 && "$again" != "$task" ]] || fail "retry printed '$again'"
ctl 0 retry "$task" --idempotency-key "retry-$run"
[[ "$out" == "$again" ]] || fail "the same retry key gave another task"
has "$err" "used for a retry before"
ctl 0 wait "${again:0:8}" --wait-timeout-s 30
has "$out" "status     succeeded"
has "$out" "retry of   $task"
has "$out" "text       bench: steps=2 calls=1"
ctl 0 submit --user "$u1" --timeout-s 120 "slow: steps=20"
running=$out
ctl 5 retry "$running"
one_error_line
has "$err" "409 task_not_ended"
ctl 0 cancel "$running"
ctl 3 retry "$missing"

echo "== stats, tools, plan"
# $u1's tasks so far: succeeded, failed, timed out, cancelled; counted from the API.
ctl 0 --json stats --user "$u1"
tasks=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tasks"])' "$out")
ctl 0 stats --user "$u1"
has "$out" "user       $u1"
has "$out" "tasks      $tasks ("
has "$out" "of those ended"
ctl 2 stats --from yesterday
has "$err" "--from needs a date"
ctl 0 tools --user "$u1"
has "$out" "PERMITTED"
[[ "$out" =~ create_item\ +calendar\ +write\ +no\  ]] || fail "tools: $out"
ctl 0 tools --describe
has "$out" "DESCRIPTION"
lacks "$out" "PERMITTED"
ctl 0 plan --user "$u1" "计划：创建待办「整理周报」"
has "$out" "status     succeeded"
has "$out" "search_items"
[[ "$out" =~ estimate\ +[0-9.]+\ s\ for\ [0-9]+\ step ]] || fail "plan: $out"
ctl 2 plan --user "$u1"
has "$err" "the text is required"

echo "== completion"
ctl 0 completion bash
completes() {  # completes EXPECTED WORD...: what bash completes the last word to
  local want=$1
  shift
  got=$(bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
                 _agentctl; echo "${COMPREPLY[*]}"' _ <(echo "$out") agentctl "$@")
  [[ "$got" == "$want" ]] || fail "completion of '$*': '$got', expected '$want'"
}
completes "batch" ba
completes "submit status" batch s
completes "--priority" batch submit --pr
completes "failed" list --user u --status f
completes "limits" --url http://x lim
completes "--wait --wait-timeout-s" submit --user u1 --w
ctl 0 completion zsh
has "$out" "bashcompinit"
ctl 2 completion fish
has "$err" "bash or zsh"

echo "== exit codes: not found (3), refused (4), rejected (5), throttled (6), unreachable (7)"
ctl 3 status "$missing"
one_error_line
has "$err" "404 not_found"
ctl 4 --api-key "wrong-$run" status "$task"
one_error_line
has "$err" "401"
lacks "$err" "wrong-$run"
ctl 4 --api-key af-dev-u1-key list --user "$u1"
has "$err" "403 forbidden"
# Without --user: a key that acts for one user lists that user's tasks; the admin's key
# searches every user's, here by text, the server counting what it found.
ctl 0 --json --api-key af-dev-u1-key list --limit 1
[[ "$out" != *'"user_id":'* || "$out" == *'"user_id":"u1"'* ]] || fail "u1's key listed another user: $out"
ctl 0 submit --user "$u1" "bench: steps=1 calls=1 find-me-$run"
found=$out
ctl 0 list --text "FIND-ME-$run" --count
has "$out" "$found"
has "$out" "1 task matches"
ctl 0 list --text "find-me-$run" --status succeeded --since 2000-01-01 --until 2000-01-02 --count
has "$out" "0 tasks match"
ctl 2 list --result-type fine
has "$err" "--result-type must be one of action_completed"
ctl 5 list --since yesterday
has "$err" "/query/since"
ctl 5 submit --user "$u1" --model no-such-model "x"
one_error_line
has "$err" "(at /model)"
ctl 5 submit --user "$u1" --timeout-s 7200 "x"
has "$err" "/timeout_s"
ctl 7 --url http://127.0.0.1:1 status "$task"
one_error_line
has "$err" "cannot reach the dispatcher at http://127.0.0.1:1 (from --url)"
# Credentials in the URL are refused (they belong in the API key), without being shown.
ctl 2 --url "http://ctl:pw-$run@127.0.0.1:1" status "$task"
has "$err" "the dispatcher URL (from --url) is not valid: http://[redacted]@127.0.0.1:1"
lacks "$err" "pw-$run"
# A queue full: one task a minute for this user, at most one queued.
ctl 0 limits set "$uq" --requests-per-minute 1 --max-queued 1
ctl 0 submit --user "$uq" "bench: steps=1 calls=1"
first=$out
deadline=$(($(now_ms) + 30000))
until ctl 0 --json status "$first" && ! grep -q '"status":"queued"' <<<"$out"; do
  (($(now_ms) < deadline)) || fail "the first task of $uq never left the queue"
  sleep 0.1
done
ctl 0 submit --user "$uq" "bench: steps=1 calls=1"
second=$out
ctl 6 submit --user "$uq" "bench: steps=1 calls=1"
one_error_line
has "$err" "429 queue_full"
ctl 0 cancel "$second"
ctl 0 limits set "$uq" --clear
has "$out" "tier standard"

echo "== settings: flags > environment > config file"
printf 'url: http://127.0.0.1:1\napi_key: from-file\n' >"$tmp/ctl.yaml"
ctl 0 --config "$tmp/ctl.yaml" status "$task"
AGENTFLEET_URL="" AGENTFLEET_API_KEY="" timeout "$(bound)" "$ctl" --config "$tmp/ctl.yaml" status "$task" \
  >/dev/null 2>"$tmp/err" && fail "the config file's URL was not used"
grep -q "from config $tmp/ctl.yaml" "$tmp/err" || fail "$(cat "$tmp/err")"
printf 'url: %s\napi_key: %s\n' "$AGENTFLEET_URL" "$AGENTFLEET_API_KEY" >"$tmp/good.yaml"
AGENTFLEET_URL="" AGENTFLEET_API_KEY="" AGENTCTL_CONFIG="$tmp/good.yaml" timeout "$(bound)" "$ctl" status "$task" \
  >/dev/null || fail "the config file from AGENTCTL_CONFIG was not used"
printf 'urll: x\n' >"$tmp/bad.yaml"
ctl 2 --config "$tmp/bad.yaml" status "$task"
has "$err" "unknown key 'urll'"
ctl 2 --config "$tmp/none.yaml" status "$task"

echo "== limits get / set (restored)"
ctl 0 limits get "$ul"
has "$out" "max_concurrency"
ctl 0 limits set "$ul" --max-concurrency 3
ctl 0 limits set "$ul" --requests-per-minute 50 --json
has "$out" '"overrides":{"max_concurrency":3,"requests_per_minute":50}'
ctl 0 limits set "$ul" --unset max_concurrency --json
has "$out" '"overrides":{"requests_per_minute":50}'
ctl 0 limits set "$ul" --replace --max-queued 7 --json
has "$out" '"overrides":{"max_queued":7}'
ctl 0 limits get "$ul"
has "$out" "max_queued"
ctl 4 --api-key af-dev-u1-key limits set "$ul" --max-queued 9
has "$err" "403"
ctl 2 limits set "$ul"
ctl 2 limits set "$ul" --max-concurrency none
ctl 0 limits set "$ul" --clear --json
has "$out" '"overrides":{}'

echo "== batch submit (progress, final line), status, results, cancel"
{
  for i in 1 2 3 4; do
    printf '{"user_id":"%s","text":"bench: steps=1 calls=1","idempotency_key":"b-%s"}\n' "$ub" "$i"
  done
  printf '{"user_id":"%s","text":"bench: steps=3 calls=1","max_steps":1,"idempotency_key":"b-5"}\n' "$ub"
} >"$tmp/batch.jsonl"
batch="ctl-batch-$run"
ctl 1 batch submit "$tmp/batch.jsonl" --user "$ub" --batch-id "$batch" --interval-s 1 \
  --wait-timeout-s 60
has "$(head -n 1 <<<"$out")" "batch $batch uploaded: 5 tasks accepted of 5 lines, 0 duplicates"
last=$(tail -n 1 <<<"$out")
[[ "$last" =~ ^batch\ $batch\ ended:\ 5\ of\ 5\ tasks\ in\ [0-9hms]+:\ succeeded\ 4,\ failed\ 1,\ timed_out\ 0,\ cancelled\ 0\;\ results:\ action_completed\ 4,\ need_clarification\ 0,\ error\ 0$ ]] ||
  fail "the final line is '$last'"
lacks "$out" $'\r'
ctl 0 batch status "$batch"
has "$out" "ended      5 of 5"
has "$out" "succeeded 4, failed 1"
has "$out" "sim-model"
ctl 0 batch results "$batch"
[[ $(grep -c "^[0-9a-f]\{8\}-" <<<"$out") == 5 ]] || fail "batch results: $out"
has "$out" "IDEMPOTENCY KEY"
has "$out" "b-5"
ctl 0 --json batch results "$batch"
[[ $(grep -c '"task_id"' <<<"$out") == 5 ]] || fail "batch results --json: $out"
# The results in the order of the file's lines; the failed one (line 5) retried, once.
[[ $(grep -o '"line":[0-9]*' <<<"$out" | tr -d '"line:' | tr '\n' ' ') == "1 2 3 4 5 " ]] ||
  fail "batch results not in line order: $out"
ctl 0 batch retry "$batch"
has "$out" "batch $batch: 1 failed tasks retried now, 0 retried before"
ctl 0 batch retry "$batch"
has "$out" "0 failed tasks retried now, 1 retried before"
ctl 0 batch results "$batch"
has "$out" "retried as "
ctl 5 batch submit "$tmp/batch.jsonl" --user "$ub" --batch-id "$batch" --no-follow
has "$err" "409 batch_exists"
has "$err" "agentctl batch status $batch"
# Batch ids are each user's: another user's batch of this id is theirs, and the admin's key,
# acting for both, names whose with --user.
printf '{"text":"bench: steps=1 calls=1"}\n' >"$tmp/theirs.jsonl"
ctl 0 batch submit "$tmp/theirs.jsonl" --user "$ub-2" --batch-id "$batch" --no-follow
ctl 5 batch status "$batch"
has "$err" "409 ambiguous_id"
has "$err" "?user_id="
ctl 0 batch status "$batch" --user "$ub"
has "$out" "ended      5 of 5"
ctl 0 --json batch status "$batch" --user "$ub-2"
has "$out" "\"user_id\":\"$ub-2\""
ctl 0 batch results "$batch" --user "$ub"
[[ $(grep -c "^[0-9a-f]\{8\}-" <<<"$out") == 5 ]] || fail "batch results --user: $out"
# The list, a user's batches with --user (every user's without it: the API's tests).
ctl 0 batch list --user "$ub"
has "$out" "NOT SUCCEEDED"
[[ $(grep -c "^$batch " <<<"$out") == 1 ]] || fail "batch list: $out"
has "$out" "action_completed 4, need_clarification 0, error 0"
lacks "$out" "$ub-2"
ctl 0 --json batch list --user "$ub-2" --limit 1
has "$out" "\"user_id\":\"$ub-2\""
# Without --batch-id agentctl makes a UUID up and sends it.
# (a line without its user_id is --user's)
printf '{"text":"bench: steps=1 calls=1","idempotency_key":"own-id"}\n' >"$tmp/own.jsonl"
ctl 0 batch submit "$tmp/own.jsonl" --user "$ub" --no-follow
[[ "$out" =~ ^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$ ]] ||
  fail "the made-up batch id is '$out'"
has "$err" "batch $out uploaded: 1 tasks accepted"
# A batch id may be given by its start (4 characters at least): the one batch it begins.
own="$out"
ctl 0 batch status "${own:0:8}"
has "$err" "batch $own of $ub: the one batch whose id begins '${own:0:8}'"
has "$out" "ended      "
ctl 3 batch status "${own:0:3}"
has "$err" "needs 4 characters at least"
printf '{"user_id":"%s","text":"x"}\n{"user_id":"%s"}\n' "$ub" "$ub" >"$tmp/bad.jsonl"
ctl 5 batch submit "$tmp/bad.jsonl" --user "$ub" --no-follow
has "$err" "(at /line/2"
ctl 3 batch status "no-such-batch-$run"
ctl 3 batch results "no-such-batch-$run"
ctl 2 batch submit "$tmp/none.jsonl" --user "$ub"
for i in 1 2 3; do
  printf '{"user_id":"%s","text":"slow: steps=30","timeout_s":120,"idempotency_key":"s-%s"}\n' "$ub" "$i"
done >"$tmp/slow.jsonl"
ctl 0 batch submit "$tmp/slow.jsonl" --user "$ub" --batch-id "$batch-slow" --no-follow
[[ "$out" == "$batch-slow" ]] || fail "--no-follow printed '$out'"
ctl 0 batch cancel "$batch-slow"
has "$out" "batch $batch-slow cancelled"
# A start several batches' ids share names them and does nothing.
ctl 5 batch cancel "${batch%?}"
has "$err" "the ids of 3 batches begin '${batch%?}': "
has "$err" "$batch-slow ($ub)"
deadline=$(($(now_ms) + 30000))
until ctl 0 --json batch status "$batch-slow" && grep -q '"ended":3' <<<"$out"; do
  (($(now_ms) < deadline)) || fail "the cancelled batch did not end: $out"
  sleep 0.2
done
has "$out" '"cancelled":3'

echo "== usage: a user, a batch, everyone"
ctl 0 usage --user "$u1"
has "$out" "usage of user $u1"
has "$out" "sim-model"
has "$out" "TOTAL"
ctl 0 usage --user "$u1" --json
has "$out" "\"user_id\":\"$u1\""
ctl 0 usage --batch "$batch" --user "$ub"  # another user has a batch of this id (above)
has "$out" "usage of batch $batch (user $ub)"
has "$out" "TOTAL"
yesterday=$(date -u -d yesterday +%F)
tomorrow=$(date -u -d tomorrow +%F)
ctl 0 usage --all --from "$yesterday" --to "${tomorrow}T00:00:00+00:00"
has "$out" "usage of every user from $yesterday to ${tomorrow}T00:00:00+00:00"
has "$out" "TOTAL"
ctl 0 usage --all --json --from 2099-01-01
has "$out" '"user_id":null'
has "$out" '"models":[]'
ctl 4 --api-key af-dev-u1-key usage --all
has "$err" "403 forbidden"
ctl 2 usage
ctl 2 usage --batch "$batch" --from "$yesterday"
ctl 2 usage --user "$u1" --from yesterday
ctl 5 usage --user "$u1" --from 2026-02-30
ctl 3 usage --batch "no-such-batch-$run"

echo "== tail --kafka: the results topic (operators)"
ctl 0 tail --kafka --from-beginning --user "$u1" --count 2 --timeout-s 20
[[ $(grep -c " $u1 " <<<"$out") == 2 ]] || fail "tail --kafka --from-beginning: $out"
has "$err" "following agent.tasks.results"
ctl 0 --json tail --kafka --from-beginning --user "$u1" --count 1 --timeout-s 20
has "$out" "\"user_id\":\"$u1\""
ctl 7 tail --kafka --user "nobody-$run" --count 1 --timeout-s 2
has "$err" "0 of 1 results"
# Quiet after joining (the first join of a group takes the broker 3 s, and a sanitizer
# build on a busy machine a while to start): exit 0; never joined: exit 7. Quiet means no
# result of the user asked about: other users' results (u1's, submitted meanwhile; and the
# other tests' on the shared fleet) do not keep it following.
bounded_ctl tail --kafka --user "nobody-$run" --timeout-s 20 >"$tmp/quiet.out" 2>"$tmp/quiet.err" &
bg_pid=$!
bg_pids=$bg_pid
deadline=$(($(now_ms) + 60000))
while kill -0 "$bg_pid" 2>/dev/null; do
  (($(now_ms) < deadline)) ||
    fail "tail --kafka --user nobody-$run --timeout-s 20 still followed after 60 s of others' results"
  ctl 0 submit --user "$u1" --wait --wait-timeout-s 20 "bench: steps=1 calls=1"
done
wait "$bg_pid" || fail "tail --kafka --user nobody-$run --timeout-s 20 exited $?: $(cat "$tmp/quiet.err")"
bg_pids=""
[[ ! -s "$tmp/quiet.out" ]] || fail "tail --kafka --user nobody-$run printed: $(cat "$tmp/quiet.out")"
ctl 7 --kafka-bootstrap 127.0.0.1:1 tail --kafka --timeout-s 2
one_error_line
has "$err" "never joined agent.tasks.results at 127.0.0.1:1"
ctl 2 tail --from-beginning --user "$u1"
has "$err" "add --kafka"
ctl 2 tail
has "$err" "tail needs --user U"

echo "== tail --user: a user's results over the API"
ctl 7 tail --user "nobody-$run" --count 1 --timeout-s 2
has "$err" "0 of 1 results"
ctl 0 tail --user "nobody-$run" --timeout-s 2
ctl 4 --api-key af-dev-u1-key tail --user "$ut" --timeout-s 2
# New results only: follow, then submit until one arrives.
bounded_ctl tail --user "$ut" --count 1 --timeout-s 45 >"$tmp/tail.out" 2>"$tmp/tail.err" &
bg_pid=$!
bg_pids=$bg_pid
deadline=$(($(now_ms) + 20000))
until grep -q "following" "$tmp/tail.err"; do
  (($(now_ms) < deadline)) || fail "tail did not join: $(cat "$tmp/tail.err")"
  sleep 0.1
done
deadline=$(($(now_ms) + 30000))
while kill -0 "$bg_pid" 2>/dev/null; do
  (($(now_ms) < deadline)) || fail "tail saw no new result: $(cat "$tmp/tail.err")"
  ctl 0 submit --user "$ut" --wait --wait-timeout-s 20 "bench: steps=1 calls=1"
done
wait "$bg_pid" || fail "tail exited $?: $(cat "$tmp/tail.err")"
bg_pids=""
grep -q " $ut .*succeeded" "$tmp/tail.out" || fail "tail printed: $(cat "$tmp/tail.out")"

echo "== dlq list and replay"
printf 'ctl-not-json-%s {\n' "$run" | timeout "$(bound 20)" kcat -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -P -t agent.tasks.submit -k "$ud"
printf '{"user_id":"%s"}\n' "$ud" | timeout "$(bound 20)" kcat -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -P -t agent.tasks.submit -k "$ud"
deadline=$(($(now_ms) + 30000))
until ctl 0 --json dlq list --key "$ud" && [[ $(grep -c '"offset"' <<<"$out") == 2 ]]; do
  (($(now_ms) < deadline)) || fail "the bad submissions were not dead-lettered: $out"
  sleep 0.5
done
has "$out" "\"value\":\"ctl-not-json-$run {\""
has "$out" '"source_topic":"agent.tasks.submit"'
has "$out" "invalid JSON"
has "$out" "missing required key 'text'"
bad=$(grep "ctl-not-json-$run" <<<"$out" | sed -E 's/^\{"partition":([0-9]+),"offset":([0-9]+),.*/\1:\2/')
[[ "$bad" =~ ^[0-9]+:[0-9]+$ ]] || fail "no partition:offset in: $out"
ctl 0 dlq list --key "$ud"
has "$out" "$bad"
has "$out" "agent.tasks.submit/"
has "$out" "invalid submission"
has "$out" "ctl-not-json-$run"
ctl 0 dlq list --key "$ud" --reason "invalid JSON" --json
[[ $(grep -c '"offset"' <<<"$out") == 1 ]] || fail "--reason: $out"
ctl 0 dlq list --key "$ud" --topic-filter agent.tasks.dispatch --json
[[ -z "$out" ]] || fail "--topic-filter: $out"
ctl 0 dlq list --key "$ud" --count 1 --json
[[ $(grep -c '"offset"' <<<"$out") == 1 ]] || fail "--count: $out"
submitted() {
  timeout "$(bound 30)" kcat -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -C -t agent.tasks.submit -e -q -f '%s\n' |
    grep -c "ctl-not-json-$run" || true
}
[[ $(submitted) == 1 ]] || fail "expected the bad submission once in the submit topic"
ctl 0 dlq replay --offset "$bad" --dry-run
has "$out" "would send $bad -> agent.tasks.submit key $ud"
[[ $(submitted) == 1 ]] || fail "--dry-run sent something"
ctl 0 dlq replay --offset "$bad"
has "$out" "sent $bad -> agent.tasks.submit key $ud"
[[ $(submitted) == 2 ]] || fail "the replay is not in the submit topic"
replayed=$(timeout "$(bound 30)" kcat -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -C -t agent.tasks.submit -e -q \
  -f '%h %s\n' | grep "ctl-not-json-$run" | tail -n 1)
has "$replayed" "dlq-replayed-from=$bad"
lacks "$replayed" "dlq-reason"
# Still bad: it is dead-lettered again, at a new offset, marked as a replay.
deadline=$(($(now_ms) + 30000))
until ctl 0 --json dlq list --key "$ud" && [[ $(grep -c '"offset"' <<<"$out") == 3 ]]; do
  (($(now_ms) < deadline)) || fail "the replay was not dead-lettered again: $out"
  sleep 0.5
done
has "$out" "\"replayed_from\":\"$bad\""
ctl 0 dlq replay --all --key "$ud" --dry-run
[[ $(grep -c "^would send" <<<"$out") == 3 ]] || fail "--all --dry-run: $out"
ctl 3 dlq replay --offset 0:999999999
has "$err" "no dead letter at 0:999999999"
ctl 2 dlq replay --key "$ud"
ctl 2 dlq replay --offset nowhere
ctl 7 --kafka-bootstrap 127.0.0.1:1 dlq list --timeout-s 3
one_error_line
has "$err" "127.0.0.1:1"

echo "agentctl: every command answered with the expected output and exit code"
