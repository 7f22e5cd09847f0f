# Included by tests/CMakeLists.txt (the g++ builds): registers only the runner, which builds
# the fuzzers itself with clang in build/fuzz (tools/build fuzz) and runs each for 60 s.
# TIMEOUT: the fuzz build from scratch (measured: 18 minutes, 1,080 CPU-seconds, on 2 cores
# shared with other builds, so about 9 minutes on an idle machine), the regression inputs,
# then 5 fuzzers two at a time (3 rounds of 60 s); about 22 minutes in all, with room to spare.
add_test(NAME fuzzers_run_clean_for_60s_each
         COMMAND ${PROJECT_SOURCE_DIR}/tests/fuzz/run_fuzzers.sh 60 ${PROJECT_SOURCE_DIR}/build/fuzz)
# It keeps both cores busy: nothing else runs beside it.
set_tests_properties(fuzzers_run_clean_for_60s_each PROPERTIES LABELS fuzz TIMEOUT 3000
                     RUN_SERIAL TRUE)
