#!/usr/bin/env bash
# ctest fixture for the Postgres-only tests (tests/pg): a private cluster of their own,
# migrated, with nothing else running against it.
#   pg_fixture.sh start RUN_DIR DISPATCHER   starts it, migrates it, writes RUN_DIR/env
#   pg_fixture.sh stop RUN_DIR               stops it
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export AF_LOG_TAG=pg-fixture
source "$root/tools/lib/common.sh"
source "$root/tools/lib/fleet.sh"
command=$1
run_dir=$2
case "$command" in
  start)
    mkdir -p "$run_dir"
    "$root/tools/devpg" stop "$run_dir/pg" >/dev/null 2>&1 || true
    if [[ -e "$run_dir/pg" ]]; then rm -rf "$(readlink -f "$run_dir/pg")" "$run_dir/pg"; fi
    _fleet_pg_dir "$run_dir"
    url=$("$root/tools/devpg" start "$run_dir/pg" | tail -n 1)
    AGENTFLEET_CONFIG="$root/config/agentfleet.yaml" AGENTFLEET_PG_URL=$url "$3" migrate \
      >"$run_dir/migrate.log" 2>&1 || {
      cat "$run_dir/migrate.log" >&2
      exit 1
    }
    echo "AGENTFLEET_PG_URL=$url" >"$run_dir/env"
    ;;
  stop)
    "$root/tools/devpg" stop "$run_dir/pg" >/dev/null 2>&1 || true
    ;;
  *)
    echo "usage: pg_fixture.sh start RUN_DIR DISPATCHER | stop RUN_DIR" >&2
    exit 2
    ;;
esac
