// The task runner (worker/task_runner) driven through its ports with fakes: a scripted
// model, a recording tool service, an in-memory run store and publisher, and a manual
// clock. No sockets, no Postgres, no wall clock: each test runs in milliseconds.
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
#include <string>
#include <vector>

#include "core/adapters/metrics/metrics_registry.hpp"
#include "core/billing/spend_limits.hpp"
#include "core/codec/checkpoint_codec.hpp"
#include "core/codec/openai_codec.hpp"
#include "core/config/config.hpp"
#include "core/react/context_budget.hpp"

namespace agentfleet::worker {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

constexpr const char* kTaskId = "00000000-0000-4000-8000-000000000001";
constexpr const char* kUser = "alice";

config::Config test_config() {
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

ToolCall call(std::string id, std::string name, std::string arguments) {
  return ToolCall{std::move(id), std::move(name), std::move(arguments)};
}

// A reply that calls tools, with its usage.
ModelReply calls_reply(std::vector<ToolCall> calls, std::int64_t input = 100,
                       std::int64_t output = 10) {
  ModelReply reply;
  reply.tool_calls = std::move(calls);
  reply.finish_reason = "tool_calls";
  reply.usage.input = input;
  reply.usage.output = output;
  return reply;
}

// A reply that finishes the task through `finish`.
ModelReply finish_reply(const std::string& message, std::int64_t input = 100,
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

  asio::awaitable<Result<ports::Claim>> claim(std::string task_id) override {
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
    if (store_error)
      co_return *store_error;
    if (end.attempt != attempt || end.incarnation != owner || status != "running")
      co_return Result<std::int64_t>(Error{ErrorKind::kLeaseLost, "not ours"});
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
  std::map<std::pair<int, int>, ports::CallSent> in_flight;
  int settled = 0;                    // records removed by the calls' ends (settles_call)
  std::optional<Error> record_error;  // record_call fails with it
  std::optional<ports::TaskEnd> ended;
  std::string event;
  std::int64_t announcements = 0;
  std::vector<std::int64_t> forgotten;
  std::optional<Error> store_error;  // every write fails with it (an outage)

 private:
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

std::vector<std::string> keys_of(const std::vector<ports::ToolInvocation>& invocations) {
  std::vector<std::string> keys;
  for (const auto& i : invocations)
    keys.push_back(i.idempotency_key);
  return keys;
}

TEST(TaskRunner, RunsTheLoopToItsEndWithACheckpointAndALedgerRowPerModelCall) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(calls_reply({call("c2", "create_item", R"({"title":"周会"})")}));
  h.model.then(finish_reply("已改到晚上8点"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.calls, 3);
  EXPECT_EQ(h.tools.invocations.size(), 2u);
  EXPECT_EQ(h.store.status, "succeeded");
  ASSERT_TRUE(h.store.ended && h.store.ended->result);
  EXPECT_EQ(h.store.ended->result->message, "已改到晚上8点");
  EXPECT_EQ(h.store.ledger.size(), 3u) << "one ledger row per model call";
  EXPECT_EQ(h.store.tool_calls, 2);
  // Identity comes from the task, never from the model's arguments.
  for (const auto& invocation : h.tools.invocations) {
    EXPECT_EQ(invocation.user_id, kUser);
    EXPECT_EQ(invocation.task_id, kTaskId);
  }
  // The result event was published by the run, and its announcement forgotten by the store.
  ASSERT_EQ(h.publisher.published.size(), 1u);
  EXPECT_NE(h.publisher.published[0].value.find("\"status\":\"succeeded\""), std::string::npos);
  EXPECT_EQ(h.store.forgotten, std::vector<std::int64_t>{1});
  EXPECT_EQ(h.publisher.events("done").size(), 1u);
}

TEST(TaskRunner, EachCallSendsTheConversationAsBuiltWholeEncodingOnlyWhatIsNew) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(calls_reply({call("c2", "create_item", R"({"title":"周会"})")}));
  h.model.then(finish_reply("已改到晚上8点"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  ASSERT_EQ(h.model.sent_bodies.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(h.model.sent_encoded[i]) << "call " << i;
    EXPECT_EQ(h.model.sent_bodies[i], h.model.built_bodies[i]) << "call " << i;
  }
  EXPECT_EQ(h.model.sent_messages, (std::vector<std::size_t>{2, 4, 6}));
}

TEST(TaskRunner, AConversationOverTheContextBudgetIsSentTrimmedAndBuiltWhole) {
  // The first call's conversation, to size a context window it fits and the second does not.
  Harness probe;
  probe.model.then(finish_reply("done"));
  ASSERT_EQ(probe.run(), RunOutcome::kFinished);
  const std::int64_t first = react::estimate_tokens(probe.model.sent.at(0));
  const std::int64_t tools = probe.model.sent_tool_tokens.at(0);

  Harness h;
  h.config.models[0].context_window_tokens =
      static_cast<int>(h.config.models[0].max_output_tokens + tools + first + 200);
  h.tools.content = "{\"items\":\"" + std::string(4000, 'x') + "\"}";  // about 1,000 tokens
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(calls_reply({call("c2", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(finish_reply("done"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  ASSERT_EQ(h.model.sent.size(), 3u);
  EXPECT_TRUE(h.model.sent_encoded[0]);
  // Over the budget, the second call is built whole from a copy (its one tool output, the
  // latest step's, is never trimmed); the third has the older output stubbed.
  EXPECT_FALSE(h.model.sent_encoded[1]);
  EXPECT_FALSE(h.model.sent_encoded[2]);
  ASSERT_EQ(h.model.sent[2].size(), 6u);
  EXPECT_EQ(h.model.sent[2][3].role, Role::kTool);
  EXPECT_EQ(h.model.sent[2][3].content.rfind(R"({"trimmed":true,"original_chars":)", 0), 0u)
      << h.model.sent[2][3].content.substr(0, 80);
  EXPECT_EQ(h.model.sent[2][5].content, h.model.sent[1][3].content);
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(h.model.sent_bodies[i], h.model.built_bodies[i]) << "call " << i;
  EXPECT_EQ(h.model.sent_bodies[1], h.model.built_bodies[1]);
}

TEST(TaskRunner, TheResultEventReportsWhatEveryAttemptBilledAsTheLedgerSumsIt) {
  Harness h;
  // An earlier attempt billed 1,000 input tokens (cost 0.002 CNY) and saved step 0.
  h.store.attempt = 1;
  h.store.billed_before.usage.input = 1000;
  h.store.billed_before.cost_micros = 2000;
  h.store.billed_before.currency = "CNY";
  h.store.checkpoint(0, calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}),
                     R"([{"call_id":"c1","tool":"search_items","ok":true,"content":"{}"}])");
  // This attempt: 250,000 input and 10,000 output tokens at 2 and 8 CNY per million.
  h.model.then(finish_reply("done", 250000, 10000));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  ASSERT_EQ(h.store.ledger.size(), 1u);
  EXPECT_EQ(h.store.ledger[0].ledger.cost, "0.580000");
  EXPECT_NE(h.store.event.find(R"("input_tokens":251000)"), std::string::npos) << h.store.event;
  EXPECT_NE(h.store.event.find(R"("output_tokens":10000)"), std::string::npos) << h.store.event;
  EXPECT_NE(h.store.event.find(R"("cost":"0.582000")"), std::string::npos) << h.store.event;
  EXPECT_NE(h.store.event.find(R"("currency":"CNY")"), std::string::npos) << h.store.event;
  EXPECT_EQ(h.publisher.published.at(0).value, h.store.event)
      << "the event published is the one stored with the end";
}

TEST(TaskRunner, IdempotencyKeysAreTheTaskTheStepAndTheCallIndexTheSameInEveryRun) {
  auto keys = [] {
    Harness h;
    h.model.then(calls_reply({call("a", "search_items", R"({"keyword":"x"})"),
                              call("b", "search_items", R"({"keyword":"y"})")}));
    h.model.then(calls_reply({call("c", "search_items", R"({"keyword":"z"})")}));
    h.model.then(finish_reply("done"));
    EXPECT_EQ(h.run(), RunOutcome::kFinished);
    return keys_of(h.tools.invocations);
  };
  const auto first = keys();
  EXPECT_EQ(first,
            (std::vector<std::string>{std::string(kTaskId) + ":0:0", std::string(kTaskId) + ":0:1",
                                      std::string(kTaskId) + ":1:0"}));
  EXPECT_EQ(keys(), first) << "a second run of the same answers sends the same keys";
}

TEST(TaskRunner, AResumedTaskNeverCallsOrBillsASavedModelStepAgain) {
  Harness h;
  // Attempt 1 saved step 0 with its tool results and step 1 without (the worker died while
  // its tool call ran).
  h.store.attempt = 1;
  h.store.checkpoint(0, calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}),
                     R"([{"call_id":"c1","tool":"search_items","ok":true,"content":"{}"}])");
  h.store.checkpoint(1, calls_reply({call("c2", "search_items", R"({"keyword":"周会"})")}),
                     std::nullopt);
  h.model.then(finish_reply("done"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.attempt, 2);
  EXPECT_EQ(h.model.calls, 1) << "only the step after the checkpoints is asked of the model";
  ASSERT_EQ(h.store.ledger.size(), 1u) << "the saved steps are not billed again";
  EXPECT_EQ(h.store.ledger[0].step, 2);
  // Step 0's tools are not run again; step 1's run again under the key the first attempt
  // used, so a tool service that saw it answers from its record.
  EXPECT_EQ(keys_of(h.tools.invocations), std::vector<std::string>{std::string(kTaskId) + ":1:0"});
  EXPECT_EQ(h.store.status, "succeeded");
  // The model saw the whole conversation: system, user, and both replayed steps.
  ASSERT_EQ(h.model.sent_messages.size(), 1u);
  EXPECT_EQ(h.model.sent_messages[0], 6u);
}

TEST(TaskRunner, AResumedStepSendsNoCallOfAToolThatIsNotIdempotentAgain) {
  Harness h;
  // Attempt 1 saved step 0 and died while its calls ran: the search may be sent again under
  // its key; the create may have acted, and its service may keep no keys.
  h.store.attempt = 1;
  h.store.checkpoint(0,
                     calls_reply({call("c1", "search_items", R"({"keyword":"周会"})"),
                                  call("c2", "create_item", R"({"title":"周会"})")}),
                     std::nullopt);
  h.model.then(finish_reply("done"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  ASSERT_EQ(h.tools.invocations.size(), 1u);
  EXPECT_EQ(h.tools.invocations[0].tool, "search_items");
  EXPECT_EQ(h.tools.invocations[0].idempotency_key, std::string(kTaskId) + ":0:0");
  EXPECT_EQ(h.tools.invocations[0].attempt, 2) << "X-Task-Attempt: this run's attempt";
  // The model reads that the create's outcome is unknown, and the trace shows it.
  ASSERT_EQ(h.model.sent.size(), 1u);
  const Message& unknown = h.model.sent[0].back();
  EXPECT_EQ(unknown.role, Role::kTool);
  EXPECT_EQ(unknown.tool_call_id, "c2");
  EXPECT_NE(unknown.content.find(R"("code":"outcome_unknown")"), std::string::npos)
      << unknown.content;
  const std::string& trace = h.store.steps.at(0).trace;
  EXPECT_NE(trace.find(R"("status":"outcome_unknown")"), std::string::npos) << trace;
  EXPECT_NE(trace.find(R"("tool":"create_item")"), std::string::npos) << trace;
  EXPECT_EQ(h.store.status, "succeeded");

  // The same step written by this run (no earlier attempt) sends both.
  Harness fresh;
  fresh.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})"),
                                call("c2", "create_item", R"({"title":"周会"})")}));
  fresh.model.then(finish_reply("done"));
  EXPECT_EQ(fresh.run(), RunOutcome::kFinished);
  EXPECT_EQ(fresh.tools.invocations.size(), 2u);
  EXPECT_EQ(fresh.tools.invocations[1].attempt, 1);
}

TEST(TaskRunner, ADrainBetweenAModelStepAndItsNonIdempotentCallsSendsThemFirst) {
  // Handed back before its create was sent, the task's next attempt could only report the
  // create's outcome unknown: the drain waits for the step's calls, then hands it back.
  Harness h;
  h.model.then(calls_reply({call("c1", "create_item", R"({"title":"x"})")}));
  h.model.then(finish_reply("done"));
  h.model.on_call = [&h] { h.runner.drain(); };
  EXPECT_EQ(h.run(), RunOutcome::kReleased);
  ASSERT_EQ(h.tools.invocations.size(), 1u) << "the create was sent before the hand-back";
  EXPECT_EQ(h.store.releases, 1);
  EXPECT_EQ(h.model.calls, 1) << "handed back at the checkpoint after the calls";
  EXPECT_FALSE(h.store.steps.at(0).record.observations.empty()) << "its answer is saved";
}

TEST(TaskRunner, ACallPastTheDeadlineEndsTheTaskTimedOutWithItsTokensBilledAndNoToolsRun) {
  Harness h;
  h.store.remaining_ms = 1000;
  // The answer arrives 1.2 s into a task with 1 s left: it is billed, its tools never run.
  h.model.then(calls_reply({call("c1", "create_item", R"({"title":"x"})")}, 500, 50), 1200ms);
  const auto started = h.clock.now();
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "timed_out");
  EXPECT_TRUE(h.tools.invocations.empty()) << "no tool runs past the deadline";
  ASSERT_EQ(h.store.ledger.size(), 1u) << "the tokens used are billed";
  EXPECT_EQ(h.store.ledger[0].ledger.usage.input, 500);
  EXPECT_EQ(h.model.calls, 1);
  // The model call was given the task's deadline (min(call timeout, deadline)), and the end
  // was written without waiting any longer.
  ASSERT_EQ(h.model.deadlines.size(), 1u);
  EXPECT_EQ(h.model.deadlines[0], started + 1000ms);
  EXPECT_EQ(h.clock.now(), started + 1200ms);
}

TEST(TaskRunner, AModelTimeoutAtTheTaskDeadlineEndsTimedOutNotFailed) {
  Harness h;
  h.store.remaining_ms = 2000;
  h.model.then(Error{ErrorKind::kTimeout, "no answer before the deadline"}, 2000ms);
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "timed_out");
  EXPECT_EQ(h.model.calls, 1);
}

// The code a task ends with is in its end, its result event and its `error` event.
void expect_ended_with(const Harness& h, ErrorCode code) {
  ASSERT_TRUE(h.store.ended);
  EXPECT_EQ(h.store.ended->error_code, code) << h.store.ended->error;
  const std::string quoted = "\"error_code\":\"" + std::string(to_string(code)) + "\"";
  EXPECT_NE(h.store.ended->result_event.find(quoted), std::string::npos)
      << h.store.ended->result_event;
  const auto errors = h.publisher.events("error");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find(quoted), std::string::npos) << errors[0];
}

TEST(TaskRunner, ACallThatCouldPassTheMonthlyBudgetIsNotMadeAndTheTaskEndsQuotaExceeded) {
  // Budget 1 CNY, 0.995 spent: the first call at its most (its input as estimated and m1's
  // 1024 output tokens at 8 CNY a million, 0.008192 CNY) could pass it.
  Harness h;
  h.store.user_budget_micros = 1'000'000;
  h.store.month_spent = {{"CNY", 995'000}};
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.calls, 0) << "stopped before the call";
  EXPECT_EQ(h.store.status, "failed");
  expect_ended_with(h, ErrorCode::kQuotaExceeded);
  EXPECT_NE(h.store.ended->error.find("monthly budget of 1.000000 CNY"), std::string::npos)
      << h.store.ended->error;
  EXPECT_NE(h.store.ended->error.find("0.995000 CNY used this month"), std::string::npos);
  EXPECT_TRUE(h.store.ledger.empty());
}

TEST(TaskRunner, TheBudgetCountsWhatTheRunSpentSinceItBegan) {
  // 0.5 of 1 CNY spent; the first call costs 0.492 (246,000 input tokens at 2 a million),
  // so the second (0.008192 for its output alone) could pass the budget: the task stops
  // after the first step's tools.
  Harness h;
  h.store.user_budget_micros = 1'000'000;
  h.store.month_spent = {{"CNY", 500'000}};
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}, 246'000, 0));
  h.model.then(finish_reply("done"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.calls, 1);
  EXPECT_EQ(h.tools.invocations.size(), 1u) << "the step's calls ran";
  expect_ended_with(h, ErrorCode::kQuotaExceeded);
  EXPECT_NE(h.store.ended->error.find("0.992000 CNY used this month"), std::string::npos)
      << h.store.ended->error;
  EXPECT_EQ(h.store.spend_reads, 1) << "the month's spend is read once, when the run begins";
}

TEST(TaskRunner, ATasksMaxTokensCapsTheOutputOfItsLastCallsAndStopsItWhenUsedUp) {
  // 6000 tokens: the first call has room for m1's whole 1024 output tokens; after it used
  // 4910, the second's output is capped at what its input leaves of the 1090; after 5920 the
  // third could not write 64 tokens and is not made.
  Harness h;
  h.store.spec.max_tokens = 6000;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}, 4900, 10));
  h.model.then(calls_reply({call("c2", "search_items", R"({"keyword":"y"})")}, 1000, 10));
  h.model.then(finish_reply("done"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.calls, 2);
  ASSERT_EQ(h.model.output_allowances.size(), 2u);
  EXPECT_EQ(h.model.output_allowances[0], 0) << "the model's own allowance";
  EXPECT_GT(h.model.output_allowances[1], billing::kMinOutputTokens);
  EXPECT_LT(h.model.output_allowances[1], 6000 - 4910) << "less its estimated input";
  EXPECT_EQ(h.tools.invocations.size(), 2u) << "both steps' calls ran";
  EXPECT_EQ(h.store.status, "failed");
  expect_ended_with(h, ErrorCode::kMaxTokens);
  EXPECT_NE(h.store.ended->error.find("used 5920 of its max_tokens of 6000"), std::string::npos)
      << h.store.ended->error;
  EXPECT_EQ(h.store.ledger.size(), 2u);
}

TEST(TaskRunner, AnAnswerCutAtWhatMaxTokensLeftEndsMaxTokensNotTruncated) {
  Harness h;
  h.store.spec.max_tokens = 6000;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}, 4900, 10));
  ModelReply cut;
  cut.content = "The meeting is moved to";
  cut.finish_reason = "length";
  cut.usage.input = 900;
  cut.usage.output = 300;
  h.model.then(cut);
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  ASSERT_EQ(h.model.output_allowances.size(), 2u);
  const std::int64_t cap = h.model.output_allowances[1];
  EXPECT_GT(cap, 0);
  expect_ended_with(h, ErrorCode::kMaxTokens);
  EXPECT_NE(h.store.ended->error.find("cut at the " + std::to_string(cap) + " tokens"),
            std::string::npos)
      << h.store.ended->error;

  // The same answer under the model's own allowance is the model's limit.
  Harness own;
  own.model.then(cut);
  EXPECT_EQ(own.run(), RunOutcome::kFinished);
  expect_ended_with(own, ErrorCode::kTruncated);
}

TEST(TaskRunner, ATasksMaxCostStopsACallThatCouldPassIt) {
  // 0.01 CNY: the first call at its most (its input and 1024 output tokens at 8 a million,
  // 0.008192 and a little) fits; it cost 0.002 (1000 input tokens at 2 a million), so the
  // second at its most could pass it.
  Harness h;
  h.store.spec.max_cost_micros = 10'000;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}, 1000, 0));
  h.model.then(finish_reply("done"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.calls, 1);
  expect_ended_with(h, ErrorCode::kMaxCost);
  EXPECT_NE(h.store.ended->error.find("the task's max_cost of 0.010000 CNY (0.002000 CNY spent "
                                      "by the task"),
            std::string::npos)
      << h.store.ended->error;
  EXPECT_EQ(h.store.spend_reads, 0) << "a task's own limit needs no read of the month";
}

TEST(TaskRunner, ATasksLimitsCountWhatEarlierAttemptsUsed) {
  Harness h;
  h.store.spec.max_tokens = 6000;
  h.store.billed_before.usage.input = 5500;
  h.store.billed_before.usage.output = 400;
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.calls, 0);
  expect_ended_with(h, ErrorCode::kMaxTokens);
  EXPECT_NE(h.store.ended->error.find("used 5900 of"), std::string::npos) << h.store.ended->error;

  Harness cost;
  cost.store.spec.max_cost_micros = 10'000;
  cost.store.billed_before.cost_micros = 9'000;
  cost.store.billed_before.currency = "CNY";
  EXPECT_EQ(cost.run(), RunOutcome::kFinished);
  EXPECT_EQ(cost.model.calls, 0);
  expect_ended_with(cost, ErrorCode::kMaxCost);
}

TEST(TaskRunner, AStreamedAnswersTextReachesTheEventStreamAsItComesAndOnlyOnce) {
  Harness h;
  ModelReply first = calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")});
  first.content = "我先查一下";
  h.model.then_streamed(first, {"我先", "查一下"});
  ModelReply whole = finish_reply("已改到晚上8点");
  whole.content = "好了";
  h.model.then(whole);  // a model that does not stream: its text at once
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  const auto deltas = h.publisher.events("delta");
  ASSERT_EQ(deltas.size(), 3u);
  EXPECT_NE(deltas[0].find(R"("data":{"text":"我先"})"), std::string::npos) << deltas[0];
  EXPECT_NE(deltas[1].find(R"("data":{"text":"查一下"})"), std::string::npos) << deltas[1];
  EXPECT_NE(deltas[2].find(R"("data":{"text":"好了"})"), std::string::npos) << deltas[2];
  EXPECT_NE(deltas[0].find(R"("step":0)"), std::string::npos) << deltas[0];
  EXPECT_NE(deltas[2].find(R"("step":1)"), std::string::npos) << deltas[2];
}

TEST(TaskRunner, AModelTheUsersTierDoesNotAllowIsNeverCalled) {
  // The tier changed after the submission was checked (or the task came in a batch).
  Harness h;
  h.store.user_tier = "m2-only";
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.calls, 0);
  expect_ended_with(h, ErrorCode::kModelNotAllowed);
  EXPECT_EQ(h.store.ended->error, "model 'm1' is not allowed for tier 'm2-only' (allowed: m2)");
}

TEST(TaskRunner, AUserWithoutABudgetIsNotAskedForTheirSpend) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}));
  h.model.then(finish_reply("done"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "succeeded");
  EXPECT_EQ(h.store.spend_reads, 0) << "the tier's budget is 0: none";
}

TEST(TaskRunner, ATaskThatRunsOutOfTimeEndsWithTheCodeDeadline) {
  Harness h;
  h.store.remaining_ms = 2000;
  h.model.then(Error{ErrorKind::kTimeout, "no answer before the deadline", ErrorCode::kDeadline},
               2000ms);
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "timed_out");
  expect_ended_with(h, ErrorCode::kDeadline);
}

TEST(TaskRunner, ACallThatGaveUpEarlyOnARetryAfterSaysHowMuchTimeWasLeft) {
  Harness h;
  h.store.remaining_ms = 30000;
  // The client gives up at once: the provider asked for 60 s, 30 s are left.
  h.model.then(Error{ErrorKind::kTimeout,
                     "HTTP 429; the server asked to wait 60000 ms, more than the 30000 ms left "
                     "before the deadline",
                     ErrorCode::kDeadline});
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "timed_out");
  expect_ended_with(h, ErrorCode::kDeadline);
  const std::string& error = h.store.ended->error;
  EXPECT_EQ(error.rfind("gave up on a model call with 30 s left before the deadline: ", 0), 0u)
      << error;
  EXPECT_NE(error.find("asked to wait 60000 ms"), std::string::npos) << error;
  EXPECT_EQ(error.find("deadline passed"), std::string::npos) << error;
}

TEST(TaskRunner, AModelFailureEndsWithTheCodeTheClientGaveOrModelUnavailable) {
  for (const auto& [given, expected] :
       {std::pair{std::optional(ErrorCode::kModelRejected), ErrorCode::kModelRejected},
        std::pair{std::optional(ErrorCode::kModelOutOfQuota), ErrorCode::kModelOutOfQuota},
        // A call's own timeout (call_timeout_s) is not the task's deadline.
        std::pair{std::optional(ErrorCode::kDeadline), ErrorCode::kModelUnavailable},
        std::pair{std::optional<ErrorCode>(), ErrorCode::kModelUnavailable}}) {
    Harness h;
    h.model.then(Error{ErrorKind::kTransient, "HTTP 503 three times", given});
    EXPECT_EQ(h.run(), RunOutcome::kFinished);
    EXPECT_EQ(h.store.status, "failed");
    expect_ended_with(h, expected);
  }
}

TEST(TaskRunner, ATaskOutOfStepsEndsWithTheCodeMaxSteps) {
  Harness h;
  h.store.spec.max_steps = 1;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(calls_reply({call("c2", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(calls_reply({call("c3", "search_items", R"({"keyword":"周会"})")}));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "failed");
  expect_ended_with(h, ErrorCode::kMaxSteps);
}

TEST(TaskRunner, ASucceededTaskHasNoErrorCode) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(finish_reply("done"));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  ASSERT_TRUE(h.store.ended);
  EXPECT_EQ(h.store.status, "succeeded");
  EXPECT_FALSE(h.store.ended->error_code.has_value());
  EXPECT_EQ(h.store.ended->result_event.find("error_code"), std::string::npos);
}

TEST(TaskRunner, ACancellationDuringAModelCallStopsAtOnceAndEndsCancelled) {
  Harness h;
  h.model.then_hang();
  h.model.on_call = [&h] { asio::post(h.io, [&h] { h.runner.cancel(kTaskId); }); };
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "cancelled");
  EXPECT_EQ(h.model.calls, 1);
  EXPECT_TRUE(h.tools.invocations.empty());
  EXPECT_TRUE(h.store.ledger.empty());
  expect_ended_with(h, ErrorCode::kCancelled);
}

// Runs what is ready until `done` holds (at most 100 rounds): work the run left behind.
void settle(Harness& h, const std::function<bool()>& done) {
  for (int i = 0; i < 100 && !done(); ++i) {
    h.io.restart();
    h.io.poll();
  }
}

TEST(TaskRunner, AModelCallTheRunStoppedWaitingForIsBilledUnreconciledWhenItsAnswerComes) {
  Harness h;
  h.model.then_held(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}, 300, 40));
  h.model.on_call = [&h] { asio::post(h.io, [&h] { h.runner.cancel(kTaskId); }); };
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "cancelled");
  EXPECT_TRUE(h.store.ledger.empty()) << "no step to bill it with";
  EXPECT_TRUE(h.store.charges.empty()) << "not answered yet";
  h.model.release();
  settle(h, [&h] { return !h.store.charges.empty(); });
  ASSERT_EQ(h.store.charges.size(), 1u) << "the provider charged for the answer nobody read";
  const ports::Charges& billed = h.store.charges[0];
  EXPECT_EQ(billed.task_id, kTaskId);
  EXPECT_EQ(billed.attempt, 1);
  EXPECT_EQ(billed.step, 0);
  EXPECT_EQ(billed.user_id, kUser);
  EXPECT_EQ(billed.model, "m1");
  ASSERT_EQ(billed.charges.size(), 1u);
  EXPECT_EQ(billed.charges[0].charge.reason, ChargeLoss::kAbandoned);
  EXPECT_FALSE(billed.charges[0].charge.estimated) << "the provider's own usage";
  EXPECT_EQ(billed.charges[0].charge.usage.input, 300);
  EXPECT_EQ(billed.charges[0].charge.usage.output, 40);
  EXPECT_FALSE(billed.charges[0].cost.empty());
  EXPECT_FALSE(billed.charges[0].currency.empty());
  EXPECT_TRUE(h.tools.invocations.empty()) << "its calls are never run";
}

TEST(TaskRunner, AnAnswerItsRunCouldNotCheckpointAfterTheLeaseWasLostIsBilledUnreconciled) {
  Harness h;
  h.model.then(calls_reply({call("c1", "create_item", R"({"title":"x"})")}, 120, 30));
  h.model.on_call = [&h] { h.store.take_over(); };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_TRUE(h.store.ledger.empty()) << "the step is the new owner's";
  ASSERT_EQ(h.store.charges.size(), 1u);
  ASSERT_EQ(h.store.charges[0].charges.size(), 1u);
  EXPECT_EQ(h.store.charges[0].attempt, 1) << "the attempt that made the call";
  EXPECT_EQ(h.store.charges[0].charges[0].charge.reason, ChargeLoss::kLeaseLost);
  EXPECT_EQ(h.store.charges[0].charges[0].charge.usage.input, 120);
}

TEST(TaskRunner, TheAnswerThatEndsTheTaskIsCheckpointedAndBilledInTheEndsOwnWrite) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}, 100, 10));
  h.model.then(finish_reply("done", 140, 20));
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "succeeded");
  ASSERT_TRUE(h.store.ended);
  ASSERT_TRUE(h.store.ended->last_step) << "the final answer rides on the end: one commit";
  EXPECT_EQ(h.store.ended->last_step->step, 1);
  EXPECT_EQ(h.store.ended->last_step->ledger.usage.input, 140);
  EXPECT_EQ(h.store.steps_with_end, 1);
  ASSERT_EQ(h.store.ledger.size(), 2u) << "both answers billed, each once";
  EXPECT_EQ(h.store.ledger[0].step, 0) << "the first in a checkpoint of its own";
  EXPECT_EQ(h.store.ledger[1].step, 1);
  EXPECT_EQ(h.store.steps.size(), 2u) << "a replay finds both steps";
  EXPECT_TRUE(h.store.in_flight.empty()) << "both calls' records settled";
  // The result event counts the last step and its tokens, as before.
  EXPECT_NE(h.store.event.find(R"("steps":2)"), std::string::npos) << h.store.event;
}

TEST(TaskRunner, AnAnswerThatEndsTheTaskIsBilledUnreconciledWhenTheEndIsFenced) {
  Harness h;
  h.model.then(finish_reply("done", 130, 25));
  h.model.on_call = [&h] { h.store.take_over(); };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_FALSE(h.store.ended) << "the new attempt ends the task";
  EXPECT_TRUE(h.store.ledger.empty()) << "the step is the new owner's";
  ASSERT_EQ(h.store.charges.size(), 1u);
  EXPECT_EQ(h.store.charges[0].step, 0);
  ASSERT_EQ(h.store.charges[0].charges.size(), 1u);
  EXPECT_EQ(h.store.charges[0].charges[0].charge.reason, ChargeLoss::kLeaseLost);
  EXPECT_EQ(h.store.charges[0].charges[0].charge.usage.input, 130);
  EXPECT_EQ(h.store.charges[0].charges[0].charge.usage.output, 25);
  EXPECT_EQ(h.store.settled, 1) << "its record settled by the bill, not left to the scheduler";
  EXPECT_TRUE(h.store.in_flight.empty());
}

TEST(TaskRunner, AttemptsTheClientReportsLostAreBilledUnreconciledAtTheirStep) {
  Harness h;
  LostCharge timed_out;
  timed_out.usage.input = 90;
  timed_out.estimated = true;
  timed_out.reason = ChargeLoss::kTimeout;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(finish_reply("done"), 0ms, {timed_out});
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "succeeded");
  EXPECT_EQ(h.store.ledger.size(), 2u) << "the answers are billed as always";
  ASSERT_EQ(h.store.charges.size(), 1u);
  EXPECT_EQ(h.store.charges[0].step, 1);
  ASSERT_EQ(h.store.charges[0].charges.size(), 1u);
  EXPECT_EQ(h.store.charges[0].charges[0].charge.reason, ChargeLoss::kTimeout);
  EXPECT_TRUE(h.store.charges[0].charges[0].charge.estimated);
  // Billed at the prices of the model: 90 input tokens cost something.
  EXPECT_NE(h.store.charges[0].charges[0].cost, "0.000000");
  EXPECT_NE(h.registry.render().find(
                "agentfleet_model_charges_unreconciled_total{model=\"m1\",reason=\"timeout\"} 1"),
            std::string::npos);
}

// ---- model calls in flight: recorded before they are sent ----------------------------------

TEST(TaskRunner, EachModelCallIsRecordedBeforeItIsSentAndItsCheckpointSettlesTheRecord) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(finish_reply("done"));
  std::vector<std::size_t> recorded_at_send;
  h.model.on_call = [&h, &recorded_at_send] {
    recorded_at_send.push_back(h.store.in_flight.size());
  };
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(recorded_at_send, (std::vector<std::size_t>{1, 1})) << "each call's own record";
  ASSERT_EQ(h.store.calls_sent.size(), 2u);
  for (int step = 0; step < 2; ++step) {
    const ports::CallSent& sent = h.store.calls_sent[static_cast<std::size_t>(step)];
    EXPECT_EQ(sent.task_id, kTaskId);
    EXPECT_EQ(sent.attempt, 1);
    EXPECT_EQ(sent.step, step);
    EXPECT_EQ(sent.user_id, kUser);
    EXPECT_EQ(sent.model, "m1");
    EXPECT_EQ(sent.input_tokens, ScriptedModel::kEstimatedInput) << "the client's estimate";
    EXPECT_NE(sent.cost, "0.000000") << "priced at the model's input price";
    EXPECT_FALSE(sent.currency.empty());
    EXPECT_EQ(sent.incarnation, h.store.incarnation);
  }
  EXPECT_EQ(h.model.call_ids, (std::vector<std::string>{std::string(kTaskId) + ":1:0",
                                                        std::string(kTaskId) + ":1:1"}));
  EXPECT_TRUE(h.store.in_flight.empty()) << "both checkpoints billed their calls";
  EXPECT_TRUE(h.store.charges.empty());
}

TEST(TaskRunner, ACallInFlightWhenTheWorkerStopsIsLeftRecordedForTheSchedulerToBill) {
  Harness h;
  h.model.then_hang();
  h.model.on_call = [&h] { asio::post(h.io, [&h] { h.io.stop(); }); };  // the worker dies
  asio::co_spawn(h.io, h.runner.run(kTaskId, kUser, ""), asio::detached);
  h.io.run();
  EXPECT_EQ(h.model.tries_sent, 1);
  EXPECT_TRUE(h.store.charges.empty()) << "nothing was left to bill it";
  EXPECT_TRUE(h.store.ledger.empty());
  ASSERT_EQ(h.store.in_flight.size(), 1u) << "but its record is durable";
  const std::vector<ports::CallSent> billed = h.store.settle_lost_calls();
  ASSERT_EQ(billed.size(), 1u);
  EXPECT_EQ(billed[0].step, 0);
  EXPECT_EQ(billed[0].input_tokens, ScriptedModel::kEstimatedInput);
}

TEST(TaskRunner, TriesLostBeforeTheLastAreBilledBeforeTheNextTryIsSent) {
  Harness h;
  LostCharge timed_out;
  timed_out.usage.input = 90;
  timed_out.reason = ChargeLoss::kTimeout;
  LostCharge cut;
  cut.usage.input = 95;
  cut.reason = ChargeLoss::kConnectionLost;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(finish_reply("done"), 0ms, {timed_out, cut});
  std::size_t billed_at_last_try = 0;
  h.model.on_call = [&h, &billed_at_last_try] {
    for (const auto& c : h.store.charges)
      billed_at_last_try += c.charges.size();
  };
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.model.tries_sent, 4) << "one for the first call, three for the second";
  EXPECT_EQ(billed_at_last_try, 2u) << "a worker dying during the last try loses neither";
  ASSERT_EQ(h.store.charges.size(), 2u) << "each billed before the try after it";
  EXPECT_EQ(h.store.charges[0].charges.at(0).charge.reason, ChargeLoss::kTimeout);
  EXPECT_EQ(h.store.charges[1].charges.at(0).charge.reason, ChargeLoss::kConnectionLost);
  EXPECT_FALSE(h.store.charges[0].settles_call) << "the call was still going";
  EXPECT_EQ(h.store.charges[1].step, 1);
  EXPECT_EQ(h.store.calls_sent.size(), 4u) << "every try recorded";
  EXPECT_TRUE(h.store.in_flight.empty());
  EXPECT_EQ(h.store.ledger.size(), 2u);
}

TEST(TaskRunner, ACallThatCouldNotBeRecordedIsNotSentAndTheTaskIsLeftForRecovery) {
  Harness h;
  h.model.then(finish_reply("done"));
  h.store.record_error = Error{ErrorKind::kTransient, "connection to postgres lost"};
  EXPECT_EQ(h.run(), RunOutcome::kStoreUnavailable);
  EXPECT_EQ(h.model.tries_sent, 0) << "a call that could not be recorded is never sent";
  EXPECT_TRUE(h.store.ledger.empty());
  EXPECT_TRUE(h.store.charges.empty());
  EXPECT_EQ(h.store.status, "running") << "left for lease recovery, not failed";
}

TEST(TaskRunner, ACallWhoseTaskIsNoLongerThisAttemptsIsNotSent) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  h.model.then(finish_reply("done"));
  // Another attempt takes the task over once the first step's results are saved.
  h.store.on_tool_results = [&h] { h.store.take_over(); };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_EQ(h.model.tries_sent, 1) << "the second call was refused its record, so not sent";
  EXPECT_EQ(h.store.calls_sent.size(), 1u);
}

TEST(TaskRunner, ACallTheProviderRefusedSettlesItsRecordWithNothingToBill) {
  Harness h;
  h.model.then(Error{ErrorKind::kFatal, "HTTP 400: invalid request", ErrorCode::kModelUnavailable});
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "failed");
  EXPECT_EQ(h.store.settled, 1) << "its end settled the record";
  EXPECT_TRUE(h.store.in_flight.empty()) << "so the scheduler bills nothing for it";
  EXPECT_TRUE(h.store.charges.empty()) << "a refused request costs nothing";
}

TEST(TaskRunner, AnAbandonedCallTheSchedulerBilledFirstIsNotBilledAgain) {
  Harness h;
  h.model.then_held(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}, 300, 40));
  h.model.on_call = [&h] { asio::post(h.io, [&h] { h.runner.cancel(kTaskId); }); };
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "cancelled");
  // The worker's liveness lapsed meanwhile: the scheduler billed the call from its record.
  EXPECT_EQ(h.store.settle_lost_calls().size(), 1u);
  h.model.release();
  settle(h, [] { return false; });  // the late answer's bill runs its course
  EXPECT_TRUE(h.store.charges.empty()) << "billed once, by the scheduler";
  EXPECT_EQ(h.registry.render().find("agentfleet_model_charges_unreconciled_total{model=\"m1\","
                                     "reason=\"abandoned\"} 1"),
            std::string::npos)
      << "nor counted twice";
}

TEST(TaskRunner, AnAnswerWithoutUsageIsBilledFromItsEstimateAndFlagged) {
  Harness h;
  ModelReply estimated = finish_reply("done", 70, 9);
  estimated.usage_estimated = true;
  h.model.then(estimated);
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  ASSERT_EQ(h.store.ledger.size(), 1u);
  EXPECT_TRUE(h.store.ledger[0].ledger.usage_estimated);
  EXPECT_EQ(h.store.ledger[0].ledger.usage.input, 70);
  EXPECT_TRUE(h.store.charges.empty());
  EXPECT_NE(h.registry.render().find("agentfleet_model_usage_estimated_total{model=\"m1\"} 1"),
            std::string::npos);
}

TEST(TaskRunner, ToolResultsThatCameBeforeACancelAreSavedToTheTraceAndCounted) {
  Harness h;
  // Two calls of one step: search_items answers, create_item never does; the cancel comes
  // while create_item is under way.
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})"),
                            call("c2", "create_item", R"({"title":"周会"})")}));
  h.tools.hangs = {"create_item"};
  h.tools.on_hang = [&h] { asio::post(h.io, [&h] { h.runner.cancel(kTaskId); }); };
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "cancelled");
  expect_ended_with(h, ErrorCode::kCancelled);
  EXPECT_EQ(h.tools.invocations.size(), 2u);
  EXPECT_EQ(h.store.tool_calls, 1) << "the call that answered is counted";
  const auto& row = h.store.steps.at(0);
  EXPECT_TRUE(row.record.observations.empty()) << "a replay would call them again";
  EXPECT_NE(row.trace.find(R"("tool":"search_items")"), std::string::npos) << row.trace;
  EXPECT_NE(row.trace.find(R"("status":"ok")"), std::string::npos) << row.trace;
  EXPECT_NE(row.trace.find(R"("status":"no_answer")"), std::string::npos) << row.trace;
  EXPECT_NE(row.trace.find("no answer before the task was cancelled"), std::string::npos);
  EXPECT_NE(h.store.ended->result_event.find(R"("tool_calls":1)"), std::string::npos)
      << h.store.ended->result_event;
}

TEST(TaskRunner, AFenceDuringToolCallsStopsWithoutWritingWhatTheyAnswered) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})"),
                            call("c2", "create_item", R"({"title":"周会"})")}));
  h.tools.hangs = {"create_item"};
  h.tools.on_hang = [&h] { asio::post(h.io, [&h] { h.runner.fence(); }); };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_EQ(h.store.tool_calls, 0);
  EXPECT_TRUE(h.store.steps.at(0).trace.empty());
  EXPECT_FALSE(h.store.ended);
}

TEST(TaskRunner, AFenceDuringAModelCallStopsAtOnceWithoutWritingAnything) {
  Harness h;
  h.model.then_hang();
  h.model.on_call = [&h] { asio::post(h.io, [&h] { h.runner.fence(); }); };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_EQ(h.store.status, "running") << "nothing written: the lease keeper hands it back";
  EXPECT_FALSE(h.store.ended);
  EXPECT_TRUE(h.store.ledger.empty());
  EXPECT_TRUE(h.tools.invocations.empty());
  EXPECT_TRUE(h.publisher.published.empty());
  EXPECT_EQ(h.model.calls, 1);
}

TEST(TaskRunner, EveryWriteCarriesTheClaimingIncarnationAndAnotherOwnerAtTheSameAttemptStopsIt) {
  Harness h;
  h.store.incarnation = 41;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"周会"})")}));
  // While the second call is under way the row passes to incarnation 42 at the same attempt
  // (a row an operator or a bug reset): the attempt alone would let this run write on.
  h.model.then(finish_reply("done"));
  h.model.on_call = [&h] {
    if (h.model.calls == 2)
      h.store.owner = 42;
  };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  ASSERT_EQ(h.store.ledger.size(), 1u) << "the first step was written under incarnation 41";
  EXPECT_EQ(h.store.ledger[0].incarnation, 41);
  EXPECT_FALSE(h.store.ended) << "the end was fenced off";
  EXPECT_TRUE(h.publisher.published.empty());
}

TEST(TaskRunner, AFencedRunnerClaimsNothingUntilTheFenceIsLifted) {
  Harness h;
  h.runner.fence();
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}));
  h.model.then(finish_reply("done"));
  std::optional<RunOutcome> outcome;
  asio::co_spawn(h.io, h.runner.run(kTaskId, kUser, ""),
                 [&](std::exception_ptr, RunOutcome o) { outcome = o; });
  h.io.poll();  // the claim waits for the fence
  EXPECT_FALSE(outcome.has_value());
  EXPECT_EQ(h.store.claims, 0);
  h.runner.unfence();
  h.io.run();
  EXPECT_EQ(outcome, RunOutcome::kFinished);
  EXPECT_EQ(h.store.claims, 1);
  EXPECT_EQ(h.store.status, "succeeded");
}

TEST(TaskRunner, AClaimThatRanAfterTheLivenessLapsedIsMadeAgainUnderTheNextIncarnation) {
  Harness h;
  h.store.not_live_claims = 1;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}));
  h.model.then(finish_reply("done"));
  std::optional<RunOutcome> outcome;
  asio::co_spawn(h.io, h.runner.run(kTaskId, kUser, ""),
                 [&](std::exception_ptr, RunOutcome o) { outcome = o; });
  h.io.poll();
  EXPECT_FALSE(outcome.has_value()) << "it waits for a new incarnation";
  EXPECT_EQ(h.store.claims, 1);
  h.runner.fence();  // the lease keeper finds the lapse and registers anew
  h.io.restart();
  h.io.poll();
  EXPECT_EQ(h.store.claims, 1) << "not under the old incarnation again";
  h.runner.unfence();
  h.io.restart();
  h.io.run();
  EXPECT_EQ(outcome, RunOutcome::kFinished);
  EXPECT_EQ(h.store.claims, 2);
  EXPECT_EQ(h.store.attempt, 1) << "no attempt spent on the refused claim";
  EXPECT_EQ(h.store.status, "succeeded");
}

TEST(TaskRunner, AClaimAnsweredAfterAFenceWentUpIsNotRunAndIsHandedBackUnderItsIncarnation) {
  // The fence collected the runs the worker knew; this claim was still on its way to the
  // store. Its incarnation may lapse: run, it could be taken over mid-call; left alone, its
  // recovery would cost the task an attempt that no crash lost.
  Harness h;
  std::vector<ports::HeldTask> abandoned;
  h.runner.set_abandoned_handler([&](ports::HeldTask task) { abandoned.push_back(task); });
  h.model.then(finish_reply("done"));
  h.store.on_claim = [&h] {
    h.runner.fence();
    h.runner.unfence();  // the keeper even registered anew before the answer came
  };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_EQ(h.model.calls, 0);
  EXPECT_TRUE(h.runner.held().empty());
  ASSERT_EQ(abandoned.size(), 1u);
  EXPECT_EQ(abandoned[0].task_id, kTaskId);
  EXPECT_EQ(abandoned[0].attempt, 1);
  EXPECT_EQ(abandoned[0].incarnation, 7) << "handed back by the incarnation that claimed it";
}

TEST(TaskRunner, AClaimInDoubtThatCommittedIsHandedBackAtTheAttemptItMade) {
  // The claim committed and its answer was lost; the retry finds the task run by this
  // incarnation at attempt 1 and no run of it here. Handed back at attempt 1 (not "attempt
  // unknown"), the release counts even if the task is taken over before the hand-back.
  Harness h;
  std::vector<ports::HeldTask> abandoned;
  h.runner.set_abandoned_handler([&](ports::HeldTask task) { abandoned.push_back(task); });
  h.store.lost_claim_answers = 1;
  EXPECT_EQ(h.run(), RunOutcome::kSkipped);
  EXPECT_EQ(h.store.claims, 2);
  EXPECT_EQ(h.model.calls, 0) << "not run: its answer never came";
  ASSERT_EQ(abandoned.size(), 1u);
  EXPECT_EQ(abandoned[0].task_id, kTaskId);
  EXPECT_EQ(abandoned[0].attempt, 1);
  EXPECT_EQ(abandoned[0].incarnation, 7);
}

TEST(TaskRunner, AClaimInDoubtOfATaskAnotherRunHereHoldsHandsNothingBack) {
  // The claim in doubt took nothing; a second dispatch message of the task was claimed by
  // another run of this worker meanwhile, which still runs it when the retry comes. The
  // retry finds the task run by this incarnation, but by that run: nothing is handed back.
  Harness h;
  std::vector<ports::HeldTask> abandoned;
  h.runner.set_abandoned_handler([&](ports::HeldTask task) { abandoned.push_back(task); });
  h.store.claim_error = Error{ErrorKind::kTransient, "postgres connection: reset"};
  h.model.then_hang();  // the other run is in its model call
  std::optional<RunOutcome> first;
  asio::co_spawn(h.io, h.runner.run(kTaskId, kUser, ""), [&](std::exception_ptr, RunOutcome o) {
    first = o;
    h.io.stop();
  });
  h.io.poll();  // its claim failed; it waits to try again
  ASSERT_FALSE(first.has_value());
  h.store.claim_error.reset();
  asio::co_spawn(h.io, h.runner.run(kTaskId, kUser, ""), asio::detached);
  h.io.run();
  EXPECT_EQ(first, RunOutcome::kSkipped);
  EXPECT_EQ(h.store.attempt, 1);
  EXPECT_EQ(h.runner.held().size(), 1u) << "the other run holds it";
  EXPECT_TRUE(abandoned.empty()) << "never handed back from under the run that holds it";
}

TEST(TaskRunner, AClaimStillUnderWayWhenTheWorkerStopsMayBeDestroyedAfterTheRunner) {
  // The worker stops its io_context after the drain; a claim still waiting to be tried again
  // is destroyed with the io_context, after the runner (run_worker declares the io_context
  // first). Nothing it destroys may touch the runner (AddressSanitizer would report it).
  Harness h;  // the collaborators; the runner and io_context below are destroyed in that order
  auto io = std::make_unique<asio::io_context>();
  auto runner = std::make_unique<TaskRunner>(h.config, "worker-test", h.model, h.tools, h.store,
                                             h.publisher, h.metrics, h.clock);
  h.store.claim_error = Error{ErrorKind::kTransient, "postgres connection: reset"};
  asio::co_spawn(*io, runner->run(kTaskId, kUser, ""), asio::detached);
  io->poll();  // the claim failed and waits to be tried again
  EXPECT_EQ(h.store.claims, 1);
  runner.reset();
  io.reset();  // destroys the suspended claim
  EXPECT_EQ(h.store.claims, 1);
}

TEST(TaskRunner, AFenceThatFailsAtACheckpointStopsTheRunBeforeItsToolsRun) {
  Harness h;
  h.model.then(calls_reply({call("c1", "create_item", R"({"title":"x"})")}));
  h.model.on_call = [&h] { h.store.take_over(); };
  EXPECT_EQ(h.run(), RunOutcome::kLeaseLost);
  EXPECT_TRUE(h.tools.invocations.empty()) << "a call of an unsaved step never runs";
  EXPECT_TRUE(h.store.ledger.empty());
  EXPECT_FALSE(h.store.ended);
}

TEST(TaskRunner, AnExhaustedModelQuotaEndsTheTaskFailedWithTheReasonAndNothingMoreIsCalled) {
  Harness h;
  h.model.then(Error{ErrorKind::kFatal,
                     "every endpoint of m1 is out of quota (insufficient_quota): the account "
                     "has no credit",
                     ErrorCode::kModelOutOfQuota});
  EXPECT_EQ(h.run(), RunOutcome::kFinished);
  EXPECT_EQ(h.store.status, "failed");
  ASSERT_TRUE(h.store.ended);
  EXPECT_NE(h.store.ended->error.find("insufficient_quota"), std::string::npos)
      << h.store.ended->error;
  EXPECT_EQ(h.store.ended->error_code, ErrorCode::kModelOutOfQuota);
  EXPECT_EQ(h.model.calls, 1);
  EXPECT_TRUE(h.tools.invocations.empty());
}

TEST(TaskRunner, AStoreOutageAtACheckpointStopsBeforeTheToolsAndReportsTheTaskAbandoned) {
  Harness h;
  std::vector<ports::HeldTask> abandoned;
  h.runner.set_abandoned_handler([&](ports::HeldTask task) { abandoned.push_back(task); });
  h.model.then(calls_reply({call("c1", "create_item", R"({"title":"x"})")}));
  h.model.on_call = [&h] { h.store.store_error = Error{ErrorKind::kTransient, "connection lost"}; };
  EXPECT_EQ(h.run(), RunOutcome::kStoreUnavailable);
  EXPECT_TRUE(h.tools.invocations.empty());
  EXPECT_FALSE(h.store.ended);
  // Still this worker's in the store and run by nobody: the lease keeper hands it back.
  ASSERT_EQ(abandoned.size(), 1u);
  EXPECT_EQ(abandoned[0].task_id, kTaskId);
  EXPECT_EQ(abandoned[0].attempt, 1);
  EXPECT_TRUE(h.runner.held().empty());
}

TEST(TaskRunner, ADrainHandsTheTaskBackAtTheNextCheckpoint) {
  Harness h;
  h.model.then(calls_reply({call("c1", "search_items", R"({"keyword":"x"})")}));
  h.model.on_call = [&h] { h.runner.drain(); };
  EXPECT_EQ(h.run(), RunOutcome::kReleased);
  EXPECT_EQ(h.store.status, "queued");
  EXPECT_EQ(h.store.releases, 1);
  EXPECT_EQ(h.store.ledger.size(), 1u) << "the step the model answered is kept";
  EXPECT_EQ(h.tools.invocations.size(), 0u) << "stopped at the checkpoint, before the tools";
  EXPECT_FALSE(h.store.ended);
}

TEST(TaskRunner, ATaskTheStoreDoesNotKnowIsReportedAsSuch) {
  Harness h;
  h.store.spec.task_id = "other";
  std::optional<RunOutcome> outcome;
  asio::co_spawn(h.io, h.runner.run("00000000-0000-4000-8000-0000000000ff", kUser, ""),
                 [&](std::exception_ptr, RunOutcome o) { outcome = o; });
  h.io.run();
  EXPECT_EQ(outcome, RunOutcome::kUnknownTask);
  EXPECT_EQ(h.model.calls, 0);
}

}  // namespace
}  // namespace agentfleet::worker
