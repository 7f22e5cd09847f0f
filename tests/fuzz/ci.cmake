# Included by tests/CMakeLists.txt (the g++ builds): registers only the runner, which builds
# the fuzzers itself with clang in build/fuzz (tools/build fuzz) and runs each for 60 s.
# TIMEOUT: the fuzz build from scratch (measured: 264 s, 512 CPU-seconds, on an idle 2-core
# machine), the regression inputs, then 5 fuzzers two at a time (3 rounds of 60 s); about
# 8 minutes in all, with room for a busier machine.
add_test(NAME fuzzers_run_clean_for_60s_each
         COMMAND ${PROJECT_SOURCE_DIR}/tests/fuzz/run_fuzzers.sh 60 ${PROJECT_SOURCE_DIR}/build/fuzz)
# It keeps both cores busy: nothing else runs beside it.
set_tests_properties(fuzzers_run_clean_for_60s_each PROPERTIES LABELS fuzz TIMEOUT 1500
                     RUN_SERIAL TRUE)
