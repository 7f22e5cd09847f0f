#!/usr/bin/env bash
# tests/tsan/run_tsan.sh: the concurrency tests under ThreadSanitizer (README.md says what
# runs and why). Builds what it needs into build/tsan (tools/build tsan TARGET...), then:
#   1. the unit tests that use threads or an io_context, and the in-process HTTP tests
#      (server, client, connection pool, streaming, TLS), each server on its own thread;
#   2. the embedded fleet with every process built with ThreadSanitizer: a load of tasks
#      (agentfleet-loadgen), the integration tests that drive the fleet's concurrent paths,
#      a second dispatcher replica taking over the scheduler from a stopped one, a worker
#      drained by SIGTERM with tasks in flight, and the drain of every process at the end.
# Fails when any process wrote a ThreadSanitizer report (all of them are printed), or when
# a step itself failed. ThreadSanitizer writes its reports to RUN_DIR/tsan/report.<pid>
# (TSAN_OPTIONS log_path); tests/tsan/suppressions.txt is the only suppression list.
#
#   AGENTFLEET_TSAN_RUN_DIR  the fleet's run folder (default /tmp/af-tsan-run)
#   AGENTFLEET_TSAN_TASKS    tasks the load submits (default 150)
#   AGENTFLEET_TSAN_SUPPRESSIONS  the suppression file (default tests/tsan/suppressions.txt;
#                            /dev/null shows what it hides)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export AF_LOG_TAG=tsan
source "$root/tools/lib/common.sh"
source "$root/tools/lib/fleet.sh"

build_dir="$root/build/tsan"
run_dir=${AGENTFLEET_TSAN_RUN_DIR:-/tmp/af-tsan-run}
tasks=${AGENTFLEET_TSAN_TASKS:-150}
suppressions=${AGENTFLEET_TSAN_SUPPRESSIONS:-$root/tests/tsan/suppressions.txt}
reports="$run_dir/tsan"
targets=(agentfleet-dispatcher agentfleet-worker agentfleet-dev-broker agentfleet-llm-sim
         agentfleet-tool-sim agentfleet-loadgen agentfleet_unit_tests agentfleet_tls_tests
         agentfleet_integration_tests)
# The integration tests that drive the fleet's concurrent paths: every sample task (claims,
# checkpoints and finishes through the write batcher, result events from the producer's
# poll thread), cancellation and lost leases reaching a run from the heartbeat, dead
# letters, a 429 storm with retries, long polls and live event streams fed by the result
# consumer's thread, batch uploads on the API's batch pool, the scheduler's per-user
# concurrency under load, and the metrics endpoints scraped while tasks run.
# --targets: what it builds, for tools/test to build the tree before the suite runs.
if [[ "${1:-}" == --targets ]]; then
  echo "${targets[*]}"
  exit 0
fi
integration_filter="SampleTasks.*:Cancel.*:Deadline.*:Recovery.*:DeadLetters.*:ModelFaults.*"
integration_filter+=":ProgressEvents.*:ApiLongPoll.*:ApiEvents.*:ApiBatches.*:SubmitTopic.*"
integration_filter+=":SchedulerConcurrency.*:SchedulerLimits.*:Metrics.*"
# Every unit test the ThreadSanitizer tree builds: tests/CMakeLists.txt builds there only the
# files whose tests run code on several threads or on an io_context (the rest are pure
# functions on one thread, which ThreadSanitizer has nothing to say about).
unit_filter="*"

mkdir -p "$run_dir"
rm -rf "$reports" "$run_dir/out"
mkdir -p "$reports" "$run_dir/out"
failed=()

step() {
  af_log "---- $*"
}

# ---- build -------------------------------------------------------------------------
step "building ${targets[*]} in $build_dir"
started=$(af_now_ms)
# One build of build/tsan at a time (two runs of this script, or a developer's build).
flock /tmp/af-build-tsan.lock "$root/tools/build" tsan "${targets[@]}" >"$run_dir/out/build.log" 2>&1 || {
  tail -n 50 "$run_dir/out/build.log" >&2
  af_log "the ThreadSanitizer build failed (log: $run_dir/out/build.log)"
  exit 1
}
af_log "build: $((($(af_now_ms) - started) / 1000)) s"
# A build folder configured without AGENTFLEET_TSAN would pass silently.
for binary in dispatcher/agentfleet-dispatcher worker/agentfleet-worker tests/agentfleet_unit_tests; do
  if [[ $(nm -D "$build_dir/$binary" | grep -c " __tsan_init") == 0 ]]; then
    af_log "$build_dir/$binary is not built with ThreadSanitizer"
    exit 1
  fi
done

# Every process from here on reports into $reports and goes on after a report, so one run
# shows them all. exitcode: a process that reported exits with 66 (the tests notice).
export TSAN_OPTIONS="halt_on_error=0 exitcode=66 second_deadlock_stack=1 log_path=$reports/report suppressions=$suppressions"

# run_step NAME CMD...: runs CMD with its output in out/NAME.log; a failure is recorded.
run_step() {
  local name=$1
  shift
  local begin rc=0
  begin=$(af_now_ms)
  "$@" >"$run_dir/out/$name.log" 2>&1 || rc=$?
  af_log "$name: exit $rc after $((($(af_now_ms) - begin) / 1000)) s"
  if ((rc != 0)); then
    failed+=("$name (exit $rc, $run_dir/out/$name.log)")
    tail -n 30 "$run_dir/out/$name.log" >&2
  fi
}

# Each pattern of a filter must name at least one test of the binary: a pattern that matches
# none (a suite renamed, a file the tree no longer builds) would quietly test nothing.
check_filter() {  # BINARY FILTER
  local binary=$1 pattern patterns
  IFS=: read -ra patterns <<<"$2"
  for pattern in "${patterns[@]}"; do
    if ! "$binary" --gtest_list_tests "--gtest_filter=$pattern" 2>/dev/null | grep -q '^  '; then
      failed+=("the filter pattern '$pattern' matches no test of ${binary##*/}")
      af_log "the filter pattern '$pattern' matches no test of ${binary##*/}"
    fi
  done
}

# ---- 1. in-process tests -------------------------------------------------------------
step "unit tests"
check_filter "$build_dir/tests/agentfleet_unit_tests" "$unit_filter"
run_step unit_tests "$build_dir/tests/agentfleet_unit_tests" --gtest_brief=1 \
  "--gtest_filter=$unit_filter"
step "HTTP server and client tests (in-process servers on their own threads)"
run_step tls_tests "$build_dir/tests/integration/agentfleet_tls_tests" --gtest_brief=1

# ---- 2. the fleet ----------------------------------------------------------------------
fleet_up=0
stop_fleet() {
  if ((fleet_up)); then
    fleet_up=0
    "$root/tests/integration/fleet_fixture.sh" stop "$run_dir" >"$run_dir/out/fleet_stop.log" 2>&1 ||
      failed+=("fleet_stop ($run_dir/out/fleet_stop.log)")
  fi
}
# A run killed outright leaves the fleet to the next run, whose start stops it first.
trap 'stop_fleet' EXIT
trap 'exit 130' INT TERM

step "starting the fleet under ThreadSanitizer in $run_dir"
export AGENTFLEET_CONFIG="$root/config/agentfleet.yaml"
fleet_up=1
if ! "$root/tests/integration/fleet_fixture.sh" start "$run_dir" "$build_dir" >"$run_dir/out/fleet_start.log" 2>&1; then
  cat "$run_dir/out/fleet_start.log" >&2
  failed+=("fleet_start ($run_dir/out/fleet_start.log)")
else
  set -a
  # shellcheck source=/dev/null
  source "$run_dir/env"
  set +a

  step "load: $tasks tasks from 8 concurrent submitters"
  run_step loadgen "$build_dir/tools/loadgen/agentfleet-loadgen" --url "$AGENTFLEET_URL" \
    --pg "$AGENTFLEET_PG_URL" --tasks "$tasks" --users 15 --concurrency 8 \
    --key-prefix tsan-load --limit-s 400

  step "integration tests against the fleet: $integration_filter"
  check_filter "$build_dir/tests/integration/agentfleet_integration_tests" "$integration_filter"
  AGENTFLEET_TEST_RUN_DIR="$run_dir" run_step integration_tests \
    "$build_dir/tests/integration/agentfleet_integration_tests" --gtest_brief=1 \
    "--gtest_filter=$integration_filter"

  step "scheduler takeover: a second dispatcher replica, then the first one stops"
  first_pid=$(awk '$2 == "dispatcher" {print $1}' "$run_dir/pids")
  if fleet_start_dispatcher "$run_dir" "$build_dir" dispatcher-2 >>"$run_dir/out/takeover.log" 2>&1; then
    kill -TERM "$first_pid" || failed+=("no first dispatcher to stop")
    deadline=$(($(af_now_ms) + 60000))
    while kill -0 "$first_pid" 2>/dev/null && (($(af_now_ms) < deadline)); do sleep 0.2; done
    AGENTFLEET_URL=$FLEET_LAST_URL  # the API from here on
    run_step takeover_load "$build_dir/tools/loadgen/agentfleet-loadgen" --url "$AGENTFLEET_URL" \
      --pg "$AGENTFLEET_PG_URL" --tasks 30 --users 5 --concurrency 4 --key-prefix tsan-takeover \
      --limit-s 300
  else
    failed+=("second dispatcher ($run_dir/out/takeover.log)")
  fi

  step "worker drain: SIGTERM to worker-1 while it runs tasks, then a worker joins"
  # Slow tasks (llm-sim's "slow" scenario: 600 ms a model answer) so some are mid-run at
  # the signal; the drained worker hands them back and the others finish them.
  "$build_dir/tools/loadgen/agentfleet-loadgen" --url "$AGENTFLEET_URL" --pg "$AGENTFLEET_PG_URL" \
    --tasks 40 --users 10 --concurrency 4 --text "slow: steps=3" --key-prefix tsan-drain \
    --limit-s 300 >"$run_dir/out/drain_load.log" 2>&1 &
  load_pid=$!
  victim=$(awk '$2 == "worker-1" {print $1}' "$run_dir/pids")
  deadline=$(($(af_now_ms) + 60000))
  while (($(af_now_ms) < deadline)); do
    running=$(psql "$AGENTFLEET_PG_URL" -XAtc \
      "SELECT count(*) FROM tasks WHERE status = 'running' AND worker_id = 'worker-1'" || echo 0)
    ((${running:-0} > 0)) && break
    sleep 0.1
  done
  kill -TERM "$victim" || failed+=("no worker-1 to drain")
  while kill -0 "$victim" 2>/dev/null && (($(af_now_ms) < deadline + 60000)); do sleep 0.2; done
  grep -q '"msg":"stopped with' "$run_dir/logs/worker-1.log" ||
    failed+=("worker-1 did not drain ($run_dir/logs/worker-1.log)")
  fleet_start_worker "$run_dir" "$build_dir" worker-3
  rc=0
  wait "$load_pid" || rc=$?
  af_log "drain_load: exit $rc; $(grep -c 'handed back' "$run_dir/logs/worker-1.log" || true) tasks handed back"
  ((rc == 0)) || failed+=("drain_load (exit $rc, $run_dir/out/drain_load.log)")
fi

step "stopping the fleet (every process drains and exits)"
stop_fleet

# ---- verdict ---------------------------------------------------------------------------
# A report is "WARNING: ThreadSanitizer: ..." (races, lock inversions, leaked threads,
# signal-unsafe calls); "ERROR: ThreadSanitizer" or DEADLYSIGNAL is the runtime itself
# failing. With log_path they are in $reports; the logs are searched too, in case a process
# ran without TSAN_OPTIONS.
mapfile -t with_reports < <(grep -l "WARNING: ThreadSanitizer:\|ERROR: ThreadSanitizer\|ThreadSanitizer:DEADLYSIGNAL" \
  "$reports"/* "$run_dir"/logs/*.log "$run_dir"/out/*.log 2>/dev/null || true)
if ((${#with_reports[@]} > 0)); then
  for file in "${with_reports[@]}"; do
    echo "======== $file"
    cat "$file"
  done
  af_log "ThreadSanitizer reports: $(cat "${with_reports[@]}" | grep -c "WARNING: ThreadSanitizer:")" \
    "in ${#with_reports[@]} files (above)"
  failed+=("ThreadSanitizer reports")
fi
if ((${#failed[@]} > 0)); then
  af_log "FAILED: ${failed[*]}"
  exit 1
fi
af_log "no ThreadSanitizer report; every step passed"
