// Short task ids (dispatcher/task_id_prefix.hpp): which ids a prefix covers, and which task
// it stands for among those the caller may see.
#include "dispatcher/task_id_prefix.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace agentfleet::dispatcher {
namespace {

TEST(TaskIdPrefix, APrefixCoversTheIdsThatBeginWithItInLowerCase) {
  auto range = task_id_range("55D85415");
  ASSERT_TRUE(range);
  EXPECT_EQ(range->first, "55d85415-0000-0000-0000-000000000000");
  EXPECT_EQ(range->last, "55d85415-ffff-ffff-ffff-ffffffffffff");
  range = task_id_range("55d85415-0a7");
  ASSERT_TRUE(range);
  EXPECT_EQ(range->first, "55d85415-0a70-0000-0000-000000000000");
  EXPECT_EQ(range->last, "55d85415-0a7f-ffff-ffff-ffffffffffff");
  EXPECT_TRUE(task_id_range("55d85415-0a74-"));  // ending with a dash where a UUID has one
  range = task_id_range("55d85415-0a74-48d0-98f7-671c6af3b48");  // all but the last digit
  ASSERT_TRUE(range);
  EXPECT_EQ(range->first, "55d85415-0a74-48d0-98f7-671c6af3b480");
  EXPECT_EQ(range->last, "55d85415-0a74-48d0-98f7-671c6af3b48f");
}

TEST(TaskIdPrefix, TooShortIsHexDigitsFewerThanEight) {
  for (const char* text : {"f", "fb2b", "FB2B", "55d8541"})
    EXPECT_TRUE(too_short_task_id_prefix(text)) << text;
  for (const char* text : {"", "55d85415", "fb2b-", "fb2g", "task", "55d85415-0a7"})
    EXPECT_FALSE(too_short_task_id_prefix(text)) << text;
}

TEST(TaskIdPrefix, WhatIsNotTheStartOfAUuidOrIsTooShortCoversNothing) {
  for (const char* text :
       {"", "55d8541", "55d85415x", "55d854150a74", "55d85415-0a74-", "55d85415_0a7", "g5d85415",
        "55d85415-0a74-48d0-98f7-671c6af3b487", "55d85415-0a74-48d0-98f7-671c6af3b4870"}) {
    if (std::string(text) == "55d85415-0a74-") {
      EXPECT_TRUE(task_id_range(text)) << text;  // the dash where a UUID has one
      continue;
    }
    EXPECT_FALSE(task_id_range(text)) << text;
  }
}

struct Found {
  std::string task_id;
  std::string user_id;
};

TEST(TaskIdPrefix, APrefixStandsForTheOneTaskTheCallerMaySee) {
  const std::vector<Found> found = {{"55d85415-1", "u2"}, {"55d85415-2", "u1"}};
  const auto only_u1 = [](const std::string& user) { return user == "u1"; };
  const auto choice = choose_task_id(found, only_u1);
  ASSERT_TRUE(choice.task_id);
  EXPECT_EQ(*choice.task_id, "55d85415-2");
  EXPECT_TRUE(choice.ambiguous.empty());
  // Another user's task is not found, not named.
  const auto none = choose_task_id(std::vector<Found>{{"55d85415-1", "u2"}}, only_u1);
  EXPECT_FALSE(none.task_id);
  EXPECT_TRUE(none.ambiguous.empty());
  EXPECT_EQ(none.matches, 0u);
}

TEST(TaskIdPrefix, SeveralOfTheCallersAreNamedUpToFiveAndCounted) {
  std::vector<Found> found;
  for (int i = 0; i < 7; ++i)
    found.push_back({"55d85415-" + std::to_string(i), "u1"});
  const auto choice = choose_task_id(found, [](const std::string&) { return true; });
  EXPECT_FALSE(choice.task_id);
  EXPECT_EQ(choice.matches, 7u);
  EXPECT_EQ(choice.ambiguous, (std::vector<std::string>{"55d85415-0", "55d85415-1", "55d85415-2",
                                                        "55d85415-3", "55d85415-4"}));
}

}  // namespace
}  // namespace agentfleet::dispatcher
