#!/usr/bin/env bash
# The web console (ui/) in a real browser against the fleet (the ctest fixture): Debian's
# Chromium, driven by playwright-core, signs in, clicks through every page and saves a
# screenshot of each (ui/test/console.test.mjs).
#
#   console_test.sh CONSOLE_WORK_DIR SCREENSHOTS_DIR
# CONSOLE_WORK_DIR is where the build made the console (tools/build-console: its
# node_modules hold playwright-core, pinned by ui/package-lock.json); the console itself is
# the one the fleet's dispatcher serves at /ui/. (AGENTFLEET_TEST_RUN_DIR names the fleet.)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$1
shots=$2
set -a
# shellcheck disable=SC1091
source "$AGENTFLEET_TEST_RUN_DIR/env"
set +a
chromium=${CHROMIUM:-/usr/bin/chromium}
if [[ ! -x $chromium ]]; then
  echo "no Chromium at $chromium: tools/setup installs Debian's chromium" >&2
  exit 1
fi
if [[ ! -d $work/ui/node_modules/playwright-core ]]; then
  echo "no console build in $work (tools/build-console; AGENTFLEET_CONSOLE on)" >&2
  exit 1
fi
rm -rf "$work/ui/test" "$shots"
cp -r "$root/ui/test" "$work/ui/test"
rm -rf "$work/ui/test/screenshots"
mkdir -p "$shots"
cd "$work/ui"
export CHROMIUM=$chromium
export AGENTFLEET_CONSOLE_URL="$AGENTFLEET_URL/ui/"
export AGENTFLEET_CONSOLE_SCREENSHOTS=$shots
# A dead letter for the dead-letters page: a submission that is not JSON, on a key of its own.
if ! command -v kcat >/dev/null; then
  echo "no kcat: tools/setup installs it" >&2
  exit 1
fi
export AGENTFLEET_CONSOLE_DLQ_KEY="console-dlq-$(date +%s%N)"
printf '{ not json, from the console test' |
  timeout 30 kcat -P -b "$AGENTFLEET_KAFKA_BOOTSTRAP" -t agent.tasks.submit -k "$AGENTFLEET_CONSOLE_DLQ_KEY"
# The test bounds each step (20 s) and itself (300 s); this bound ends before ctest's.
exec timeout 420 node --test test/console.test.mjs
