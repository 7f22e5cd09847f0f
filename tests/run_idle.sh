#!/bin/sh
# Runs a unit test under the idle scheduling class (SCHED_IDLE): it gets a core only when no
# other process wants one. The unit tests are pure code with no clock to miss, so ctest runs
# them beside the tests that hold the whole machine (a fleet with 6 s leases, the chaos run,
# the benchmark), on the cores those leave idle, without taking a slice from them
# (tests/CMakeLists.txt, docs/testing.md). Where the class cannot be set, the test runs as is.
# The build's listing of the tests (gtest_discover_tests, bounded at 5 s) runs as is too: a
# build at normal priority beside it on every core would starve it past that bound.
case " $* " in
  *" --gtest_list_tests "*) exec "$@" ;;
esac
if chrt --idle 0 true 2>/dev/null; then
  exec chrt --idle 0 "$@"
fi
exec "$@"
