#!/usr/bin/env bash
# The client libraries (clients/) against the embedded fleet (the ctest fixture): their own
# wire tests (event parsing, errors, what is sent again, against a local server), then every
# call against the fleet. Users are the run's own; limits set are cleared.
#
#   clients_test.sh python                  python3's unittest, standard library only
#   clients_test.sh typescript WORK_DIR     npm ci and tsc in WORK_DIR (a copy of the
#                                           package, so the source tree stays clean), then
#                                           node --test
# (AGENTFLEET_TEST_RUN_DIR names the fleet's folder.)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
set -a
# shellcheck disable=SC1091
source "$AGENTFLEET_TEST_RUN_DIR/env"
set +a

case "$1" in
  python)
    cd "$root/clients/python"
    # -B: no __pycache__ left in the source tree.
    exec python3 -B -m unittest discover -s tests -v
    ;;
  typescript)
    work=$2
    rm -rf "$work/src" "$work/test"
    mkdir -p "$work"
    cp -r "$root/clients/typescript/src" "$root/clients/typescript/test" \
      "$root/clients/typescript/package.json" "$root/clients/typescript/package-lock.json" \
      "$root/clients/typescript/tsconfig.json" "$work/"
    cd "$work"
    # The lock file pins the compiler; the registry's answer is bounded in time. The three
    # bounds (240 + 60 + 240 s) end before ctest's TIMEOUT (600 s).
    timeout 240 npm ci --no-audit --no-fund --loglevel=error
    timeout 60 npx --no-install tsc -p tsconfig.json
    exec timeout 240 node --test test/wire.test.mjs test/fleet.test.mjs
    ;;
  *)
    echo "usage: clients_test.sh python | typescript WORK_DIR" >&2
    exit 2
    ;;
esac
