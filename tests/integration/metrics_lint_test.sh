#!/usr/bin/env bash
# `promtool check metrics` finds nothing to complain about in the /metrics of every process
# of the integration fleet (the dispatcher and each worker): names, units, counter
# suffixes, help texts. Run after the dashboard test, so the series a mixed workload creates
# are there too.
set -euo pipefail
set -a
# shellcheck disable=SC1091
source "$AGENTFLEET_TEST_RUN_DIR/env"
set +a
command -v promtool >/dev/null || { echo "promtool is missing (tools/setup installs prometheus)" >&2; exit 1; }
IFS=, read -ra urls <<<"$AGENTFLEET_DISPATCHER_METRICS_URL,$AGENTFLEET_WORKER_METRICS_URLS"
failed=0
for url in "${urls[@]}"; do
  text=$(curl -sSf --max-time 10 "$url/metrics")
  families=$(grep -c '^# TYPE ' <<<"$text" || true)
  if ((families == 0)); then
    echo "$url/metrics: no metric families"
    failed=1
    continue
  fi
  if ! problems=$(promtool check metrics <<<"$text" 2>&1) || [[ -n "$problems" ]]; then
    echo "$url/metrics: promtool check metrics:"
    echo "$problems"
    failed=1
    continue
  fi
  echo "$url/metrics: $families families, no lint problems"
done
exit "$failed"
