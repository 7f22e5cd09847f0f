#pragma once
// The URL of the private cluster tests/pg/pg_fixture.sh started for this ctest run (its env
// file, in AGENTFLEET_TEST_RUN_DIR).

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
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

// A random version-4 UUID: each test runs in a process of its own on a shared cluster.
inline std::string next_id() {
  static std::mutex mutex;
  static std::mt19937_64 random{std::random_device{}()};
  std::lock_guard lock(mutex);
  const std::uint64_t a = random(), b = random();
  char id[40];
  std::snprintf(id, sizeof id, "%08x-%04x-4%03x-8%03x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xfff),
                static_cast<unsigned>(b >> 52),
                static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return id;
}

}  // namespace agentfleet::pgtest
