#pragma once
// The database of this test process on the private cluster tests/pg/pg_fixture.sh started
// for this ctest run (its env file, in AGENTFLEET_TEST_RUN_DIR). ctest runs each test in a
// process of its own and several at once (tools/test), so each process gets a database of
// its own, a copy of the fixture's migrated one: a test that clears the workers or the
// queue, or takes the scheduler's advisory lock, sees nothing of the tests beside it.

#include <gtest/gtest.h>
#include <unistd.h>

#include <pqxx/pqxx>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include <random>
#include <string>

namespace agentfleet::pgtest {

// The URL of the fixture's migrated database (the template), from its env file.
inline std::string fixture_url() {
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

// This process's database: created on the first call as a copy of the fixture's (CREATE
// DATABASE ... TEMPLATE, which copies the migrated schema without running a migration), and
// left to the fixture, which removes the whole cluster at the next start.
inline std::string pg_url() {
  static const std::string url = []() -> std::string {
    const std::string fixture = fixture_url();
    const auto slash = fixture.rfind('/');
    if (fixture.empty() || slash == std::string::npos)
      return fixture;
    const std::string template_name = fixture.substr(slash + 1);
    const std::string name = "t" + std::to_string(::getpid()) + "_" + next_id().substr(0, 8);
    try {
      pqxx::connection db(fixture.substr(0, slash + 1) + "postgres");
      pqxx::nontransaction tx(db);
      tx.exec0("CREATE DATABASE " + tx.quote_name(name) + " TEMPLATE " +
               tx.quote_name(template_name));
    } catch (const std::exception& e) {
      // Never the template itself: the test would change what the others copy. The URL of
      // the database that is not there fails the test's first statement too.
      ADD_FAILURE() << "cannot create this test's database from " << template_name << ": "
                    << e.what();
    }
    return fixture.substr(0, slash + 1) + name;
  }();
  return url;
}

}  // namespace agentfleet::pgtest
