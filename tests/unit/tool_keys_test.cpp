// The keys of direct tool calls cannot collide across users (issue 19, item 6).

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/domain/tool_keys.hpp"

namespace agentfleet {
namespace {

TEST(DirectCallKey, AnOrdinaryUserIdIsWrittenAsItIs) {
  EXPECT_EQ(direct_call_key("u1", "retry-7"), "direct:u1:retry-7");
  EXPECT_EQ(direct_call_key("用户-1", "k"), "direct:用户-1:k");
}

TEST(DirectCallKey, UsersWhoseIdsHoldTheSeparatorNeverShareAKey) {
  // Each pair was one string when the user id was written as it is.
  EXPECT_NE(direct_call_key("a:b", "c"), direct_call_key("a", "b:c"));
  EXPECT_NE(direct_call_key("a%3Ab", "c"), direct_call_key("a:b", "c"));
  EXPECT_NE(direct_call_key("a%", "3A:c"), direct_call_key("a:", "c"));
  EXPECT_EQ(direct_call_key("a:b", "c"), "direct:a%3Ab:c");
  EXPECT_EQ(direct_call_key("50%", "k"), "direct:50%25:k");
  // Every split of one string into a user id and a key gives a key of its own.
  const std::string joined = "x:%:3A:y:%25";
  std::set<std::string> keys;
  for (std::size_t at = 0; at <= joined.size(); ++at)
    keys.insert(direct_call_key(joined.substr(0, at), joined.substr(at)));
  EXPECT_EQ(keys.size(), joined.size() + 1);
}

TEST(DirectCallKey, TheUserPartEndsAtTheFirstSeparator) {
  const std::string key = direct_call_key("t:e:a:m", "k:1");
  const std::string user_part = key.substr(7, key.find(':', 7) - 7);
  EXPECT_EQ(user_part, "t%3Ae%3Aa%3Am");
  EXPECT_EQ(key.substr(7 + user_part.size() + 1), "k:1");
}

}  // namespace
}  // namespace agentfleet
