#!/usr/bin/env bash
# Hostile clients (tools/abuse, short form) against a fleet of one dispatcher and one worker,
# loopback only, while a well-behaved user keeps submitting: idle and slow connections,
# 8 MiB bodies without a key, streams and long polls past one key's caps, a trickling batch
# upload, a flood of bad keys and a batch over its user's queue. The well-behaved user gets
# no error; every hostile request is refused as it should be; nothing of them is stored.
# The report (latencies, the dispatcher's peak RSS) is printed, not asserted: this build
# runs under AddressSanitizer; docs/performance.md has the figures of a release build.
#   abuse_test.sh BUILD_DIR RUN_DIR   (ABUSE_FORM=full for the figures of docs/performance.md)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=$1
run_dir=$2
export AF_LOG_TAG=abuse
source "$root/tools/lib/common.sh"
source "$root/tools/lib/fleet.sh"
source "$root/tests/e2e/lib.sh"
fleet_reset "$run_dir"
trap 'fleet_stop "$run_dir"' EXIT
AGENTFLEET_BATCH_UPLOAD_RATE_WINDOW_S=3 fleet_start "$run_dir" "$build_dir" 1
e2e_wait_consuming "$run_dir" worker-1
pid=$(awk '$2 == "dispatcher" {print $1}' "$run_dir/pids")
[[ -n "$pid" ]] || fail "no dispatcher in $run_dir/pids"
"$root/tools/abuse" --url "$AGENTFLEET_URL" --dispatcher-pid "$pid" \
  --pg-url "$AGENTFLEET_PG_URL" --form "${ABUSE_FORM:-short}" --out "$run_dir/abuse.json" ||
  fail "a check of the abuse run failed (problems in the report above)"
kill -0 "$pid" 2>/dev/null || fail "the dispatcher did not survive the abuse run"
echo "abuse: the well-behaved user was served throughout; every hostile request was refused"
