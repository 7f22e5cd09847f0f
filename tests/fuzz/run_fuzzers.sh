#!/usr/bin/env bash
# tests/fuzz/run_fuzzers.sh [--idle] [SECONDS] [BUILD_DIR]: builds the fuzzers if needed
# (tools/build fuzz, the fuzz targets only), replays every committed input of
# tests/fuzz/regressions/, then gives each fuzzer SECONDS (default 60) of one core's time on
# its seed corpus, all at once: each fuzzer's own CPU time is read from /proc, and once it
# has had SECONDS it is asked to stop (SIGUSR1, libFuzzer's graceful exit: its final stats,
# and the exit's leak check, as at -max_total_time). New inputs go to a temporary folder,
# never into the repository. Fails on any crash, leak, timeout, out-of-memory or broken
# invariant, printing the reproducer's path (kept under BUILD_DIR/fuzz-artifacts/) and its
# bytes in base64, and when a fuzzer did not get its SECONDS within the wall-time bound.
# BUILD_DIR defaults to build/fuzz.
#   --idle  the whole run (its build too) under the idle scheduling class (tests/run_idle.sh):
#           the fuzzers take only the cores no other process wants, so ctest runs them
#           beside the tests that hold the machine (tests/fuzz/ci.cmake); they get their
#           SECONDS of a core however long the wait for idle cores takes.
#
# One fuzzer by hand: build/fuzz/tests/fuzz/config_fuzz -max_len=16384 NEW_DIR tests/fuzz/corpus/config_fuzz
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [[ "${1:-}" == --idle ]]; then
  shift
  # Once: the idle class is inherited by the build and the fuzzers.
  [[ -n "${AGENTFLEET_FUZZ_IDLE:-}" ]] || AGENTFLEET_FUZZ_IDLE=1 exec "$root/tests/run_idle.sh" "$0" --idle "$@"
fi
seconds=${1:-60}
build_dir=${2:-$root/build/fuzz}
# Cores the fuzzers share (AGENTFLEET_FUZZ_JOBS, else every core).
cores=${AGENTFLEET_FUZZ_JOBS:-$(nproc)}

# Target and its -max_len: the largest input worth trying (the seeds fit).
targets=(submission_fuzz model_response_fuzz react_json_fuzz config_fuzz api_request_fuzz)
declare -A max_len=([submission_fuzz]=16384 [model_response_fuzz]=16384 [react_json_fuzz]=8192
                    [config_fuzz]=16384 [api_request_fuzz]=16384)

command -v clang++ >/dev/null || {
  echo "run_fuzzers.sh: clang++ is missing (tools/setup installs clang and libclang-rt-14-dev)" >&2
  exit 1
}
# One build of build/fuzz at a time (another run, or someone's tools/build fuzz).
if [[ "$build_dir" == "$root/build/fuzz" ]]; then
  flock /tmp/af-build-fuzz.lock "$root/tools/build" fuzz "${targets[@]}"
else
  flock /tmp/af-build-fuzz.lock cmake --build "$build_dir" --target "${targets[@]}"
fi
bin_dir=$build_dir/tests/fuzz

work=$(mktemp -d "${TMPDIR:-/tmp}/agentfleet-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
artifacts=$build_dir/fuzz-artifacts
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Prints a failed run's reproducers (crash-*, leak-*, timeout-*, oom-*) and keeps them.
report() {
  local target=$1 dir=$2 found=0 file
  mkdir -p "$artifacts/$target"
  for file in "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-* "$dir"/slow-unit-*; do
    [[ -e "$file" ]] || continue
    found=1
    cp "$file" "$artifacts/$target/"
    echo "run_fuzzers.sh: $target reproducer: $artifacts/$target/$(basename "$file")"
    echo "  input (base64): $(base64 -w0 "$file")"
    echo "  replay: $bin_dir/$target $artifacts/$target/$(basename "$file")"
  done
  ((found)) || echo "run_fuzzers.sh: $target failed without a reproducer file; see its log above"
}

status=0

# 1. The committed regression inputs, each run once.
for target in "${targets[@]}"; do
  mapfile -t inputs < <(find "$root/tests/fuzz/regressions/$target" -type f ! -name '.*' \
                        ! -name '*.md' | sort)
  ((${#inputs[@]})) || continue
  mkdir -p "$work/$target/regressions"
  if ! (cd "$work/$target/regressions" && "$bin_dir/$target" "${inputs[@]}") \
      >"$work/$target.regressions.log" 2>&1; then
    cat "$work/$target.regressions.log"
    echo "run_fuzzers.sh: $target fails on a committed regression input" >&2
    status=1
  else
    echo "run_fuzzers.sh: $target: ${#inputs[@]} regression input(s) pass"
  fi
done
((status == 0)) || exit 1

# 2. Fuzzing, every fuzzer at once, each until it has had SECONDS of one core's time (utime
# plus stime of /proc/PID/stat, every thread of the process). N fuzzers sharing P cores each
# get P/N of one when nothing else runs: five fuzzers for 60 s on two cores take 150 s of
# wall time, where rounds of two took 180 s with a core idle in the last. Under --idle they
# take what the other tests leave. libFuzzer's own bounds are wall time: -max_total_time
# bounds the wait for a core (a fuzzer that reaches it short of its SECONDS fails), and the
# per-input -timeout is 10 s of one core stretched by the fuzzers' share of the cores, or,
# under --idle, where a core may be taken from them for a while, 120 s.
# Each runs in an empty folder of its own (the configuration loader resolves relative file
# names there) on a fresh corpus folder, first so that libFuzzer writes only there, and the
# committed seeds.
run_one() {
  local target=$1 dir=$work/$1
  mkdir -p "$dir/corpus" "$dir/run" "$dir/artifacts"
  cd "$dir/run"
  exec "$bin_dir/$target" -max_total_time="$wall_limit" -rss_limit_mb=2048 \
    -timeout="$input_timeout" -print_final_stats=1 -max_len="${max_len[$target]}" \
    -artifact_prefix="$dir/artifacts/" "$dir/corpus" "$root/tests/fuzz/corpus/$target" \
    >"$dir/log" 2>&1
}

# cpu_seconds PID: the process's CPU time so far, in whole seconds (0 once it is gone).
ticks=$(getconf CLK_TCK)
cpu_seconds() {
  local stat fields
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
  # The fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
  read -r -a fields <<<"${stat##*) }"
  echo $(((fields[11] + fields[12]) / ticks))
}

declare -A pid_of=() used=()
failed=()
finish() {
  local target=$1 pid=$2
  if wait "$pid"; then
    local execs speed
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$target/log" | tail -1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/$target/log" | tail -1)
    if ((${used[$target]:-0} < seconds)); then
      echo "run_fuzzers.sh: $target had ${used[$target]:-0}s of a core, not ${seconds}s, within" \
        "its ${wall_limit}s of wall time (the machine was busy throughout)"
      failed+=("$target")
      return
    fi
    echo "run_fuzzers.sh: $target: clean for ${used[$target]}s of one core, ${execs:-?} runs, ${speed:-?} exec/s"
  else
    tail -n 60 "$work/$target/log"
    report "$target" "$work/$target/artifacts"
    failed+=("$target")
  fi
}

# stretch N: N * fuzzers / cores, rounded up, and never less than N (a fuzzer gets at most
# one core).
stretch() {
  local n=$(((${#targets[@]} * $1 + cores - 1) / cores))
  echo $((n > $1 ? n : $1))
}
if [[ -n "${AGENTFLEET_FUZZ_IDLE:-}" ]]; then
  input_timeout=120
  wall_limit=$((20 * seconds))
else
  input_timeout=$(stretch 10)
  wall_limit=$((2 * $(stretch "$seconds")))
fi
echo "run_fuzzers.sh: ${#targets[@]} fuzzers at once on $cores cores${AGENTFLEET_FUZZ_IDLE:+ (idle class)}," \
  "each until it has had ${seconds}s of one core (at most ${wall_limit}s of wall time)"
for target in "${targets[@]}"; do
  run_one "$target" &
  pid_of[$target]=$!
done
# Each fuzzer stops once it has had its time; the loop ends when every one has exited, at the
# latest at its -max_total_time (or its -timeout, should it hang in one input). A
# fuzzer is asked only while this shell still counts it among its running jobs, never by a
# process id that, once it exited, may name another process.
running=${#targets[@]}
while ((running > 0)); do
  running=0
  alive=" $(jobs -pr | tr '\n' ' ') "
  for target in "${!pid_of[@]}"; do
    pid=${pid_of[$target]}
    [[ "$alive" == *" $pid "* ]] || continue
    running=$((running + 1))
    cpu=$(cpu_seconds "$pid")
    ((cpu > ${used[$target]:-0})) && used[$target]=$cpu
    if ((${used[$target]:-0} >= seconds)); then
      kill -USR1 "$pid" 2>/dev/null || true
    fi
  done
  sleep 0.5
done
for target in "${!pid_of[@]}"; do
  finish "$target" "${pid_of[$target]}"
done

if ((${#failed[@]})); then
  echo "run_fuzzers.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "run_fuzzers.sh: every fuzzer ran clean for ${seconds}s of one core"
