#!/usr/bin/env bash
# A fleet whose run folder Postgres cannot enter keeps its cluster under /tmp
# (tools/lib/fleet.sh, _fleet_pg_dir). Such clusters do not outlive their run folder: the next
# one made removes those whose run folder is gone, and leaves alone the ones still linked and
# the ones that name no run folder. Runs as root only (as anyone else the cluster stays in the
# run folder and nothing goes to /tmp).
#   fleet_pg_sweep_test.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if ((EUID != 0)); then
  echo "SKIP: clusters move to /tmp only when running as root"
  exit 77
fi
export AF_LOG_TAG=pg-sweep AF_ROOT=$root
source "$root/tools/lib/common.sh"
source "$root/tools/lib/fleet.sh"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# A private folder (mode 0700): the postgres user cannot enter it, as in a CI clone made with
# mktemp -d.
base=$(mktemp -d)
# A cluster folder that names no run folder (as one made before folders named theirs): the
# sweep must leave it alone.
unowned=$(mktemp -d /tmp/agentfleet-pg-sweeptest.XXXXXX)
cleanup() {
  local d
  for d in "$base"/*/pg; do
    if [[ -L "$d" ]]; then rm -rf "$(readlink -f "$d")"; fi
  done
  rm -rf "$base" "$unowned"
}
trap cleanup EXIT

mkdir -p "$base/gone" "$base/kept" "$base/new" # as fleet_start makes its run folder first
_fleet_pg_dir "$base/gone" 2>/dev/null
_fleet_pg_dir "$base/kept" 2>/dev/null
gone=$(readlink -f "$base/gone/pg")
kept=$(readlink -f "$base/kept/pg")
[[ "$gone" == /tmp/agentfleet-pg-* && -d "$gone" ]] || fail "no cluster folder under /tmp: $gone"
[[ "$(<"$gone/owner")" == "$base/gone" ]] || fail "the folder does not name its run folder"
mkdir -p "$gone/data" "$kept/data"
echo x >"$gone/data/PG_VERSION.not" # something in it, as a cluster would have

rm -rf "$base/gone" # the run folder goes (a clone removed after its run)
_fleet_pg_dir "$base/new" 2>/dev/null
[[ ! -e "$gone" ]] || fail "the cluster of a run folder that is gone is still there: $gone"
[[ -d "$kept/data" ]] || fail "a cluster still linked from its run folder was removed: $kept"
[[ -d "$unowned" ]] || fail "a folder that names no run folder was removed: $unowned"
[[ -L "$base/new/pg" && -d "$(readlink -f "$base/new/pg")" ]] || fail "the new run folder has no cluster folder"
echo "PASS: the orphaned cluster went, the linked and the unowned ones stayed"
