// Whether commits wait for a synchronous standby (core/adapters/pg/replication.hpp), from the
// settings a session reads; and when a process that requires it is not ready (issue 39,
// item 6: synchronous replication was only documented).
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>

#include "core/adapters/pg/replication.hpp"

namespace agentfleet::pg {
namespace {

TEST(Replication, CommitsWaitOnlyWithAStandbyNamedAndACommitLevelThatWaitsForIt) {
  const ReplicationState none = judge_replication({"on", "", 0, 0});
  EXPECT_FALSE(none.synchronous);
  EXPECT_NE(none.detail.find("synchronous_standby_names is empty"), std::string::npos)
      << none.detail;
  for (const char* level : {"local", "off"}) {
    const ReplicationState local = judge_replication({level, "ANY 1 (s1, s2)", 1, 0});
    EXPECT_FALSE(local.synchronous) << level;
    EXPECT_NE(local.detail.find(std::string("synchronous_commit is ") + level),
              std::string::npos)
        << local.detail;
  }
  for (const char* level : {"on", "remote_apply", "remote_write"}) {
    const ReplicationState sync = judge_replication({level, "s1", 1, 0});
    EXPECT_TRUE(sync.synchronous) << level;
    EXPECT_NE(sync.detail.find("1 in sync now"), std::string::npos) << sync.detail;
  }
  // Named but none connected: commits wait (they hang until one is); said so.
  const ReplicationState waiting = judge_replication({"on", "s1", 0, 0});
  EXPECT_TRUE(waiting.synchronous);
  EXPECT_NE(waiting.detail.find("no standby is in sync now"), std::string::npos)
      << waiting.detail;
  const ReplicationState hidden = judge_replication({"on", "s1", 0, 2});
  EXPECT_NE(hidden.detail.find("grant pg_monitor"), std::string::npos) << hidden.detail;
}

TEST(Replication, AProcessThatRequiresItIsNotReadyWithoutItAndSaysWhy) {
  const ReplicationState async = judge_replication({"on", "", 0, 0});
  const ReplicationState sync = judge_replication({"on", "s1", 1, 0});
  EXPECT_EQ(replication_refusal(async, false), std::nullopt) << "reported, not required";
  EXPECT_EQ(replication_refusal(sync, true), std::nullopt);
  auto refused = replication_refusal(async, true);
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->find("synchronous_standby_names is empty"), std::string::npos) << *refused;
  EXPECT_NE(refused->find("require_synchronous_replication"), std::string::npos) << *refused;

  rapidjson::Document ready;
  ready.Parse(ready_json(async).c_str());
  ASSERT_FALSE(ready.HasParseError());
  EXPECT_STREQ(ready["status"].GetString(), "ready");
  EXPECT_FALSE(ready["postgres"]["synchronous_replication"].GetBool());
  EXPECT_EQ(std::string(ready["postgres"]["detail"].GetString()), async.detail);
}

}  // namespace
}  // namespace agentfleet::pg
