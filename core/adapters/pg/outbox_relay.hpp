#pragma once
// The outbox relay's store side: messages handed over as their rows were written, and one
// batch of due outbox rows, published through `send` and
// deleted once the broker confirmed them, holding their row locks meanwhile (a batch is one
// transaction that spans the broker round trip, so two relays never publish the same row at
// once). Runs on the calling thread with a connection of its own (a DbPool of one thread,
// used blocking): the relay is a thread of its own and the broker round trip is long.
// Statements in sql/relay.sql; the removal of published rows is the worker's too (RunStore).
//
// Lifecycle: one per relay thread. Thread-safety: once() is called from that thread only.

#include <pqxx/pqxx>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/adapters/pg/db_pool.hpp"
#include "core/ports/publisher.hpp"

namespace agentfleet::pg {

struct RelayedBatch {
  int published = 0;                    // rows confirmed by the broker and deleted
  std::map<std::string, int> by_topic;  // of those, per topic
};

// Removes published outbox rows, in one statement; skips rows another transaction holds
// (the relay's, which it deletes itself) instead of waiting for them.
void delete_outbox_rows(pqxx::transaction_base& tx, const std::vector<std::int64_t>& ids);

class OutboxRelay {
 public:
  // Stores `messages` in the broker within the producer's deadline; one Status per message,
  // in order (the ones not ok stay in the outbox for the next batch).
  using Send = std::function<std::vector<Status>(std::vector<ports::OutMessage> messages)>;

  // `statement_timeout_ms` covers the broker round trip made inside the transaction.
  OutboxRelay(const std::string& url, int statement_timeout_ms, int connect_timeout_s)
      : db_(url, 1, statement_timeout_ms, connect_timeout_s, PlanCache::kGeneric) {}

  // Up to `batch` due rows of `dispatch_topic` and up to `batch` due rows of the other
  // topics, each in publish order (dispatch messages never wait behind a flood of result
  // events); the counts of those published, once their deletion committed.
  Result<RelayedBatch> once(int batch, const std::string& dispatch_topic, const Send& send);

  // Messages handed over by the one who wrote their rows, not yet due (the scheduler's
  // dispatch messages: ports::SchedulerPass::handoff_s), published at once; the rows of those
  // delivered are then deleted in one statement of their own. A message not delivered stays
  // in its row, which the relay publishes once it falls due.
  Result<RelayedBatch> publish_handed(std::vector<ports::OutboxMessage> handed, const Send& send);

 private:
  DbPool db_;
};

}  // namespace agentfleet::pg
