#pragma once
// The URL of the private cluster tests/pg/pg_fixture.sh started for this ctest run (its env
// file, in AGENTFLEET_TEST_RUN_DIR).

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace agentfleet::pgtest {

inline std::string pg_url() {
  const char* dir = std::getenv("AGENTFLEET_TEST_RUN_DIR");
  EXPECT_NE(dir, nullptr) << "run by ctest, which starts the pg fixture";
  std::ifstream file(std::string(dir ? dir : ".") + "/env");
  for (std::string line; std::getline(file, line);) {
    if (line.rfind("AGENTFLEET_PG_URL=", 0) == 0)
      return line.substr(18);
  }
  ADD_FAILURE() << "no AGENTFLEET_PG_URL in the fixture's env file";
  return {};
}

}  // namespace agentfleet::pgtest
