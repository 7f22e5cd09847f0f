#pragma once
// The source tree's folder, for tests that read its files (config/, README.md, the SQL and
// the migrations). It is compiled into one small file (tests/source_dir.cpp) rather than
// passed to every test file on the command line, so that the compiler cache serves the test
// files to a clone in another folder (docs/testing.md).

namespace agentfleet::test {
const char* source_dir();
}  // namespace agentfleet::test

#define AGENTFLEET_SOURCE_DIR (::agentfleet::test::source_dir())
