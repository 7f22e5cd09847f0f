#pragma once
// The worker's RunStore on Postgres: every claim, checkpoint, end and hand-back goes through
// the WriteBatcher, so the writes of many runs share one transaction and one commit, and
// the writes of one kind in a batch (claims, model checkpoints, tool checkpoints, plan tool
// steps, ends) are one statement (core/adapters/pg/sql/run.sql); the rows of result
// announcements the run published itself are removed together in the background, those
// published within a second by one statement (settling() until they are gone).
//
// Lifecycle: lives as long as the worker's io_context and the WriteBatcher it writes
// through. Thread-safety: called on the io thread (the executor given); writes run on the
// DbPool's threads.

#include <boost/asio/any_io_executor.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/adapters/pg/write_batcher.hpp"
#include "core/ports/run_store.hpp"

namespace agentfleet::pg {

struct ClaimRequest {
  std::string task_id;
  std::string worker_id;
  std::int64_t incarnation = 0;
  int max_attempts = 5;
  // How the claim records the task's first model call (ports::FirstCallEstimate); null: it
  // records none. A batch of claims uses the last request's (they are the same worker's,
  // made within a commit's time of each other).
  std::shared_ptr<const ports::FirstCallEstimates> first_calls;
};
// Claims the requested tasks in one statement (claim_tasks in sql/run.sql): one answer per
// request, in order. A task asked for twice is claimed once; the other request finds it
// busy. Exposed for the Postgres tests.
std::vector<ports::Claim> claim_tasks(pqxx::transaction_base& tx,
                                      const std::vector<ClaimRequest>& requests);

// Hands a running task back (a draining worker): status queued again, lease and worker
// cleared, `releases` + 1 so the hand-back does not count as a lost attempt. Fenced by
// the attempt; kLeaseLost when the task is no longer ours.
Status release_task(pqxx::work& tx, const std::string& task_id, int attempt,
                    std::int64_t incarnation);

// A follow-up's parent as the worker rebuilds its conversation: only a task of `user_id`.
std::optional<ports::ParentTask> load_parent(pqxx::work& tx, const std::string& parent_id,
                                             const std::string& user_id);

struct FinishItem;

struct RunStoreOptions {
  std::string worker_id;
  int lease_s = 30;
  int max_attempts = 5;
  std::string results_topic;
  int relay_delay_s = 10;  // the relay publishes an announcement the run has not by then
};

class RunStore final : public ports::RunStore {
 public:
  RunStore(boost::asio::any_io_executor executor, WriteBatcher& writes, RunStoreOptions options);
  ~RunStore() override;

  boost::asio::awaitable<Result<ports::Claim>> claim(
      std::string task_id, std::shared_ptr<const ports::FirstCallEstimates> first_calls) override;
  boost::asio::awaitable<Result<Status>> save_model_step(ports::ModelStep step) override;
  boost::asio::awaitable<Result<Status>> save_tool_results(ports::ToolResults results) override;
  boost::asio::awaitable<Result<Status>> save_tool_step(ports::ToolStep step) override;
  boost::asio::awaitable<Result<Status>> record_charges(ports::Charges charges) override;
  boost::asio::awaitable<Result<Status>> record_call(ports::CallSent call) override;
  boost::asio::awaitable<Result<Result<std::int64_t>>> finish(ports::TaskEnd end) override;
  boost::asio::awaitable<Result<Status>> release(std::string task_id, int attempt,
                                                 std::int64_t incarnation) override;
  boost::asio::awaitable<Result<std::optional<ports::ParentTask>>> load_parent(
      std::string parent_id, std::string user_id) override;
  boost::asio::awaitable<Result<billing::SpendByCurrency>> month_spend(
      std::string user_id, std::string time_zone) override;
  void announced(std::int64_t id) override;
  bool settling() const override { return removing_; }

  // The worker's incarnation (its lease keeper's); claims are made under it. 0 (before the
  // first registration, and while fenced): claims are refused without asking Postgres.
  void set_incarnation(std::int64_t incarnation) { incarnation_ = incarnation; }

 private:
  boost::asio::any_io_executor executor_;
  WriteBatcher& writes_;
  RunStoreOptions options_;
  std::vector<std::int64_t> announced_;  // outbox rows to remove
  bool removing_ = false;
  std::int64_t incarnation_ = 0;
  struct Kinds;  // the write kinds, one statement each per batch
  std::unique_ptr<Kinds> kinds_;
};

}  // namespace agentfleet::pg
