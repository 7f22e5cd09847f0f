# Included by tests/CMakeLists.txt (the g++ builds): registers only the runner, which builds
# the fuzzers with clang in build/fuzz (tools/build fuzz) when tools/test has not, and gives
# each 60 s of one core's time. --idle: the build and the fuzzers run under the idle
# scheduling class, so the test holds no share of the machine and runs beside every other
# test, the ones that hold the machine too, on the cores they leave idle (five fuzzers for
# 60 s are 300 s of a core: 150 s of the whole machine when they ran alone). TIMEOUT: the
# fuzz build from scratch on idle cores (445 s and 877 CPU-seconds measured on an idle 2-core
# machine before its unreached code went to -O0), the regression inputs, then the fuzzers'
# 300 s of a core on what the other tests leave; with room for a busier machine. COST: it
# starts first, to have the whole suite's idle cores.
add_test(NAME fuzzers_run_clean_for_60s_each
         COMMAND ${PROJECT_SOURCE_DIR}/tests/fuzz/run_fuzzers.sh --idle 60
                 ${PROJECT_SOURCE_DIR}/build/fuzz)
set_tests_properties(fuzzers_run_clean_for_60s_each PROPERTIES LABELS fuzz TIMEOUT 2700
                     COST 3000)
set_property(GLOBAL APPEND PROPERTY AGENTFLEET_IDLE_TESTS fuzzers_run_clean_for_60s_each)
