// The dev broker's fault-injection commands: what is accepted, and every bound.
#include <gtest/gtest.h>

#include "tools/dev_broker/control.hpp"

namespace agentfleet::dev_broker {
namespace {

template <typename T>
T command_of(std::string_view line, int brokers = 3) {
  Parsed parsed = parse_control_command(line, brokers);
  EXPECT_TRUE(parsed.command) << line << ": " << parsed.error;
  EXPECT_TRUE(parsed.command && std::holds_alternative<T>(*parsed.command)) << line;
  return parsed.command && std::holds_alternative<T>(*parsed.command) ? std::get<T>(*parsed.command)
                                                                      : T{};
}

std::string error_of(std::string_view line, int brokers = 3) {
  Parsed parsed = parse_control_command(line, brokers);
  EXPECT_FALSE(parsed.command) << line;
  return parsed.error;
}

TEST(DevBrokerControl, BrokerFaultsAreBoundedInTime) {
  BrokerDown down = command_of<BrokerDown>("broker-down 2");
  EXPECT_EQ(down.broker, 2);
  EXPECT_EQ(down.seconds, kDefaultFaultSeconds);
  EXPECT_EQ(command_of<BrokerDown>("broker-down 3 5\r").seconds, 5);
  EXPECT_EQ(command_of<BrokerUp>("  broker-up   1 ").broker, 1);
  SetRtt rtt = command_of<SetRtt>("rtt 1 250 12");
  EXPECT_EQ(rtt.broker, 1);
  EXPECT_EQ(rtt.ms, 250);
  EXPECT_EQ(rtt.seconds, 12);
  EXPECT_NE(error_of("broker-down 4").find("no broker '4' (ids 1..3)"), std::string::npos);
  EXPECT_NE(error_of("broker-down 0").find("no broker"), std::string::npos);
  EXPECT_NE(error_of("broker-down 1 601").find("SECONDS must be 1..600"), std::string::npos);
  EXPECT_NE(error_of("broker-down 1 0").find("SECONDS must be"), std::string::npos);
  EXPECT_NE(error_of("rtt 1 10001").find("MS must be 0..10000"), std::string::npos);
  EXPECT_NE(error_of("rtt 1 -5").find("MS must be"), std::string::npos);
}

TEST(DevBrokerControl, RequestErrorsNameTheApiAndTheErrorAndAreBoundedInCount) {
  RequestErrors e = command_of<RequestErrors>("request-errors Produce NOT_LEADER_FOR_PARTITION 5");
  EXPECT_EQ(e.api_key, 0);
  EXPECT_EQ(e.error, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION);
  EXPECT_EQ(e.count, 5);
  e = command_of<RequestErrors>("request-errors 12 ERR_REQUEST_TIMED_OUT 1");
  EXPECT_EQ(e.api_key, 12);
  EXPECT_EQ(e.error, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT);
  EXPECT_EQ(command_of<RequestErrors>("request-errors Fetch 7 3").error, 7);
  EXPECT_EQ(command_of<ClearErrors>("clear-errors JoinGroup").api_key, 11);
  EXPECT_NE(error_of("request-errors Produce NOT_LEADER_FOR_PARTITION 10001")
                .find("COUNT must be 1..10000"),
            std::string::npos);
  EXPECT_NE(error_of("request-errors Produce NOT_LEADER_FOR_PARTITION 0").find("COUNT"),
            std::string::npos);
  EXPECT_NE(error_of("request-errors Produse NOT_LEADER_FOR_PARTITION 1").find("unknown API"),
            std::string::npos);
  EXPECT_NE(error_of("request-errors Produce NO_SUCH_ERROR 1").find("unknown error"),
            std::string::npos);
  // Internal (negative) librdkafka codes are not Kafka errors a broker can answer with.
  EXPECT_NE(error_of("request-errors Produce _TRANSPORT 1").find("unknown error"),
            std::string::npos);
}

TEST(DevBrokerControl, LeaderMovesNameTopicPartitionAndBroker) {
  MoveLeader m = command_of<MoveLeader>("leader agent.tasks.dispatch 4 2");
  EXPECT_EQ(m.topic, "agent.tasks.dispatch");
  EXPECT_EQ(m.partition, 4);
  EXPECT_EQ(m.broker, 2);
  EXPECT_NE(error_of("leader agent.tasks.dispatch x 2").find("PARTITION"), std::string::npos);
  EXPECT_NE(error_of("leader agent.tasks.dispatch 1 9").find("no broker"), std::string::npos);
}

TEST(DevBrokerControl, AnythingElseIsRefusedWithTheCommandList) {
  command_of<Help>("help");
  command_of<ListBrokers>("brokers");
  command_of<ListFaults>("faults");
  EXPECT_EQ(api_name(0), "Produce");
  EXPECT_EQ(api_name(8), "OffsetCommit");
  EXPECT_EQ(api_name(66), "66");
  for (std::string_view line : {"", "   ", "shutdown", "broker-down", "broker-down 1 2 3",
                                "brokers now", "rtt 1", "faults all"}) {
    std::string error = error_of(line);
    EXPECT_FALSE(error.empty()) << line;
  }
  EXPECT_NE(error_of("reboot").find("commands: brokers"), std::string::npos);
}

}  // namespace
}  // namespace agentfleet::dev_broker
