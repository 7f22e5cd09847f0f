// Event streams and long polls per caller and per replica (dispatcher/waiter_limits.hpp).
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
