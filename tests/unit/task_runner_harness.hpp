#pragma once
// The task runner (worker/task_runner) driven through its ports with fakes: a scripted
// model, a recording tool service, an in-memory run store and publisher, and a manual
// clock. No sockets, no Postgres, no wall clock: each test runs in milliseconds. Shared by
// the runner's unit tests, a file per part of the runner (task_runner_test.cpp,
// run_claim_test.cpp, model_step_test.cpp, model_bill_test.cpp, tool_round_test.cpp).
#include "worker/task_runner.hpp"

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/adapters/metrics/metrics_registry.hpp"
#include "core/billing/spend_limits.hpp"
#include "core/codec/checkpoint_codec.hpp"
#include "core/codec/openai_codec.hpp"
#include "core/config/config.hpp"
#include "core/react/context_budget.hpp"

namespace agentfleet::worker::runner_test {

namespace asio = boost::asio;
using namespace std::chrono_literals;

constexpr const char* kTaskId = "00000000-0000-4000-8000-000000000001";
constexpr const char* kUser = "alice";

inline config::Config test_config() {
  return config::load_config_text(R"(
postgres: {url: x}
kafka: {bootstrap_servers: b}
models:
  - {name: m1, call_timeout_s: 60, endpoints: [{url: "http://h/x"}]}
  - {name: m2, call_timeout_s: 60, endpoints: [{url: "http://h/y"}]}
billing:
  time_zone: UTC
  prices:
    - {model: m1, currency: CNY, effective_from: "2026-01-01", input_per_million: "2",
       cached_input_per_million: "0.5", output_per_million: "8"}
    - {model: m2, currency: CNY, effective_from: "2026-01-01", input_per_million: "1"}
task_defaults: {model: m1, tier: standard, time_zone: UTC}
tiers:
  - {tier: standard, max_concurrency: 5, tool_permission: write}
  - {tier: m2-only, max_concurrency: 5, allowed_models: [m2]}
tools:
  - name: search_items
    description: Search the calendar.
    url: http://t/search_items
    idempotent: true
    permission: read
    parameters: {type: object, properties: {keyword: {type: string}}}
  - name: create_item
    description: Create an item.
    url: http://t/create_item
    idempotent: false
    permission: write
    parameters: {type: object, required: [title], properties: {title: {type: string}}}
)",
                                  "test.yaml");
}

inline ToolCall call(std::string id, std::string name, std::string arguments) {
  return ToolCall{std::move(id), std::move(name), std::move(arguments)};
}

// A reply that calls tools, with its usage.
inline ModelReply calls_reply(std::vector<ToolCall> calls, std::int64_t input = 100,
                              std::int64_t output = 10) {
  ModelReply reply;
  reply.tool_calls = std::move(calls);
  reply.finish_reason = "tool_calls";
  reply.usage.input = input;
  reply.usage.output = output;
  return reply;
}

// A reply that finishes the task through `finish`.
inline ModelReply finish_reply(const std::string& message, std::int64_t input = 100,
                               std::int64_t output = 10) {
  ModelReply reply;
  reply.tool_calls = {call("call_finish", "finish",
                           R"({"type":"action_completed","message":")" + message + R"("})")};
  FinishCall finish;
  finish.result.type = ResultType::kActionCompleted;
  finish.result.message = message;
  reply.finish = finish;
  reply.finish_reason = "tool_calls";
  reply.usage.input = input;
  reply.usage.output = output;
  return reply;
}

// The model: answers from a script, one entry per call. An entry may move the clock (the
// call took that long) or hang until the test's io_context stops.
class ScriptedModel final : public ports::ModelClient {
 public:
  struct Answer {
    Result<ModelReply> reply;
    std::chrono::milliseconds takes{0};
    bool hangs = false;
    bool held = false;                  // answers once release() is called
    std::vector<LostCharge> lost;       // attempts the client reports as lost before answering
    std::vector<std::string> streamed;  // text handed to on_text before answering
  };
  explicit ScriptedModel(limits::ManualClock& clock) : clock_(clock) {}

  void then(Result<ModelReply> reply, std::chrono::milliseconds takes = 0ms,
            std::vector<LostCharge> lost = {}) {
    script_.push_back(Answer{std::move(reply), takes, false, false, std::move(lost)});
  }
  // An answer whose text arrives as `pieces` (a model that streams) before it returns.
  void then_streamed(ModelReply reply, std::vector<std::string> pieces) {
    Answer answer{std::move(reply), 0ms, false, false, {}};
    answer.streamed = std::move(pieces);
    script_.push_back(std::move(answer));
  }
  void then_hang() { script_.push_back(Answer{Error{ErrorKind::kFatal, "unused"}, 0ms, true}); }
  // A call that answers `reply` only when the test releases it (after the run stopped
  // waiting, say).
  void then_held(Result<ModelReply> reply) {
    script_.push_back(Answer{std::move(reply), 0ms, false, true, {}});
  }
  void release() {
    if (held_ != nullptr)
      held_->cancel();
  }
  // Runs when a call arrives (before it answers): lets a test act in the middle of a call.
  std::function<void()> on_call;

  asio::awaitable<Result<ModelReply>> complete(ports::ModelRequest request) override {
    ++calls;
    deadlines.push_back(request.deadline);
    output_allowances.push_back(request.max_output_tokens);
    sent_messages.push_back(request.messages ? request.messages->size() : 0);
    if (request.messages != nullptr && request.tools != nullptr) {
      // The body the model client would send: spliced from the run's encoding when it
      // gave one, else built from the messages.
      const codec::ChatRequestOptions options{"m1"};
      sent_encoded.push_back(!request.messages_json.empty());
      sent_bodies.push_back(
          request.messages_json.empty()
              ? codec::build_chat_request(options, *request.messages, *request.tools)
              : codec::assemble_chat_request(options, request.messages_json, request.tools_json));
      built_bodies.push_back(codec::build_chat_request(options, *request.messages, *request.tools));
      sent.push_back(*request.messages);
      sent_tool_tokens.push_back(
          codec::estimate_tool_tokens(*request.tools, codec::ChatProtocol::kFunctionCalling));
    }
    std::optional<Answer> next;
    if (!script_.empty()) {
      next = std::move(script_.front());
      script_.pop_front();
    }
    // As the model client does: each try is recorded (before_send) before it is sent; the
    // tries the answer lists as lost come first, each reported once it is lost.
    const std::size_t lost_tries = next ? next->lost.size() : 0;
    for (std::size_t i = 0; i <= lost_tries; ++i) {
      if (request.before_send) {
        Status recorded = co_await request.before_send(kEstimatedInput);
        if (!recorded.ok())
          co_return recorded.error();
      }
      ++tries_sent;
      call_ids.push_back(request.call_id);
      if (i < lost_tries && request.lost != nullptr)
        request.lost->push_back(next->lost[i]);
    }
    if (on_call)
      on_call();
    if (!next)
      co_return Error{ErrorKind::kFatal,
                      "the script has no answer for call " + std::to_string(calls)};
    Answer answer = std::move(*next);
    if (answer.hangs || answer.held) {
      asio::steady_timer forever(co_await asio::this_coro::executor, std::chrono::hours(24));
      if (answer.held)
        held_ = &forever;
      boost::system::error_code ec;
      co_await forever.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      held_ = nullptr;
    }
    for (const auto& piece : answer.streamed) {
      if (request.on_text)
        request.on_text(piece);
    }
    clock_.advance(answer.takes);
    co_return std::move(answer.reply);
  }

  // What the client estimates every request's input at (what before_send is told).
  static constexpr std::int64_t kEstimatedInput = 250;
  int calls = 0;
  int tries_sent = 0;                 // tries that went out (recorded first)
  std::vector<std::string> call_ids;  // each try's call id
  std::vector<limits::Clock::time_point> deadlines;
  std::vector<std::size_t> sent_messages;
  std::vector<bool> sent_encoded;         // the call carried the run's encoding
  std::vector<std::string> sent_bodies;   // as the client would send them
  std::vector<std::string> built_bodies;  // the messages and tools built whole
  std::vector<std::vector<Message>> sent;
  std::vector<std::int64_t> sent_tool_tokens;
  std::vector<std::int64_t> output_allowances;  // each call's cap (0: the model's own)

 private:
  limits::ManualClock& clock_;
  std::deque<Answer> script_;
  asio::steady_timer* held_ = nullptr;
};

// The tool service: records every invocation and answers ok (optionally taking time).
class RecordingTools final : public ports::ToolClient {
 public:
  explicit RecordingTools(limits::ManualClock& clock) : clock_(clock) {}
  asio::awaitable<ports::ToolOutcome> call(ports::ToolInvocation invocation) override {
    invocations.push_back(invocation);
    if (on_call)
      on_call();
    if (hangs.count(invocation.tool)) {
      if (on_hang)
        on_hang();
      asio::steady_timer forever(co_await asio::this_coro::executor, std::chrono::hours(24));
      boost::system::error_code ec;
      co_await forever.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    clock_.advance(takes);
    ports::ToolOutcome outcome;
    outcome.observation.ok = true;
    outcome.observation.content = content;
    outcome.http_status = 200;
    co_return outcome;
  }
  std::vector<ports::ToolInvocation> invocations;
  std::chrono::milliseconds takes{0};
  std::string content = R"({"items":[{"id":"evt_1"}]})";  // what every call answers
  std::set<std::string> hangs;                            // tools whose calls never answer
  std::function<void()> on_hang;                          // runs when such a call arrives
  std::function<void()> on_call;                          // runs when any call arrives

 private:
  limits::ManualClock& clock_;
};

// The store: one task, its checkpoints, its ledger and its end, in memory. Fences like the
// real one: a write of an attempt that no longer owns the task is refused with kLeaseLost.
class MemoryRunStore final : public ports::RunStore {
 public:
  struct Row {
    ports::StepRecord record;
    std::string trace;
  };
  MemoryRunStore() {
    spec.task_id = kTaskId;
    spec.user_id = kUser;
    spec.text = "把周会改到晚上8点";
    spec.model = "m1";
    spec.timeout_s = 30;
  }

  asio::awaitable<Result<ports::Claim>> claim(
      std::string task_id, std::shared_ptr<const ports::FirstCallEstimates> first_calls) override {
    ++claims;
    if (not_live_claims > 0) {
      --not_live_claims;
      co_return ports::Claim{ports::ClaimOutcome::kNotLive, {}};
    }
    if (claim_error)
      co_return *claim_error;
    if (task_id != kTaskId)
      co_return ports::Claim{ports::ClaimOutcome::kUnknown, {}};
    if (status != "dispatched") {
      ports::Claim busy{ports::ClaimOutcome::kBusyOrDone, {}, incarnation};
      if (status == "running" && owner == incarnation)
        busy.held_attempt = attempt;
      co_return busy;
    }
    status = "running";
    owner = incarnation;
    ++attempt;
    const bool first_call_recorded = record_first_call(first_calls.get());
    if (lost_claim_answers > 0) {
      // Committed, but the answer never came (a connection lost at COMMIT).
      --lost_claim_answers;
      co_return Error{ErrorKind::kTransient, "postgres commit in doubt: connection lost"};
    }
    ports::ClaimedTask claimed;
    claimed.spec = spec;
    claimed.attempt = attempt;
    claimed.remaining_ms = remaining_ms;
    claimed.totals = billed_before;
    claimed.user_monthly_budget_micros = user_budget_micros;
    claimed.user_tier = user_tier;
    for (const auto& [step, row] : steps)
      claimed.steps.push_back(row.record);
    claimed.first_call_recorded = first_call_recorded;
    if (on_claim)
      on_claim();
    co_return ports::Claim{ports::ClaimOutcome::kClaimed, std::move(claimed), incarnation};
  }

  asio::awaitable<Result<Status>> save_model_step(ports::ModelStep step) override {
    if (auto refused = refuse(step.attempt, step.incarnation))
      co_return *refused;
    steps[step.step] = Row{ports::StepRecord{step.step, step.reply_json, {}}, {}};
    in_flight.erase({step.attempt, step.step});  // the ledger bills the call
    ledger.push_back(step);
    co_return Status(ok_status());
  }
  asio::awaitable<Result<Status>> save_tool_results(ports::ToolResults results) override {
    if (auto refused = refuse(results.attempt, results.incarnation))
      co_return *refused;
    auto& row = steps.at(results.step);
    row.record.observations = results.observations_json;
    row.trace = results.trace_json;
    tool_calls += results.executed_calls;
    if (results.next_call) {
      // The next call's record, in the same write (as save_tool_results writes it).
      calls_carried.push_back(*results.next_call);
      in_flight.emplace(std::make_pair(results.attempt, results.next_call->step),
                        *results.next_call);
    }
    if (on_tool_results)
      on_tool_results();
    co_return Status(ok_status());
  }
  asio::awaitable<Result<Status>> save_tool_step(ports::ToolStep step) override {
    if (auto refused = refuse(step.attempt, step.incarnation))
      co_return *refused;
    steps[step.step] = Row{ports::StepRecord{step.step, step.calls_json, {}}, {}};
    co_return Status(ok_status());
  }
  asio::awaitable<Result<Status>> record_charges(ports::Charges recorded) override {
    if (store_error)
      co_return *store_error;  // unfenced, but not through an outage
    if (recorded.settles_call) {
      // Whoever removes the call's record bills it: gone, the scheduler did.
      if (in_flight.erase({recorded.attempt, recorded.step}) == 0)
        co_return Status(Error{ErrorKind::kConflict, "billed by the scheduler already"});
      ++settled;
    }
    if (!recorded.charges.empty())
      charges.push_back(std::move(recorded));
    co_return Status(ok_status());
  }
  asio::awaitable<Result<Status>> record_call(ports::CallSent call) override {
    if (record_error)
      co_return *record_error;
    if (auto refused = refuse(call.attempt, call.incarnation))
      co_return *refused;
    calls_sent.push_back(call);
    in_flight.emplace(std::make_pair(call.attempt, call.step), call);  // a second try keeps it
    co_return Status(ok_status());
  }
  // What the scheduler does once the worker is gone: every record left is billed
  // (worker_lost) and removed.
  std::vector<ports::CallSent> settle_lost_calls() {
    std::vector<ports::CallSent> lost;
    for (auto& [key, call] : in_flight)
      lost.push_back(std::move(call));
    in_flight.clear();
    return lost;
  }
  asio::awaitable<Result<Result<std::int64_t>>> finish(ports::TaskEnd end) override {
    if (std::exchange(finish_throws_once, false))
      throw std::runtime_error("the end could not be encoded");
    if (store_error)
      co_return *store_error;
    if (end.attempt != attempt || end.incarnation != owner || status != "running")
      co_return Result<std::int64_t>(Error{ErrorKind::kLeaseLost, "not ours"});
    if (end.unsent_call_step && in_flight.erase({end.attempt, *end.unsent_call_step}) > 0)
      ++unsent_ended;     // the record of a call never sent goes with the end
    if (end.last_step) {  // the checkpoint of the answer that ended the task, in the end's write
      const ports::ModelStep& step = *end.last_step;
      steps[step.step] = Row{ports::StepRecord{step.step, step.reply_json, {}}, {}};
      in_flight.erase({step.attempt, step.step});
      ledger.push_back(step);
      ++steps_with_end;
    }
    status = std::string(to_string(end.status));
    event = end.result_event;
    ended = std::move(end);
    co_return Result<std::int64_t>(++announcements);
  }
  asio::awaitable<Result<Status>> release(std::string, int release_attempt,
                                          std::int64_t release_incarnation) override {
    if (auto refused = refuse(release_attempt, release_incarnation))
      co_return *refused;
    status = "queued";
    ++releases;
    co_return Status(ok_status());
  }
  asio::awaitable<Result<std::optional<ports::ParentTask>>> load_parent(std::string,
                                                                        std::string) override {
    co_return std::optional<ports::ParentTask>();
  }
  asio::awaitable<Result<billing::SpendByCurrency>> month_spend(std::string user_id,
                                                                std::string) override {
    ++spend_reads;
    EXPECT_EQ(user_id, kUser);
    co_return month_spent;
  }
  void announced(std::int64_t id) override { forgotten.push_back(id); }
  bool settling() const override { return false; }

  // A checkpoint of an earlier attempt: a model step (with its observations when given).
  void checkpoint(int step, const ModelReply& reply, std::optional<std::string> observations) {
    steps[step] = Row{
        ports::StepRecord{step, codec::model_reply_json(reply, {}), observations.value_or("")}, {}};
  }
  // Another worker's attempt takes the task over: this run's fence fails from now on.
  void take_over() { ++attempt; }
  // The store holds a new task under the same id, not claimed yet (the last one's rows gone).
  void next_task() {
    status = "dispatched";
    attempt = 0;
    owner = 0;
    steps.clear();
    ended.reset();
  }

  TaskSpec spec;
  std::string status = "dispatched";
  int attempt = 0;
  std::int64_t remaining_ms = 30000;
  ports::TaskTotals billed_before;  // what earlier attempts billed
  int claims = 0;
  int not_live_claims = 0;                // the next claims run after the claimer's liveness lapsed
  int lost_claim_answers = 0;             // the next claims commit, but answer with an error
  std::optional<Error> claim_error;       // claims fail with it, taking nothing
  std::int64_t owner = 0;                 // the incarnation that runs the task
  std::int64_t incarnation = 7;           // the worker incarnation claims are made under
  std::function<void()> on_claim;         // runs while a claim that succeeds is under way
  std::function<void()> on_tool_results;  // runs once a step's tool results are saved
  int releases = 0;
  int steps_with_end = 0;  // checkpoints written with the task's end
  int tool_calls = 0;
  std::string user_tier;                           // the user's own tier ("": the default)
  std::optional<std::int64_t> user_budget_micros;  // the user's own monthly budget
  billing::SpendByCurrency month_spent;            // this month's spend, per currency
  int spend_reads = 0;
  std::map<int, Row> steps;
  std::vector<ports::ModelStep> ledger;
  std::vector<ports::Charges> charges;  // unreconciled
  // Model calls recorded before they were sent, and the records not settled yet (by
  // attempt and step).
  std::vector<ports::CallSent> calls_sent;
  std::vector<ports::CallSent> calls_carried;  // records written with the tool results
  std::vector<ports::CallSent> calls_claimed;  // first calls recorded by their claims
  int unsent_ended = 0;                        // records of calls never sent, gone with an end
  bool finish_throws_once = false;             // the next finish() throws (a runner bug)
  std::map<std::pair<int, int>, ports::CallSent> in_flight;
  int settled = 0;                    // records removed by the calls' ends (settles_call)
  std::optional<Error> record_error;  // record_call fails with it
  std::optional<ports::TaskEnd> ended;
  std::string event;
  std::int64_t announcements = 0;
  std::vector<std::int64_t> forgotten;
  std::optional<Error> store_error;  // every write fails with it (an outage)

 private:
  // As the claim statement does (sql/run.sql claim_tasks): attempt 1 of a task with no
  // parent, of a model and strategy the estimates name, its input the prompt's tokens and
  // the text's, priced at the estimate's rate.
  bool record_first_call(const ports::FirstCallEstimates* estimates) {
    if (estimates == nullptr || attempt != 1 || !spec.parent_task_id.empty())
      return false;
    const std::string strategy = spec.strategy ? std::string(to_string(*spec.strategy)) : "";
    for (const ports::FirstCallEstimate& e : *estimates) {
      if (e.model != spec.model || e.strategy != strategy)
        continue;
      const std::int64_t input = e.prompt_tokens + react::estimate_tokens(spec.text);
      __extension__ using Wide = __int128;
      const Wide wide = static_cast<Wide>(input) * e.rate;
      const Wide micros = (wide * 2 + 1'000'000'000'000) / 2'000'000'000'000;
      ports::CallSent call{kTaskId,
                           attempt,
                           0,
                           spec.user_id,
                           spec.batch_id,
                           spec.model,
                           input,
                           billing::format_micros(static_cast<std::int64_t>(micros)),
                           e.currency,
                           incarnation};
      calls_claimed.push_back(call);
      in_flight.emplace(std::make_pair(attempt, 0), std::move(call));
      return true;
    }
    return false;
  }
  std::optional<Result<Status>> refuse(int write_attempt, std::int64_t write_incarnation) const {
    if (store_error)
      return Result<Status>(*store_error);
    if (write_attempt != attempt || write_incarnation != owner || status != "running")
      return Result<Status>(Status(Error{ErrorKind::kLeaseLost, "not ours"}));
    return std::nullopt;
  }
};

class RecordingPublisher final : public ports::Publisher {
 public:
  asio::awaitable<Status> publish(ports::OutMessage message) override {
    published.push_back(std::move(message));
    co_return ok_status();
  }
  void post(ports::OutMessage message) override { posted.push_back(std::move(message)); }
  std::vector<std::string> events(const std::string& kind) const {
    std::vector<std::string> out;
    for (const auto& m : posted) {
      if (m.value.find("\"event\":\"" + kind + "\"") != std::string::npos)
        out.push_back(m.value);
    }
    return out;
  }
  std::vector<ports::OutMessage> published, posted;
};

// One runner and its fakes; run() drives a task to its end on an io_context.
struct Harness {
  config::Config config = test_config();
  limits::ManualClock clock;
  ScriptedModel model{clock};
  RecordingTools tools{clock};
  MemoryRunStore store;
  RecordingPublisher publisher;
  metrics::MetricsRegistry registry;
  metrics::WorkerMetrics metrics{registry, config};
  TaskRunner runner{config, "worker-test", model, tools, store, publisher, metrics, clock};
  asio::io_context io;

  // Runs the task; `during` is posted once the run has started (from inside the io thread).
  RunOutcome run(std::function<void()> during = {}) {
    std::optional<RunOutcome> outcome;
    asio::co_spawn(io, runner.run(kTaskId, kUser, ""), [&](std::exception_ptr error, RunOutcome o) {
      EXPECT_FALSE(error) << "the run threw";
      outcome = o;
      io.stop();
    });
    if (during)
      asio::post(io, during);
    io.run();
    EXPECT_TRUE(outcome.has_value()) << "the run did not end";
    return outcome.value_or(RunOutcome::kStoreUnavailable);
  }
};

inline std::vector<std::string> keys_of(const std::vector<ports::ToolInvocation>& invocations) {
  std::vector<std::string> keys;
  for (const auto& i : invocations)
    keys.push_back(i.idempotency_key);
  return keys;
}

// The code a task ends with is in its end, its result event and its `error` event.
inline void expect_ended_with(const Harness& h, ErrorCode code) {
  ASSERT_TRUE(h.store.ended);
  EXPECT_EQ(h.store.ended->error_code, code) << h.store.ended->error;
  const std::string quoted = "\"error_code\":\"" + std::string(to_string(code)) + "\"";
  EXPECT_NE(h.store.ended->result_event.find(quoted), std::string::npos)
      << h.store.ended->result_event;
  const auto errors = h.publisher.events("error");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find(quoted), std::string::npos) << errors[0];
}

// Runs what is ready until `done` holds (at most 100 rounds): work the run left behind.
inline void settle(Harness& h, const std::function<bool()>& done) {
  for (int i = 0; i < 100 && !done(); ++i) {
    h.io.restart();
    h.io.poll();
  }
}

}  // namespace agentfleet::worker::runner_test
