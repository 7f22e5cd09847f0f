# shellcheck shell=bash
# Starts and stops the embedded fleet: a private Postgres, the dev broker, llm-sim,
# tool-sim, the dispatcher and N workers, all on loopback, all under one run folder.
# Used by tools/quickstart and the integration tests. Source it after common.sh.
#
#   fleet_start RUN_DIR BUILD_DIR [WORKERS]   exports AGENTFLEET_* for the config file,
#                                             AGENTFLEET_URL (the dispatcher's API) and
#                                             AGENTFLEET_API_KEY (the development admin
#                                             key), the metrics endpoints:
#                                             AGENTFLEET_DISPATCHER_METRICS_URL and
#                                             AGENTFLEET_WORKER_METRICS_URLS (comma-separated,
#                                             worker-1 first), each a base URL serving
#                                             /metrics, /healthz and /readyz
#   fleet_start_worker RUN_DIR BUILD_DIR NAME  one more worker in the running fleet
#   fleet_start_dispatcher RUN_DIR BUILD_DIR NAME  one more dispatcher replica
#   fleet_start_faultproxy RUN_DIR BUILD_DIR NAME TARGET_HOST:PORT
#                                             a fault proxy (tools/faultproxy) in front of
#                                             TARGET; sets FLEET_LAST_PROXY_PORT (point the
#                                             client at 127.0.0.1 and this port) and
#                                             FLEET_LAST_PROXY_CONTROL (its control port)
#   fleet_fault CONTROL_PORT COMMAND...       sends one command to a fault proxy (blackhole
#                                             5, latency 300, reset, pass, status, ...) and
#                                             prints its reply; fails on an `error` reply
#
# Knobs (environment): FLEET_PG_LATENCY_MS (a network between the fleet's processes and
# Postgres: every dispatcher and worker reaches it through a fault proxy, pg-proxy, that
# delays each direction by that many milliseconds, decimals allowed; a round trip gains
# twice that; migrations and the scripts' own queries go direct; FLEET_PG_PROCESS_URL is the
# proxied URL), LLM_SIM_LATENCY_MS (each model answer), TOOL_SIM_LATENCY (a
# distribution such as fixed:1500, each tool call), AGENTFLEET_LEASE_S,
# AGENTFLEET_HEARTBEAT_S, AGENTFLEET_MAX_IN_FLIGHT, AGENTFLEET_SHUTDOWN_GRACE_S,
# AGENTFLEET_ROUND_TRIP_TARGET_MS (worker.round_trip_target_ms), AGENTFLEET_LEADER_SILENCE_S
# (dispatcher.leader_silence_s), AGENTFLEET_MAX_ACTIVE_TASKS, AGENTFLEET_RELAY_INTERVAL_MS,
# AGENTFLEET_BATCH_UPLOAD_RATE_WINDOW_S (dispatcher.batch_upload_rate_window_s)
# (read by config/agentfleet.yaml, which the fleet runs with),
# SIM_TIMING_DIR (both simulators write a --timing-log there: llm-sim.timing, tool-sim.timing),
# FLEET_OTLP_SPANS (a file: a local OTLP receiver, tools/otlp_receiver, is started and the
# workers export each task's trace to it, one span per line; AGENTFLEET_OTLP_ENDPOINT is
# exported, and AGENTFLEET_TRACE_LINK, the receiver's page of a trace, which the dispatcher
# names as telemetry.trace_link).
#   fleet_stop RUN_DIR                        stops everything fleet_start started
#   fleet_reset RUN_DIR                       stops it and removes its database and logs
#
# Every process's pid is recorded in RUN_DIR/pids and its output in RUN_DIR/logs/, so
# fleet_stop (and a trap) can clean up whatever state a failed start left behind.

AF_ROOT="${AF_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"

# _fleet_spawn RUN_DIR NAME CMD...: starts CMD in the background, logging to logs/NAME.log.
_fleet_spawn() {
  local run_dir=$1 name=$2
  shift 2
  "$@" >"$run_dir/logs/$name.log" 2>&1 &
  echo "$! $name" >>"$run_dir/pids"
}

# _fleet_port_from RUN_DIR FILE NAME: waits for a port file written by a simulator.
_fleet_wait_file() {
  local path=$1 name=$2 run_dir=$3
  if ! af_wait_file "$path" 30; then
    af_log "$name did not start; last lines of its log:"
    tail -n 20 "$run_dir/logs/$name.log" >&2 || true
    return 1
  fi
}

# _fleet_pg_dir RUN_DIR: as root, Postgres runs as the postgres user, which must be able to
# reach its folder. When RUN_DIR is not reachable (a checkout under /root or in a private
# temporary folder, say), the cluster lives in a folder of its own under /tmp, RUN_DIR/pg
# links to it, and the folder names its run folder in a file `owner`. Clusters whose run
# folder is gone (a clone removed after its CI run) are removed when the next one is made:
# about 50 MB each, a suite makes a few dozen, and a host that clones to a new path for every
# run would otherwise fill /tmp with them.
_fleet_pg_dir() {
  local run_dir=$1
  ((EUID == 0)) || return 0
  [[ -e "$run_dir/pg" ]] && return 0
  if ! runuser -u postgres -- test -x "$run_dir"; then
    _fleet_sweep_pg_dirs
    local target
    target="/tmp/agentfleet-pg-$(printf '%s' "$run_dir" | md5sum | cut -c1-12)"
    # No link yet means a new run folder (a fresh checkout at the same path, say): a
    # cluster left there by an earlier one is not ours to reuse.
    if [[ -d "$target" ]]; then
      "$AF_ROOT/tools/devpg" stop "$target" >/dev/null 2>&1 || true
      rm -rf "$target"
    fi
    mkdir -p "$target"
    # The link first: a sweep running beside this one (another fleet of the suite starting)
    # never sees an owner that does not link here yet.
    ln -sfn "$target" "$run_dir/pg"
    printf '%s\n' "$(realpath -m -- "$run_dir")" >"$target/owner"
    af_log "postgres cannot reach $run_dir; its cluster lives in $target"
  fi
}

# _fleet_sweep_pg_dirs: stops and removes the clusters under /tmp that no run folder links to
# any more (their `owner` gone, or its pg link pointing elsewhere). A cluster without an
# `owner` file is left alone: nothing says whose it is.
_fleet_sweep_pg_dirs() {
  local dir owner
  for dir in /tmp/agentfleet-pg-*; do
    [[ -d "$dir" && -f "$dir/owner" ]] || continue
    owner=$(<"$dir/owner")
    [[ "$(readlink -f -- "$owner/pg" 2>/dev/null)" == "$(readlink -f -- "$dir")" ]] && continue
    "$AF_ROOT/tools/devpg" stop "$dir" >/dev/null 2>&1 || true
    rm -rf -- "$dir"
    af_log "removed the cluster of a run folder that is gone: $dir (was $owner)"
  done
}

fleet_start() {
  local run_dir=$1 build_dir=$2 workers=${3:-2}
  mkdir -p "$run_dir/logs"
  : >"$run_dir/pids"
  local bin_broker="$build_dir/tools/dev_broker/agentfleet-dev-broker"
  local bin_llm="$build_dir/tools/llm_sim/agentfleet-llm-sim"
  local bin_tool="$build_dir/tools/tool_sim/agentfleet-tool-sim"
  local bin_dispatcher="$build_dir/dispatcher/agentfleet-dispatcher"
  local bin_worker="$build_dir/worker/agentfleet-worker"

  _fleet_pg_dir "$run_dir"
  af_log "starting Postgres under $run_dir/pg"
  AGENTFLEET_PG_URL=$("$AF_ROOT/tools/devpg" start "$run_dir/pg" | tail -n 1)
  export AGENTFLEET_PG_URL

  af_log "starting the dev broker"
  rm -f "$run_dir/kafka.bootstrap" "$run_dir/kafka.control"
  # The control port injects Kafka faults at run time (tools/dev_broker/README.md); it
  # is written before the bootstrap file.
  _fleet_spawn "$run_dir" dev-broker "$bin_broker" --bootstrap-file "$run_dir/kafka.bootstrap" \
    --control-file "$run_dir/kafka.control"
  _fleet_wait_file "$run_dir/kafka.bootstrap" dev-broker "$run_dir"
  AGENTFLEET_KAFKA_BOOTSTRAP=$(cat "$run_dir/kafka.bootstrap")
  AGENTFLEET_KAFKA_CONTROL_PORT=$(cat "$run_dir/kafka.control")
  export AGENTFLEET_KAFKA_BOOTSTRAP AGENTFLEET_KAFKA_CONTROL_PORT

  af_log "starting llm-sim and tool-sim"
  rm -f "$run_dir/llm-sim.port" "$run_dir/tool-sim.port"
  _fleet_spawn "$run_dir" llm-sim "$bin_llm" --scenarios "$AF_ROOT/config/llm-sim-scenarios.yaml" \
    --port-file "$run_dir/llm-sim.port" ${LLM_SIM_LATENCY_MS:+--latency-ms "$LLM_SIM_LATENCY_MS"} \
    ${SIM_TIMING_DIR:+--timing-log "$SIM_TIMING_DIR/llm-sim.timing"}
  # TOOL_SIM_ARGS: more flags for tool-sim (words split on spaces).
  local tool_sim_args=()
  read -ra tool_sim_args <<<"${TOOL_SIM_ARGS:-}"
  _fleet_spawn "$run_dir" tool-sim "$bin_tool" --seed "$AF_ROOT/config/tool-sim-seed.yaml" \
    --port-file "$run_dir/tool-sim.port" ${TOOL_SIM_LATENCY:+--latency "$TOOL_SIM_LATENCY"} \
    ${SIM_TIMING_DIR:+--timing-log "$SIM_TIMING_DIR/tool-sim.timing"} "${tool_sim_args[@]}"
  _fleet_wait_file "$run_dir/llm-sim.port" llm-sim "$run_dir"
  _fleet_wait_file "$run_dir/tool-sim.port" tool-sim "$run_dir"
  if [[ -n "${FLEET_OTLP_SPANS:-}" ]]; then
    rm -f "$run_dir/otlp.port"
    _fleet_spawn "$run_dir" otlp-receiver python3 "$AF_ROOT/tools/otlp_receiver/otlp_receiver.py" \
      --port-file "$run_dir/otlp.port" --out "$FLEET_OTLP_SPANS"
    _fleet_wait_file "$run_dir/otlp.port" otlp-receiver "$run_dir"
    export AGENTFLEET_OTLP_ENDPOINT="http://127.0.0.1:$(cat "$run_dir/otlp.port")"
    export AGENTFLEET_TRACE_LINK="$AGENTFLEET_OTLP_ENDPOINT/traces/{trace_id}"
  fi
  LLM_SIM_PORT=$(cat "$run_dir/llm-sim.port")
  TOOL_SIM_URL="http://127.0.0.1:$(cat "$run_dir/tool-sim.port")"
  export LLM_SIM_PORT TOOL_SIM_URL

  AGENTFLEET_DISPATCHER_PORT=$(af_free_port)
  export AGENTFLEET_DISPATCHER_PORT
  # FLEET_CONFIG: another configuration file (a test's variant of the embedded default).
  export AGENTFLEET_CONFIG="${FLEET_CONFIG:-$AF_ROOT/config/agentfleet.yaml}"

  af_log "applying migrations"
  "$bin_dispatcher" migrate >"$run_dir/logs/migrate.log" 2>&1 || {
    cat "$run_dir/logs/migrate.log" >&2
    return 1
  }

  unset FLEET_PG_PROCESS_URL
  if [[ -n "${FLEET_PG_LATENCY_MS:-}" ]]; then
    local pg_port
    pg_port=$(cat "$run_dir/pg/port")
    fleet_start_faultproxy "$run_dir" "$build_dir" pg-proxy "127.0.0.1:$pg_port" || return 1
    fleet_fault "$FLEET_LAST_PROXY_CONTROL" latency "$FLEET_PG_LATENCY_MS" >/dev/null || return 1
    FLEET_PG_PROCESS_URL=${AGENTFLEET_PG_URL/:$pg_port\//:$FLEET_LAST_PROXY_PORT/}
    [[ "$FLEET_PG_PROCESS_URL" != "$AGENTFLEET_PG_URL" ]] || {
      af_log "could not point the Postgres URL at the proxy: $AGENTFLEET_PG_URL"
      return 1
    }
    export FLEET_PG_PROCESS_URL
    af_log "the dispatcher and workers reach Postgres through pg-proxy, ${FLEET_PG_LATENCY_MS} ms each way"
  fi

  af_log "starting the dispatcher on port $AGENTFLEET_DISPATCHER_PORT and $workers workers"
  # Each process gets its own metrics port (AGENTFLEET_METRICS_PORT, set per process only).
  local metrics_port i
  metrics_port=$(af_free_port)
  AGENTFLEET_DISPATCHER_METRICS_URL="http://127.0.0.1:$metrics_port"
  AGENTFLEET_PG_URL=${FLEET_PG_PROCESS_URL:-$AGENTFLEET_PG_URL} AGENTFLEET_METRICS_PORT=$metrics_port \
    _fleet_spawn "$run_dir" dispatcher "$bin_dispatcher" serve
  local -a worker_ports=()
  for ((i = 1; i <= workers; i++)); do
    metrics_port=$(af_free_port)
    worker_ports+=("$metrics_port")
    AGENTFLEET_PG_URL=${FLEET_PG_PROCESS_URL:-$AGENTFLEET_PG_URL} AGENTFLEET_WORKER_ID="worker-$i" \
      AGENTFLEET_METRICS_PORT=$metrics_port _fleet_spawn "$run_dir" "worker-$i" "$bin_worker"
  done
  if ! af_wait_port 127.0.0.1 "$AGENTFLEET_DISPATCHER_PORT" 30; then
    af_log "the dispatcher did not start; last lines of its log:"
    tail -n 20 "$run_dir/logs/dispatcher.log" >&2 || true
    return 1
  fi
  AGENTFLEET_WORKER_METRICS_URLS=""
  for ((i = 1; i <= workers; i++)); do
    metrics_port=${worker_ports[i - 1]}
    if ! af_wait_port 127.0.0.1 "$metrics_port" 30; then
      af_log "worker-$i did not open its metrics port $metrics_port; last lines of its log:"
      tail -n 20 "$run_dir/logs/worker-$i.log" >&2 || true
      return 1
    fi
    AGENTFLEET_WORKER_METRICS_URLS+="${AGENTFLEET_WORKER_METRICS_URLS:+,}http://127.0.0.1:$metrics_port"
  done
  export AGENTFLEET_URL="http://127.0.0.1:$AGENTFLEET_DISPATCHER_PORT"
  # The embedded default's development admin key (config/agentfleet.yaml, auth).
  export AGENTFLEET_API_KEY="${AGENTFLEET_API_KEY:-af-dev-admin-key}"
  export AGENTFLEET_DISPATCHER_METRICS_URL AGENTFLEET_WORKER_METRICS_URLS
  af_log "metrics: dispatcher $AGENTFLEET_DISPATCHER_METRICS_URL/metrics, workers" \
    "$(printf '%s/metrics ' ${AGENTFLEET_WORKER_METRICS_URLS//,/ })"
}

# fleet_start_worker RUN_DIR BUILD_DIR NAME: starts one more worker (or restarts a stopped
# one) in the running fleet; its id and log are NAME. Sets FLEET_LAST_PID.
fleet_start_worker() {
  local run_dir=$1 build_dir=$2 name=$3
  AGENTFLEET_PG_URL=${FLEET_PG_PROCESS_URL:-$AGENTFLEET_PG_URL} AGENTFLEET_WORKER_ID="$name" \
    AGENTFLEET_METRICS_PORT=$(af_free_port) _fleet_spawn "$run_dir" "$name" "$build_dir/worker/agentfleet-worker"
  FLEET_LAST_PID=$!
}

# fleet_start_dispatcher RUN_DIR BUILD_DIR NAME: one more dispatcher replica in the running
# fleet (same database and broker; the scheduler is active on one replica at a time). Sets
# FLEET_LAST_PID, FLEET_LAST_URL (its API) and FLEET_LAST_METRICS_URL; waits for its port.
fleet_start_dispatcher() {
  local run_dir=$1 build_dir=$2 name=$3 port metrics_port
  port=$(af_free_port)
  metrics_port=$(af_free_port)
  AGENTFLEET_PG_URL=${FLEET_PG_PROCESS_URL:-$AGENTFLEET_PG_URL} AGENTFLEET_DISPATCHER_PORT=$port \
    AGENTFLEET_METRICS_PORT=$metrics_port \
    _fleet_spawn "$run_dir" "$name" "$build_dir/dispatcher/agentfleet-dispatcher" serve
  FLEET_LAST_PID=$!
  FLEET_LAST_URL="http://127.0.0.1:$port"
  FLEET_LAST_METRICS_URL="http://127.0.0.1:$metrics_port"
  if ! af_wait_port 127.0.0.1 "$port" 30; then
    af_log "$name did not start; last lines of its log:"
    tail -n 20 "$run_dir/logs/$name.log" >&2 || true
    return 1
  fi
}

# fleet_start_faultproxy RUN_DIR BUILD_DIR NAME TARGET_HOST:PORT: starts a fault proxy
# (tools/faultproxy/README.md) on 127.0.0.1 in front of TARGET (a loopback address), logging
# to logs/NAME.log; fleet_stop stops it. Its ports are in RUN_DIR/NAME.port and
# RUN_DIR/NAME.control. Waits for its port file and sets FLEET_LAST_PID,
# FLEET_LAST_PROXY_PORT and FLEET_LAST_PROXY_CONTROL. fleet_stop stops processes whose NAME
# starts with dispatcher or worker- first (they drain through their proxies): name a proxy
# after what it fronts, e.g. pg-proxy-worker-1, not worker-1-pg.
fleet_start_faultproxy() {
  local run_dir=$1 build_dir=$2 name=$3 target=$4
  mkdir -p "$run_dir/logs"
  rm -f "$run_dir/$name.port" "$run_dir/$name.control"
  _fleet_spawn "$run_dir" "$name" "$build_dir/tools/faultproxy/agentfleet-faultproxy" \
    --target "$target" --port-file "$run_dir/$name.port" --control-file "$run_dir/$name.control"
  FLEET_LAST_PID=$!
  _fleet_wait_file "$run_dir/$name.port" "$name" "$run_dir" || return 1
  FLEET_LAST_PROXY_PORT=$(cat "$run_dir/$name.port")
  FLEET_LAST_PROXY_CONTROL=$(cat "$run_dir/$name.control")
}

# fleet_fault CONTROL_PORT COMMAND...: sends COMMAND (its words joined by spaces) to the
# fault proxy whose control port is CONTROL_PORT and prints the reply line. Returns 0 on an
# `ok` reply, 1 on an `error` reply, no reply within 10 s, or no proxy on that port.
fleet_fault() {
  local port=$1 reply="" fd
  shift
  # The braces keep 2>/dev/null from outliving the exec (which would make it permanent).
  if ! { exec {fd}<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then
    af_log "fleet_fault: no fault proxy answers on 127.0.0.1:$port"
    return 1
  fi
  # In a subshell: a proxy that closed at once (too many control connections) must not
  # kill the caller with SIGPIPE.
  (printf '%s\n' "$*" >&"$fd") 2>/dev/null || true
  IFS= read -r -t 10 reply <&"$fd" || true
  exec {fd}>&-
  if [[ -z "$reply" ]]; then
    af_log "fleet_fault: no reply from 127.0.0.1:$port to '$*'"
    return 1
  fi
  printf '%s\n' "$reply"
  [[ "$reply" == ok* ]]
}

# fleet_reset RUN_DIR: stops whatever an earlier run left and removes its cluster and logs,
# so the next fleet_start begins from an empty database.
fleet_reset() {
  local run_dir=$1
  fleet_stop "$run_dir"
  if [[ -e "$run_dir/pg" ]]; then rm -rf "$(readlink -f "$run_dir/pg")"; fi
  rm -rf "$run_dir/pg" "$run_dir/logs"
  # The spans an earlier fleet exported (the fixture's receiver writes them here).
  rm -f "$run_dir/otlp-spans.jsonl"
}

# _fleet_is_ours PID: the process exists and runs one of the fleet's programs (the OTLP
# receiver is a Python script).
_fleet_is_ours() {
  local cmdline
  cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline") || return 1
  [[ "$cmdline" == *agentfleet-* || "$cmdline" == *otlp_receiver.py* ]]
}

# _fleet_stop_matching RUN_DIR REGEX: SIGTERM to the recorded processes whose name matches,
# then waits up to 35 s for them, then SIGKILL.
_fleet_stop_matching() {
  local run_dir=$1 pattern=$2 pid name
  local -a stopping=()
  while read -r pid name; do
    [[ "$name" =~ $pattern ]] || continue
    # After a crash or reboot the pid may belong to someone else now: only signal a
    # process that is still one of ours.
    _fleet_is_ours "$pid" || continue
    kill -TERM "$pid" 2>/dev/null && stopping+=("$pid:$name")
  done <"$run_dir/pids"
  # Longer than the worker's drain grace (30 s), so a drain is not cut short.
  local deadline=$(($(af_now_ms) + 35000)) entry
  for entry in "${stopping[@]}"; do
    pid=${entry%%:*}
    name=${entry#*:}
    while kill -0 "$pid" 2>/dev/null && (($(af_now_ms) < deadline)); do sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      af_log "$name ($pid) did not stop in time; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}

fleet_stop() {
  local run_dir=$1
  if [[ -f "$run_dir/pids" ]]; then
    # The fleet drains first, while the broker and Postgres it drains into are still up.
    _fleet_stop_matching "$run_dir" '^(dispatcher.*|worker-.*)$'
    _fleet_stop_matching "$run_dir" '.'
    : >"$run_dir/pids"
  fi
  "$AF_ROOT/tools/devpg" stop "$run_dir/pg" >/dev/null 2>&1 || true
}
