#!/usr/bin/env bash
# `agentfleet-dispatcher migrate` is idempotent and safe to run from several processes at
# once: both runs succeed, nothing is applied twice, every file is recorded.
set -euo pipefail
dispatcher=$1
migrations_dir=$2
set -a
# shellcheck disable=SC1091
source "$AGENTFLEET_TEST_RUN_DIR/env"
set +a
export AGENTFLEET_CONFIG="$(dirname "$0")/../../config/agentfleet.yaml"
out=$(mktemp -d)
"$dispatcher" migrate >"$out/a" 2>&1 &
a=$!
"$dispatcher" migrate >"$out/b" 2>&1 &
b=$!
wait "$a" || { echo "first migrate failed:"; cat "$out/a"; exit 1; }
wait "$b" || { echo "second migrate failed:"; cat "$out/b"; exit 1; }
grep -q "0 applied" "$out/a" && grep -q "0 applied" "$out/b" || {
  echo "the fixture already migrated; a rerun must apply nothing:"; cat "$out/a" "$out/b"; exit 1; }
expected=$(find "$migrations_dir" -name '*.sql' | wc -l)
recorded=$(psql "$AGENTFLEET_PG_URL" -X -At -c "SELECT count(*) FROM schema_migrations")
[[ "$recorded" == "$expected" ]] || { echo "recorded $recorded migrations, expected $expected"; exit 1; }
echo "migrate: concurrent reruns applied nothing; $recorded of $expected recorded"
