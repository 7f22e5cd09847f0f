#!/usr/bin/env bash
# Logs: secrets never appear, every line is a JSON object, task lines carry their task.
#
# The fleet runs with distinctive secrets planted where production keeps them: a password
# in the Postgres URL (the dev cluster trusts every connection, so any password is
# accepted), a model API key (LLM_API_KEY, which the configuration references), a Kafka
# `sasl.password` property (librdkafka accepts it harmlessly on a PLAINTEXT connection;
# `debug: conf` makes librdkafka print its configuration through the log too), a tool
# service credential header, and a password in a tool's URL. API requests come with wrong
# keys holding a planted string and with the right key. Tasks succeed, fail on a tool error,
# fail on model 500s (with retries), time out on a hung model call, are cancelled, are
# recovered after their worker was killed; malformed and unknown messages become dead
# letters in the dispatcher and in a worker. Two lines would quote a planted secret if it
# were not redacted: the worker's `tool call failed` for the tool whose URL holds a
# password (the HTTP client reports the URL it cannot use), and the dispatcher's dead
# letter for a submission naming the model `password=SECRET` (a secret nothing registers,
# so only the `password=` pattern hides it). Then:
#   - no planted secret (nor the right API key) is in any log file of any process;
#   - nor in what the fleet stored or published: the database's rows (errors, results,
#     traces, the ledger, the outbox) and every message and header of the five topics (the
#     refused submission's own message aside), nor in the answers to the wrong keys;
#   - those two lines show `[redacted]` where the secret was;
#   - every line the dispatchers and workers wrote parses as a JSON object with ts, level,
#     component and msg;
#   - the workers' task lines carry task_id, user_id, attempt and trace_id, and step where
#     a step applies; the trace id a client sent is the one in the dispatcher's and the
#     workers' lines of that task.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=$1
run_dir=$2
export AF_LOG_TAG=log-secrets-test
source "$root/tools/lib/common.sh"
source "$root/tools/lib/fleet.sh"
source "$root/tests/e2e/lib.sh"

random_hex() { od -An -tx1 -N"$1" /dev/urandom | tr -d ' \n'; }
salt=$(random_hex 4)
pg_secret="pgPw-planted-$salt"
model_secret="sk-model-planted-$salt"
kafka_secret="kafkaPw-planted-$salt"
tool_secret="toolToken-planted-$salt"
tool_url_secret="toolUrlPw-planted-$salt"
submit_secret="submitPw-planted-$salt"
wrong_key="af-wrong-key-planted-$salt"
right_key="af-dev-admin-key"
trace_id=$(random_hex 16)
traceparent="00-$trace_id-$(random_hex 8)-01"
dead_trace_id=$(random_hex 16)
recovered_trace_id=$(random_hex 16)

export LLM_API_KEY=$model_secret
fleet_reset "$run_dir"
trap 'fleet_stop "$run_dir" || true' EXIT
# fleet_start brings up Postgres, the broker, the simulators and a dispatcher with the
# embedded configuration; that dispatcher makes way for one with the planted one.
fleet_start "$run_dir" "$build_dir" 0
first=$(awk '$2 == "dispatcher" {print $1}' "$run_dir/pids")
kill -TERM "$first"
# Bounded like fleet_stop: 35 s (longer than a drain), then SIGKILL.
deadline=$(($(af_now_ms) + 35000))
while kill -0 "$first" 2>/dev/null && (($(af_now_ms) < deadline)); do sleep 0.1; done
if kill -0 "$first" 2>/dev/null; then
  af_log "the first dispatcher ($first) did not stop in time; killing it"
  kill -KILL "$first" 2>/dev/null || true
fi
{ wait "$first"; } 2>/dev/null || true

config="$run_dir/agentfleet-planted.yaml"
cp "$root/config/system-prompt.zh.md" "$run_dir/"
# The ${...} are the configuration's own, replaced by the processes from the environment.
# complete_todo's URL carries a user and password and no port: the HTTP client takes what
# follows the last ':' for the port, so every call fails with "invalid URL: <the URL>".
# shellcheck disable=SC2016
sed -e 's|^  delivery_timeout_ms: .*|&\n  properties:\n    sasl.password: "${PLANTED_KAFKA_PASSWORD}"\n    debug: conf|' \
  -e 's|^    url: .*/tools/create_item$|&\n    headers: {Authorization: "Bearer ${PLANTED_TOOL_TOKEN}"}|' \
  -e 's|^    url: .*/tools/complete_todo$|    url: http://tooluser:${PLANTED_TOOL_URL_PASSWORD}@127.0.0.1/tools/complete_todo|' \
  "$root/config/agentfleet.yaml" >"$config"
# shellcheck disable=SC2016
grep -qF 'sasl.password: "${PLANTED_KAFKA_PASSWORD}"' "$config" || fail "no sasl.password in $config"
# shellcheck disable=SC2016
grep -qF 'Bearer ${PLANTED_TOOL_TOKEN}' "$config" || fail "no tool header in $config"
# shellcheck disable=SC2016
grep -qF 'tooluser:${PLANTED_TOOL_URL_PASSWORD}@' "$config" || fail "no tool URL password in $config"
planted_pg_url=${AGENTFLEET_PG_URL/postgres@/postgres:$pg_secret@}
[[ "$planted_pg_url" == *":$pg_secret@"* ]] || fail "cannot plant a password in $AGENTFLEET_PG_URL"
export PLANTED_KAFKA_PASSWORD=$kafka_secret PLANTED_TOOL_TOKEN=$tool_secret \
  PLANTED_TOOL_URL_PASSWORD=$tool_url_secret
# Short leases, so a killed worker's task is recovered within seconds.
export AGENTFLEET_LEASE_S=3 AGENTFLEET_HEARTBEAT_S=1

AGENTFLEET_CONFIG=$config AGENTFLEET_PG_URL=$planted_pg_url \
  fleet_start_dispatcher "$run_dir" "$build_dir" dispatcher-planted
api=$FLEET_LAST_URL
for worker in worker-1 worker-2; do
  AGENTFLEET_CONFIG=$config AGENTFLEET_PG_URL=$planted_pg_url \
    fleet_start_worker "$run_dir" "$build_dir" "$worker"
done
# /proc/PID/environ is the program's only once it has been exec'd (a moment after the fork).
planted_env_seen() { grep -qzF "AGENTFLEET_PG_URL=$planted_pg_url" "/proc/$FLEET_LAST_PID/environ"; }
deadline=$(($(af_now_ms) + 10000))
until planted_env_seen; do
  (($(af_now_ms) < deadline)) || fail "the worker does not run with the planted Postgres URL"
  sleep 0.1
done
e2e_wait_consuming "$run_dir" worker-1 worker-2
llm="http://127.0.0.1:$LLM_SIM_PORT"

# Wrong keys (planted) are refused, neither quoted in the answer (body or headers) nor
# logged; the right one must not be logged either.
for header in "Authorization: Bearer $wrong_key" "X-API-Key: $wrong_key"; do
  answer=$(curl -sS -i --max-time 10 -X POST "$api/v1/tasks" \
    -H "$header" -d '{"user_id":"logs-u1","text":"今天下午去买东西"}')
  [[ "$answer" == "HTTP/1.1 401"* ]] || fail "a wrong API key answered ${answer%%$'\r'*}"
  [[ "$answer" != *"$wrong_key"* ]] || fail "the answer to a wrong API key quotes it: $answer"
done
answer=$(curl -sS -i --max-time 10 "$api/v1/tasks?user_id=logs-u1" \
  -H "Authorization: Bearer $wrong_key")
[[ "$answer" == "HTTP/1.1 401"* ]] || fail "a wrong API key answered ${answer%%$'\r'*}"
[[ "$answer" != *"$wrong_key"* ]] || fail "the answer to a wrong API key quotes it: $answer"

# submit TEXT USER TIMEOUT_S [TRACEPARENT] [MODEL]: prints the new task's id.
submit() {
  local body
  body=$(curl -sS --max-time 10 -X POST "$api/v1/tasks" -H "Authorization: Bearer $right_key" \
    ${4:+-H "traceparent: $4"} \
    -d "{\"user_id\":\"$2\",\"text\":\"$1\",\"timeout_s\":$3,\"model\":\"${5:-sim-model}\"}")
  [[ "$body" =~ \"task_id\":[[:space:]]*\"([0-9a-f-]{36})\" ]] || fail "submit '$1' answered $body"
  echo "${BASH_REMATCH[1]}"
}
# ends TASK STATUS [RESULT_TYPE [SECONDS]]: waits (20 s) for the task to end so.
ends() {
  local task=$1 want=$2 type=${3:-} seconds=${4:-20} status deadline
  deadline=$(($(af_now_ms) + seconds * 1000))
  while :; do
    status=$(psql_q "SELECT status || '/' || coalesce(result_type, '') FROM tasks WHERE task_id = '$task'")
    [[ "$status" =~ ^(succeeded|failed|timed_out|cancelled)/ ]] && break
    (($(af_now_ms) < deadline)) || fail "task $task still $status after $seconds s"
    sleep 0.1
  done
  [[ "$status" == "$want/$type" ]] || fail "task $task ended $status, expected $want/$type: $(
    psql_q "SELECT error FROM tasks WHERE task_id = '$task'")"
}

ok_task=$(submit "今天下午去买东西" logs-u1 30 "$traceparent")
ends "$ok_task" succeeded action_completed

# A tool error: tool-sim answers the next call 500 (create_item is not retried).
curl -sS --max-time 5 -X POST "$TOOL_SIM_URL/admin/faults" -d '{"mode":"http_500","count":1}' >/dev/null
tool_task=$(submit "今天下午去买东西" logs-u2 30)
ends "$tool_task" succeeded error
# A tool whose URL holds a password: u1's seed has one todo about 报告, so the scenario
# finds it with search_items and calls complete_todo, which cannot be reached.
url_task=$(submit "完成报告提交" u1 30)
ends "$url_task" succeeded error

# Model 500s on every attempt: retried, then the task fails. (On the react_json model,
# whose endpoint has a circuit breaker of its own: the hang below does not open it.)
curl -sS --max-time 5 -X POST "$llm/admin/faults" \
  -d '{"mode":"http_500","count":50,"scenario":"bench"}' >/dev/null
model_task=$(submit "bench: steps=1 calls=1" logs-u3 30 "" sim-react-model)
ends "$model_task" failed
# A model call that hangs: the 3 s deadline ends the task.
curl -sS --max-time 5 -X POST "$llm/admin/faults" \
  -d '{"mode":"hang","count":1,"hang_s":30,"scenario":"slow"}' >/dev/null
hang_task=$(submit "slow: steps=1" logs-u4 3)
ends "$hang_task" timed_out
curl -sS --max-time 5 -X DELETE "$llm/admin/faults" >/dev/null

# A cancellation while running.
cancel_task=$(submit "slow: steps=5" logs-u5 30)
deadline=$(($(af_now_ms) + 20000))
until [[ $(psql_q "SELECT status FROM tasks WHERE task_id = '$cancel_task'") == running ]]; do
  (($(af_now_ms) < deadline)) || fail "task $cancel_task did not start"
  sleep 0.05
done
curl -sS -o /dev/null --max-time 10 -X POST "$api/v1/tasks/$cancel_task/cancel" \
  -H "Authorization: Bearer $right_key"
ends "$cancel_task" cancelled

# Dead letters: a submission that is not JSON and one naming an unknown model that quotes a
# password (dispatcher), a dispatch message naming no task (a worker). kcat gives up after
# 20 s rather than librdkafka's 300 s message timeout.
unknown_task=$(cat /proc/sys/kernel/random/uuid)
echo 'not json' | timeout 20 kcat -P -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -t agent.tasks.submit -k logs-u6
echo "{\"user_id\":\"logs-u8\",\"text\":\"今天下午去买东西\",\"model\":\"password=$submit_secret\"}" |
  timeout 20 kcat -P -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -t agent.tasks.submit -k logs-u8
echo "{\"version\":1,\"task_id\":\"$unknown_task\",\"user_id\":\"logs-u6\",\"priority\":\"interactive\",\"dispatched_at\":\"2026-01-01T00:00:00.000Z\"}" |
  timeout 20 kcat -P -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -t agent.tasks.dispatch -k logs-u6 \
    -H "traceparent=00-$dead_trace_id-$(random_hex 8)-01"
deadline=$(($(af_now_ms) + 20000))
dispatcher_log="$run_dir/logs/dispatcher-planted.log"
until grep -qF "\"msg\":\"dead letter: invalid submission at '':" "$dispatcher_log" &&
  grep -qF "\"msg\":\"dead letter: invalid submission at '/model':" "$dispatcher_log" &&
  grep -q "\"task_id\":\"$unknown_task\".*\"msg\":\"dead letter: unknown task" "$run_dir"/logs/worker-*.log; do
  (($(af_now_ms) < deadline)) || fail "the dead letters were not logged"
  sleep 0.1
done

# Recovery: the worker running a task dies after its first checkpoint; the lease expires,
# the scheduler dispatches the task again and the other worker resumes it (attempt 2).
recovered_task=$(submit "slow: steps=4" logs-u7 60 "00-$recovered_trace_id-$(random_hex 8)-01")
deadline=$(($(af_now_ms) + 20000))
until (($(psql_q "SELECT count(*) FROM task_steps WHERE task_id = '$recovered_task'") > 0)); do
  (($(af_now_ms) < deadline)) || fail "task $recovered_task made no checkpoint"
  sleep 0.05
done
victim=$(psql_q "SELECT worker_id FROM tasks WHERE task_id = '$recovered_task'")
victim_pid=$(awk -v name="$victim" '$2 == name {print $1}' "$run_dir/pids")
[[ -n "$victim_pid" ]] || fail "task $recovered_task runs on '$victim', not one of ours"
kill -KILL "$victim_pid"
{ wait "$victim_pid"; } 2>/dev/null || true
# The kill landed before the task ended, or there is nothing to recover. Read after the
# kill: the task cannot end now before its lease (3 s) expires and another worker resumes it.
[[ $(psql_q "SELECT finished_at IS NULL FROM tasks WHERE task_id = '$recovered_task'") == t ]] ||
  fail "task $recovered_task had ended on $victim before the kill: nothing to recover"
ends "$recovered_task" succeeded action_completed 45

# What the fleet stored and published, while Postgres and the broker still run: every row
# of the database (the tasks' errors and results, each step's model reply and trace with
# the tool results, the ledger, the outbox) and every message of the five topics, headers
# included (the dead letters' reasons).
pg_dump --data-only --no-owner "$AGENTFLEET_PG_URL" >"$run_dir/stored.sql" ||
  fail "pg_dump of the fleet's database failed"
[[ $(psql_q "SELECT count(*) FROM task_steps WHERE trace IS NOT NULL") -gt 0 ]] ||
  fail "no step has a trace to look at"
: >"$run_dir/published.txt"
for topic in agent.tasks.submit agent.tasks.dispatch agent.tasks.results agent.tasks.events \
  agent.tasks.dlq; do
  timeout 30 kcat -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -C -t "$topic" -e -q \
    -f "$topic %k %h %s\n" >>"$run_dir/published.txt" || fail "kcat could not read $topic"
done
grep -q '^agent.tasks.results ' "$run_dir/published.txt" || fail "no result event was read"

# Stop everything, so every line (drains, closing reports) is written.
fleet_stop "$run_dir"

# 1. No secret in any log of any process (the Postgres server's included).
logs=("$run_dir"/logs/*.log "$run_dir/pg/postgres.log")
for log in "${logs[@]}"; do [[ -r "$log" ]] || fail "cannot read $log"; done
for secret in "$pg_secret" "$model_secret" "$kafka_secret" "$tool_secret" "$tool_url_secret" \
  "$submit_secret" "$wrong_key" "$right_key" "planted-$salt"; do
  found=0
  grep -nF -- "$secret" "${logs[@]}" >&2 || found=$?
  ((found == 1)) || fail "a secret ($secret) is in the logs (above: file:line), or grep failed"
done
# 1b. Nor in the database or on a topic: no error, result, trace or reason quotes one. The
# one exception is the submission that put `password=...` in its model name itself: the
# submit topic and its dead letter hold that message as it was sent (the sender's secret).
for secret in "$pg_secret" "$model_secret" "$kafka_secret" "$tool_secret" "$tool_url_secret" \
  "$wrong_key" "$right_key"; do
  found=0
  grep -nF -- "$secret" "$run_dir/stored.sql" "$run_dir/published.txt" >&2 || found=$?
  ((found == 1)) || fail "a secret ($secret) is stored or published (above: file:line), or grep failed"
done
found=0
grep -nF -- "$submit_secret" "$run_dir/stored.sql" >&2 || found=$?
((found == 1)) || fail "the refused submission's secret is in the database (above)"
found=0
grep -F -- "$submit_secret" "$run_dir/published.txt" | grep -v '^agent.tasks.\(submit\|dlq\) ' >&2 ||
  found=$?
((found == 1)) || fail "the refused submission's secret is on a topic other than its own (above)"
grep -q 'sasl.password = \[redacted\]' "$run_dir/logs/worker-1.log" ||
  fail "librdkafka did not print its configuration through the log (debug: conf)"

# 2.-4. The shape of every line, the task lines, the trace ids.
python3 - "$run_dir/logs" "$ok_task" "$trace_id" "$tool_task" "$model_task" "$hang_task" \
  "$cancel_task" "$unknown_task" "$dead_trace_id" "$recovered_task" "$recovered_trace_id" \
  "$url_task" "$tool_url_secret" "$submit_secret" <<'EOF'
import glob, json, os, sys
(logs, ok_task, trace_id, tool_task, model_task, hang_task, cancel_task, unknown_task, dead_trace,
 recovered_task, recovered_trace, url_task, tool_url_secret, submit_secret) = sys.argv[1:]
problems = []
lines = {}  # file -> [objects]
for path in sorted(glob.glob(os.path.join(logs, "dispatcher*.log")) + glob.glob(os.path.join(logs, "worker-*.log"))):
    name = os.path.basename(path)
    lines[name] = []
    with open(path, encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            try:
                obj = json.loads(text)
            except ValueError:
                problems.append(f"{name}:{n}: not JSON: {text.rstrip()[:200]}")
                continue
            if not isinstance(obj, dict):
                problems.append(f"{name}:{n}: not an object")
                continue
            for key in ("ts", "level", "component", "msg"):
                if not isinstance(obj.get(key), str):
                    problems.append(f"{name}:{n}: no string '{key}': {text.rstrip()[:200]}")
            obj["_where"] = f"{name}:{n}"
            lines[name].append(obj)

worker = [o for name, objs in lines.items() if name.startswith("worker-") for o in objs]
dispatcher = [o for name, objs in lines.items() if name.startswith("dispatcher") for o in objs]
stepped = ("model call failed", "tool call failed", "tool call refused")
for o in worker:
    if "task_id" not in o:
        continue
    # Lines from before a claim know no attempt yet.
    unclaimed = o["msg"].startswith(("dead letter", "claim failed", "skipped", "left for lease"))
    need = ("user_id", "trace_id") if unclaimed else ("user_id", "attempt", "trace_id")
    for key in need:
        if key not in o:
            problems.append(f"{o['_where']}: a task line without {key}: {o['msg']}")
    if "attempt" in o and not (isinstance(o["attempt"], int) and o["attempt"] >= 1):
        problems.append(f"{o['_where']}: attempt is not a number >= 1")
    if "step" in o and not (isinstance(o["step"], int) and o["step"] >= 0):
        problems.append(f"{o['_where']}: step is not a number >= 0")
    if o["msg"].startswith(stepped) and "step" not in o:
        problems.append(f"{o['_where']}: '{o['msg']}' without its step")

def task_lines(objs, task):
    return [o for o in objs if o.get("task_id") == task]

def expect(objs, task, msg_start, **fields):
    found = [o for o in task_lines(objs, task) if o["msg"].startswith(msg_start)
             and all(o.get(k) == v for k, v in fields.items())]
    if not found:
        problems.append(f"no line '{msg_start}' {fields} for task {task}")

expect(worker, ok_task, "claimed", attempt=1, trace_id=trace_id)
expect(worker, ok_task, "finished succeeded action_completed", step=1, trace_id=trace_id)
expect(dispatcher, ok_task, "accepted", user_id="logs-u1", trace_id=trace_id)
expect(worker, tool_task, "tool call failed", step=0, tool="create_item")
expect(worker, model_task, "model call failed", step=0)
expect(worker, model_task, "finished failed", step=0)
expect(worker, hang_task, "finished timed_out", step=0)
expect(worker, cancel_task, "finished cancelled")
expect(worker, unknown_task, "dead letter: unknown task", user_id="logs-u6", trace_id=dead_trace)
expect(dispatcher, recovered_task, "dispatched again: its worker's lease expired",
       user_id="logs-u7", trace_id=recovered_trace)
expect(worker, recovered_task, "claimed, resuming after", attempt=2, trace_id=recovered_trace)
expect(worker, recovered_task, "finished succeeded action_completed", attempt=2)
if not any(o["msg"].startswith("dead letter: invalid submission") and o.get("user_id") is None
           for o in dispatcher):
    problems.append("no dead letter line for the malformed submission in the dispatcher")

# The lines that would quote a planted secret: redacted in place, the rest kept.
def redacted_in(objs, what, where, secret, shown, pick):
    found = [o for o in objs if pick(o)]
    if not found:
        problems.append(f"no {what} line")
    for o in found:
        text = json.dumps(o, ensure_ascii=False)
        if secret in text:
            problems.append(f"{o['_where']}: the planted secret is in the {what} line")
        if shown not in o.get(where, ""):
            problems.append(f"{o['_where']}: {where} of the {what} line lacks '{shown}': {text[:300]}")

redacted_in(worker, "complete_todo 'tool call failed'", "error", tool_url_secret,
            "invalid URL: http://tooluser:[redacted]@127.0.0.1/tools/complete_todo",
            lambda o: o.get("task_id") == url_task and o["msg"] == "tool call failed"
            and o.get("tool") == "complete_todo")
redacted_in(dispatcher, "unknown model dead letter", "msg", submit_secret,
            "unknown model 'password=[redacted]'",
            lambda o: o.get("user_id") == "logs-u8" and o["msg"].startswith("dead letter:"))

# One task, one trace id, in every process that logs it.
for task in (ok_task, tool_task, url_task, model_task, hang_task, cancel_task, recovered_task):
    ids = {o.get("trace_id") for o in task_lines(worker + dispatcher, task)}
    if len(ids) != 1 or None in ids:
        problems.append(f"task {task} logged with trace ids {ids}")

if problems:
    print("\n".join(problems[:50]), file=sys.stderr)
    sys.exit(1)
total = sum(len(v) for v in lines.values())
print(f"{total} lines in {len(lines)} dispatcher and worker logs: all JSON objects, task lines complete")
EOF

echo "log secrets: 7 planted secrets and the API keys in none of ${#logs[@]} logs;" \
  "task $ok_task traced as $trace_id from the dispatcher to the worker"
