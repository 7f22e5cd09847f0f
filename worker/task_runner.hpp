#pragma once
// Runs one dispatched task to its end: claim (lease, attempt fence), replay checkpoints,
// then the ReAct loop — model call, checkpoint with its ledger row, tool calls with
// idempotency keys, checkpoint of their results — until finish, failure, max_steps or the
// deadline; then the task row, totals and result announcement in one transaction, then
// the result event. The last backstop: nothing thrown inside escapes as a crash.
//
// Its parts, a file each: the attempt and its claim (run_claim.cpp), the run's start
// (run_start.cpp), a model step (model_step.cpp), a tool round (tool_round.cpp), the end
// (run_end.cpp); the loop that drives them and the run's controls (task_runner.cpp); the
// state they share (run_state.hpp).
//
// A run can be stopped from outside: `cancel` (the API asked) and `fence` (the worker's
// liveness lapsed: it can no longer prove it owns its tasks) interrupt it at once, even while
// it waits on the model or a tool; `drain` (SIGTERM) lets each run reach its next checkpoint
// and hand the task back (status queued again) so another worker resumes it from there.
//
// Thread-safety: everything runs on the worker's single io thread (task coroutines, the
// lease keeper and drain calls); only the model/tool clients' own state and the store's
// threads are elsewhere. held() and running() may also be read from another thread
// (guarded).

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/adapters/metrics/worker_metrics.hpp"
#include "core/billing/price_table.hpp"
#include "core/billing/spend_limits.hpp"
#include "core/codec/json_schema.hpp"
#include "core/config/config.hpp"
#include "core/limits/clock.hpp"
#include "core/ports/model_client.hpp"
#include "core/ports/publisher.hpp"
#include "core/ports/run_store.hpp"
#include "core/ports/tool_client.hpp"
#include "core/react/plan_execute.hpp"
#include "core/react/react_loop.hpp"
#include "core/react/strategy.hpp"
#include "worker/runs.hpp"

namespace agentfleet::worker {

// What outside events ask of one run (task_runner.cpp).
struct RunControl;

class TaskRunner final : public Runs {
 public:
  // Time (deadlines, timestamps, prices in force) comes from `clock`.
  TaskRunner(const config::Config& config, std::string worker_id, ports::ModelClient& model,
             ports::ToolClient& tools, ports::RunStore& store, ports::Publisher& publisher,
             metrics::WorkerMetrics& metrics,
             const limits::Clock& clock = limits::SteadyClock::instance());

  boost::asio::awaitable<ClaimResult> claim(std::string task_id, std::string user_id,
                                            std::string traceparent) override;
  boost::asio::awaitable<RunOutcome> execute(std::shared_ptr<ClaimedRun> run) override;
  // claim() and, when claimed, execute().
  boost::asio::awaitable<RunOutcome> run(std::string task_id, std::string user_id,
                                         std::string traceparent);

  std::vector<ports::HeldTask> held() const override;
  std::size_t running() const override;
  void cancel(const std::string& task_id) override;
  void fence() override;
  void unfence() override;
  void drain() override;

  // Told of each task a run stopped holding without ending it or handing it back (a store
  // error left it running under this worker): (task_id, attempt), the attempt -1 when the
  // claim itself was in doubt. The lease keeper hands those back.
  void set_abandoned_handler(std::function<void(ports::HeldTask)> handler) {
    abandoned_ = std::move(handler);
  }
  // Told of each task a run ended, once its end is stored: (task_id, traceparent). The trace
  // exporter queues it; must not block.
  void set_ended_handler(std::function<void(const std::string&, const std::string&)> handler) {
    ended_ = std::move(handler);
  }
  // True while the store is still forgetting result events the runs published (a shutdown
  // waits for it, or the relay would publish them again).
  bool removing_outbox_rows() const { return store_.settling(); }
  const std::string& worker_id() const { return worker_id_; }

 private:
  struct Run;   // the state of one run: a ClaimedRun
  struct Loop;  // where the run's strategy is between its steps
  // The run from its claim to its end: the start, then model steps and tool rounds as the
  // strategy asks for them, until it concludes (or the run is stopped).
  boost::asio::awaitable<RunOutcome> run_strategy(Run& run);
  // The checks before the first call (a cancel or expiry while queued, the model, the
  // tier), the month's spend when a budget holds, the tools the task offers (run_start.cpp).
  // These and the steps below: how the run ends now, or nullopt to go on.
  boost::asio::awaitable<std::optional<RunOutcome>> check_start(Run& run);
  // The strategy the run follows (with a follow-up's history), with the checkpoints of
  // earlier attempts replayed into it.
  boost::asio::awaitable<std::optional<RunOutcome>> start_strategy(Run& run, Loop& loop);
  boost::asio::awaitable<std::optional<RunOutcome>> replay_checkpoints(Run& run, Loop& loop);
  // The end the strategy reached (a Finish or a Fail).
  boost::asio::awaitable<RunOutcome> conclude(Run& run, const react::Step& next);
  // One model step (model_step.cpp): the spend check, the call, its checkpoint and bill.
  boost::asio::awaitable<std::optional<RunOutcome>> model_step(Run& run, Loop& loop);
  struct CallInput;  // what a model call sends
  static CallInput call_input(Run& run, const Loop& loop, const react::NextCall& request);
  // The next call the strategy asks for, with what it sends and the spend check's answer.
  struct PreparedCall;
  PreparedCall prepare_call(Run& run, const Loop& loop) const;
  // The record of a model call's try (ports::CallSent): `input_tokens` priced now.
  ports::CallSent call_record(const ports::Charges& of_step, std::int64_t input_tokens,
                              std::int64_t incarnation) const;
  // Settles the record a tool round wrote for a call the run then did not send (it stopped
  // first, Run::unsent_call_step): the record goes, nothing is billed.
  boost::asio::awaitable<void> settle_unsent_call(Run& run);
  // The end of a run whose call gave no reply (interrupted, or past its backstop) or failed.
  boost::asio::awaitable<RunOutcome> call_unanswered(Run& run, const config::ModelConfig& model,
                                                     limits::Clock::time_point call_deadline);
  boost::asio::awaitable<RunOutcome> call_failed(Run& run, const Error& error,
                                                 limits::Clock::time_point call_deadline);
  // An answer's checkpoint (its ledger row with it), or, when it ends the task, kept for the
  // end's write; then the run's totals and spend.
  boost::asio::awaitable<std::optional<RunOutcome>> checkpoint_answer(Run& run, Loop& loop,
                                                                      const ModelReply& answer,
                                                                      const std::string& role,
                                                                      int latency_ms);
  // One tool round (tool_round.cpp): a plan tool step's row, the calls, their results saved.
  boost::asio::awaitable<std::optional<RunOutcome>> tool_round(Run& run, Loop& loop);
  // From here on the run only writes its end (or hands the task back).
  void mark_ending(Run& run);
  // Calls the model; nullopt when the run was interrupted before the reply arrived.
  // `tools`: what the call offers (the task's tools, only finish, one tool, or none).
  // `messages`: what the call sends, held unchanged until the call ends; `messages_json`
  // their encoding when the run keeps it (else empty). `prerecorded`: the first try's record
  // was written already (with the tool results before the call).
  struct ToolSet;
  // What a call offers: the task's tools (ReAct), only finish (the synthesizer), the plan
  // step's tool (an executor filling it in), or nothing.
  std::shared_ptr<const ToolSet> offered_tools(const Run& run, const react::NextCall& call) const;
  boost::asio::awaitable<std::optional<Result<ModelReply>>> call_model(
      Run& run, std::shared_ptr<const std::vector<Message>> messages, std::string messages_json,
      std::shared_ptr<const ToolSet> tools, limits::Clock::time_point deadline,
      std::int64_t max_output_tokens, bool prerecorded);
  struct ModelCall;  // a model call under way
  // ModelRequest::before_send of a call: bills the tries lost before it, then records the try
  // (ports::CallSent) before it is sent; an error when it could not be recorded.
  std::function<boost::asio::awaitable<Status>(std::int64_t input_tokens)> record_before_send(
      std::shared_ptr<ModelCall> call, std::int64_t incarnation);
  // Bills model calls no checkpoint bills (`lost`, of the step `charges` names): their
  // usage_unreconciled rows and the metrics; a failure to write them is logged with what
  // was lost. With `charges.settles_call` the call's in-flight record is settled too (even
  // with nothing to bill), and nothing is billed or counted when the scheduler billed the
  // call first. Safe after the run ended (an abandoned call finishing late).
  boost::asio::awaitable<void> bill_unreconciled(ports::Charges charges,
                                                 std::vector<LostCharge> lost);
  // Bills the answer of model step `step` whose checkpoint was fenced (another attempt owns
  // the task) as an unreconciled charge, settling the call's record.
  boost::asio::awaitable<void> bill_fenced_answer(Run& run, int step, TokenUsage usage,
                                                  bool estimated);
  // What bill_unreconciled needs to know of the run's step `step`.
  static ports::Charges charges_of(const Run& run, int step);
  // The tool set of these schemas, encoded.
  static std::shared_ptr<const ToolSet> make_tool_set(std::vector<ports::ToolSchema> schemas);
  // The task's tools as a set shared with the runs that offer the same tools.
  std::shared_ptr<const ToolSet> task_tool_set(std::vector<ports::ToolSchema> schemas);
  // The strategy a claimed task runs (its own, its user's tier's, or the default), set up
  // with the run's tools and prompt; an error when it cannot run with the task's model.
  // `history`: a follow-up's earlier conversation.
  Result<std::unique_ptr<react::Strategy>> make_strategy(const Run& run,
                                                         const react::PromptValues& values,
                                                         std::vector<Message> history) const;
  // A follow-up's parent conversation (parent_conversation), read from the store.
  boost::asio::awaitable<Result<std::vector<Message>>> load_history(Run& run);
  // Waits (bounded) until the worker may claim: not fenced, and, when `lifted_after` is
  // set, holding an incarnation newer than the one of that count of lifted fences. False
  // when that did not come.
  boost::asio::awaitable<bool> claimable(std::optional<std::uint64_t> lifted_after);
  // The store's answer to a claim (run_claim.cpp): tried once more under a new incarnation
  // when it came too late for the last one (nullopt when none came), and again through a
  // store outage (`in_doubt` then: its commit may have happened). `fences_before`: the
  // fences raised before the last try was sent.
  boost::asio::awaitable<std::optional<Result<ports::Claim>>> claim_in_store(
      Run& run, std::uint64_t lifted, std::uint64_t& fences_before, bool& in_doubt);
  // What a claim needs to record a task's first model call with itself: the prompt tokens
  // learned per model and strategy (learn_first_call), each priced now; null before the
  // first was learned.
  std::shared_ptr<const ports::FirstCallEstimates> first_call_estimates() const;
  // Learns from the first call of attempt 1 of a task with no parent, as prepared, what its
  // request adds to the task's text (ports::FirstCallEstimate::prompt_tokens).
  void learn_first_call(const Run& run, std::int64_t input_tokens);
  // Tells the lease keeper of a task a claim in doubt may have made this worker's; the
  // attempt it is handed back at, 0 when unknown or not handed back.
  int report_claim_in_doubt(const Run& run, const Result<ports::Claim>& claim);
  // The run of a claimed task, held by this worker (or handed back at once, when a fence
  // went up while the claim was under way).
  ClaimResult take_claim(std::shared_ptr<Run> run, ports::Claim claim, std::uint64_t fences_before);
  std::uint64_t fence_count() const;
  // How the run stops now (interrupted, drained at a checkpoint), or nullopt to go on.
  boost::asio::awaitable<std::optional<RunOutcome>> stop_requested(Run& run, bool at_checkpoint);
  // A step's calls as they ended: complete, with every call's observation; or cut short (the
  // run was interrupted or reached its deadline) with the count of calls that answered by
  // then. The trace shows every call either way (a call sent and not answered as such).
  struct ToolsRun {
    bool complete = false;
    std::vector<ToolObservation> observations;  // complete: one per call
    int answered = 0;                           // calls sent that answered
  };
  // Whether the next model call may be made, and with what output allowance: the task's
  // max_tokens and max_cost, then the user's monthly budget (billing::check_spend).
  // `input_tokens`: as estimated.
  billing::SpendDecision spend_check(const Run& run, const config::ModelConfig& model,
                                     std::int64_t input_tokens) const;
  // `resumed`: the calls are an earlier attempt's (its checkpointed step has no saved
  // answers), which may have sent them: a call of a tool that is not idempotent is not sent
  // again; the model reads that its outcome is unknown (error code outcome_unknown).
  boost::asio::awaitable<ToolsRun> run_tools(Run& run, int step, const react::CallTools& calls,
                                             bool resumed, std::string* trace_json);
  struct ToolBatch;  // a step's calls as they go
  // The calls to send: those not refused (permission, arguments) nor of unknown outcome.
  std::vector<std::size_t> check_tool_calls(const Run& run, int step, bool resumed,
                                            ToolBatch& batch);
  // Sends them, a window at a time; false when cut short (interrupted, or the deadline).
  boost::asio::awaitable<bool> send_tool_calls(Run& run, int step, std::shared_ptr<ToolBatch> batch,
                                               const std::vector<std::size_t>& to_call);
  // The step's trace: every call as it ended; fills `ran`'s observations and answered.
  std::string tool_trace(Run& run, int step, ToolBatch& batch, const react::CallTools& calls,
                         ToolsRun& ran);
  // nullopt when `saved` succeeded; else how the run ends (lease lost, left to recovery,
  // or failed for good).
  boost::asio::awaitable<std::optional<RunOutcome>> on_store_failure(Run& run,
                                                                     const Result<Status>& saved,
                                                                     const char* what);
  // Ends the task: `code` is set for every status but succeeded (kInternal if missing).
  boost::asio::awaitable<RunOutcome> finish(Run& run, TaskStatus status,
                                            std::optional<TaskResult> result, std::string error,
                                            std::optional<ErrorCode> code);
  void emit_progress(Run& run, std::string event, int step, std::string tool,
                     std::string data_json);

  const config::Config& config_;
  std::string worker_id_;
  ports::ModelClient& model_;
  ports::ToolClient& tools_;
  ports::RunStore& store_;  // claims, checkpoints, ends, hand-backs
  ports::Publisher& publisher_;
  metrics::WorkerMetrics& metrics_;
  const limits::Clock& clock_;
  billing::PriceTable prices_;
  billing::Exchange exchange_;  // spend in the budget currency
  react::ResultMarkers markers_;
  react::PlanPolicy plan_policy_;
  std::map<std::string, std::shared_ptr<codec::CompiledSchema>> argument_schemas_;
  std::set<std::string> not_idempotent_;  // tools marked idempotent: false
  // What a plan_execute call offers when it is not the task's tools.
  std::shared_ptr<const ToolSet> no_tools_;
  std::shared_ptr<const ToolSet> finish_only_;
  // The task tool sets in use, by the names they hold; at most kToolSetCacheSize (a full
  // cache starts over; runs keep the sets they hold).
  static constexpr std::size_t kToolSetCacheSize = 64;
  std::mutex tool_sets_mutex_;
  std::map<std::string, std::shared_ptr<const ToolSet>> tool_sets_;
  bool draining_ = false;
  bool fenced_ = false;
  std::uint64_t unfenced_ = 0;  // how many times a fence was lifted (a new incarnation)
  std::uint64_t fences_ = 0;    // how many times a fence went up
  std::set<boost::asio::steady_timer*> fence_waiters_;  // claims waiting for unfence()
  std::function<void(ports::HeldTask)> abandoned_;
  std::function<void(const std::string&, const std::string&)> ended_;

  mutable std::mutex leases_mutex_;
  struct Held {
    int attempt = 0;
    std::shared_ptr<RunControl> control;
  };
  std::map<std::string, Held> leases_;
  // Claims under way, by task (two dispatch messages of one task may be claimed at once).
  // Shared with each claim's guard: a claim's frame may be destroyed after the runner (one
  // still suspended when the worker stops is destroyed with the io_context).
  struct Claiming {
    std::mutex mutex;
    std::map<std::string, int> tasks;
  };
  std::shared_ptr<Claiming> claiming_ = std::make_shared<Claiming>();
  // The prompt tokens of a first call, by (model, strategy as the task row names it): only
  // configured models and the strategies there are, so bounded by the configuration.
  mutable std::mutex first_calls_mutex_;
  std::map<std::pair<std::string, std::string>, std::int64_t> first_call_prompts_;
};

}  // namespace agentfleet::worker
