// What each of the dev broker's faults did, read from the mock cluster's log
// (tools/dev_broker/fault_effects.hpp): a fault counts by its effect, not by its command.
#include "tools/dev_broker/fault_effects.hpp"

#include <gtest/gtest.h>

#include <string>

namespace agentfleet::dev_broker {
namespace {

TEST(DevBrokerFaultEffects, TheMocksRequestAndCloseLinesAreRead) {
  auto request = parse_mock_request("Broker 2: Received ProduceRequestV7 from 127.0.0.1:40123");
  ASSERT_TRUE(request);
  EXPECT_EQ(request->broker, 2);
  EXPECT_EQ(request->api, "Produce");
  request = parse_mock_request("[thrd:mock]: Broker 13: Received OffsetCommitRequestV7 from x");
  ASSERT_TRUE(request);
  EXPECT_EQ(request->broker, 13);
  EXPECT_EQ(request->api, "OffsetCommit");
  EXPECT_FALSE(parse_mock_request("Broker 2: Sending ProduceResponseV7 to 127.0.0.1:40123"));
  EXPECT_FALSE(parse_mock_request("Broker x: Received ProduceRequestV7 from y"));
  EXPECT_FALSE(parse_mock_request("Broker 2: Received Request from y"));

  auto closed = parse_mock_closed("Broker 3: Connection from 127.0.0.1:5555 closed: Broker down");
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->broker, 3);
  EXPECT_EQ(closed->reason, "Broker down");
  EXPECT_FALSE(parse_mock_closed("Broker 3: Received FetchRequestV11 from 127.0.0.1:5555"));
}

TEST(DevBrokerFaultEffects, RequestErrorsAreMetOldestFirstAndEndWhenAllAreMetOrCleared) {
  FaultEffects effects;
  const int first = effects.add_request_errors("Produce", "NOT_LEADER_FOR_PARTITION", 2);
  const int second = effects.add_request_errors("Produce", "REQUEST_TIMED_OUT", 1);
  const int fetch = effects.add_request_errors("Fetch", "NOT_LEADER_FOR_PARTITION", 5);
  EXPECT_EQ(second, first + 1);
  for (int i = 0; i < 4; ++i)
    effects.on_log_line("Broker 1: Received ProduceRequestV7 from 127.0.0.1:1");
  effects.on_log_line("Broker 2: Received MetadataRequestV9 from 127.0.0.1:1");
  effects.clear("Fetch");
  effects.on_log_line("Broker 2: Received FetchRequestV11 from 127.0.0.1:1");
  const std::string listing = effects.listing_json();
  EXPECT_NE(listing.find(R"({"id":)" + std::to_string(first) +
                         R"(,"kind":"request-errors","what":"Produce NOT_LEADER_FOR_PARTITION 2",)"
                         R"("active":false,"seen":2,"served":2})"),
            std::string::npos)
      << listing;
  EXPECT_NE(listing.find(R"({"id":)" + std::to_string(second) +
                         R"(,"kind":"request-errors","what":"Produce REQUEST_TIMED_OUT 1",)"
                         R"("active":false,"seen":3,"served":1})"),
            std::string::npos)
      << "it saw the first's two go by: " << listing;
  EXPECT_NE(listing.find(R"({"id":)" + std::to_string(fetch) +
                         R"(,"kind":"request-errors","what":"Fetch NOT_LEADER_FOR_PARTITION 5",)"
                         R"("active":false,"seen":0,"served":0})"),
            std::string::npos)
      << "cleared before any request of its API came: " << listing;
}

TEST(DevBrokerFaultEffects, ABrokerDownCountsTheConnectionsItClosedUntilItEnds) {
  FaultEffects effects;
  const int down = effects.add_broker_down(2);
  effects.on_log_line("Broker 2: Connection from 127.0.0.1:1 closed: Broker down");
  effects.on_log_line("Broker 2: Connection from 127.0.0.1:2 closed: Broker down");
  effects.on_log_line("Broker 1: Connection from 127.0.0.1:3 closed: Broker down");
  effects.on_log_line("Broker 2: Connection from 127.0.0.1:4 closed: Disconnected");
  effects.end(down);
  effects.on_log_line("Broker 2: Connection from 127.0.0.1:5 closed: Broker down");
  EXPECT_NE(effects.listing_json().find(R"("kind":"broker-down","what":"broker 2",)"
                                        R"("active":false,"seen":2,"served":2})"),
            std::string::npos)
      << effects.listing_json();
}

TEST(DevBrokerFaultEffects, ASlowBrokerCountsItsRequestsAndAMovedLeaderItsPartitionTraffic) {
  FaultEffects effects;
  effects.add_rtt(1, 300);
  const int moved = effects.add_leader_move("agent.tasks.submit", 3, 2);
  effects.on_log_line("Broker 1: Received HeartbeatRequestV3 from a");
  effects.on_log_line("Broker 2: Received MetadataRequestV9 from a");
  effects.on_log_line("Broker 2: Received FetchRequestV11 from a");
  effects.end(moved);
  effects.on_log_line("Broker 2: Received ProduceRequestV7 from a");
  const std::string listing = effects.listing_json();
  EXPECT_NE(listing.find(R"("kind":"rtt","what":"broker 1 300 ms","active":true,"seen":1,)"
                         R"("served":1})"),
            std::string::npos)
      << listing;
  EXPECT_NE(listing.find(R"("kind":"leader","what":"agent.tasks.submit [3] to broker 2",)"
                         R"("active":false,"seen":2,"served":1})"),
            std::string::npos)
      << "a metadata request is seen, not served: " << listing;
}

TEST(DevBrokerFaultEffects, TheListingKeepsTheNewestFaultsOnly) {
  FaultEffects effects;
  for (std::size_t i = 0; i < FaultEffects::kMaxKept + 5; ++i)
    effects.add_rtt(1, 1);
  const std::string listing = effects.listing_json();
  EXPECT_EQ(listing.find(R"({"id":5,)"), std::string::npos);
  EXPECT_NE(listing.find(R"({"id":6,)"), std::string::npos);
  EXPECT_NE(listing.find(R"({"id":)" + std::to_string(FaultEffects::kMaxKept + 5) + ","),
            std::string::npos);
}

}  // namespace
}  // namespace agentfleet::dev_broker
