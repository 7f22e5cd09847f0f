#pragma once
// What each fault of the control port did, judged by its effect (not by the command having
// been accepted): the requests a request error met, the connections a broker taken down
// closed, the requests a slow broker answered late, the traffic a moved leader served.
//
// The effects are read from the mock cluster's own debug log (librdkafka's "mock" debug
// context, on the handle that hosts the cluster): a line for each request a broker received
// ("Broker 2: Received ProduceRequestV7 from 127.0.0.1:5555") and for each connection it
// closed ("Broker 2: Connection from 127.0.0.1:5555 closed: Broker down"). Pure: the
// ControlServer records the faults it applies, the log lines are fed in, and the control
// command `faults` lists them.
//
// Request errors go onto the cluster's stack for their API (as `request-errors` pushes
// them; no broker's own stack, which would come first, is ever used): the mock pops one for
// each request of that API any broker receives, in the order they were pushed. So a request
// of the API is attributed to the oldest of its faults with errors left; a fault whose
// errors were all met, or were cleared, ends.
//
// Thread-safety: every member may be called from any thread (the log lines arrive on
// librdkafka's threads, the faults on the control thread).

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentfleet::dev_broker {

// One line of the mock cluster's debug log, as far as it tells an effect.
struct MockRequest {
  int broker = 0;
  std::string api;  // the request's name without "Request": "Produce", "Fetch", ...
};
struct MockClosed {
  int broker = 0;
  std::string reason;  // "Broker down", ...
};
std::optional<MockRequest> parse_mock_request(std::string_view line);
std::optional<MockClosed> parse_mock_closed(std::string_view line);

class FaultEffects {
 public:
  // Each returns the fault's id (1, 2, ...), which `faults` lists.
  int add_request_errors(std::string api, std::string error, int count);
  int add_broker_down(int broker);
  int add_rtt(int broker, int ms);
  int add_leader_move(std::string topic, int partition, int broker);
  // The fault's time is up (a broker back up, its latency back to 0, its partition's leader
  // moved again).
  void end(int id);
  // The request errors of `api` still queued were dropped.
  void clear(std::string_view api);

  void on_request(const MockRequest& request);
  void on_closed(const MockClosed& closed);
  // A line of the mock's log: whichever of the above it is, if any.
  void on_log_line(std::string_view line);

  // Every fault so far (the newest kMaxKept), as one line of JSON: {"faults":[{"id","kind",
  // "what","active","seen","served"}, ...]}. `served`: the requests (for a broker taken
  // down, the connections) the fault acted on; `seen`: those it could have (README.md).
  std::string listing_json() const;

  static constexpr std::size_t kMaxKept = 1000;

 private:
  enum class Kind { kRequestErrors, kBrokerDown, kRtt, kLeaderMove };
  struct Fault {
    int id = 0;
    Kind kind = Kind::kRequestErrors;
    std::string what;  // the command's terms, for the listing
    std::string api;   // kRequestErrors
    int broker = 0;    // kBrokerDown, kRtt, kLeaderMove
    int left = 0;      // kRequestErrors: errors not yet met
    bool active = true;
    std::int64_t seen = 0;
    std::int64_t served = 0;
  };
  Fault& add(Fault fault);
  Fault* find(int id);

  mutable std::mutex mutex_;
  int next_id_ = 1;
  std::vector<Fault> faults_;  // in id order
};

}  // namespace agentfleet::dev_broker
