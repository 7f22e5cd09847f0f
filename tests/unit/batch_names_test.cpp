// Batch ids are each user's (dispatcher/batch_names.hpp, migration 0030): whose batches a
// route looks for, and which one a name stands for among those the caller may act for.
#include "dispatcher/batch_names.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/domain/task.hpp"

namespace agentfleet::dispatcher {
namespace {

struct Found {
  std::string batch_id;
  std::string user_id;
};

Caller acting_for(std::vector<std::string> users, bool any_user = false) {
  Caller caller;
  caller.name = "test";
  caller.users = std::move(users);
  caller.any_user = any_user;
  return caller;
}

TEST(BatchNames, TheKeyOfASecondUsersBatchShowsItsName) {
  EXPECT_EQ(batch_name("nightly"), "nightly");
  const std::string key = batch_key_of_user("nightly", "u2");
  EXPECT_NE(key, "nightly");
  EXPECT_EQ(batch_name(key), "nightly");
  EXPECT_NE(batch_key_of_user("nightly", "u3"), key);
  EXPECT_EQ(batch_name(""), "");
}

TEST(BatchNames, ARouteLooksForTheNamedUserElseTheCallersOnlyUserElseAnyones) {
  EXPECT_EQ(batch_owner_to_find(acting_for({"u1"}), ""), "u1");
  EXPECT_EQ(batch_owner_to_find(acting_for({"u1"}), "u1"), "u1");
  EXPECT_EQ(batch_owner_to_find(acting_for({"u1", "u2"}), ""), "");
  EXPECT_EQ(batch_owner_to_find(acting_for({"u1", "u2"}), "u2"), "u2");
  EXPECT_EQ(batch_owner_to_find(acting_for({}, /*any_user=*/true), ""), "");
  EXPECT_EQ(batch_owner_to_find(acting_for({"u1"}, /*any_user=*/true), ""), "")
      << "a key acting for any user looks at every user's";
}

TEST(BatchNames, ANameStandsForTheOneBatchOfAUserTheCallerActsFor) {
  const std::vector<Found> found{{"nightly", "u1"}, {batch_key_of_user("nightly", "u2"), "u2"}};
  const Caller caller = acting_for({"u2", "u3"});
  auto choice = choose_batch(found, /*complete=*/true,
                             [&](const std::string& user) { return caller.may_act_for(user); });
  ASSERT_TRUE(choice.batch) << "the other user's batch of the name is not the caller's";
  EXPECT_EQ(choice.batch->user_id, "u2");
  EXPECT_TRUE(choice.users.empty());

  const Caller none = acting_for({"u4"});
  choice =
      choose_batch(found, true, [&](const std::string& user) { return none.may_act_for(user); });
  EXPECT_FALSE(choice.batch);
  EXPECT_TRUE(choice.users.empty());
  EXPECT_FALSE(choice.more) << "none of the caller's: not found";
}

TEST(BatchNames, SeveralOfTheCallersUsersOrAListCutShortAreAmbiguous) {
  std::vector<Found> found;
  for (int i = 0; i < 7; ++i)
    found.push_back(
        {i == 0 ? "n" : batch_key_of_user("n", "u" + std::to_string(i)), "u" + std::to_string(i)});
  const auto all = [](const std::string&) { return true; };
  auto choice = choose_batch(found, true, all);
  EXPECT_FALSE(choice.batch);
  EXPECT_EQ(choice.users, (std::vector<std::string>{"u0", "u1", "u2", "u3", "u4"}));
  EXPECT_TRUE(choice.more);

  const std::vector<Found> two(found.begin(), found.begin() + 2);
  choice = choose_batch(two, true, all);
  EXPECT_EQ(choice.users, (std::vector<std::string>{"u0", "u1"}));
  EXPECT_FALSE(choice.more);

  // The read stopped at its limit: one of the caller's among those read may not be the only.
  const auto only_u1 = [](const std::string& user) { return user == "u1"; };
  choice = choose_batch(found, /*complete=*/false, only_u1);
  EXPECT_FALSE(choice.batch);
  EXPECT_EQ(choice.users, std::vector<std::string>{"u1"});
  EXPECT_TRUE(choice.more);
  const auto nobody = [](const std::string&) { return false; };
  choice = choose_batch(found, false, nobody);
  EXPECT_FALSE(choice.batch);
  EXPECT_TRUE(choice.users.empty());
  EXPECT_TRUE(choice.more) << "the caller's may lie beyond the read";
}

}  // namespace
}  // namespace agentfleet::dispatcher
