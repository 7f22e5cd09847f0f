#pragma once
// Port: messages out to the event transport (Kafka in production: adapters/kafka). A result
// announcement is published and its delivery awaited; progress events are posted and
// forgotten. Tests fake it.
//
// Thread-safety: called from the worker's io thread; publish() resumes on the caller's
// executor.

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/domain/error.hpp"

namespace agentfleet::ports {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct OutMessage {
  std::string topic;
  std::string key;
  std::string value;
  Headers headers;
};

// A message and the outbox row that holds it until it is published.
struct OutboxMessage {
  std::int64_t outbox_id = 0;
  OutMessage message;
};

class Publisher {
 public:
  virtual ~Publisher() = default;
  // Resumes once the transport has stored the message (ok), or could not (an error; the
  // caller keeps its fallback, such as the outbox row a relay publishes).
  virtual boost::asio::awaitable<Status> publish(OutMessage message) = 0;
  // Best effort: no confirmation, no retry beyond the transport's own.
  virtual void post(OutMessage message) = 0;
};

}  // namespace agentfleet::ports
