# shellcheck shell=bash
# Shared helpers for agentfleet's bash tools. Source it; do not execute it:
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# The functions work under `set -euo pipefail` and only touch loopback.

# Sourcing twice is harmless.
if [[ -n "${AF_COMMON_SH_LOADED:-}" ]]; then
  return 0
fi
AF_COMMON_SH_LOADED=1

# af_log MSG...: one line "<UTC time> <tool>: MSG" on stderr.
# The tool name is $AF_LOG_TAG, or the calling script's file name.
af_log() {
  printf '%s %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)" \
    "${AF_LOG_TAG:-$(basename -- "$0")}" "$*" >&2
}

# af_port_in_use PORT: succeeds when a local TCP socket (any state, any address) uses
# PORT. Uses `ss` when present, else a connect attempt to 127.0.0.1 via bash's /dev/tcp
# (which only detects listeners).
af_port_in_use() {
  local port=$1
  if command -v ss >/dev/null 2>&1; then
    [[ -n "$(ss -Htan "( sport = :$port )" 2>/dev/null)" ]]
  else
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
  fi
}

# af_free_port: prints a TCP port that nothing on this host uses now. Candidates are
# random in 20000-40000 minus the kernel's ephemeral range (outgoing connections and
# port-0 listeners such as the dev broker's take ports from there). Another process may
# still take it before the caller binds it: callers that pick the port themselves should
# retry on "address in use". Returns 1 after 100 busy candidates.
# Ports handed out earlier by this shell and its children (each call runs in a command
# substitution, so the record is a file) are never handed out again: a fleet picks several
# ports before any process binds one, and two equal picks would make a process fail with
# "address in use" at start. The record is named after the shell that first sourced this
# file (its children inherit the name) and appears with the first port handed out;
# records of shells that have exited are removed here.
if [[ -z "${_AF_PORTS_GIVEN:-}" ]]; then
  for _af_record in "${TMPDIR:-/tmp}"/af-ports.*; do
    if [[ -e "$_af_record" ]] && ! kill -0 "${_af_record##*.}" 2>/dev/null; then
      rm -f "$_af_record"
    fi
  done
  unset _af_record
  export _AF_PORTS_GIVEN="${TMPDIR:-/tmp}/af-ports.$$"
fi
af_free_port() {
  local lo=20000 hi=40000 eph_lo eph_hi port _
  if read -r eph_lo eph_hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null; then
    if ((eph_lo > lo && eph_lo <= hi)); then
      hi=$((eph_lo - 1))
    elif ((eph_hi >= lo && eph_hi < hi && eph_lo <= lo)); then
      lo=$((eph_hi + 1))
    fi
  fi
  for _ in $(seq 100); do
    port=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1)))
    grep -qx "$port" "$_AF_PORTS_GIVEN" 2>/dev/null && continue
    if ! af_port_in_use "$port"; then
      echo "$port" >>"$_AF_PORTS_GIVEN"
      echo "$port"
      return 0
    fi
  done
  af_log "af_free_port: no free port found in $lo-$hi"
  return 1
}

# af_now_ms: milliseconds since the epoch (for deadlines).
af_now_ms() {
  date +%s%3N
}

# af_secs_to_ms SECONDS: prints SECONDS ("5", "0.25") in whole milliseconds.
af_secs_to_ms() {
  local int frac
  if [[ ! "$1" =~ ^([0-9]*)(\.([0-9]*))?$ ]] || [[ "$1" == "" || "$1" == "." ]]; then
    af_log "not a number of seconds: '$1'"
    return 1
  fi
  int=${BASH_REMATCH[1]:-0}
  frac="${BASH_REMATCH[3]:-}000"
  echo $((10#$int * 1000 + 10#${frac:0:3}))
}

# af_wait_port HOST PORT TIMEOUT_S: waits until HOST:PORT accepts a TCP connection.
# Returns 0 when it does, 1 after TIMEOUT_S seconds (fractions allowed, e.g. 0.5),
# 2 when TIMEOUT_S is not a number.
af_wait_port() {
  local host=$1 port=$2 timeout_s=$3 deadline
  deadline=$(af_secs_to_ms "$timeout_s") || return 2
  deadline=$((deadline + $(af_now_ms)))
  while true; do
    # `timeout` bounds a connect that hangs (a non-loopback host dropping packets).
    if timeout 1 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null; then
      return 0
    fi
    if (($(af_now_ms) >= deadline)); then
      return 1
    fi
    sleep 0.1
  done
}

# af_wait_file PATH TIMEOUT_S: waits until PATH exists and is not empty (so a file that
# is written in place is not seen half-created; atomic writers rename into place).
# Returns 0 when it is there, 1 after TIMEOUT_S seconds (fractions allowed), 2 when
# TIMEOUT_S is not a number.
af_wait_file() {
  local path=$1 timeout_s=$2 deadline
  deadline=$(af_secs_to_ms "$timeout_s") || return 2
  deadline=$((deadline + $(af_now_ms)))
  until [[ -s "$path" ]]; do
    if (($(af_now_ms) >= deadline)); then
      return 1
    fi
    sleep 0.05
  done
}
