#!/usr/bin/env bash
# ctest fixture for the integration tests:
#   fleet_fixture.sh start RUN_DIR BUILD_DIR   starts the embedded fleet, writes RUN_DIR/env
#   fleet_fixture.sh stop RUN_DIR              stops it
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export AF_LOG_TAG=fleet-fixture
source "$root/tools/lib/common.sh"
source "$root/tools/lib/fleet.sh"
command=$1
run_dir=$2
case "$command" in
  start)
    # A batch upload's average rate is held after 3 s instead of 30, so that a trickling
    # upload is cut within a test's patience.
    export AGENTFLEET_BATCH_UPLOAD_RATE_WINDOW_S=3
    # Every task's trace goes to a local OTLP receiver, one span per line of this file.
    export FLEET_OTLP_SPANS="${FLEET_OTLP_SPANS:-$run_dir/otlp-spans.jsonl}"
    fleet_reset "$run_dir"
    if ! fleet_start "$run_dir" "$3" 2; then
      fleet_stop "$run_dir"
      exit 1
    fi
    {
      echo "AGENTFLEET_URL=$AGENTFLEET_URL"
      echo "AGENTFLEET_PG_URL=$AGENTFLEET_PG_URL"
      echo "AGENTFLEET_KAFKA_BOOTSTRAP=$AGENTFLEET_KAFKA_BOOTSTRAP"
      echo "AGENTFLEET_KAFKA_CONTROL_PORT=$AGENTFLEET_KAFKA_CONTROL_PORT"
      echo "TOOL_SIM_URL=$TOOL_SIM_URL"
      echo "LLM_SIM_PORT=$LLM_SIM_PORT"
      echo "AGENTFLEET_DISPATCHER_METRICS_URL=$AGENTFLEET_DISPATCHER_METRICS_URL"
      echo "AGENTFLEET_WORKER_METRICS_URLS=$AGENTFLEET_WORKER_METRICS_URLS"
      echo "AGENTFLEET_API_KEY=$AGENTFLEET_API_KEY"
      echo "AGENTFLEET_OTLP_ENDPOINT=$AGENTFLEET_OTLP_ENDPOINT"
      echo "AGENTFLEET_OTLP_SPANS=$FLEET_OTLP_SPANS"
    } >"$run_dir/env"
    ;;
  stop)
    fleet_stop "$run_dir"
    # Sanitizer reports in any process of the fleet fail the run.
    if grep -l "ERROR: AddressSanitizer\|runtime error:" "$run_dir"/logs/*.log 2>/dev/null; then
      echo "a fleet process reported a sanitizer error (files above)" >&2
      exit 1
    fi
    ;;
  *)
    echo "usage: fleet_fixture.sh start RUN_DIR BUILD_DIR | stop RUN_DIR" >&2
    exit 2
    ;;
esac
