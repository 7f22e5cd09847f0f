#pragma once
// An in-memory ports::ApiStore for the API's unit tests (api_handlers_test.cpp): tasks
// stored by submissions and retries (idempotent by user and key, refused when a queue room
// runs out), searched as the store searches them (whose, status, batch, text as written,
// newest first, a cursor, a count), batches found by name, their failed tasks listed in id
// order. It keeps what it was asked, and can be made to fail every call as a store away
// does. What the tests do not reach answers "not faked" (kFatal), which the API turns into
// a 503.
//
// Thread-safety: one thread (the test's io_context).

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/ports/api_store.hpp"

namespace agentfleet::testing {

class FakeApiStore final : public ports::ApiStore {
 public:
  struct Task {
    std::string task_id;
    std::string user_id;
    TaskStatus status = TaskStatus::kQueued;
    std::string result_type;  // empty: none yet
    std::string text;
    std::string canonical;
    std::string parent_task_id;
    std::string idempotency_key;
    std::string batch_key;  // the batches row's key; empty: none
    std::string retry_of;
    std::int64_t created = 0;  // the order of creation (the search's newest first)
  };

  // The store's contents; tests may set them directly.
  std::map<std::string, Task> tasks;  // by id
  std::vector<ports::BatchHeader> batches;
  // Tasks insert_task may still create before the user's queue is full (none: no limit).
  std::optional<int> room;
  // Set: every call answers it (the store away, or a value it refuses).
  std::optional<Error> failure;

  // What the API asked.
  int calls = 0;
  std::vector<ports::TaskListQuery> searches;
  std::vector<ports::BatchListQuery> batch_lists;
  std::vector<ports::NewTask> inserted;  // each insert_task's task, stored or not

  Awaitable<ports::InsertResult> insert_task(const ports::NewTask& task, const ports::QueueLimit&,
                                             bool with_json, const ports::ModelCheck&) override {
    if (auto refused = fail())
      co_return *refused;
    inserted.push_back(task);
    ports::InsertResult result;
    if (!task.spec.idempotency_key.empty()) {
      for (const auto& [id, stored] : tasks) {
        if (stored.user_id != task.spec.user_id ||
            stored.idempotency_key != task.spec.idempotency_key)
          continue;
        result.outcome = stored.canonical == task.canonical ? ports::InsertOutcome::kExisting
                                                            : ports::InsertOutcome::kConflict;
        result.task_id = id;
        if (with_json)
          result.task_json = json_of(stored);
        co_return result;
      }
    }
    if (room && *room <= 0) {
      result.outcome = ports::InsertOutcome::kQueueFull;
      result.room = ports::QueueRoom{static_cast<std::int64_t>(tasks.size()), 0};
      co_return result;
    }
    if (room)
      --*room;
    Task& made = tasks[task.spec.task_id];
    made.task_id = task.spec.task_id;
    made.user_id = task.spec.user_id;
    made.text = task.spec.text;
    made.canonical = task.canonical;
    made.parent_task_id = task.spec.parent_task_id;
    made.idempotency_key = task.spec.idempotency_key;
    made.retry_of = task.retry_of;
    made.created = ++created_;
    result.task_id = made.task_id;
    if (with_json)
      result.task_json = json_of(made);
    co_return result;
  }

  Awaitable<std::optional<ports::ParentRef>> find_parent(const std::string&, const std::string&,
                                                         const std::string&,
                                                         const std::string&) override {
    if (auto refused = fail())
      co_return *refused;
    co_return std::optional<ports::ParentRef>{};
  }

  Awaitable<std::optional<std::string>> task_json(const std::string& task_id) override {
    if (auto refused = fail())
      co_return *refused;
    auto found = tasks.find(task_id);
    if (found == tasks.end())
      co_return std::optional<std::string>{};
    co_return std::optional<std::string>{json_of(found->second)};
  }

  Awaitable<std::optional<ports::RetrySource>> retry_source(const std::string& task_id) override {
    if (auto refused = fail())
      co_return *refused;
    auto found = tasks.find(task_id);
    if (found == tasks.end())
      co_return std::optional<ports::RetrySource>{};
    const Task& t = found->second;
    co_return std::optional<ports::RetrySource>{
        ports::RetrySource{t.user_id, t.status, t.canonical, t.parent_task_id}};
  }

  Awaitable<ports::TaskListPage> list_tasks(const ports::TaskListQuery& query) override {
    if (auto refused = fail())
      co_return *refused;
    searches.push_back(query);
    std::vector<const Task*> matches;
    for (const auto& [id, t] : tasks) {
      if (matches_search(t, query))
        matches.push_back(&t);
    }
    std::sort(matches.begin(), matches.end(),
              [](const Task* a, const Task* b) { return a->created > b->created; });
    ports::TaskListPage page;
    std::size_t from = 0;
    if (!query.before.empty()) {
      auto before = tasks.find(query.before);
      while (before != tasks.end() && from < matches.size() &&
             matches[from]->created >= before->second.created)
        ++from;
    }
    page.tasks = "[";
    int taken = 0;
    for (std::size_t i = from; i < matches.size() && taken < query.limit; ++i, ++taken) {
      page.tasks += (taken ? "," : "") + json_of(*matches[i]);
      page.last = matches[i]->task_id;
    }
    page.tasks += "]";
    if (taken < query.limit)
      page.last.clear();  // not a full page: the last one
    if (query.count_up_to > 0)
      page.count =
          std::min<std::int64_t>(static_cast<std::int64_t>(matches.size()), query.count_up_to);
    co_return page;
  }

  Awaitable<std::vector<ports::BatchHeader>> find_batches(const std::string& name,
                                                          const std::string& user_id,
                                                          int limit) override {
    if (auto refused = fail())
      co_return *refused;
    std::vector<ports::BatchHeader> found;
    for (const auto& b : batches) {
      if (b.batch_id == name && (user_id.empty() || b.user_id == user_id) &&
          static_cast<int>(found.size()) < limit)
        found.push_back(b);
    }
    co_return found;
  }

  Awaitable<std::vector<std::string>> batch_failed_tasks(const ports::BatchHeader& batch,
                                                         const std::string& after,
                                                         int limit) override {
    if (auto refused = fail())
      co_return *refused;
    std::vector<std::string> failed;
    for (const auto& [id, t] : tasks) {  // in id order
      const bool failed_one = t.status == TaskStatus::kFailed ||
                              t.status == TaskStatus::kTimedOut ||
                              (t.status == TaskStatus::kSucceeded && t.result_type == "error");
      if (t.batch_key == batch.batch_id && t.user_id == batch.user_id && failed_one && id > after &&
          static_cast<int>(failed.size()) < limit)
        failed.push_back(id);
    }
    co_return failed;
  }

  // The batches of the query's users (all: none named) whose id begins with its prefix, in
  // the order they were added, each as {"batch_id", "user_id"}.
  Awaitable<std::string> list_batches(const ports::BatchListQuery& query) override {
    if (auto refused = fail())
      co_return *refused;
    batch_lists.push_back(query);
    std::string page = "[";
    for (const auto& b : batches) {
      const bool theirs = query.users.empty() || std::find(query.users.begin(), query.users.end(),
                                                           b.user_id) != query.users.end();
      if (theirs && b.batch_id.rfind(query.prefix, 0) == 0)
        page += std::string(page.size() > 1 ? "," : "") + "{\"batch_id\":\"" + b.batch_id +
                "\",\"user_id\":\"" + b.user_id + "\"}";
    }
    co_return page + "]";
  }

  Awaitable<ports::ReplicationState> check_replication() override {
    if (auto refused = fail())
      co_return *refused;
    co_return ports::ReplicationState{false, "no standby (the fake's)"};
  }

  // Not reached by the tests.
  Awaitable<std::vector<ports::TaskOwner>> tasks_in_id_range(const std::string&, const std::string&,
                                                             int) override {
    co_return not_faked("tasks_in_id_range");
  }
  Awaitable<std::optional<std::string>> task_history_json(const std::string&) override {
    co_return not_faked("task_history_json");
  }
  Awaitable<ports::QueueRoom> queue_room(const std::string&, ports::QueueLimit) override {
    co_return not_faked("queue_room");
  }
  Awaitable<std::vector<std::string>> ended_of_user(const std::string&,
                                                    std::vector<std::string>) override {
    co_return not_faked("ended_of_user");
  }
  Awaitable<ports::CancelOutcome> cancel_task(const std::string&, const std::string&) override {
    co_return not_faked("cancel_task");
  }
  Awaitable<bool> record_replay(const ports::ReplayRecord&) override {
    co_return not_faked("record_replay");
  }
  Awaitable<std::map<ports::LetterAt, ports::LetterReplays>> letter_replays(
      const std::string&, std::vector<ports::LetterAt>) override {
    co_return not_faked("letter_replays");
  }
  Awaitable<std::string> usage_json(const ports::UsageQuery&) override {
    co_return not_faked("usage_json");
  }
  Awaitable<std::optional<ports::UserOverrides>> get_user_overrides(const std::string&) override {
    co_return not_faked("get_user_overrides");
  }
  Awaitable<bool> put_user_overrides(const ports::UserOverrides&) override {
    co_return not_faked("put_user_overrides");
  }
  Awaitable<std::optional<std::string>> batch_json(const std::string&) override {
    co_return not_faked("batch_json");
  }
  Awaitable<ports::ResultsPage> batch_results_page(const ports::BatchHeader&,
                                                   const ports::ResultsCursor&, int) override {
    co_return not_faked("batch_results_page");
  }
  Awaitable<ports::CancelSlice> cancel_batch_slice(const ports::BatchHeader&, const std::string&,
                                                   int, const std::string&) override {
    co_return not_faked("cancel_batch_slice");
  }
  Awaitable<std::int64_t> insert_tool_audit(const ports::ToolAuditEntry&) override {
    co_return not_faked("insert_tool_audit");
  }
  Awaitable<bool> finish_tool_audit(std::int64_t, const std::string&, int, int,
                                    const std::string&) override {
    co_return not_faked("finish_tool_audit");
  }
  Awaitable<std::string> stats_json(const ports::StatsQuery&) override {
    co_return not_faked("stats_json");
  }
  Awaitable<std::string> fleet_json() override { co_return not_faked("fleet_json"); }
  Awaitable<ports::FleetCounts> fleet_counts() override { co_return not_faked("fleet_counts"); }

  // The task as the API shows it, as far as the handlers read it.
  static std::string json_of(const Task& t) {
    return "{\"task_id\":\"" + t.task_id + "\",\"user_id\":\"" + t.user_id + "\",\"status\":\"" +
           std::string(to_string(t.status)) + "\",\"retry_of\":" +
           (t.retry_of.empty() ? std::string("null") : "\"" + t.retry_of + "\"") + "}";
  }

 private:
  std::optional<Error> fail() {
    ++calls;
    return failure;
  }
  static Error not_faked(const char* what) {
    return Error{ErrorKind::kFatal, std::string("FakeApiStore: ") + what + " is not faked"};
  }
  static bool matches_search(const Task& t, const ports::TaskListQuery& q) {
    if (!q.user_id.empty() ? t.user_id != q.user_id
                           : !q.users.empty() && std::find(q.users.begin(), q.users.end(),
                                                           t.user_id) == q.users.end())
      return false;
    if (!q.status.empty() && to_string(t.status) != q.status)
      return false;
    if (!q.batch_key.empty() && t.batch_key != q.batch_key)
      return false;
    return q.text.empty() || t.text.find(q.text) != std::string::npos;
  }

  std::int64_t created_ = 0;
};

}  // namespace agentfleet::testing
