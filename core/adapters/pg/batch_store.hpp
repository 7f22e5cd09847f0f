#pragma once
// Batches: many tasks of one user submitted as one JSON Lines upload, followed and cancelled
// together. A batch upload is one transaction on a connection of its own (BatchWriter),
// written in slices as the body streams in, so a failed or refused upload stores nothing.
//
// Thread-safety: a BatchWriter is used by one caller at a time (its calls may run on
// different threads, one after another). The functions take their connection like the
// rest of the store.

#include <pqxx/pqxx>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/adapters/pg/submission_store.hpp"

namespace agentfleet::pg {

struct BatchHeader {
  std::string batch_id;
  std::string user_id;
  Priority priority = Priority::kBatch;
};

class BatchWriter {
 public:
  // Opens its own connection (statement and lock timeouts) and begins the transaction.
  BatchWriter(const std::string& url, int statement_timeout_ms, int connect_timeout_s,
              BatchHeader header);
  ~BatchWriter();  // rolls back what was not committed
  BatchWriter(const BatchWriter&) = delete;
  BatchWriter& operator=(const BatchWriter&) = delete;

  // False when a batch with this id exists already (for any user).
  bool create();
  // Inserts tasks (their ids set); a task whose (user, idempotency key) exists already is
  // skipped and counted as a duplicate. Returns how many were inserted.
  int add(const std::vector<NewTask>& tasks);
  // The user's queue after the upload: queued tasks (counted up to the limit + 1) and limit.
  // Takes the user's submission lock until the commit.
  QueueRoom room(const QueueLimit& limit);
  // Sets the batch's total and commits; the scheduler is notified.
  void commit(std::int64_t total);

 private:
  BatchHeader header_;
  std::unique_ptr<pqxx::connection> connection_;
  std::unique_ptr<pqxx::work> tx_;
};

// The batch row, or nullopt.
std::optional<BatchHeader> find_batch(pqxx::connection& c, const std::string& batch_id);

// GET /v1/batches/{id}: the batch with counts per status and result type, progress, and
// usage per model, as JSON; nullopt when there is no such batch.
std::optional<std::string> batch_json(pqxx::connection& c, const std::string& batch_id);

// One page of GET /v1/batches/{id}/results: each task as one JSON line (with "\n"), in
// task id order after `after` (empty: from the start); at most `limit`. The last task id
// of the page is returned in `last` (empty when the page is empty).
std::string batch_results_page(pqxx::connection& c, const BatchHeader& batch,
                               const std::string& after, int limit, std::string& last);

// POST /v1/batches/{id}/cancel, one slice: marks the batch cancelled (the scheduler admits
// none of its tasks from then on), then takes up to `limit` of its live tasks after the
// task id `after` (empty: from the first): those not yet running end cancelled with their
// result events, running ones are asked to stop. Advances `after`; returns the tasks
// taken. Call again until it returns less than `limit`; the batch is then marked drained.
int cancel_batch_slice(pqxx::connection& c, const BatchHeader& batch, std::string& after, int limit,
                       const std::string& results_topic);

// For the scheduler: tasks of cancelled batches not yet drained (a cancel cut short by a
// failure or a crash), ended cancelled, at most `limit`.
int sweep_cancelled_batches(pqxx::work& tx, int limit, const std::string& results_topic);

}  // namespace agentfleet::pg
