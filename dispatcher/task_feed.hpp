#pragma once
// What this replica hears about tasks from Kafka: every result event (results topic) and
// every progress event (events topic), read by a consumer of its own (a group per process,
// starting at the end), so each replica sees all of them whichever replica the client
// talks to. It answers long polls the moment a task's result lands, feeds event streams
// (SSE), and tells the scheduler a task ended (its slot is free, its real tokens known).
//
// The feed is a fast path, not the truth. A subscription says when it may have missed
// something (a gap: the consumer was not yet assigned its partitions or was reassigned, a
// progress event's `seq` skipped a number, or the subscriber fell behind by more than its
// backlog); the waiter then re-reads Postgres, and otherwise only on a slow safety timer
// (feed_watch.hpp).
//
// Lifecycle: construct, start(), stop() before the io_context goes away; a Subscription
// must not outlive its feed. Thread-safety: subscribe() and Subscription run on the
// io_context's thread (the dispatcher runs one); the consumer's thread only posts, and
// drops progress events while nobody subscribes (most tasks are never watched, and a
// task's progress events outnumber its result several times).

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/adapters/kafka/kafka.hpp"
#include "core/config/config.hpp"
#include "dispatcher/feed_watch.hpp"

namespace agentfleet::dispatcher {

class TaskFeed {
 public:
  struct Item {
    bool result = false;  // a result event (the task ended), else a progress event
    std::string event;    // progress: step, action, execution, delta, done, error
    int attempt = 0;
    int seq = 0;
    int step = 0;
    std::string json;  // the message as it came
    std::string task_id;
  };

  class Subscription {
   public:
    ~Subscription();
    Subscription(const Subscription&) = delete;
    Subscription& operator=(const Subscription&) = delete;
    // The next item for the task, or nullopt once `until` passes, the feed stops or a gap
    // opens (take_gap).
    boost::asio::awaitable<std::optional<Item>> next(std::chrono::steady_clock::time_point until);
    // Whether the feed may have missed something for the task since the last call (or since
    // the subscription began): the waiter should read the row.
    bool take_gap();

   private:
    friend class TaskFeed;
    Subscription(TaskFeed& feed, std::string key, bool by_user);
    void push(Item item);
    TaskFeed& feed_;
    std::string task_id_;  // or the user's id, for a subscription to a user's results
    bool by_user_ = false;
    std::deque<Item> items_;
    boost::asio::steady_timer signal_;
    std::uint64_t epoch_;  // the feed's assignment epoch when last looked at
    SeqGaps seqs_;
    bool missed_ = false;  // items dropped, or a seq skipped, since take_gap
  };

  // `on_result(user_id, task_id, tokens)` runs on the io thread for every result event.
  using ResultObserver =
      std::function<void(const std::string&, const std::string&, std::int64_t tokens)>;
  TaskFeed(boost::asio::io_context& io, const config::Config& config, ResultObserver on_result);
  ~TaskFeed();

  void start();
  void stop();
  std::unique_ptr<Subscription> subscribe(const std::string& task_id);
  // Every result event of the user's tasks (items with `result` set, `task_id` filled).
  std::unique_ptr<Subscription> subscribe_user(const std::string& user_id);
  // stop() was called: waiters should answer with what they have.
  bool stopped() const { return stopped_; }
  // The consumer holds its partitions (messages from now on reach the feed).
  bool assigned() const { return assigned_; }

 private:
  void deliver(kafka::InMessage message);
  void rebalanced(bool assigned);
  // Assigned, and for long enough that the consumer reads from where it will.
  bool settled() const;

  boost::asio::io_context& io_;
  const config::Config& config_;
  ResultObserver on_result_;
  std::unordered_multimap<std::string, Subscription*> subscribers_;
  std::unordered_multimap<std::string, Subscription*> user_subscribers_;
  std::atomic<std::size_t> subscriptions_{0};  // subscribers_.size(), for the consumer thread
  bool stopped_ = false;
  // Counts assignments and revocations (io thread): a subscription that saw another epoch
  // may have missed messages.
  std::uint64_t epoch_ = 0;
  bool assigned_ = false;
  std::chrono::steady_clock::time_point assigned_at_;
  std::unique_ptr<kafka::Consumer> consumer_;
};

}  // namespace agentfleet::dispatcher
