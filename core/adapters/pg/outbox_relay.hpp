#pragma once
// The outbox relay's store side: messages handed over as their rows were written, published
// through `send`, their rows removed together once gathered; and one batch of due outbox
// rows, published and deleted once the broker confirmed them, holding their row locks
// meanwhile (a batch is one transaction that spans the broker round trip, so two relays
// never publish the same row at once). Runs on the calling thread with a connection of its own (a
// DbPool of one thread, used blocking): the relay is a thread of its own and the broker round trip
// is long. Statements in sql/relay.sql; the removal of published rows is the worker's too
// (RunStore).
//
// Lifecycle: one per relay thread. Thread-safety: every member is called from that thread only.

#include <pqxx/pqxx>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/adapters/pg/db_pool.hpp"
#include "core/ports/publisher.hpp"

namespace agentfleet::pg {

struct RelayedBatch {
  int published = 0;                    // rows confirmed by the broker and deleted
  std::map<std::string, int> by_topic;  // of those, per topic
  int undelivered = 0;                  // rows sent that the broker did not confirm
  // In how long the earliest row falls due: set when none was published, 0 when rows were due
  // (all held by another relay, or refused: `undelivered`); none: the outbox is empty.
  std::optional<std::chrono::milliseconds> next_due_in;
};

// Removes published outbox rows, in one statement; skips rows another transaction holds
// (the relay's, which it deletes itself) instead of waiting for them.
void delete_outbox_rows(pqxx::transaction_base& tx, const std::vector<std::int64_t>& ids);

class OutboxRelay {
 public:
  using Clock = std::chrono::steady_clock;
  // Stores `messages` in the broker within the producer's deadline; one Status per message,
  // in order (the ones not ok stay in the outbox for the next batch).
  using Send = std::function<std::vector<Status>(std::vector<ports::OutMessage> messages)>;
  // The most rows of published handed messages gathered: reached, they are removed at once.
  static constexpr std::size_t kGatherBound = 10000;

  // `statement_timeout_ms` covers the broker round trip made inside the transaction.
  // `gather`: how long the rows of published handed messages wait to be removed together;
  // shorter than the hand-off (ports::SchedulerPass::handoff_s), so no relay finds them due.
  OutboxRelay(const std::string& url, int statement_timeout_ms, int connect_timeout_s,
              std::chrono::milliseconds gather = std::chrono::milliseconds(0))
      : db_(url, 1, statement_timeout_ms, connect_timeout_s, PlanCache::kGeneric),
        gather_(gather) {}

  // Up to `batch` due rows of `dispatch_topic` and up to `batch` due rows of the other
  // topics, each in publish order (dispatch messages never wait behind a flood of result
  // events); the counts of those published, once their deletion committed. With none due,
  // one statement, which says when the earliest row falls due.
  Result<RelayedBatch> once(int batch, const std::string& dispatch_topic, const Send& send);

  // Messages handed over by the one who wrote their rows, not yet due (the scheduler's
  // dispatch messages: ports::SchedulerPass::handoff_s), published at once. The rows of those
  // delivered are gathered (at `now`) for remove_published(). A message not delivered stays
  // in its row, which the relay publishes once it falls due.
  Result<RelayedBatch> publish_handed(std::vector<ports::OutboxMessage> handed, const Send& send,
                                      Clock::time_point now = Clock::now());

  // Removes the gathered rows in one statement once the first of them has waited `gather`
  // (or kGatherBound are gathered), or now whatever they waited when `all`; the count
  // removed. A removal that fails forgets them: published already, they fall due and are
  // published again (a duplicate dispatch message, which a claim refuses).
  Result<int> remove_published(Clock::time_point now, bool all = false);

  // When remove_published() next has work: Clock::time_point::max() with nothing gathered.
  Clock::time_point removal_due() const;

 private:
  DbPool db_;
  const std::chrono::milliseconds gather_;
  std::vector<std::int64_t> published_;  // rows of delivered handed messages, not removed yet
  Clock::time_point gathered_since_{};   // when the first of published_ was gathered
};

}  // namespace agentfleet::pg
