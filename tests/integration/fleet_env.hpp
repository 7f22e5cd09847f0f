#pragma once
// What the fleet fixture (fleet_fixture.sh) tells the integration tests: the KEY=VALUE
// lines of $AGENTFLEET_TEST_RUN_DIR/env (AGENTFLEET_URL, AGENTFLEET_PG_URL, ...), and
// the comma-separated URL lists in them.

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace agentfleet::test {

inline std::map<std::string, std::string> fleet_env() {
  const char* dir = std::getenv("AGENTFLEET_TEST_RUN_DIR");
  EXPECT_NE(dir, nullptr) << "run by ctest, which starts the fleet fixture";
  std::map<std::string, std::string> env;
  std::ifstream file(std::string(dir ? dir : ".") + "/env");
  for (std::string line; std::getline(file, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos)
      env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  EXPECT_FALSE(env.empty()) << "the fleet fixture wrote no env file";
  return env;
}

// The dispatcher's API key the tests act with (an admin key of the embedded default,
// AGENTFLEET_API_KEY in the fixture's env file), as an Authorization header.
inline std::pair<std::string, std::string> admin_auth() {
  static const std::string key = [] {
    auto env = fleet_env();
    return env.count("AGENTFLEET_API_KEY") ? env["AGENTFLEET_API_KEY"] : std::string();
  }();
  return {"Authorization", "Bearer " + key};
}

// The fixture's comma-separated URL lists.
inline std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> parts;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    if (!part.empty())
      parts.push_back(part);
  }
  return parts;
}

}  // namespace agentfleet::test
