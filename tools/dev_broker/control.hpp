#pragma once
// Run-time fault injection for the dev broker: a line protocol on a loopback TCP port.
//
// One command per line; each gets one reply line, `ok ...` or `error ...`:
//
//   brokers                                  the broker ids
//   broker-down ID [SECONDS]                 take a broker down (it closes its connections
//                                            and refuses new ones); back up after SECONDS
//   broker-up ID                             bring it back now
//   rtt ID MS [SECONDS]                      add MS of latency to every answer of a broker
//   request-errors API ERROR COUNT           the next COUNT requests of API (name or number,
//                                            e.g. Produce, Fetch, Metadata, JoinGroup) fail
//                                            with ERROR (name or number, e.g.
//                                            NOT_LEADER_FOR_PARTITION, REQUEST_TIMED_OUT)
//   clear-errors API                         drop the errors still queued for API
//   leader TOPIC PARTITION BROKER            move a partition's leader
//   faults                                   what each fault did so far (fault_effects.hpp),
//                                            as one line of JSON
//   help                                     the commands
//
// A command that starts a fault names it in its reply, "... (fault N)", N as `faults` lists
// it.
//
// Every fault is bounded: SECONDS is 1..600 (default 30), after which the broker is up
// again or its latency back to 0; MS is 0..10000; COUNT is 1..10000. The port listens on
// 127.0.0.1 only. Commands take effect through librdkafka's mock-cluster calls.
//
// Parsing is pure (parse_control_command); ControlServer owns a thread that accepts one
// connection at a time and applies commands to the cluster. Thread-safety: the mock
// cluster calls are safe from any thread; ControlServer itself is started and stopped
// from one thread.

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "tools/dev_broker/fault_effects.hpp"

namespace agentfleet::dev_broker {

inline constexpr int kDefaultFaultSeconds = 30;
inline constexpr int kMaxFaultSeconds = 600;
inline constexpr int kMaxRttMs = 10000;
inline constexpr int kMaxErrorCount = 10000;

struct ListBrokers {};
struct Help {};
struct ListFaults {};
struct BrokerDown {
  int broker = 0;
  int seconds = kDefaultFaultSeconds;
};
struct BrokerUp {
  int broker = 0;
};
struct SetRtt {
  int broker = 0;
  int ms = 0;
  int seconds = kDefaultFaultSeconds;
};
struct RequestErrors {
  int api_key = 0;
  int error = 0;  // rd_kafka_resp_err_t
  int count = 0;
};
struct ClearErrors {
  int api_key = 0;
};
struct MoveLeader {
  std::string topic;
  int partition = 0;
  int broker = 0;
};

using ControlCommand = std::variant<ListBrokers, Help, ListFaults, BrokerDown, BrokerUp, SetRtt,
                                    RequestErrors, ClearErrors, MoveLeader>;

// A parsed command, or the message of an `error` reply.
struct Parsed {
  std::optional<ControlCommand> command;
  std::string error;
};

// Parses one line (without its newline). Broker ids are checked against `brokers` (ids
// 1..brokers).
Parsed parse_control_command(std::string_view line, int brokers);

// The Kafka API key of a request name (Produce, Fetch, Metadata, ...) or a number 0..67.
std::optional<int> api_key_by_name(std::string_view name);
// The name of an API key as librdkafka names its requests (Produce, Fetch, ...), else the
// number.
std::string api_name(int api_key);

// A Kafka error code by librdkafka's name (NOT_LEADER_FOR_PARTITION, with or without an
// ERR_ prefix) or a number.
std::optional<int> error_by_name(std::string_view name);

extern const char kControlHelp[];

// Accepts connections on 127.0.0.1 and applies their commands to `cluster`. Brokers taken
// down and latencies added are restored when their time is up, and all of them when the
// server stops. Each fault is recorded in `effects`, which the mock's log feeds.
class ControlServer {
 public:
  ControlServer(rd_kafka_mock_cluster_t* cluster, int brokers, FaultEffects& effects);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Binds 127.0.0.1:port (0 picks one) and starts the thread. Returns the port, or
  // nullopt with `error` set.
  std::optional<int> start(int port, std::string& error);
  void stop();

  // Applies one command now and returns the reply line (without newline). Used by the
  // server thread; public for the tool's own startup faults.
  std::string apply(const ControlCommand& command);

 private:
  struct Restore {
    std::chrono::steady_clock::time_point at;
    int broker = 0;
    bool up = false;   // bring the broker up
    bool rtt = false;  // set its latency back to 0
    int fault = 0;     // the fault it ends (FaultEffects)
  };

  void run();
  void serve(int fd);
  void restore_due(bool all);
  int next_wait_ms() const;

  rd_kafka_mock_cluster_t* cluster_;
  int brokers_;
  FaultEffects& effects_;
  std::vector<std::pair<std::string, int>> leader_faults_;  // "topic/partition" -> fault
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::vector<Restore> restores_;  // only touched by the server thread (and after join)
};

}  // namespace agentfleet::dev_broker
