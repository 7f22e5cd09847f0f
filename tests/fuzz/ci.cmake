# Included by tests/CMakeLists.txt (the g++ builds): registers only the runner, which builds
# the fuzzers with clang in build/fuzz (tools/build fuzz) when tools/test has not, and gives
# each 60 s of one core. TIMEOUT: the fuzz build from scratch (measured: 445 s, 877
# CPU-seconds before its unreached code went to -O0, on a 2-core machine), the regression
# inputs, then the 5 fuzzers at once for 150 s; with room for a busier machine.
add_test(NAME fuzzers_run_clean_for_60s_each
         COMMAND ${PROJECT_SOURCE_DIR}/tests/fuzz/run_fuzzers.sh 60 ${PROJECT_SOURCE_DIR}/build/fuzz)
# It keeps both cores busy: nothing else runs beside it. COST -1: in a tree ctest has no
# timings for (a clean clone), it runs after every other test, by when tools/test has built
# build/fuzz on the cores the others left idle.
set_tests_properties(fuzzers_run_clean_for_60s_each PROPERTIES LABELS fuzz TIMEOUT 1500
                     RUN_SERIAL TRUE COST -1)
