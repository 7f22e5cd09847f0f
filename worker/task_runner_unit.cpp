// The task runner's parts, compiled as one translation unit. Each part is a file for its
// reader (worker/task_runner.hpp lists them), but each alone pays about 5 s of the same
// headers (Boost.Asio's coroutines, the codecs, the configuration) before its own code: the
// six compiled apart took 71 s of compiler time, together 32 s (release flags, this 2-core
// machine, 2026-12-02). This is a unity build by hand, not CMake's UNITY_BUILD: the file
// CMake generates names the parts by the clone's absolute path, so every new clone would
// miss the compiler cache for it (tools/lib/ccache-launch); these includes are relative.
// The parts share nothing in their anonymous namespaces; each includes what it uses.
// GCC takes an included file for a header and warns of a coroutine frame holding a local
// type (-Wsubobject-linkage), which matters only for a header that several translation
// units include: these files are included here alone.
#pragma GCC diagnostic ignored "-Wsubobject-linkage"
#include "worker/model_step.cpp"
#include "worker/run_claim.cpp"
#include "worker/run_end.cpp"
#include "worker/run_start.cpp"
#include "worker/task_runner.cpp"
#include "worker/tool_round.cpp"
