#!/usr/bin/env bash
# The dev broker's fault-injection port does what it says, seen by a stock Kafka client
# (kcat), on a broker of its own (faults on the shared fleet would disturb other tests):
# a moved partition leader shows in the metadata; a broker taken down refuses clients and
# is back by itself when its time is up; added latency slows its answers; queued request
# errors fail a produce until cleared; bad commands get an error line. Each fault is named
# in its reply, and `faults` says what each did, read from the broker's own log.
#   dev_broker_faults_test.sh DEV_BROKER_BINARY
set -euo pipefail
broker_bin=${1:?usage: dev_broker_faults_test.sh DEV_BROKER_BINARY}
dir=$(mktemp -d)
pid=""
consumer=""
cleanup() {
  [[ -n $consumer ]] && kill "$consumer" 2>/dev/null
  [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "--- dev broker log:" >&2
  tail -20 "$dir/broker.log" >&2
  exit 1
}

"$broker_bin" --bootstrap-file "$dir/bootstrap" --control-file "$dir/control" \
  --topic faults.test:2 >"$dir/broker.out" 2>"$dir/broker.log" &
pid=$!
for _ in $(seq 1 100); do
  [[ -s $dir/bootstrap ]] && break
  kill -0 "$pid" 2>/dev/null || fail "the dev broker exited"
  sleep 0.1
done
[[ -s $dir/bootstrap && -s $dir/control ]] || fail "no bootstrap or control file after 10 s"
bootstrap=$(cat "$dir/bootstrap")
IFS=, read -r broker1 _ broker3 <<<"$bootstrap"
port=$(cat "$dir/control")
grep -q "^control.port=$port$" "$dir/broker.out" || fail "control.port=$port not printed"

exec 3<>"/dev/tcp/127.0.0.1/$port"
say() {
  echo "$1" >&3
  IFS= read -r -t 10 reply <&3 || fail "no reply to '$1'"
  echo "> $1  < $reply"
}

say "brokers"
[[ $reply == "ok 1 2 3" ]] || fail "brokers: $reply"
effect() {  # effect ID FIELD: the fault's count in the last `faults` reply
  python3 -c 'import json,sys; f={x["id"]: x for x in json.loads(sys.argv[1][3:])["faults"]}[int(sys.argv[2])]; print(f[sys.argv[3]])' \
    "$reply" "$1" "$2"
}

# A moved leader is what clients see.
say "leader faults.test 1 3"
[[ $reply =~ ^ok\ .*\(fault\ ([0-9]+)\)$ ]] || fail "leader: $reply"
leader_fault=${BASH_REMATCH[1]}
timeout 20 kcat -b "$bootstrap" -L -t faults.test | grep -q "partition 1, leader 3" ||
  fail "partition 1 of faults.test is not led by broker 3"
# A consumer of partition 1 fetches from broker 3: the move's effect, and a connection for
# the broker going down below to close.
timeout 60 kcat -b "$bootstrap" -C -t faults.test -p 1 -o end -q >/dev/null 2>&1 &
consumer=$!
fetched=""
for _ in $(seq 1 100); do
  say "faults"
  if (($(effect "$leader_fault" served) >= 1)); then
    fetched=yes
    break
  fi
  sleep 0.2
done
[[ -n $fetched ]] || fail "the new leader served no fetch in 20 s: $reply"

# A broker taken down refuses clients, and is up again when its time is up. Down long
# enough (8 s) that the probe below, a kcat started on a busy machine, surely runs while it
# is down.
say "broker-down 3 8"
[[ $reply =~ ^ok\ broker\ 3\ down\ for\ 8\ s\ \(fault\ ([0-9]+)\)$ ]] || fail "broker-down: $reply"
down_fault=${BASH_REMATCH[1]}
if timeout 20 kcat -b "$broker3" -L -m 1 >/dev/null 2>&1; then
  fail "broker 3 answered metadata while down"
fi
up=""
for _ in $(seq 1 40); do
  if timeout 10 kcat -b "$broker3" -L -m 2 >/dev/null 2>&1; then
    up=yes
    break
  fi
  sleep 0.25
done
[[ -n $up ]] || fail "broker 3 is not back up 10 s after its 8 s were over"
kill "$consumer" 2>/dev/null || true
wait "$consumer" 2>/dev/null || true
consumer=""
grep -q "broker 3 up again" "$dir/broker.log" || fail "the broker did not log bringing broker 3 up"

# Added latency: each answer of broker 1 waits 600 ms, so a metadata round trip (API
# versions, then metadata) takes at least that.
say "rtt 1 600 20"
[[ $reply == ok* ]] || fail "rtt: $reply"
start=$(date +%s%N)
timeout 20 kcat -b "$broker1" -L -m 10 >/dev/null || fail "metadata from a slow broker 1 failed"
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
((elapsed_ms >= 600)) || fail "metadata from broker 1 took $elapsed_ms ms with 600 ms of latency"
say "rtt 1 0"
[[ $reply == "ok broker 1 rtt back to 0" ]] || fail "rtt 0: $reply"

# Queued request errors fail produces until cleared.
say "request-errors Produce NOT_ENOUGH_REPLICAS 10000"
[[ $reply =~ ^ok\ next\ 10000\ requests\ of\ API\ 0\ fail\ with\ NOT_ENOUGH_REPLICAS\ \(fault\ ([0-9]+)\)$ ]] ||
  fail "request-errors: $reply"
errors_fault=${BASH_REMATCH[1]}
if echo "k:v" | timeout 20 kcat -b "$bootstrap" -P -t faults.test -K: -X message.timeout.ms=2000 \
  >"$dir/produce.log" 2>&1; then
  fail "a produce succeeded while every Produce request failed: $(cat "$dir/produce.log")"
fi
say "clear-errors Produce"
[[ $reply == ok* ]] || fail "clear-errors: $reply"
echo "k:v" | timeout 20 kcat -b "$bootstrap" -P -t faults.test -K: -X message.timeout.ms=10000 ||
  fail "a produce failed after the errors were cleared"
# What each fault did: the refused produce met errors; an idle Heartbeat fault met nothing.
say "request-errors Heartbeat NOT_COORDINATOR 3"
[[ $reply =~ \(fault\ ([0-9]+)\)$ ]] || fail "request-errors Heartbeat: $reply"
idle_fault=${BASH_REMATCH[1]}
say "faults"
[[ $reply == "ok {\"faults\":["* ]] || fail "faults: $reply"
(($(effect "$errors_fault" served) >= 1)) || fail "the Produce errors met no request: $reply"
[[ $(effect "$errors_fault" active) == False ]] || fail "cleared errors are still active: $reply"
(($(effect "$down_fault" served) >= 1)) || fail "broker 3 going down closed no connection: $reply"
[[ $(effect "$down_fault" active) == False ]] || fail "broker 3 is up, its fault active: $reply"
[[ $(effect "$idle_fault" served) == 0 ]] || fail "a Heartbeat fault met a request: $reply"
[[ $(effect "$idle_fault" active) == True ]] || fail "the Heartbeat fault ended: $reply"
say "clear-errors Heartbeat"

# Bad commands get an error line and the connection stays usable.
say "broker-down 9"
[[ $reply == "error no broker '9' (ids 1..3)" ]] || fail "bad broker: $reply"
say "broker-down 1 601"
[[ $reply == "error SECONDS must be 1..600" ]] || fail "unbounded fault: $reply"
say "format-disks"
[[ $reply == error* ]] || fail "unknown command: $reply"
say "brokers"
[[ $reply == "ok 1 2 3" ]] || fail "the connection is not usable after errors: $reply"

# A fault still in force is undone at shutdown, and the broker exits 0 promptly.
say "broker-down 2 600"
exec 3>&-
kill -TERM "$pid"
for _ in $(seq 1 100); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$pid" 2>/dev/null && fail "the dev broker did not exit within 10 s of SIGTERM"
wait "$pid" && rc=0 || rc=$?
pid=""
((rc == 0)) || fail "the dev broker exited $rc"
grep -q "broker 2 up again" "$dir/broker.log" || fail "broker 2's fault was not undone at shutdown"
[[ ! -e $dir/control && ! -e $dir/bootstrap ]] || fail "the control or bootstrap file was left behind"
echo "ok: the dev broker's faults work and are bounded"
