#!/usr/bin/env bash
# The client libraries (clients/) against the embedded fleet (the ctest fixture), each in the
# form a user installs it: their own wire tests (event parsing, errors, what is sent again,
# against a local server), then every call against the fleet. Users are the run's own;
# limits set are cleared.
#
#   clients_test.sh python WORK_DIR       the wheel built from a copy of clients/python in
#                                         WORK_DIR (pip wheel, no index), installed into
#                                         WORK_DIR/site; python3's unittest runs the tests
#                                         there, away from the sources
#   clients_test.sh typescript WORK_DIR   npm ci in WORK_DIR (a copy of the package, so the
#                                         source tree stays clean), npm pack (which builds
#                                         it), the tarball installed into a project of its
#                                         own, whose copy of the tests imports
#                                         @agentfleet/client; then node --test
# (AGENTFLEET_TEST_RUN_DIR names the fleet's folder.)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
set -a
# shellcheck disable=SC1091
source "$AGENTFLEET_TEST_RUN_DIR/env"
set +a

case "$1" in
  python)
    work=$2
    rm -rf "$work"
    mkdir -p "$work"
    cp -r "$root/clients/python" "$work/src"
    # Debian's python3 (tools/setup installs its pip and wheel): setuptools builds the wheel
    # from the copy, nothing is fetched.
    /usr/bin/python3 -m pip wheel --quiet --no-deps --no-build-isolation --no-index \
      -w "$work/dist" "$work/src"
    /usr/bin/python3 -m pip install --quiet --no-deps --no-index --target "$work/site" \
      "$work"/dist/agentfleet-*-py3-none-any.whl
    cp -r "$root/clients/python/tests" "$work/tests"
    cd "$work"
    # The package the tests import is the installed one, not the sources.
    installed=$(PYTHONPATH="$work/site" /usr/bin/python3 -B -c 'import agentfleet; print(agentfleet.__file__)')
    [[ "$installed" == "$work/site/agentfleet/"* ]] || {
      echo "the tests would import $installed, not the installed wheel" >&2
      exit 1
    }
    PYTHONPATH="$work/site" exec /usr/bin/python3 -B -m unittest discover -s tests -v
    ;;
  typescript)
    work=$2
    rm -rf "$work/src" "$work/test" "$work/pack" "$work/user"
    mkdir -p "$work"
    cp -r "$root/clients/typescript/src" "$root/clients/typescript/test" \
      "$root/clients/typescript/package.json" "$root/clients/typescript/package-lock.json" \
      "$root/clients/typescript/tsconfig.json" "$root/clients/typescript/README.md" "$work/"
    cd "$work"
    # The lock file pins the compiler; the registry's answer is bounded in time. The bounds
    # (240 + 60 + 60 + 240 s) end before ctest's TIMEOUT (660 s).
    timeout 240 npm ci --no-audit --no-fund --loglevel=error
    # npm pack builds the package (its prepack script) and packs what a user installs.
    mkdir -p pack user/test
    timeout 60 npm pack --pack-destination pack --loglevel=error >/dev/null
    # A project of a user's: the tarball installed (no dependencies to fetch), the tests
    # importing the package by its name.
    cd user
    printf '{"name":"agentfleet-client-user","private":true,"type":"module"}\n' >package.json
    timeout 60 npm install --no-audit --no-fund --loglevel=error "$work"/pack/agentfleet-client-*.tgz
    for t in wire fleet; do
      sed 's#"\.\./dist/index\.js"#"@agentfleet/client"#' "$work/test/$t.test.mjs" >"test/$t.test.mjs"
      grep -q '"@agentfleet/client"' "test/$t.test.mjs" || {
        echo "test/$t.test.mjs does not import the package" >&2
        exit 1
      }
    done
    exec timeout 240 node --test test/wire.test.mjs test/fleet.test.mjs
    ;;
  *)
    echo "usage: clients_test.sh python|typescript WORK_DIR" >&2
    exit 2
    ;;
esac
