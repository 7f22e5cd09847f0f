#pragma once
// The worker process: consumes the dispatch topic in a consumer group, runs each task as
// a coroutine (TaskRunner) with at most max_in_flight at once, pausing its partitions
// while full; commits each partition's offset up to its lowest still-running message;
// extends the leases of running tasks; on SIGTERM/SIGINT stops consuming and lets running
// tasks finish within the grace period.
//
// Threads: one io_context thread runs every task coroutine (so task state needs no locks),
// librdkafka's poll threads hand messages over by posting, DbPool threads do Postgres.

#include <boost/asio/io_context.hpp>

#include <memory>

#include "core/config/config.hpp"

namespace agentfleet::worker {

// Runs until signalled; returns the process exit code.
int run_worker(const config::Config& config);

}  // namespace agentfleet::worker
