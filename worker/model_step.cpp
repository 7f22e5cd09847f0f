// A model step: what the call sends and offers, the spend check before it, the call
// (recorded before each try is sent, abandoned at once on a cancel), its checkpoint and
// bill, how a failed call ends the run, and the bills no checkpoint writes.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <limits>

#include "core/adapters/log.hpp"
#include "core/codec/checkpoint_codec.hpp"
#include "core/react/context_budget.hpp"
#include "worker/run_state.hpp"
#include "worker/task_runner.hpp"

namespace agentfleet::worker {

namespace asio = boost::asio;

asio::awaitable<void> TaskRunner::bill_fenced_answer(Run& run, int step, TokenUsage usage,
                                                     bool estimated) {
  // Another attempt owns the task and will make this call again; this one was made and
  // charged all the same.
  LostCharge charge;
  charge.usage = usage;
  charge.estimated = estimated;
  charge.reason = ChargeLoss::kLeaseLost;
  std::vector<LostCharge> lost{charge};
  ports::Charges of_step = charges_of(run, step);
  of_step.settles_call = true;  // the checkpoint did not settle the call's record
  co_await bill_unreconciled(std::move(of_step), std::move(lost));
}

std::shared_ptr<const TaskRunner::ToolSet> TaskRunner::offered_tools(
    const Run& run, const react::NextCall& call) const {
  switch (call.tools) {
    case react::ToolOffer::kTaskTools:
      return run.schemas;
    case react::ToolOffer::kFinishOnly:
      return finish_only_;
    case react::ToolOffer::kStepTool: {
      std::vector<ports::ToolSchema> one;
      for (const auto& schema : run.schemas->schemas) {
        if (schema.name == call.tool)
          one.push_back(schema);
      }
      return make_tool_set(std::move(one));
    }
    case react::ToolOffer::kNone:
      break;
  }
  return no_tools_;
}

TaskRunner::CallInput TaskRunner::call_input(Run& run, const Loop& loop,
                                             const react::NextCall& request) {
  // What the call sends: the conversation as it is when it fits (held by the strategy,
  // which the call keeps alive), else a trimmed copy.
  CallInput input;
  input.tokens = loop.tool_tokens;
  if (loop.keep_encoded)
    run.encoder.sync(request.conversation, *request.messages, loop.model->reasoning_echo);
  if (loop.keep_encoded && run.encoder.estimated_tokens() <= loop.budget.max_tokens) {
    input.messages = std::shared_ptr<const std::vector<Message>>(loop.strategy, request.messages);
    input.messages_json = run.encoder.json();
    input.tokens += run.encoder.estimated_tokens();
    return input;
  }
  react::FittedContext context = react::fit_context(*request.messages, loop.budget);
  if (!context.fits) {
    log::warn("worker", run.log_context(),
              "conversation exceeds the context budget even trimmed (" +
                  std::to_string(context.estimated_tokens) + " estimated tokens)");
  }
  input.messages = std::make_shared<const std::vector<Message>>(std::move(context.messages));
  input.tokens += context.estimated_tokens;
  return input;
}

TaskRunner::PreparedCall TaskRunner::prepare_call(Run& run, const Loop& loop) const {
  PreparedCall prepared{loop.strategy->request(), {}, {}};
  prepared.input = call_input(run, loop, prepared.request);
  prepared.spend = spend_check(run, *loop.model, prepared.input.tokens);
  return prepared;
}

ports::CallSent TaskRunner::call_record(const ports::Charges& of_step, std::int64_t input_tokens,
                                        std::int64_t incarnation) const {
  TokenUsage estimate;
  estimate.input = input_tokens;
  const billing::Money cost = prices_.cost(of_step.model, estimate, clock_.wall_now());
  return ports::CallSent{
      of_step.task_id,  of_step.attempt, of_step.step, of_step.user_id,
      of_step.batch_id, of_step.model,   input_tokens, billing::format_micros(cost.micros),
      cost.currency,    incarnation};
}

asio::awaitable<void> TaskRunner::settle_unsent_call(Run& run) {
  if (!run.unsent_call_step)
    co_return;
  const int step = *std::exchange(run.unsent_call_step, std::nullopt);
  ports::Charges unsent = charges_of(run, step);
  unsent.settles_call = true;  // never sent: its record goes, with nothing to bill
  // Named, not a temporary in the co_await: GCC 12 destroys such temporaries twice.
  std::vector<LostCharge> nothing;
  co_await bill_unreconciled(std::move(unsent), std::move(nothing));
}

asio::awaitable<std::optional<RunOutcome>> TaskRunner::model_step(Run& run, Loop& loop) {
  const config::ModelConfig& model = *loop.model;
  const auto call_deadline =
      std::min(run.deadline, clock_.now() + std::chrono::seconds(model.call_timeout_s));
  emit_progress(run, "step", loop.step, {}, "{}");
  const auto started = clock_.now();
  // Prepared by the tool round before it, when there was one (its write carried the call's
  // record when the spend check let the call through).
  PreparedCall prepared = loop.prepared ? std::move(*loop.prepared) : prepare_call(run, loop);
  loop.prepared.reset();
  if (run.step == 0)
    learn_first_call(run, prepared.input.tokens);  // what the next claims record it at
  CallInput& input = prepared.input;
  billing::SpendDecision& spend = prepared.spend;
  if (spend.stop) {  // the end removes the record of the call not sent, if one was written
    const ErrorCode code = *spend.stop == billing::SpendStop::kMaxTokens ? ErrorCode::kMaxTokens
                           : *spend.stop == billing::SpendStop::kMaxCost
                               ? ErrorCode::kMaxCost
                               : ErrorCode::kQuotaExceeded;
    co_return co_await finish(run, TaskStatus::kFailed, std::nullopt, std::move(spend.message),
                              code);
  }
  run.capped_output.reset();
  if (spend.capped)
    run.capped_output = spend.output_tokens;
  const bool prerecorded = std::exchange(run.unsent_call_step, std::nullopt).has_value();
  auto reply = co_await call_model(run, std::move(input.messages), std::move(input.messages_json),
                                   offered_tools(run, prepared.request), call_deadline,
                                   spend.capped ? spend.output_tokens : 0, prerecorded);
  if (!reply)
    co_return co_await call_unanswered(run, model, call_deadline);
  const int latency_ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(clock_.now() - started).count());
  if (!reply->ok() && run.call_unrecorded) {
    // Not sent: the call could not be recorded first (the store failed, or the task is no
    // longer this attempt's).
    Result<Status> unrecorded = std::move(*run.call_unrecorded);
    run.call_unrecorded.reset();
    if (auto stop = co_await on_store_failure(run, unrecorded, "model call record"))
      co_return *stop;
  }
  if (!reply->ok())
    co_return co_await call_failed(run, reply->error(), call_deadline);
  co_return co_await checkpoint_answer(run, loop, reply->value(), prepared.request.role,
                                       latency_ms);
}

asio::awaitable<RunOutcome> TaskRunner::call_unanswered(Run& run, const config::ModelConfig& model,
                                                        TimePoint call_deadline) {
  if (auto stop = co_await stop_requested(run, false))
    co_return *stop;
  // The call overran its own deadline (it should not: the client enforces it).
  if (call_deadline < run.deadline) {
    co_return co_await finish(run, TaskStatus::kFailed, std::nullopt,
                              "the model call did not return within its " +
                                  std::to_string(model.call_timeout_s) + " s timeout",
                              ErrorCode::kModelUnavailable);
  }
  co_return co_await finish(
      run, TaskStatus::kTimedOut, std::nullopt,
      "deadline of " + std::to_string(run.claimed.spec.timeout_s) + " s passed during a model call",
      ErrorCode::kDeadline);
}

asio::awaitable<RunOutcome> TaskRunner::call_failed(Run& run, const Error& error,
                                                    TimePoint call_deadline) {
  log::warn("worker", run.log_context(), "model call failed: " + error.message,
            {{"model", run.claimed.spec.model}});
  // A call bounded by the task's deadline that gave up on time (it ran out, or the provider
  // asked for a wait past it) ends the task timed_out, not failed.
  const bool out_of_time = clock_.now() >= run.deadline ||
                           (error.kind == ErrorKind::kTimeout && call_deadline >= run.deadline);
  if (out_of_time) {
    // Said as it is: a call that gave up early (a Retry-After or a back-off longer than the
    // time left) says how much time was left, not that the deadline passed.
    const auto left =
        std::chrono::duration_cast<std::chrono::seconds>(run.deadline - clock_.now()).count();
    // Named, not a temporary in the co_await: GCC 12 destroys such temporaries twice.
    std::string message = left > 0 ? "gave up on a model call with " + std::to_string(left) +
                                         " s left before the deadline: "
                                   : std::string("deadline passed during a model call: ");
    message += error.message;
    co_return co_await finish(run, TaskStatus::kTimedOut, std::nullopt, std::move(message),
                              ErrorCode::kDeadline);
  }
  // The call's own timeout is not the task's deadline: the model did not answer in time.
  const ErrorCode code = error.code.value_or(ErrorCode::kModelUnavailable);
  co_return co_await finish(run, TaskStatus::kFailed, std::nullopt,
                            "model call failed: " + error.message,
                            code == ErrorCode::kDeadline ? ErrorCode::kModelUnavailable : code);
}

asio::awaitable<std::optional<RunOutcome>> TaskRunner::checkpoint_answer(Run& run, Loop& loop,
                                                                         const ModelReply& answer,
                                                                         const std::string& role,
                                                                         int latency_ms) {
  const TaskSpec& spec = run.claimed.spec;
  const int step = loop.step;
  const auto now = clock_.wall_now();
  const billing::Money cost = prices_.cost(spec.model, answer.usage, now);
  metrics_.tokens(spec.model, answer.usage);
  metrics_.cost(spec.model, cost.currency, cost.micros);
  if (answer.usage_estimated)
    metrics_.usage_estimated(spec.model);
  ports::LedgerRow ledger{spec.user_id,
                          spec.batch_id,
                          spec.model,
                          answer.usage,
                          billing::format_micros(cost.micros),
                          cost.currency,
                          answer.usage_estimated};
  const std::string reply_json =
      codec::model_reply_json(answer, role == "react" ? std::string() : role);
  ports::ModelStep checkpoint{run.task_id, run.claimed.attempt, step,           reply_json,
                              latency_ms,  std::move(ledger),   run.incarnation};
  loop.next = loop.strategy->on_model_reply(answer);
  if (std::holds_alternative<react::Finish>(loop.next) ||
      std::holds_alternative<react::Fail>(loop.next)) {
    // The answer ends the task (the loop's next turn finishes it, before anything else):
    // its checkpoint rides on the end's commit.
    run.final_step = std::move(checkpoint);
  } else {
    auto saved = co_await store_.save_model_step(std::move(checkpoint));
    if (saved.ok() && !saved.value().ok())
      co_await bill_fenced_answer(run, step, answer.usage, answer.usage_estimated);
    if (auto stop = co_await on_store_failure(run, saved, "model step"))
      co_return *stop;
  }
  // Billed: the totals the result event reports (input, cached input and output, as the
  // task row sums them).
  run.totals.usage.input += answer.usage.input;
  run.totals.usage.cached_input += answer.usage.cached_input;
  run.totals.usage.output += answer.usage.output;
  run.totals.cost_micros += cost.micros;
  run.totals.currency = cost.currency;
  if (run.budget_micros > 0 || spec.max_cost_micros) {
    const std::int64_t in_budget = exchange_.to_target(cost.micros, cost.currency)
                                       .value_or(std::numeric_limits<std::int64_t>::max());
    if (__builtin_add_overflow(run.budget_spent_micros, in_budget, &run.budget_spent_micros))
      run.budget_spent_micros = std::numeric_limits<std::int64_t>::max();
    if (__builtin_add_overflow(run.task_cost_micros, in_budget, &run.task_cost_micros))
      run.task_cost_micros = std::numeric_limits<std::int64_t>::max();
  }
  if (!answer.content.empty() && run.streamed_step != step) {
    // The model's text of the step, always as {"text": ...} (react_json text is JSON too),
    // unless it came as a stream (then its pieces went out as they came).
    emit_progress(run, "delta", step, {}, text_event_json(answer.content));
  }
  loop.step = step + 1;
  run.steps = loop.step;
  co_return std::nullopt;
}

// A model call under way. It runs as its own coroutine owning what it reads, so that a
// cancellation can stop waiting for it at once; an abandoned call ends at its own deadline.
struct TaskRunner::ModelCall {
  std::shared_ptr<const std::vector<Message>> messages;
  std::string messages_json;
  std::shared_ptr<const ToolSet> tools;
  std::optional<Result<ModelReply>> reply;
  asio::steady_timer* waiter = nullptr;
  // Attempts the provider may have charged for whose answers are not the reply.
  std::vector<LostCharge> lost;
  // The run stopped waiting: the call bills what it cost itself when it ends.
  bool abandoned = false;
  ports::Charges step;  // the run's step, for that bill
  // A try was recorded before it was sent (ports::CallSent): the call's end settles it.
  bool recorded = false;
  // The first try's record was written before the call began (with the tool results).
  bool prerecorded = false;
  // The store's answer when a try could not be recorded (and so was not sent).
  std::optional<Result<Status>> unrecorded;
};

std::function<asio::awaitable<Status>(std::int64_t)> TaskRunner::record_before_send(
    std::shared_ptr<ModelCall> call, std::int64_t incarnation) {
  return [this, call, incarnation](std::int64_t input_tokens) -> asio::awaitable<Status> {
    if (call->prerecorded) {
      // The first try's record was written with the tool results before the call.
      call->prerecorded = false;
      co_return ok_status();
    }
    if (!call->lost.empty()) {
      std::vector<LostCharge> earlier = std::move(call->lost);
      call->lost.clear();
      co_await bill_unreconciled(call->step, std::move(earlier));
    }
    ports::CallSent sent = call_record(call->step, input_tokens, incarnation);
    auto recorded = co_await store_.record_call(std::move(sent));
    if (recorded.ok() && recorded.value().ok()) {
      call->recorded = true;
      co_return ok_status();
    }
    Error why = recorded.ok() ? recorded.value().error() : recorded.error();
    call->unrecorded = std::move(recorded);
    co_return why;
  };
}

asio::awaitable<std::optional<Result<ModelReply>>> TaskRunner::call_model(
    Run& run, std::shared_ptr<const std::vector<Message>> messages, std::string messages_json,
    std::shared_ptr<const ToolSet> tools, TimePoint deadline, std::int64_t max_output_tokens,
    bool prerecorded) {
  auto call = std::make_shared<ModelCall>();
  call->messages = std::move(messages);
  call->messages_json = std::move(messages_json);
  call->tools = std::move(tools);
  call->step = charges_of(run, run.step);
  call->prerecorded = prerecorded;
  call->recorded = prerecorded;
  auto executor = co_await asio::this_coro::executor;
  ports::ModelRequest request{run.claimed.spec.model, call->messages.get(), &call->tools->schemas,
                              call->messages_json,    call->tools->json,    deadline,
                              run.traceparent,        run.encoder.echo(),   &call->lost,
                              max_output_tokens};
  // A model that streams: its text reaches the task's event stream as the model writes it.
  // Not once the run stopped waiting (the run may be gone by then).
  request.on_text = [this, call, running = &run, step = run.step](std::string_view text) {
    if (call->abandoned)
      return;
    running->streamed_step = step;
    emit_progress(*running, "delta", step, {}, text_event_json(text));
  };
  request.call_id =
      run.task_id + ":" + std::to_string(run.claimed.attempt) + ":" + std::to_string(run.step);
  // Each try is recorded before it is sent, with the charges of the tries lost before it, so
  // that nothing it costs is lost with the worker (docs/billing.md, "Calls in flight when a
  // worker stops").
  request.before_send = record_before_send(call, run.incarnation);
  asio::co_spawn(
      executor,
      [this, call, request = std::move(request),
       &model = model_]() mutable -> asio::awaitable<void> {
        auto reply = co_await model.complete(std::move(request));
        if (call->abandoned) {
          // Nobody reads the reply any more; what the call cost is billed all the same.
          std::vector<LostCharge> lost = std::move(call->lost);
          if (reply.ok()) {
            LostCharge answered;
            answered.usage = reply.value().usage;
            answered.estimated = reply.value().usage_estimated;
            answered.reason = ChargeLoss::kAbandoned;
            lost.push_back(answered);
          }
          ports::Charges of_call = call->step;
          of_call.settles_call = call->recorded;
          co_await bill_unreconciled(std::move(of_call), std::move(lost));
          co_return;
        }
        call->reply = std::move(reply);
        if (call->waiter != nullptr)
          call->waiter->cancel();
      },
      [call](std::exception_ptr error) {
        if (error && !call->reply) {
          call->reply = Result<ModelReply>(Error{ErrorKind::kTransient, "model call failed"});
          if (call->waiter != nullptr)
            call->waiter->cancel();
        }
      });
  // The call's own deadline bounds it; the timer is a backstop a little past it.
  const TimePoint backstop = deadline + std::chrono::seconds(1);
  asio::steady_timer timer(executor);
  call->waiter = &timer;
  run.control->waiting = &timer;
  while (!call->reply && !run.control->interrupted() && clock_.now() < backstop) {
    timer.expires_after(backstop - clock_.now());
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  call->waiter = nullptr;
  run.control->waiting = nullptr;
  if (!call->reply) {
    call->abandoned = true;
    co_return std::nullopt;
  }
  run.call_unrecorded = std::move(call->unrecorded);
  // An answer is billed by its checkpoint, which settles the call's record; a call that
  // failed settles it here, with what its last try may have cost (maybe nothing: the
  // provider refused it).
  ports::Charges of_call = call->step;
  of_call.settles_call = call->recorded && !call->reply->ok();
  if (!call->lost.empty() || of_call.settles_call)
    co_await bill_unreconciled(std::move(of_call), std::move(call->lost));
  co_return std::move(call->reply);
}

ports::Charges TaskRunner::charges_of(const Run& run, int step) {
  ports::Charges charges;
  charges.task_id = run.task_id;
  charges.attempt = run.claimed.attempt;
  charges.step = step;
  charges.user_id = run.claimed.spec.user_id;
  charges.batch_id = run.claimed.spec.batch_id;
  charges.model = run.claimed.spec.model;
  charges.traceparent = run.traceparent;
  return charges;
}

asio::awaitable<void> TaskRunner::bill_unreconciled(ports::Charges charges,
                                                    std::vector<LostCharge> lost) {
  if (lost.empty() && !charges.settles_call)
    co_return;
  const auto now = clock_.wall_now();
  std::string what;
  std::vector<std::int64_t> micros;
  for (const LostCharge& charge : lost) {
    const billing::Money cost = prices_.cost(charges.model, charge.usage, now);
    micros.push_back(cost.micros);
    what += (what.empty() ? "" : "; ") + std::string(to_string(charge.reason)) + " " +
            std::to_string(charge.usage.input) + "+" + std::to_string(charge.usage.output) +
            " tokens" + (charge.estimated ? " (estimated)" : "");
    charges.charges.push_back(
        ports::UnreconciledCharge{charge, billing::format_micros(cost.micros), cost.currency});
  }
  // The log line's context and the metrics outlive what the store is given: copies.
  const std::vector<ports::UnreconciledCharge> billed = charges.charges;
  const std::string task_id = charges.task_id;
  const std::string user_id = charges.user_id;
  const std::string batch_id = charges.batch_id;
  const std::string model = charges.model;
  const std::string traceparent = charges.traceparent;
  const log::TaskContext task{task_id,         user_id,      batch_id,
                              charges.attempt, charges.step, log::trace_id_of(traceparent)};
  auto recorded = co_await store_.record_charges(std::move(charges));
  if (recorded.ok() && !recorded.value().ok() &&
      recorded.value().error().kind == ErrorKind::kConflict) {
    // The call's record was gone: the scheduler billed it (its estimate) when this worker's
    // liveness lapsed. Billed once, not twice.
    if (!billed.empty())
      log::warn("worker", task,
                "model charges already billed by the scheduler (this worker's liveness had "
                "lapsed); not billed again: " +
                    what,
                {{"model", model}});
    co_return;
  }
  if (!recorded.ok() || !recorded.value().ok()) {
    const std::string why =
        !recorded.ok() ? recorded.error().message : recorded.value().error().message;
    log::error("worker", task, "unreconciled model charges not recorded (" + what + "): " + why,
               {{"model", model}});
    co_return;
  }
  if (billed.empty())
    co_return;
  for (std::size_t i = 0; i < billed.size(); ++i) {
    const ports::UnreconciledCharge& c = billed[i];
    metrics_.tokens(model, c.charge.usage);
    metrics_.cost(model, c.currency, micros[i]);
    metrics_.charge_unreconciled(model, c.charge.reason, c.charge.estimated);
  }
  log::info("worker", task, "unreconciled model charges billed: " + what, {{"model", model}});
}

billing::SpendDecision TaskRunner::spend_check(const Run& run, const config::ModelConfig& model,
                                               std::int64_t input_tokens) const {
  const TaskSpec& spec = run.claimed.spec;
  billing::SpendLimits limits;
  limits.max_tokens = spec.max_tokens;
  limits.max_cost_micros = spec.max_cost_micros;
  limits.budget_micros = run.budget_micros;
  limits.currency = exchange_.target();
  limits.month_zone = config_.billing.time_zone;
  billing::SpendSoFar spent;
  spent.task_tokens = run.totals.usage.input + run.totals.usage.output;
  spent.task_cost_micros = run.task_cost_micros;
  spent.month_micros = run.budget_spent_micros;
  billing::NextCall call;
  call.input_tokens = input_tokens;
  call.max_output_tokens = model.max_output_tokens;
  // The call at its most: the input as estimated and the whole output allowance, priced now.
  call.cost_micros = [&](std::int64_t input, std::int64_t output) {
    TokenUsage most;
    most.input = input;
    most.output = output;
    const billing::Money cost = prices_.cost(spec.model, most, clock_.wall_now());
    return exchange_.to_target(cost.micros, cost.currency)
        .value_or(std::numeric_limits<std::int64_t>::max());
  };
  return billing::check_spend(limits, spent, call);
}

}  // namespace agentfleet::worker
