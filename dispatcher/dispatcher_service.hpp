#pragma once
// The dispatcher process: the HTTP API, the scheduler loop that admits queued tasks into
// the outbox, and the relay that publishes the outbox to Kafka. Any number of replicas
// may run; the scheduler's advisory lock admits one at a time and the relay's row locks
// (SKIP LOCKED) keep two relays from sending the same row at once.

#include "core/config/config.hpp"
#include "dispatcher/console.hpp"

namespace agentfleet::dispatcher {

// `console`: the web console's files, served at /ui/ (none: this build has no console).
int run_dispatcher(const config::Config& config, ConsoleFiles console = {});

}  // namespace agentfleet::dispatcher
