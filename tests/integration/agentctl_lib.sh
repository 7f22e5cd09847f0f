# shellcheck shell=bash
# What the agentctl tests share (agentctl_test.sh, agentctl_follow_test.sh): the fleet's
# settings from the fixture's env file, a private HOME, this run's user names, the script's
# time budget and the helpers that run agentctl and check what it printed. Source it after
# `set -euo pipefail` with the agentctl binary in $1.
ctl=$1
set -a
# shellcheck disable=SC1091
source "$AGENTFLEET_TEST_RUN_DIR/env"
set +a
# agentctl takes AGENTFLEET_URL, AGENTFLEET_API_KEY (the admin key) and
# AGENTFLEET_KAFKA_BOOTSTRAP from the environment; no config file of the machine's.
unset AGENTCTL_CONFIG
tmp=$(mktemp -d)
export HOME="$tmp/home"
bg_pids=""  # agentctl runs in the background, stopped on exit
cleanup() {
  local pid
  for pid in $bg_pids; do
    kill "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp" || true
}
trap cleanup EXIT

run=$(date +%s%N | cut -c6-16)
# The whole script's budget (budget_s, set before sourcing this; 280 s by default): under its
# ctest TIMEOUT, so a slow fleet fails here, naming the step, rather than being killed by
# ctest.
budget_s=${budget_s:-280}
budget_end=$(($(date +%s) + budget_s))
u1="ctl-u1-$run"
ub="ctl-b-$run"
ul="ctl-l-$run"
uq="ctl-q-$run"
ut="ctl-t-$run"
ud="ctl-dlq-$run"
missing="00000000-0000-4000-8000-000000000000"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
now_ms() { date +%s%3N; }
compact_json() {
  python3 -c 'import json, sys
for line in sys.stdin:
    if line.strip():
        print(json.dumps(json.loads(line), separators=(",", ":"), ensure_ascii=False))'
}

# bound [MAX]: seconds a command may take: MAX (90), or what is left of the script's budget.
bound() {
  local most=${1:-90} left=$((budget_end - $(date +%s)))
  ((left > 0)) || fail "the script's $budget_s s budget is spent"
  echo $((left < most ? left : most))
}
# Runs agentctl bounded (bound); its stdout and stderr go where the caller redirects them.
bounded_ctl() {
  local limit
  limit=$(bound)
  timeout "$limit" "$ctl" "$@"
}

# ctl CODE ARGS...: runs agentctl; its stdout in $out, its stderr in $err; the exit code
# must be CODE.
out=""
err=""
ctl() {
  local want=$1 got=0 limit
  shift
  limit=$(bound)
  timeout "$limit" "$ctl" "$@" >"$tmp/out" 2>"$tmp/err" || got=$?
  if [[ "$got" == 124 ]]; then
    fail "agentctl $* did not end within $limit s (killed); stderr: $(cat "$tmp/err")"
  fi
  out=$(cat "$tmp/out")
  err=$(cat "$tmp/err")
  # JSON output (the parts Postgres writes have spaces after ':' and ','), one compact object
  # per line.
  if [[ " $* " == *" --json "* && -n "$out" ]]; then
    out=$(compact_json <<<"$out") || fail "agentctl $* printed what is not JSON lines: $out"
  fi
  if [[ "$got" != "$want" ]]; then
    echo "agentctl $*: exit $got, expected $want" >&2
    echo "--- stdout:" >&2
    echo "$out" >&2
    echo "--- stderr:" >&2
    echo "$err" >&2
    exit 1
  fi
}
has() { grep -qF -- "$2" <<<"$1" || fail "expected '$2' in:"$'\n'"$1"; }
lacks() { ! grep -qF -- "$2" <<<"$1" || fail "did not expect '$2' in:"$'\n'"$1"; }
# One line of stderr naming the problem.
one_error_line() {
  [[ $(wc -l <<<"$err") == 1 && "$err" == agentctl:* ]] || fail "expected one error line, got:"$'\n'"$err"
}
