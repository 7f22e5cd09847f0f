#pragma once
// Group commit for the worker: many tasks' small write transactions (claims, checkpoints,
// finishes) run in ONE Postgres transaction and one commit (one WAL flush) instead of one
// each. Durability is unchanged: a caller resumes only after the commit that holds its
// write, and gets the error when that commit failed. A write that fails (a constraint; a
// lost fence is not a failure) is rolled back alone and the others commit. Writes are applied in
// the order of their keys (the task id): rows are then locked in one global order, by batches and
// by the lease heartbeat alike, so concurrent batches cannot deadlock. A batch is first written
// without savepoints (one round trip per write fewer); only when one of its writes fails is it
// rolled back and written again with a savepoint per write.
//
// A connection that Postgres closed (a restart) looks open until it is used, so the first
// batch after a restart breaks on it before writing anything; such a batch runs again, whole,
// on a new connection (a few tries). A batch whose COMMIT was sent is never run again: its
// outcome is unknown, and its callers get the error (they leave their tasks to lease
// recovery, which reads what was committed).
//
// Writes of a Kind (a claim, a model checkpoint, ...) are applied together: the writes of
// one kind in a batch go to the kind in one call, which writes them all with one statement;
// kinds are applied in the order of their rank. So a batch costs a statement per kind, not
// per write; and a batch of one kind (what a quiet worker writes) is that statement alone,
// committed by itself, without BEGIN and COMMIT. Its connection is looked at first (a
// connection the server closed has its end waiting in the socket), so a restart does not
// leave such a statement's outcome in doubt; a connection that breaks while it runs does. A batch
// that fails is written again write by write (each a kind of one), with a savepoint each, as above.
//
// There is no timer: a batch is whatever queued while the previous batches were being
// written, so an idle worker commits each write at once and a busy one commits hundreds
// together. At most `max_batches` batches run at once on the DbPool's threads.
//
// Thread-safety: run() may be called from any thread; a write's function runs on a DbPool
// thread, the awaiting coroutine resumes on its own executor. Keep the batcher alive until
// the DbPool has joined.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <pqxx/pqxx>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>

#include "core/adapters/pg/db_pool.hpp"
#include "core/domain/error.hpp"

namespace agentfleet::pg {

class WriteBatcher {
 public:
  struct Stats {
    std::uint64_t batches = 0;
    std::uint64_t writes = 0;
    std::uint64_t largest = 0;
    std::uint64_t isolated = 0;  // batches written again with a savepoint per write
    std::uint64_t queued = 0;    // writes waiting for a batch now
  };

  WriteBatcher(DbPool& pool, int max_batches, int max_batch_size);

  // Runs f(tx) in the next batch; its value (or the error of its savepoint or of the
  // batch's commit) once that batch has committed. `key`: the task the write locks.
  // Not a coroutine itself: the returned awaitable starts the write when awaited. (Keeping
  // the initiation out of a coroutine frame avoids GCC 12 destroying its captures twice.)
  template <typename F>
  auto run(std::string key, F f)
      -> boost::asio::awaitable<Result<std::invoke_result_t<F, pqxx::work&>>> {
    using T = std::invoke_result_t<F, pqxx::work&>;
    auto slot = std::make_shared<std::optional<Result<T>>>();
    auto fn = std::make_shared<F>(std::move(f));
    auto initiation = [this, slot, fn, key = std::move(key)](auto handler) mutable {
      auto h = std::make_shared<decltype(handler)>(std::move(handler));
      Write write;
      write.key = std::move(key);
      write.apply = [slot, fn](pqxx::work& tx) { slot->emplace((*fn)(tx)); };
      write.fail = [slot](const Error& error) { slot->emplace(error); };
      write.executor = boost::asio::get_associated_executor(*h);
      write.deliver = [slot, h] { (*h)(std::move(**slot)); };
      enqueue(std::move(write));
    };
    return boost::asio::async_initiate<decltype(boost::asio::use_awaitable), void(Result<T>)>(
        std::move(initiation), boost::asio::use_awaitable);
  }

  // A kind of write many runs make: the writes of one kind in a batch are applied together.
  // Kinds live as long as the batcher.
  template <typename Item, typename Value>
  class Kind {
   public:
    virtual ~Kind() = default;
    // Kinds are applied in rank order within a batch (each locks its rows in task-id order).
    virtual int rank() const = 0;
    // One value per item, in the order of `items`, with ONE statement for all of them (a
    // batch of one kind then runs as that statement alone, without BEGIN and COMMIT). Throws
    // what libpqxx throws; then the batch is written again write by write.
    virtual std::vector<Value> apply(pqxx::transaction_base& tx,
                                     const std::vector<const Item*>& items) = 0;
  };

  // Runs `item` through `kind` in the next batch, together with the other writes of that kind
  // in it; its value (or the error of its savepoint or of the batch's commit) once that batch
  // has committed. `key`: the task the write locks.
  template <typename Item, typename Value>
  auto run(std::string key, Kind<Item, Value>& kind, Item item)
      -> boost::asio::awaitable<Result<Value>> {
    struct State {
      Item item;
      std::optional<Result<Value>> slot;
    };
    auto state = std::make_shared<State>(State{std::move(item), std::nullopt});
    auto initiation = [this, state, &kind, key = std::move(key)](auto handler) mutable {
      auto h = std::make_shared<decltype(handler)>(std::move(handler));
      Write write;
      write.key = std::move(key);
      write.kind = &kind;
      write.rank = kind.rank();
      write.item = &state->item;
      write.apply = [state, &kind](pqxx::work& tx) {
        auto values = kind.apply(tx, {&state->item});
        state->slot.emplace(std::move(values.at(0)));
      };
      write.apply_kind = [&kind](pqxx::transaction_base& tx, const std::vector<Write*>& writes) {
        std::vector<const Item*> items;
        items.reserve(writes.size());
        for (const Write* w : writes)
          items.push_back(static_cast<const Item*>(w->item));
        auto values = kind.apply(tx, items);
        for (std::size_t i = 0; i < writes.size(); ++i)
          writes[i]->set_value(&values.at(i));
      };
      write.set_value = [state](void* value) {
        state->slot.emplace(std::move(*static_cast<Value*>(value)));
      };
      write.fail = [state](const Error& error) { state->slot.emplace(error); };
      write.executor = boost::asio::get_associated_executor(*h);
      write.deliver = [state, h] { (*h)(std::move(*state->slot)); };
      enqueue(std::move(write));
    };
    return boost::asio::async_initiate<decltype(boost::asio::use_awaitable), void(Result<Value>)>(
        std::move(initiation), boost::asio::use_awaitable);
  }

  Stats stats() const;

 private:
  struct Write {
    std::string key;
    std::function<void(pqxx::work&)> apply;  // runs the write alone; stores its value
    std::function<void(const Error&)> fail;  // stores an error instead
    // Resumes the caller with its value (after the commit), run on `executor`: the writes of
    // a batch are handed back to each executor in one post, not one each.
    boost::asio::any_io_executor executor;
    std::function<void()> deliver;
    // Writes of a Kind: the kind, its rank, the item, how the writes of the kind in a batch
    // are applied together, and how this write takes its value from that.
    const void* kind = nullptr;
    int rank = 0;
    void* item = nullptr;
    std::function<void(pqxx::transaction_base&, const std::vector<Write*>&)> apply_kind;
    std::function<void(void*)> set_value;
  };
  // A batch whose writes are all of one kind is that kind's one statement, run on its own
  // (no BEGIN, no COMMIT: two round trips and two statements fewer). nullopt when it ran (each
  // write has its value or error); the error when the connection looked closed before
  // anything was sent (the batch runs again on a new one).
  std::optional<Error> write_alone(pqxx::connection& c, std::deque<Write>& batch,
                                   const CallWatchdog::Armed& armed);
  // Hands every write of the batch back to its caller: one post per executor.
  static void complete(std::deque<Write>& batch);
  // The batch, written without savepoints: kind by kind in rank order, then the writes that
  // belong to no kind, in key order.
  static void write_together(pqxx::work& tx, std::deque<Write>& batch);

  void enqueue(Write write);
  void start_batch_locked();
  // Writes the batch in one transaction; every write gets its value or its error. Except
  // when the connection broke before the COMMIT was sent: then nothing is written, nothing
  // is answered, and the error is returned so that the batch can run again elsewhere.
  std::optional<Error> write_batch(pqxx::connection& c, std::deque<Write>& batch);
  // The batch with a savepoint per write: a write that throws is undone and gets its error.
  static void write_isolated(pqxx::work& tx, std::deque<Write>& batch);

  DbPool& pool_;
  const int max_batches_;
  const std::size_t max_batch_size_;
  mutable std::mutex mutex_;
  std::deque<Write> queue_;
  int running_ = 0;
  Stats stats_;
};

}  // namespace agentfleet::pg
