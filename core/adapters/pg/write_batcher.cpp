#include "core/adapters/pg/write_batcher.hpp"

#include <poll.h>

#include <algorithm>
#include <map>

namespace agentfleet::pg {

namespace {
// New connections a batch may try after the one it started on broke (restart-stale
// connections of every pool thread are found one by one, so one retry is usually enough).
constexpr int kBrokenConnectionRetries = 3;
}  // namespace

WriteBatcher::WriteBatcher(DbPool& pool, int max_batches, int max_batch_size)
    : pool_(pool),
      max_batches_(std::max(1, max_batches)),
      max_batch_size_(static_cast<std::size_t>(std::max(1, max_batch_size))) {}

WriteBatcher::Stats WriteBatcher::stats() const {
  std::lock_guard lock(mutex_);
  Stats stats = stats_;
  stats.queued = queue_.size();
  return stats;
}

void WriteBatcher::enqueue(Write write) {
  std::lock_guard lock(mutex_);
  queue_.push_back(std::move(write));
  if (running_ < max_batches_)
    start_batch_locked();
}

void WriteBatcher::start_batch_locked() {
  ++running_;
  // The batch is taken when a thread is free, not now: whatever queued meanwhile joins it.
  pool_.post_with_connection([this](pqxx::connection* c, const Error* no_connection) {
    std::deque<Write> batch;
    {
      std::lock_guard lock(mutex_);
      while (!queue_.empty() && batch.size() < max_batch_size_) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      stats_.batches += batch.empty() ? 0 : 1;
      stats_.writes += batch.size();
      stats_.largest = std::max<std::uint64_t>(stats_.largest, batch.size());
    }
    if (no_connection != nullptr) {
      // Postgres is unreachable: these writes fail now (their tasks are left to lease
      // recovery) rather than wait for a connection without bound.
      for (Write& write : batch)
        write.fail(*no_connection);
    } else if (!batch.empty()) {
      for (int attempt = 0;; ++attempt) {
        std::optional<Error> broken = write_batch(*c, batch);
        if (!broken)
          break;
        std::optional<Error> unreachable;
        if (attempt < kBrokenConnectionRetries)
          c = pool_.reopen_connection(attempt, unreachable);
        if (attempt >= kBrokenConnectionRetries || c == nullptr) {
          for (Write& write : batch)
            write.fail(unreachable ? *unreachable : *broken);
          break;
        }
      }
    }
    complete(batch);
    std::lock_guard lock(mutex_);
    --running_;
    if (!queue_.empty() && running_ < max_batches_)
      start_batch_locked();
  });
}

std::optional<Error> WriteBatcher::write_batch(pqxx::connection& c, std::deque<Write>& batch) {
  std::stable_sort(batch.begin(), batch.end(),
                   [](const Write& a, const Write& b) { return a.key < b.key; });
  // The whole batch has one client-side deadline: a server that never answers (a half-open
  // connection) fails it as a broken connection instead of holding the pool thread.
  auto armed = pool_.arm(c);
  const void* kind = batch.front().kind;
  if (kind != nullptr &&
      std::all_of(batch.begin(), batch.end(), [kind](const Write& w) { return w.kind == kind; })) {
    return write_alone(c, batch, armed);
  }
  // First without savepoints: a write rarely fails, and a savepoint costs a round trip per
  // write. A batch of one needs none (its write's failure is the batch's). When a write of a
  // larger batch fails, the transaction is rolled back and the whole batch written again,
  // each write after a savepoint of its own, so that only the failing one is undone.
  bool isolate = false;
  for (;;) {
    bool committing = false;
    try {
      pqxx::work tx(c);
      if (isolate)
        write_isolated(tx, batch);
      else
        write_together(tx, batch);
      committing = true;
      tx.commit();
      return std::nullopt;
    } catch (const std::exception& e) {
      if (armed.fired()) {
        // Cut by the deadline: the server does not answer. Trying again elsewhere would wait
        // as long; the callers leave their tasks to be handed back. (Whether a COMMIT that
        // was sent took effect is unknown: the same as an in-doubt commit.)
        const Error timeout{ErrorKind::kTimeout, "postgres did not answer within " +
                                                     std::to_string(pool_.call_deadline().count()) +
                                                     " ms"};
        for (Write& write : batch)
          write.fail(timeout);
        return std::nullopt;
      }
      const Error error = map_pg_error(e);
      // Broken before the COMMIT was sent: nothing of the batch was written (values and
      // errors stored so far are replaced when it runs again).
      if (!committing && (dynamic_cast<const pqxx::broken_connection*>(&e) || !c.is_open()))
        return error;
      if (!committing && !isolate && batch.size() > 1) {
        isolate = true;
        std::lock_guard lock(mutex_);
        ++stats_.isolated;
        continue;
      }
      // The commit failed, or its outcome is unknown: none of the batch is known to be
      // written. An in-doubt commit is reported as transient, like any lost connection: the
      // callers leave their tasks to lease recovery, which reads what was committed.
      for (Write& write : batch)
        write.fail(error);
      return std::nullopt;
    }
  }
}

namespace {
// Something is waiting on an idle connection nobody asked for (a server that closed it
// sends its reason and hangs up): it is not to be used.
bool looks_closed(pqxx::connection& c) {
  const int fd = c.sock();
  if (fd < 0)
    return true;
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) != 0;
}
}  // namespace

std::optional<Error> WriteBatcher::write_alone(pqxx::connection& c, std::deque<Write>& batch,
                                               const CallWatchdog::Armed& armed) {
  if (looks_closed(c))
    return Error{ErrorKind::kTransient, "postgres connection: closed by the server"};
  std::vector<Write*> writes;
  writes.reserve(batch.size());
  for (Write& write : batch)
    writes.push_back(&write);
  try {
    pqxx::nontransaction tx(c);
    writes.front()->apply_kind(tx, writes);
    return std::nullopt;
  } catch (const std::exception& e) {
    Error error = map_pg_error(e);
    if (armed.fired()) {
      error = Error{ErrorKind::kTimeout, "postgres did not answer within " +
                                             std::to_string(pool_.call_deadline().count()) +
                                             " ms (outcome unknown)"};
    } else if (dynamic_cast<const pqxx::broken_connection*>(&e) || !c.is_open()) {
      // Sent, and the connection broke: the statement may have committed. Reported as
      // transient, like an in-doubt commit: the callers leave their tasks to be handed back.
      error.message += " (outcome unknown)";
    } else if (batch.size() > 1) {
      // The statement failed, so none of it was written: each write alone now, so that only
      // the failing one fails.
      {
        std::lock_guard lock(mutex_);
        ++stats_.isolated;
      }
      for (Write* write : writes) {
        try {
          pqxx::nontransaction alone(c);
          write->apply_kind(alone, {write});
        } catch (const std::exception& each) {
          write->fail(map_pg_error(each));
          if (!c.is_open())
            error = map_pg_error(each);
        }
      }
      return std::nullopt;
    }
    for (Write& write : batch)
      write.fail(error);
    return std::nullopt;
  }
}

void WriteBatcher::complete(std::deque<Write>& batch) {
  // Usually every write of a batch came from the worker's one io thread: one wake-up of it.
  while (!batch.empty()) {
    auto executor = batch.front().executor;
    auto mine = std::make_shared<std::vector<std::function<void()>>>();
    for (auto it = batch.begin(); it != batch.end();) {
      if (it->executor == executor) {
        mine->push_back(std::move(it->deliver));
        it = batch.erase(it);
      } else {
        ++it;
      }
    }
    boost::asio::post(executor, [mine] {
      for (auto& deliver : *mine)
        deliver();
    });
  }
}

void WriteBatcher::write_together(pqxx::work& tx, std::deque<Write>& batch) {
  // The kinds in rank order, each with its writes in key order (the batch is sorted).
  std::map<std::pair<int, const void*>, std::vector<Write*>> kinds;
  for (Write& write : batch) {
    if (write.kind != nullptr)
      kinds[{write.rank, write.kind}].push_back(&write);
  }
  for (auto& [kind, writes] : kinds)
    writes.front()->apply_kind(tx, writes);
  for (Write& write : batch) {
    if (write.kind == nullptr)
      write.apply(tx);
  }
}

void WriteBatcher::write_isolated(pqxx::work& tx, std::deque<Write>& batch) {
  // Each write runs after a savepoint of its own; the release of one and the next one's
  // savepoint go in one round trip (the last is released by the commit). ROLLBACK TO keeps
  // the savepoint, so the write after a failed one needs no new one.
  tx.exec0("SAVEPOINT write");
  for (std::size_t i = 0; i < batch.size(); ++i) {
    try {
      batch[i].apply(tx);
      if (i + 1 < batch.size())
        tx.exec0("RELEASE SAVEPOINT write; SAVEPOINT write");
    } catch (const pqxx::broken_connection&) {
      throw;  // nothing more can be written on this connection
    } catch (const std::exception& e) {
      // This write alone is undone (a deadlock, a constraint, a bad row); the batch goes
      // on. Should the rollback itself fail, the whole batch fails.
      tx.exec0("ROLLBACK TO SAVEPOINT write");
      batch[i].fail(map_pg_error(e));
    }
  }
}

}  // namespace agentfleet::pg
