// The end of a run: the task row, its totals, the last answer's checkpoint and the result
// event in one write, then the result announced; and the progress events of the run.
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "core/adapters/log.hpp"
#include "core/codec/json_text.hpp"
#include "core/codec/task_codec.hpp"
#include "worker/run_state.hpp"
#include "worker/task_runner.hpp"

namespace agentfleet::worker {

namespace asio = boost::asio;

asio::awaitable<RunOutcome> TaskRunner::finish(Run& run, TaskStatus status,
                                               std::optional<TaskResult> result, std::string error,
                                               std::optional<ErrorCode> code) {
  const TaskSpec& spec = run.claimed.spec;
  mark_ending(run);
  // Errors quote outside text (response excerpts); keep them storable.
  error = codec::sanitize_text(error);
  if (status == TaskStatus::kSucceeded)
    code.reset();
  else if (!code)
    code = ErrorCode::kInternal;
  // The result event, from the totals the run kept (what earlier attempts billed, plus each
  // model step it saved): the store writes it with the end, in the same statement.
  codec::ResultEvent event;
  event.task_id = run.task_id;
  event.user_id = spec.user_id;
  event.batch_id = spec.batch_id;
  event.status = status;
  event.result = result;
  event.error = error;
  event.error_code = code ? std::string(to_string(*code)) : std::string();
  event.attempt = run.claimed.attempt;
  event.steps = run.steps;
  event.tool_calls = run.tool_calls;
  event.usage = run.totals.usage;
  event.cost = billing::format_micros(run.totals.cost_micros);
  event.currency = run.totals.currency.empty() ? "CNY" : run.totals.currency;
  event.finished_at = codec::format_rfc3339(clock_.wall_now());
  const std::string event_json = codec::result_event_json(event);
  ports::TaskEnd end{run.task_id,  run.claimed.attempt, status,     result, error,
                     spec.user_id, run.traceparent,     event_json, code,   run.incarnation};
  // The answer that ended the task, if one did: its bill, should the end be fenced.
  std::optional<ports::ModelStep> last_step;
  if (run.final_step) {
    last_step = run.final_step;
    end.last_step = std::exchange(run.final_step, std::nullopt);
  }
  // A call recorded for this attempt but never sent: its record goes with the end. Should
  // the end not be stored, the run settles it (TaskRunner::execute).
  end.unsent_call_step = run.unsent_call_step;
  auto finished = co_await store_.finish(std::move(end));
  if (!finished.ok()) {
    // The last step, if any, was not written either: its call's record stays, billed when
    // this worker's incarnation ends (docs/billing.md).
    log::warn("worker", run.log_context(),
              "could not store the end " + std::string(to_string(status)) +
                  " (left for lease recovery): " + finished.error().message);
    co_return RunOutcome::kStoreUnavailable;
  }
  if (!finished.value().ok()) {
    log::warn("worker", run.log_context(),
              "lease taken over; the end " + std::string(to_string(status)) + " was not stored");
    if (last_step) {
      co_await bill_fenced_answer(run, last_step->step, last_step->ledger.usage,
                                  last_step->ledger.usage_estimated);
    }
    co_return RunOutcome::kLeaseLost;
  }
  const std::int64_t outbox_id = finished.value().value();
  run.unsent_call_step.reset();  // the end removed its record
  if (ended_)
    ended_(run.task_id, run.traceparent);
  metrics_.task_finished(status, result ? std::optional(result->type) : std::nullopt, code,
                         std::chrono::duration<double>(clock_.now() - run.claimed_at).count());
  if (error.empty()) {
    log::info(
        "worker", run.log_context(),
        std::string("finished ") + std::string(to_string(status)) +
            (result ? std::string(" ") + std::string(to_string(result->type)) : std::string()));
  } else {
    log::write(status == TaskStatus::kFailed ? "warn" : "info", "worker", run.log_context(),
               std::string("finished ") + std::string(to_string(status)),
               {{"error", error}, {"error_code", std::string(to_string(*code))}});
  }
  if (status != TaskStatus::kSucceeded) {
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
    const std::string text = error.empty() ? std::string(to_string(status)) : error;
    const std::string_view code_text = to_string(*code);
    w.StartObject();
    w.Key("text");
    w.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
    w.Key("error_code");
    w.String(code_text.data(), static_cast<rapidjson::SizeType>(code_text.size()));
    w.EndObject();
    emit_progress(run, "error", run.steps, {}, std::string(buffer.GetString(), buffer.GetSize()));
  }
  emit_progress(run, "done", run.steps, {}, event_json);

  // Announce now; if this fails the relay publishes the outbox row after its delay.
  ports::Headers headers;
  if (!run.traceparent.empty())
    headers.emplace_back("traceparent", run.traceparent);
  ports::OutMessage announcement{config_.kafka.topics.results, spec.user_id, event_json, headers};
  Status published = co_await publisher_.publish(std::move(announcement));
  if (published.ok()) {
    store_.announced(outbox_id);
  } else {
    log::warn("worker", run.log_context(),
              "result event not published yet (the relay will): " + published.error().message);
  }
  co_return RunOutcome::kFinished;
}

void TaskRunner::emit_progress(Run& run, std::string event, int step, std::string tool,
                               std::string data_json) {
  // Progress is best effort (the result event and the row are the truth), so it is
  // produced without waiting for the broker. Data that is not a JSON object is wrapped.
  rapidjson::Document data;
  if (!codec::parse_json(data, data_json) || !data.IsObject()) {
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
    w.StartObject();
    w.Key("text");
    w.String(data_json.c_str());
    w.EndObject();
    data_json.assign(buffer.GetString(), buffer.GetSize());
  }
  codec::ProgressEvent progress{
      run.task_id,         run.claimed.spec.user_id, run.progress_seq++,
      run.claimed.attempt, std::move(event),         step,
      std::move(tool),     std::move(data_json),     codec::format_rfc3339(clock_.wall_now())};
  publisher_.post(ports::OutMessage{config_.kafka.topics.events,
                                    run.claimed.spec.user_id,
                                    codec::progress_event_json(progress),
                                    {}});
}

}  // namespace agentfleet::worker
