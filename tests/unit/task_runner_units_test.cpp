// The task runner's unit tests, a file per part of the runner, compiled as one translation
// unit: each file alone pays the same headers (GoogleTest, Boost.Asio's coroutines, the
// fakes of tests/unit/task_runner_harness.hpp), about as much as its tests. A unity build by
// hand for the reason worker/task_runner_unit.cpp gives (and its -Wsubobject-linkage).
#pragma GCC diagnostic ignored "-Wsubobject-linkage"
#include "tests/unit/model_bill_test.cpp"
#include "tests/unit/model_step_test.cpp"
#include "tests/unit/run_claim_test.cpp"
#include "tests/unit/task_runner_test.cpp"
#include "tests/unit/tool_round_test.cpp"
