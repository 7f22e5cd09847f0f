#pragma once
// Runs one dispatched task to its end: claim (lease, attempt fence), replay checkpoints,
// then the ReAct loop — model call, checkpoint with its ledger row, tool calls with
// idempotency keys, checkpoint of their results — until finish, failure, max_steps or the
// deadline; then the task row, totals and result announcement in one transaction, then
// the result event. The last backstop: nothing thrown inside escapes as a crash.
//
// A run can be stopped from outside: `cancel` (the API asked) and `lease_lost` (a
// heartbeat found the task taken over) interrupt it at once, even while it waits on the
// model or a tool; `drain` (SIGTERM) lets each run reach its next checkpoint and hand the
// task back (status queued again) so another worker resumes it from there.
//
// Thread-safety: everything runs on the worker's single io thread (task coroutines, the
// heartbeat and drain calls); only the model/tool clients' own state and DbPool threads
// are elsewhere. held_leases() may also be read from another thread (guarded).

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/adapters/kafka/kafka.hpp"
#include "core/adapters/metrics/worker_metrics.hpp"
#include "core/adapters/pg/db_pool.hpp"
#include "core/adapters/pg/write_batcher.hpp"
#include "core/billing/price_table.hpp"
#include "core/codec/json_schema.hpp"
#include "core/config/config.hpp"
#include "core/ports/model_client.hpp"
#include "core/ports/tool_client.hpp"
#include "core/react/plan_execute.hpp"
#include "core/react/react_loop.hpp"
#include "core/react/strategy.hpp"

namespace agentfleet::worker {

// kReleased: handed back during a drain. kUnknownTask: no such task (a dead letter).
enum class RunOutcome {
  kFinished,
  kSkipped,
  kLeaseLost,
  kStoreUnavailable,
  kReleased,
  kUnknownTask
};
std::string_view to_string(RunOutcome outcome);

class TaskRunner {
 public:
  TaskRunner(const config::Config& config, std::string worker_id, ports::ModelClient& model,
             ports::ToolClient& tools, kafka::Producer& producer, metrics::WorkerMetrics& metrics,
             pg::WriteBatcher& writes);

  // `user_id` and `traceparent` come from the dispatch message (its key and header).
  boost::asio::awaitable<RunOutcome> run(std::string task_id, std::string user_id,
                                         std::string traceparent);

  // (task_id, attempt) of every task this worker is running, for lease heartbeats.
  std::vector<std::pair<std::string, int>> held_leases() const;

  // Stops the run of `task_id` at once, ending it cancelled (or, for a lost lease, without
  // writing anything). Unknown ids are ignored.
  void cancel(const std::string& task_id);
  // A heartbeat no longer found the lease of (task_id, attempt): true when that run still
  // held it, and stops now; false when the run is gone or its end is being written (its
  // lease ended with it).
  bool lease_lost(const std::string& task_id, int attempt);
  // Every run (and every later one) stops at its next checkpoint and hands its task back.
  void drain();
  std::size_t running() const;
  // True while published result events' rows are being removed from the outbox (a
  // shutdown waits for it, or the relay would publish them again).
  bool removing_outbox_rows() const { return removing_rows_; }
  const std::string& worker_id() const { return worker_id_; }

 private:
  struct Run;
  struct Control;
  boost::asio::awaitable<RunOutcome> execute(Run& run);
  // From here on the run only writes its end (or hands the task back).
  void mark_ending(Run& run);
  // Calls the model; nullopt when the run was interrupted before the reply arrived.
  // `tools`: what the call offers (the task's tools, only finish, one tool, or none).
  boost::asio::awaitable<std::optional<Result<ModelReply>>> call_model(
      Run& run, std::vector<Message> messages,
      std::shared_ptr<const std::vector<ports::ToolSchema>> tools,
      std::chrono::steady_clock::time_point deadline);
  // The strategy a claimed task runs (its own, its user's tier's, or the default), set up
  // with the run's tools and prompt; an error when it cannot run with the task's model.
  // `history`: a follow-up's earlier conversation.
  Result<std::unique_ptr<react::Strategy>> make_strategy(const Run& run,
                                                         const react::PromptValues& values,
                                                         std::vector<Message> history) const;
  // A follow-up's parent conversation (parent_conversation), read from the store.
  boost::asio::awaitable<Result<std::vector<Message>>> load_history(Run& run);
  // How the run stops now (interrupted, drained at a checkpoint), or nullopt to go on.
  boost::asio::awaitable<std::optional<RunOutcome>> stop_requested(Run& run, bool at_checkpoint);
  // The observations of a step's calls; nullopt when interrupted or past the deadline.
  boost::asio::awaitable<std::optional<std::vector<ToolObservation>>> run_tools(
      Run& run, int step, const react::CallTools& calls, std::string* trace_json);
  // nullopt when `saved` succeeded; else how the run ends (lease lost, left to recovery,
  // or failed for good).
  boost::asio::awaitable<std::optional<RunOutcome>> on_store_failure(Run& run,
                                                                     const Result<Status>& saved,
                                                                     const char* what);
  boost::asio::awaitable<RunOutcome> finish(Run& run, TaskStatus status,
                                            std::optional<TaskResult> result, std::string error);
  void emit_progress(Run& run, std::string event, int step, std::string tool,
                     std::string data_json);
  // The outbox row of a result event the run has published goes: rows published meanwhile
  // are removed together, one statement per batch, one removal at a time.
  void remove_outbox_row(const boost::asio::any_io_executor& executor, std::int64_t id);

  const config::Config& config_;
  std::string worker_id_;
  ports::ModelClient& model_;
  ports::ToolClient& tools_;
  pg::WriteBatcher& writes_;  // claims, checkpoints and finishes: group-committed
  kafka::Producer& producer_;
  metrics::WorkerMetrics& metrics_;
  billing::PriceTable prices_;
  react::ResultMarkers markers_;
  react::PlanPolicy plan_policy_;
  std::map<std::string, std::shared_ptr<codec::CompiledSchema>> argument_schemas_;
  // What a plan_execute call offers when it is not the task's tools.
  std::shared_ptr<const std::vector<ports::ToolSchema>> no_tools_;
  std::shared_ptr<const std::vector<ports::ToolSchema>> finish_only_;
  bool draining_ = false;
  std::vector<std::int64_t> published_rows_;  // outbox rows to remove
  bool removing_rows_ = false;

  mutable std::mutex leases_mutex_;
  struct Held {
    int attempt = 0;
    std::shared_ptr<Control> control;
  };
  std::map<std::string, Held> leases_;
};

// Builds the price table from configuration (throws config::ConfigError on bad values).
billing::PriceTable make_price_table(const config::BillingConfig& billing);

}  // namespace agentfleet::worker
