// Event streams, long polls and batch uploads per caller and per replica
// (dispatcher/waiter_limits.hpp).
#include <gtest/gtest.h>

#include <optional>
#include <variant>
#include <vector>

#include "dispatcher/waiter_limits.hpp"

namespace agentfleet::dispatcher {
namespace {

using Ticket = WaiterLimits::Ticket;
using Refusal = WaiterLimits::Refusal;

std::optional<Refusal> refusal_of(const std::variant<Ticket, Refusal>& got) {
  if (const auto* refused = std::get_if<Refusal>(&got))
    return *refused;
  return std::nullopt;
}

TEST(WaiterLimits, ACallerAtItsShareIsRefusedWhileOthersStillGetPlaces) {
  WaiterLimits limits({2, 10}, {0, 0});
  std::vector<std::variant<Ticket, Refusal>> held;
  held.push_back(limits.acquire(Waiter::kEventStream, "key-a"));
  held.push_back(limits.acquire(Waiter::kEventStream, "key-a"));
  EXPECT_EQ(refusal_of(held[0]), std::nullopt);
  EXPECT_EQ(refusal_of(held[1]), std::nullopt);
  EXPECT_EQ(refusal_of(limits.acquire(Waiter::kEventStream, "key-a")), Refusal::kCaller);
  auto other = limits.acquire(Waiter::kEventStream, "key-b");
  EXPECT_EQ(refusal_of(other), std::nullopt);
  EXPECT_EQ(limits.held(Waiter::kEventStream), 3u);
  EXPECT_EQ(limits.held(Waiter::kEventStream, "key-a"), 2u);
  // Long polls are counted apart, and uncapped here.
  std::vector<std::variant<Ticket, Refusal>> polls;
  for (int i = 0; i < 50; ++i) {
    polls.push_back(limits.acquire(Waiter::kLongPoll, "key-a"));
    EXPECT_EQ(refusal_of(polls.back()), std::nullopt);
  }
}

TEST(WaiterLimits, AReplicaAtItsTotalRefusesEveryCaller) {
  WaiterLimits limits({0, 0}, {5, 3});
  std::vector<std::variant<Ticket, Refusal>> held;
  for (const char* caller : {"a", "b", "c"})
    held.push_back(limits.acquire(Waiter::kLongPoll, caller));
  EXPECT_EQ(refusal_of(limits.acquire(Waiter::kLongPoll, "d")), Refusal::kReplica);
  EXPECT_EQ(refusal_of(limits.acquire(Waiter::kLongPoll, "a")), Refusal::kReplica);
  // Refusals hold nothing.
  EXPECT_EQ(limits.held(Waiter::kLongPoll), 3u);
  EXPECT_EQ(limits.held(Waiter::kLongPoll, "d"), 0u);
}

// Issue 39, item 1: two uploads of one tenant held both of a replica's upload places, and
// every other tenant's upload was answered 429. A caller now holds at most its share.
TEST(WaiterLimits, OneTenantHoldsAtMostItsShareOfAReplicasUploads) {
  WaiterLimits limits({0, 0}, {0, 0}, {1, 2});
  auto replica_1 = limits.acquire(Waiter::kUpload, {});
  ASSERT_EQ(refusal_of(replica_1), std::nullopt);
  auto mine = limits.acquire(Waiter::kCallerUpload, upload_caller("u2-key", false, "u2"));
  ASSERT_EQ(refusal_of(mine), std::nullopt);
  // The tenant's second upload takes a place of the replica's, but not one of its own.
  {
    auto replica_2 = limits.acquire(Waiter::kUpload, {});
    ASSERT_EQ(refusal_of(replica_2), std::nullopt);
    EXPECT_EQ(refusal_of(limits.acquire(Waiter::kCallerUpload,
                                        upload_caller("u2-key", false, "u2-other"))),
              Refusal::kCaller)
        << "a key that acts for the users it lists is one caller whatever the user";
  }
  // Another tenant's upload goes in.
  auto replica_2 = limits.acquire(Waiter::kUpload, {});
  ASSERT_EQ(refusal_of(replica_2), std::nullopt);
  EXPECT_EQ(refusal_of(limits.acquire(Waiter::kCallerUpload, upload_caller("u1-key", false, "u1"))),
            std::nullopt);
  EXPECT_EQ(refusal_of(limits.acquire(Waiter::kUpload, {})), Refusal::kReplica);
  EXPECT_EQ(limits.held(Waiter::kCallerUpload, "u2-key"), 1u);
}

TEST(WaiterLimits, AnAnyUserKeyIsOneUploaderPerUserKnownFromTheQueryOrTheFirstLine) {
  EXPECT_EQ(upload_caller("admin", true, "u1"), "admin/u1");
  EXPECT_EQ(upload_caller("admin", true, ""), "") << "not known before the first line";
  EXPECT_EQ(upload_caller("gateway:u7", false, "u7"), "gateway:u7");
  EXPECT_EQ(upload_caller("u1-key", false, ""), "u1-key");
  WaiterLimits limits({0, 0}, {0, 0}, {1, 0});
  auto u1 = limits.acquire(Waiter::kCallerUpload, upload_caller("admin", true, "u1"));
  EXPECT_EQ(refusal_of(u1), std::nullopt);
  EXPECT_EQ(refusal_of(limits.acquire(Waiter::kCallerUpload, upload_caller("admin", true, "u2"))),
            std::nullopt);
  EXPECT_EQ(refusal_of(limits.acquire(Waiter::kCallerUpload, upload_caller("admin", true, "u1"))),
            Refusal::kCaller);
}

TEST(WaiterLimits, APlaceIsGivenBackWhenItsTicketGoesAndAMovedTicketOnlyOnce) {
  WaiterLimits limits({1, 1}, {0, 0});
  {
    auto first = limits.acquire(Waiter::kEventStream, "a");
    ASSERT_TRUE(std::holds_alternative<Ticket>(first));
    Ticket moved = std::move(std::get<Ticket>(first));
    EXPECT_EQ(limits.held(Waiter::kEventStream), 1u);
    EXPECT_EQ(refusal_of(limits.acquire(Waiter::kEventStream, "b")), Refusal::kReplica);
    Ticket again = std::move(moved);
    EXPECT_EQ(limits.held(Waiter::kEventStream), 1u);
  }
  EXPECT_EQ(limits.held(Waiter::kEventStream), 0u);
  EXPECT_EQ(limits.held(Waiter::kEventStream, "a"), 0u);
  EXPECT_EQ(refusal_of(limits.acquire(Waiter::kEventStream, "b")), std::nullopt);
  EXPECT_EQ(limits.held(Waiter::kEventStream), 0u) << "the temporary ticket gave its place back";
}

}  // namespace
}  // namespace agentfleet::dispatcher
