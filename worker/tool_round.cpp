// A tool round: a plan tool step's row, the step's calls checked, sent with their idempotency keys
// (at most max_tool_calls_per_step at once), waited for until the deadline or an interruption, and
// written into the step's trace; their results saved.
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>

#include "core/adapters/log.hpp"
#include "core/codec/checkpoint_codec.hpp"
#include "core/codec/json_text.hpp"
#include "core/codec/task_codec.hpp"
#include "core/codec/tool_call_check.hpp"
#include "worker/run_state.hpp"
#include "worker/task_runner.hpp"

namespace agentfleet::worker {

namespace asio = boost::asio;

namespace {
// First `limit` code points of `text`, for the trace.
std::string truncate_chars(const std::string& text, int limit) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      if (count == static_cast<std::size_t>(limit))
        return text.substr(0, i) + "…";
      ++count;
    }
  }
  return text;
}

// The error code of an observation's {"error":{"code":...}}, or `fallback`.
std::string error_code_of(const std::string& content, std::string fallback = "error") {
  rapidjson::Document error;
  if (codec::parse_json(error, content) && error.IsObject() && error.HasMember("error") &&
      error["error"].IsObject() && error["error"].HasMember("code") &&
      error["error"]["code"].IsString()) {
    return error["error"]["code"].GetString();
  }
  return fallback;
}
}  // namespace

asio::awaitable<std::optional<RunOutcome>> TaskRunner::tool_round(Run& run, Loop& loop) {
  const TaskSpec& spec = run.claimed.spec;
  auto& calls = std::get<react::CallTools>(loop.next);
  if (calls.own_checkpoint && !loop.tool_row_written) {
    // A plan tool step is recorded with its calls before they run, as a model step is, so
    // every side effect belongs to a checkpointed step.
    const std::string row = codec::tool_step_checkpoint_json(calls.calls);
    // Named, not a temporary in the co_await: GCC 12 destroys such temporaries twice.
    ports::ToolStep tool_step{run.task_id, run.claimed.attempt, loop.step, row, run.incarnation};
    auto written = co_await store_.save_tool_step(std::move(tool_step));
    if (auto stop = co_await on_store_failure(run, written, "tool step"))
      co_return *stop;
    ++loop.step;
    run.steps = loop.step;
    run.step = loop.step - 1;
    loop.tool_row_written = true;
  }
  // A step whose tools ran before a crash but were not checkpointed runs them again with
  // the same idempotency keys, so their side effects happen once.
  const int tools_step = loop.step - 1;
  std::string trace;
  ToolsRun ran = co_await run_tools(run, tools_step, calls, loop.replayed_calls, &trace);
  loop.replayed_calls = false;  // every later call is this run's own
  if (!ran.complete) {
    if (run.control->lease_lost)
      co_return RunOutcome::kLeaseLost;  // another attempt owns it: nothing is written
    // Cut short by a cancel or the deadline: what the tools did before the end is in the
    // trace and the count (with no observations, so a replay would call them again, with
    // the same keys).
    ports::ToolResults done_so_far{run.task_id,    run.claimed.attempt, tools_step,
                                   std::string(),  std::move(trace),    ran.answered,
                                   run.incarnation};
    auto saved = co_await store_.save_tool_results(std::move(done_so_far));
    if (auto stop = co_await on_store_failure(run, saved, "tool results"))
      co_return *stop;
    run.tool_calls += ran.answered;
    if (auto stop = co_await stop_requested(run, false))
      co_return *stop;
    co_return co_await finish(
        run, TaskStatus::kTimedOut, std::nullopt,
        "deadline of " + std::to_string(spec.timeout_s) + " s passed during tool calls",
        ErrorCode::kDeadline);
  }
  const std::string obs_json = codec::observations_json(ran.observations);
  const int executed = static_cast<int>(calls.calls.size());
  ports::ToolResults results{run.task_id,    run.claimed.attempt, tools_step,
                             obs_json,       std::move(trace),    executed,
                             run.incarnation};
  // The strategy reads the results before they are written: when they lead to a model call
  // the spend check allows, that call's record rides on their write, and the call is sent
  // without a commit of its own (`calls` is not used past this point: `next` replaces it).
  loop.next = loop.strategy->on_tool_results(calls, std::move(ran.observations));
  bool carries_record = false;
  if (std::holds_alternative<react::CallModel>(loop.next)) {
    loop.prepared = prepare_call(run, loop);
    if (!loop.prepared->spend.stop) {
      results.next_call =
          call_record(charges_of(run, loop.step), loop.prepared->input.tokens, run.incarnation);
      carries_record = true;
    }
  }
  auto saved = co_await store_.save_tool_results(std::move(results));
  if (auto stop = co_await on_store_failure(run, saved, "tool results"))
    co_return *stop;
  if (carries_record)
    run.unsent_call_step = loop.step;
  loop.tool_row_written = false;
  run.tool_calls = loop.strategy->tool_calls();
  co_return std::nullopt;
}

// A step's calls as they go: shared with the call coroutines, which may outlive the run
// after an interruption.
struct TaskRunner::ToolBatch {
  struct Slot {
    ToolCall call;
    int index = 0;  // position among the assistant's tool calls: part of the idempotency key
    ports::ToolOutcome outcome;
    std::chrono::system_clock::time_point at;
    bool refused = false;  // never sent: permission or arguments
    bool unknown = false;  // an earlier attempt's call of a tool that is not idempotent
    bool sent = false;
    bool done = false;
  };
  std::vector<Slot> slots;
  std::size_t pending = 0;
  asio::steady_timer* waiter = nullptr;
};

asio::awaitable<TaskRunner::ToolsRun> TaskRunner::run_tools(Run& run, int step,
                                                            const react::CallTools& calls,
                                                            bool resumed, std::string* trace_json) {
  auto batch = std::make_shared<ToolBatch>();
  for (std::size_t i = 0; i < calls.calls.size(); ++i) {
    batch->slots.push_back(ToolBatch::Slot{calls.calls[i], calls.call_indices[i], {}, {}});
  }
  const std::vector<std::size_t> to_call = check_tool_calls(run, step, resumed, *batch);
  ToolsRun ran;
  ran.complete = co_await send_tool_calls(run, step, batch, to_call);
  *trace_json = tool_trace(run, step, *batch, calls, ran);
  co_return ran;
}

std::vector<std::size_t> TaskRunner::check_tool_calls(const Run& run, int step, bool resumed,
                                                      ToolBatch& batch) {
  // Permission and arguments are checked before anything is sent; a refused or bad call
  // is the model's to fix.
  std::vector<std::size_t> to_call;
  for (std::size_t i = 0; i < batch.slots.size(); ++i) {
    ToolBatch::Slot& slot = batch.slots[i];
    slot.at = clock_.wall_now();
    slot.outcome.observation.call_id = slot.call.id;
    slot.outcome.observation.tool = slot.call.name;
    auto schema = argument_schemas_.find(slot.call.name);
    if (auto refusal = codec::check_tool_call(
            slot.call, run.permitted,
            schema != argument_schemas_.end() ? schema->second.get() : nullptr)) {
      slot.outcome.observation.content = std::move(refusal->error_json);
      slot.refused = true;
      metrics_.tool_call(slot.call.name,
                         refusal->code == codec::kInvalidArguments
                             ? metrics::ToolOutcome::kInvalidArguments
                             : metrics::ToolOutcome::kRefused,
                         0);
      continue;
    }
    if (resumed && not_idempotent_.count(slot.call.name)) {
      // Sent again, it might act twice: the model is told to check before repeating it.
      slot.unknown = true;
      slot.outcome.observation.ok = false;
      slot.outcome.observation.content = react::tool_error_json(
          "outcome_unknown",
          "an earlier attempt of this task made this call and stopped before its answer was "
          "saved: it may or may not have taken effect. It was not sent again; check (for "
          "example by searching) before repeating it.");
      metrics_.tool_call(slot.call.name, metrics::ToolOutcome::kOutcomeUnknown, 0);
      const std::string key =
          run.task_id + ":" + std::to_string(step) + ":" + std::to_string(slot.index);
      log::warn("worker", run.log_context(),
                "tool call not sent again: an earlier attempt may have made it (outcome unknown)",
                {{"tool", slot.call.name}, {"idempotency_key", key}});
      continue;
    }
    to_call.push_back(i);
  }
  return to_call;
}

asio::awaitable<bool> TaskRunner::send_tool_calls(Run& run, int step,
                                                  std::shared_ptr<ToolBatch> batch,
                                                  const std::vector<std::size_t>& to_call) {
  const TaskSpec& spec = run.claimed.spec;
  auto executor = co_await asio::this_coro::executor;
  // At most max_tool_calls_per_step calls of one step run at once.
  const std::size_t window =
      static_cast<std::size_t>(std::max(1, config_.worker.max_tool_calls_per_step));
  const TimePoint backstop = run.deadline + std::chrono::seconds(1);
  asio::steady_timer timer(executor);
  bool complete = true;
  for (std::size_t begin = 0; begin < to_call.size() && complete; begin += window) {
    const std::size_t end = std::min(to_call.size(), begin + window);
    batch->pending = end - begin;
    for (std::size_t k = begin; k < end; ++k) {
      const std::size_t i = to_call[k];
      ToolBatch::Slot& slot = batch->slots[i];
      slot.sent = true;
      emit_progress(run, "action", step, slot.call.name, slot.call.arguments);
      ports::ToolInvocation invocation{
          run.task_id,
          spec.user_id,
          spec.metadata.device_id,
          slot.call.name,
          slot.call.arguments,
          run.task_id + ":" + std::to_string(step) + ":" + std::to_string(slot.index),
          run.deadline,
          run.traceparent,
          run.claimed.attempt};
      asio::co_spawn(
          executor, tools_.call(std::move(invocation)),
          [batch, i, &metrics = metrics_](std::exception_ptr error, ports::ToolOutcome out) {
            ToolBatch::Slot& done = batch->slots[i];
            if (error) {
              out.observation.ok = false;
              out.observation.content = react::tool_error_json("internal", "tool call failed");
            }
            const bool timed_out = !out.observation.ok &&
                                   out.observation.content.find("\"timeout\"") != std::string::npos;
            metrics.tool_call(done.call.name,
                              out.observation.ok ? metrics::ToolOutcome::kOk
                              : timed_out        ? metrics::ToolOutcome::kTimeout
                                                 : metrics::ToolOutcome::kError,
                              std::chrono::duration<double>(out.latency).count());
            out.observation.call_id = done.call.id;
            out.observation.tool = done.call.name;
            done.outcome = std::move(out);
            done.done = true;
            if (--batch->pending == 0 && batch->waiter != nullptr)
              batch->waiter->cancel();
          });
    }
    batch->waiter = &timer;
    run.control->waiting = &timer;
    while (batch->pending > 0 && !run.control->interrupted() && clock_.now() < backstop) {
      timer.expires_after(backstop - clock_.now());
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    batch->waiter = nullptr;
    run.control->waiting = nullptr;
    // Interrupted, or past the deadline: what answered is kept (the caller saves it).
    complete = batch->pending == 0;
  }
  co_return complete;
}

std::string TaskRunner::tool_trace(Run& run, int step, ToolBatch& batch,
                                   const react::CallTools& calls, ToolsRun& ran) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartArray();
  // A sent call as the trace names it: its id, its tool and its arguments.
  auto call_keys = [&w](const ToolCall& call) {
    w.Key("call_id");
    w.String(call.id.c_str());
    w.Key("tool");
    w.String(call.name.c_str());
    w.Key("arguments");
    w.String(call.arguments.c_str());
  };
  for (ToolBatch::Slot& slot : batch.slots) {
    const ToolObservation& o = slot.outcome.observation;
    const bool refused = slot.refused;
    if (!refused && !slot.unknown && !slot.sent)
      continue;  // cut short before its window started: never sent, not shown
    if (!refused && !slot.unknown && !slot.done) {
      // Sent, and no answer before the run stopped: it may or may not have acted.
      w.StartObject();
      call_keys(slot.call);
      w.Key("status");
      w.String("no_answer");
      w.Key("result");
      w.String(run.control->cancel ? "no answer before the task was cancelled"
                                   : "no answer before the task's deadline");
      w.Key("at");
      const std::string at = codec::format_rfc3339(slot.at);
      w.String(at.c_str());
      w.EndObject();
      continue;
    }
    if (slot.done)
      ++ran.answered;
    if (!o.ok && !slot.unknown) {
      const std::string code = error_code_of(o.content);
      if (refused) {
        log::info("worker", run.log_context(), "tool call refused",
                  {{"tool", slot.call.name}, {"code", code}});
      } else {
        const std::string excerpt = truncate_chars(o.content, 300);
        const std::string status = std::to_string(slot.outcome.http_status);
        log::warn("worker", run.log_context(), "tool call failed",
                  {{"tool", slot.call.name},
                   {"code", code},
                   {"http_status", status},
                   {"error", excerpt}});
      }
    }
    emit_progress(run, "execution", step, slot.call.name,
                  std::string("{\"ok\":") + (o.ok ? "true" : "false") + "}");
    w.StartObject();
    call_keys(slot.call);
    w.Key("status");
    w.String(o.ok ? "ok" : refused ? "refused" : slot.unknown ? "outcome_unknown" : "error");
    w.Key("http_status");
    w.Int(slot.outcome.http_status);
    w.Key("result");
    const std::string shown = truncate_chars(o.content, config_.worker.trace_result_chars);
    w.String(shown.c_str());
    w.Key("latency_ms");
    w.Int64(slot.outcome.latency.count());
    w.Key("at");
    const std::string at = codec::format_rfc3339(slot.at);
    w.String(at.c_str());
    w.EndObject();
    ran.observations.push_back(o);
  }
  for (const ToolObservation& refused : calls.refused) {
    metrics_.tool_call(refused.tool, metrics::ToolOutcome::kRefused, 0);
    log::info("worker", run.log_context(), "tool call refused",
              {{"tool", refused.tool}, {"code", error_code_of(refused.content)}});
    // A refusal that names no tool (the synthetic call answering a react_json reply that
    // could not be read) shows its reason, the error code, where the tool would be.
    const std::string tool =
        refused.tool.empty() ? error_code_of(refused.content, "refused") : refused.tool;
    w.StartObject();
    w.Key("call_id");
    w.String(refused.call_id.c_str());
    w.Key("tool");
    w.String(tool.c_str());
    w.Key("status");
    w.String("refused");
    w.Key("result");
    const std::string shown = truncate_chars(refused.content, config_.worker.trace_result_chars);
    w.String(shown.c_str());
    w.EndObject();
  }
  w.EndArray();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace agentfleet::worker
