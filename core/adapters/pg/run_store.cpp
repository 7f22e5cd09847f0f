#include "core/adapters/pg/run_store.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "core/adapters/log.hpp"
#include "core/adapters/pg/outbox_relay.hpp"
#include "core/adapters/pg/scheduler_session.hpp"
#include "core/adapters/pg/sql.hpp"
#include "core/billing/money.hpp"

namespace agentfleet::pg {

namespace asio = boost::asio;

namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

// How long published result events' rows are gathered before one statement removes them: a
// second (a quarter of the relay's delay when that is shorter, so that the relay does not
// find them due). The removal is on no task's path; gathered longer, it is a commit of its
// own (or a kind more in another batch's transaction) once a second instead of ten times.
constexpr auto kGatherAnnounced = std::chrono::milliseconds(1000);

std::chrono::milliseconds gather_announced(int relay_delay_s) {
  return std::max(std::chrono::milliseconds(10),
                  std::min(kGatherAnnounced, std::chrono::milliseconds(relay_delay_s * 250)));
}

// The order kinds are written in within a batch.
enum Rank {
  kClaims = 0,
  kToolSteps = 1,
  kModelSteps = 2,
  kToolResults = 3,
  kFinishes = 4,
  kCallsSent = 5
};

void key_string(Writer& w, const char* key, std::string_view value) {
  w.Key(key);
  w.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
}

// `json` is already JSON text (made by the codec): written into the array as it is.
void key_raw(Writer& w, const char* key, std::string_view json, rapidjson::Type type) {
  w.Key(key);
  if (json.empty())
    w.Null();
  else
    w.RawValue(json.data(), json.size(), type);
}

// A call's tokens, as the ledger and the unreconciled charges' statements read them.
void usage_fields(Writer& w, const TokenUsage& usage) {
  w.Key("input");
  w.Int64(usage.input);
  w.Key("cached");
  w.Int64(usage.cached_input);
  w.Key("output");
  w.Int64(usage.output);
  w.Key("reasoning");
  w.Int64(usage.reasoning);
}

// What a call's record holds beyond its task, attempt and step (record_calls, and the record
// save_tool_results writes with the results that lead to the call).
void call_record_fields(Writer& w, const ports::CallSent& call) {
  key_string(w, "user_id", call.user_id);
  key_string(w, "batch_id", call.batch_id);
  key_string(w, "model", call.model);
  w.Key("input");
  w.Int64(call.input_tokens);
  key_string(w, "cost", call.cost);
  key_string(w, "currency", call.currency);
}

// A model step's checkpoint and ledger row, as save_model_steps and finish_tasks read them.
void step_fields(Writer& w, const ports::ModelStep& m) {
  w.Key("step");
  w.Int(m.step);
  key_raw(w, "reply", m.reply_json, rapidjson::kObjectType);
  w.Key("latency_ms");
  w.Int(m.latency_ms);
  key_string(w, "user_id", m.ledger.user_id);
  key_string(w, "batch_id", m.ledger.batch_id);
  key_string(w, "model", m.ledger.model);
  usage_fields(w, m.ledger.usage);
  // A decimal string: Postgres reads it into numeric exactly.
  key_string(w, "cost", m.ledger.cost);
  key_string(w, "currency", m.ledger.currency);
  w.Key("estimated");
  w.Bool(m.ledger.usage_estimated);
}

std::string text_of(const rapidjson::StringBuffer& buffer) {
  return std::string(buffer.GetString(), buffer.GetSize());
}

Error lease_lost(const std::string& task_id) {
  return Error{ErrorKind::kLeaseLost, "task " + task_id + " is owned by a newer attempt"};
}

// The task ids the statement answered for (the ones still this attempt's).
std::set<std::string> ids_of(const pqxx::result& rows) {
  std::set<std::string> ids;
  for (const auto& row : rows)
    ids.insert(row[0].as<std::string>());
  return ids;
}

// Each write's answer: done, or its fence failed (another attempt owns the task).
template <typename Item>
std::vector<Status> fenced(const std::vector<const Item*>& items,
                           const std::set<std::string>& ours) {
  std::vector<Status> out;
  out.reserve(items.size());
  for (const Item* item : items)
    out.push_back(ours.count(item->task_id) ? ok_status() : Status(lease_lost(item->task_id)));
  return out;
}

// A task's tool allow-list from array_to_json(tools): nullopt for NULL (every tool).
std::optional<std::vector<std::string>> tool_list(const pqxx::field& field) {
  if (field.is_null())
    return std::nullopt;
  rapidjson::Document tools;
  tools.Parse(field.c_str());
  std::vector<std::string> out;
  if (tools.IsArray()) {
    for (const auto& t : tools.GetArray()) {
      if (t.IsString())
        out.emplace_back(t.GetString());
    }
  }
  return out;
}

// [[step, reply text, observations text], ...] as the claim statement aggregates them.
std::vector<ports::StepRecord> step_records(const pqxx::field& field) {
  std::vector<ports::StepRecord> steps;
  if (field.is_null())
    return steps;
  rapidjson::Document doc;
  doc.Parse(field.c_str());
  if (!doc.IsArray())
    return steps;
  for (const auto& s : doc.GetArray()) {
    if (!s.IsArray() || s.Size() != 3 || !s[0].IsInt() || !s[1].IsString() || !s[2].IsString())
      continue;
    steps.push_back(ports::StepRecord{s[0].GetInt(),
                                      std::string(s[1].GetString(), s[1].GetStringLength()),
                                      std::string(s[2].GetString(), s[2].GetStringLength())});
  }
  return steps;
}

ports::Claim read_claim(const pqxx::row& r) {
  if (!r[1].as<bool>()) {
    if (!r[32].as<bool>())
      return ports::Claim{ports::ClaimOutcome::kNotLive, {}};
    ports::Claim busy{
        r[2].as<bool>() ? ports::ClaimOutcome::kBusyOrDone : ports::ClaimOutcome::kUnknown, {}};
    busy.held_attempt = r[33].is_null() ? 0 : r[33].as<int>();
    return busy;
  }
  ports::ClaimedTask claimed;
  TaskSpec& s = claimed.spec;
  s.task_id = r[0].as<std::string>();
  s.user_id = r[3].as<std::string>();
  s.text = r[4].as<std::string>();
  s.model = r[5].as<std::string>();
  s.tools = tool_list(r[6]);
  s.timeout_s = r[7].as<int>();
  s.schedule_timeout_s = r[8].as<int>();
  s.max_steps = r[9].as<int>();
  s.priority = parse_priority(r[10].as<std::string>()).value_or(Priority::kInteractive);
  s.idempotency_key = r[11].as<std::string>();
  s.batch_id = r[12].as<std::string>();
  s.metadata.device_id = r[13].is_null() ? "" : r[13].as<std::string>();
  s.metadata.time_zone = r[14].is_null() ? "" : r[14].as<std::string>();
  s.metadata.locale = r[15].is_null() ? "" : r[15].as<std::string>();
  claimed.attempt = r[16].as<int>();
  claimed.remaining_ms = r[17].as<std::int64_t>();
  claimed.cancel_requested = r[18].as<bool>();
  claimed.schedule_expired = !r[19].is_null() && r[19].as<bool>();
  claimed.user_tier = r[20].as<std::string>();
  claimed.user_tool_permission = r[21].as<std::string>();
  claimed.queued_ms = r[22].as<std::int64_t>();
  s.strategy = parse_agent_strategy(r[23].as<std::string>());
  s.parent_task_id = r[24].as<std::string>();
  s.session_id = r[25].as<std::string>();
  claimed.totals.usage.input = r[26].as<std::int64_t>();
  claimed.totals.usage.cached_input = r[27].as<std::int64_t>();
  claimed.totals.usage.output = r[28].as<std::int64_t>();
  claimed.totals.cost_micros = r[29].as<std::int64_t>();
  claimed.totals.currency = r[30].as<std::string>();
  claimed.steps = step_records(r[31]);
  if (!r[34].is_null())
    claimed.user_monthly_budget_micros = r[34].as<std::int64_t>();
  if (!r[35].is_null())
    s.max_tokens = r[35].as<std::int64_t>();
  if (!r[36].is_null())
    s.max_cost_micros = r[36].as<std::int64_t>();
  claimed.first_call_recorded = r[37].as<bool>();
  return ports::Claim{ports::ClaimOutcome::kClaimed, std::move(claimed)};
}

}  // namespace

std::vector<ports::Claim> claim_tasks(pqxx::transaction_base& tx,
                                      const std::vector<ClaimRequest>& requests) {
  // A task asked for twice in one batch (two dispatch messages of it) is claimed once: the
  // other request finds it busy, as it would in the next batch.
  std::vector<ports::Claim> out(requests.size());
  std::map<std::string, std::size_t> first;
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartArray();
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const ClaimRequest& request = requests[i];
    if (!first.emplace(request.task_id, i).second)
      continue;
    w.StartObject();
    key_string(w, "task_id", request.task_id);
    key_string(w, "worker_id", request.worker_id);
    w.Key("incarnation");
    w.Int64(request.incarnation);
    w.Key("max_attempts");
    w.Int(request.max_attempts);
    w.EndObject();
  }
  w.EndArray();
  rapidjson::StringBuffer estimates_buffer;
  Writer e(estimates_buffer);
  e.StartArray();
  if (!requests.empty() && requests.back().first_calls) {
    for (const ports::FirstCallEstimate& estimate : *requests.back().first_calls) {
      e.StartObject();
      key_string(e, "model", estimate.model);
      key_string(e, "strategy", estimate.strategy);
      e.Key("prompt");
      e.Int64(estimate.prompt_tokens);
      e.Key("rate");
      e.Int64(estimate.rate);
      key_string(e, "currency", estimate.currency);
      e.EndObject();
    }
  }
  e.EndArray();
  for (const auto& row :
       exec_named(tx, "claim_tasks", text_of(buffer), text_of(estimates_buffer))) {
    auto it = first.find(row[0].as<std::string>());
    if (it != first.end())
      out[it->second] = read_claim(row);
  }
  return out;
}

namespace {
// A task's checkpoints in step order.
std::vector<ports::StepRecord> step_records(pqxx::work& tx, const std::string& task_id) {
  auto rows = exec_named(tx, "task_steps", task_id);
  std::vector<ports::StepRecord> steps;
  steps.reserve(rows.size());
  for (const auto& row : rows)
    steps.push_back(
        ports::StepRecord{row[0].as<int>(), row[1].as<std::string>(), row[2].as<std::string>()});
  return steps;
}

// The fence of a single write: the row must still be ours.
bool still_ours(pqxx::work& tx, const std::string& task_id, int attempt, std::int64_t incarnation) {
  return !exec_named(tx, "still_ours", task_id, attempt, incarnation).empty();
}
}  // namespace

Status release_task(pqxx::work& tx, const std::string& task_id, int attempt,
                    std::int64_t incarnation) {
  if (!still_ours(tx, task_id, attempt, incarnation))
    return lease_lost(task_id);
  exec_named(tx, "release", task_id);
  return ok_status();
}

std::optional<ports::ParentTask> load_parent(pqxx::work& tx, const std::string& parent_id,
                                             const std::string& user_id) {
  auto rows = exec_named(tx, "parent", parent_id, user_id);
  if (rows.empty())
    return std::nullopt;
  const auto& r = rows[0];
  ports::ParentTask parent;
  parent.text = r[0].as<std::string>();
  parent.strategy = parse_agent_strategy(r[1].as<std::string>());
  parent.status = parse_task_status(r[2].as<std::string>()).value_or(TaskStatus::kQueued);
  if (const auto type = parse_result_type(r[3].as<std::string>())) {
    TaskResult result;
    result.type = *type;
    result.message = r[4].as<std::string>();
    rapidjson::Document options;
    options.Parse(r[5].c_str());
    if (options.IsArray()) {
      for (const auto& o : options.GetArray()) {
        if (o.IsString())
          result.options.emplace_back(o.GetString());
      }
    }
    parent.result = std::move(result);
  }
  parent.error = r[6].as<std::string>();
  parent.tools = tool_list(r[7]);
  parent.steps = step_records(tx, parent_id);
  return parent;
}

namespace {

class ClaimKind final : public WriteBatcher::Kind<ClaimRequest, ports::Claim> {
 public:
  int rank() const override { return kClaims; }
  std::vector<ports::Claim> apply(pqxx::transaction_base& tx,
                                  const std::vector<const ClaimRequest*>& items) override {
    std::vector<ClaimRequest> requests;
    requests.reserve(items.size());
    for (const ClaimRequest* item : items)
      requests.push_back(*item);
    return claim_tasks(tx, requests);
  }
};

class ModelStepKind final : public WriteBatcher::Kind<ports::ModelStep, Status> {
 public:
  int rank() const override { return kModelSteps; }
  std::vector<Status> apply(pqxx::transaction_base& tx,
                            const std::vector<const ports::ModelStep*>& items) override {
    rapidjson::StringBuffer buffer;
    Writer w(buffer);
    w.StartArray();
    for (const ports::ModelStep* m : items) {
      w.StartObject();
      key_string(w, "task_id", m->task_id);
      w.Key("attempt");
      w.Int(m->attempt);
      w.Key("incarnation");
      w.Int64(m->incarnation);
      step_fields(w, *m);
      w.EndObject();
    }
    w.EndArray();
    return fenced(items, ids_of(exec_named(tx, "save_model_steps", text_of(buffer))));
  }
};

class ToolResultsKind final : public WriteBatcher::Kind<ports::ToolResults, Status> {
 public:
  int rank() const override { return kToolResults; }
  std::vector<Status> apply(pqxx::transaction_base& tx,
                            const std::vector<const ports::ToolResults*>& items) override {
    rapidjson::StringBuffer buffer;
    Writer w(buffer);
    w.StartArray();
    for (const ports::ToolResults* t : items) {
      w.StartObject();
      key_string(w, "task_id", t->task_id);
      w.Key("attempt");
      w.Int(t->attempt);
      w.Key("incarnation");
      w.Int64(t->incarnation);
      w.Key("step");
      w.Int(t->step);
      key_raw(w, "observations", t->observations_json, rapidjson::kArrayType);
      key_raw(w, "trace", t->trace_json, rapidjson::kArrayType);
      w.Key("executed");
      w.Int(t->executed_calls);
      if (const auto& call = t->next_call) {
        w.Key("call_step");
        w.Int(call->step);
        call_record_fields(w, *call);
      }
      w.EndObject();
    }
    w.EndArray();
    return fenced(items, ids_of(exec_named(tx, "save_tool_results", text_of(buffer))));
  }
};

class ToolStepKind final : public WriteBatcher::Kind<ports::ToolStep, Status> {
 public:
  int rank() const override { return kToolSteps; }
  std::vector<Status> apply(pqxx::transaction_base& tx,
                            const std::vector<const ports::ToolStep*>& items) override {
    rapidjson::StringBuffer buffer;
    Writer w(buffer);
    w.StartArray();
    for (const ports::ToolStep* t : items) {
      w.StartObject();
      key_string(w, "task_id", t->task_id);
      w.Key("attempt");
      w.Int(t->attempt);
      w.Key("incarnation");
      w.Int64(t->incarnation);
      w.Key("step");
      w.Int(t->step);
      key_raw(w, "calls", t->calls_json, rapidjson::kObjectType);
      w.EndObject();
    }
    w.EndArray();
    return fenced(items, ids_of(exec_named(tx, "save_tool_steps", text_of(buffer))));
  }
};

}  // namespace

struct FinishItem {
  ports::TaskEnd end;
  std::string topic;
  int relay_delay_s = 10;
};

namespace {

class FinishKind final : public WriteBatcher::Kind<FinishItem, Result<std::int64_t>> {
 public:
  int rank() const override { return kFinishes; }
  std::vector<Result<std::int64_t>> apply(pqxx::transaction_base& tx,
                                          const std::vector<const FinishItem*>& items) override {
    rapidjson::StringBuffer buffer;
    Writer w(buffer);
    w.StartArray();
    for (const FinishItem* f : items) {
      const ports::TaskEnd& e = f->end;
      w.StartObject();
      key_string(w, "task_id", e.task_id);
      w.Key("attempt");
      w.Int(e.attempt);
      w.Key("incarnation");
      w.Int64(e.incarnation);
      key_string(w, "status", to_string(e.status));
      w.Key("result_type");
      if (e.result)
        w.String(std::string(to_string(e.result->type)).c_str());
      else
        w.Null();
      w.Key("message");
      if (e.result)
        w.String(e.result->message.data(),
                 static_cast<rapidjson::SizeType>(e.result->message.size()));
      else
        w.Null();
      w.Key("options");
      if (e.result) {
        w.StartArray();
        for (const std::string& option : e.result->options)
          w.String(option.data(), static_cast<rapidjson::SizeType>(option.size()));
        w.EndArray();
      } else {
        w.Null();
      }
      key_string(w, "error", e.error);
      key_string(w, "error_code", e.error_code ? to_string(*e.error_code) : std::string_view());
      key_string(w, "topic", f->topic);
      key_string(w, "key", e.user_id);
      key_string(w, "payload", e.result_event);
      key_string(w, "traceparent", e.traceparent);
      w.Key("relay_delay_s");
      w.Int(f->relay_delay_s);
      if (e.last_step)
        step_fields(w, *e.last_step);
      if (e.unsent_call_step) {
        w.Key("unsent_step");
        w.Int(*e.unsent_call_step);
      }
      w.EndObject();
    }
    w.EndArray();
    std::map<std::string, std::int64_t> ids;
    for (const auto& row : exec_named(tx, "finish_tasks", text_of(buffer)))
      ids[row[0].as<std::string>()] = row[1].as<std::int64_t>();
    std::vector<Result<std::int64_t>> out;
    out.reserve(items.size());
    for (const FinishItem* f : items) {
      auto it = ids.find(f->end.task_id);
      out.push_back(it != ids.end() ? Result<std::int64_t>(it->second)
                                    : Result<std::int64_t>(lease_lost(f->end.task_id)));
    }
    return out;
  }
};

class CallSentKind final : public WriteBatcher::Kind<ports::CallSent, Status> {
 public:
  int rank() const override { return kCallsSent; }
  std::vector<Status> apply(pqxx::transaction_base& tx,
                            const std::vector<const ports::CallSent*>& items) override {
    rapidjson::StringBuffer buffer;
    Writer w(buffer);
    w.StartArray();
    for (const ports::CallSent* c : items) {
      w.StartObject();
      key_string(w, "task_id", c->task_id);
      w.Key("attempt");
      w.Int(c->attempt);
      w.Key("incarnation");
      w.Int64(c->incarnation);
      w.Key("step");
      w.Int(c->step);
      call_record_fields(w, *c);
      w.EndObject();
    }
    w.EndArray();
    return fenced(items, ids_of(exec_named(tx, "record_calls", text_of(buffer))));
  }
};

}  // namespace

struct RunStore::Kinds {
  ClaimKind claims;
  ModelStepKind model_steps;
  ToolResultsKind tool_results;
  ToolStepKind tool_steps;
  FinishKind finishes;
  CallSentKind calls_sent;
};

RunStore::RunStore(asio::any_io_executor executor, WriteBatcher& writes, RunStoreOptions options)
    : executor_(std::move(executor)),
      writes_(writes),
      options_(std::move(options)),
      kinds_(std::make_unique<Kinds>()) {}

RunStore::~RunStore() = default;

asio::awaitable<Result<ports::Claim>> RunStore::claim(
    std::string task_id, std::shared_ptr<const ports::FirstCallEstimates> first_calls) {
  const std::int64_t incarnation = incarnation_;
  if (incarnation == 0)
    co_return Error{ErrorKind::kTransient, "this worker holds no liveness to claim under"};
  ClaimRequest request{task_id, options_.worker_id, incarnation, options_.max_attempts,
                       std::move(first_calls)};
  auto claim = co_await writes_.run(std::move(task_id), kinds_->claims, std::move(request));
  if (claim.ok())
    claim.value().incarnation = incarnation;
  co_return claim;
}

asio::awaitable<Result<Status>> RunStore::save_model_step(ports::ModelStep step) {
  std::string key = step.task_id;
  co_return co_await writes_.run(std::move(key), kinds_->model_steps, std::move(step));
}

asio::awaitable<Result<Status>> RunStore::save_tool_results(ports::ToolResults results) {
  std::string key = results.task_id;
  co_return co_await writes_.run(std::move(key), kinds_->tool_results, std::move(results));
}

asio::awaitable<Result<Status>> RunStore::save_tool_step(ports::ToolStep step) {
  std::string key = step.task_id;
  co_return co_await writes_.run(std::move(key), kinds_->tool_steps, std::move(step));
}

asio::awaitable<Result<Status>> RunStore::record_charges(ports::Charges charges) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartArray();
  for (const ports::UnreconciledCharge& c : charges.charges) {
    w.StartObject();
    key_string(w, "task_id", charges.task_id);
    w.Key("attempt");
    w.Int(charges.attempt);
    w.Key("step");
    w.Int(charges.step);
    key_string(w, "user_id", charges.user_id);
    key_string(w, "batch_id", charges.batch_id);
    key_string(w, "model", charges.model);
    usage_fields(w, c.charge.usage);
    w.Key("estimated");
    w.Bool(c.charge.estimated);
    key_string(w, "cost", c.cost);
    key_string(w, "currency", c.currency);
    key_string(w, "reason", to_string(c.charge.reason));
    w.EndObject();
  }
  w.EndArray();
  std::string rows = text_of(buffer);
  // Named, not a temporary in the co_await: GCC 12 destroys such temporaries twice.
  auto write = [&rows, &charges](pqxx::work& tx) {
    if (!charges.settles_call) {
      exec_named0(tx, "record_charges", rows);
      return Status(ok_status());
    }
    // The call's record decides: there, it is settled with these charges; gone, the
    // scheduler billed the call already.
    const bool was_there =
        exec_named1(tx, "settle_call", rows, charges.task_id, charges.attempt, charges.step)[0]
            .as<bool>();
    return was_there
               ? Status(ok_status())
               : Status(Error{ErrorKind::kConflict, "model call of task " + charges.task_id +
                                                        " step " + std::to_string(charges.step) +
                                                        " was billed by the scheduler already"});
  };
  co_return co_await writes_.run(charges.task_id, std::move(write));
}

asio::awaitable<Result<Status>> RunStore::record_call(ports::CallSent call) {
  std::string key = call.task_id;
  co_return co_await writes_.run(std::move(key), kinds_->calls_sent, std::move(call));
}

asio::awaitable<Result<Result<std::int64_t>>> RunStore::finish(ports::TaskEnd end) {
  std::string key = end.task_id;
  FinishItem item{std::move(end), options_.results_topic, options_.relay_delay_s};
  co_return co_await writes_.run(std::move(key), kinds_->finishes, std::move(item));
}

asio::awaitable<Result<Status>> RunStore::release(std::string task_id, int attempt,
                                                  std::int64_t incarnation) {
  co_return co_await writes_.run(task_id, [&task_id, attempt, incarnation](pqxx::work& tx) {
    return release_task(tx, task_id, attempt, incarnation);
  });
}

asio::awaitable<Result<std::optional<ports::ParentTask>>> RunStore::load_parent(
    std::string parent_id, std::string user_id) {
  co_return co_await writes_.run(std::string(), [&parent_id, &user_id](pqxx::work& tx) {
    return pg::load_parent(tx, parent_id, user_id);
  });
}

asio::awaitable<Result<billing::SpendByCurrency>> RunStore::month_spend(std::string user_id,
                                                                        std::string time_zone) {
  co_return co_await writes_.run(std::string(), [&user_id, &time_zone](pqxx::work& tx) {
    auto spent = pg::month_spend_micros(tx, {user_id}, time_zone);
    return spent.empty() ? billing::SpendByCurrency{} : std::move(spent.begin()->second);
  });
}

void RunStore::announced(std::int64_t id) {
  announced_.push_back(id);
  if (removing_)
    return;  // the removal under way takes it next
  removing_ = true;
  asio::co_spawn(
      executor_,
      [this]() -> asio::awaitable<void> {
        // A published event's row is not due for relay_delay_s: the rows published in the
        // next second go with it, one statement for all of them.
        asio::steady_timer gather(executor_, gather_announced(options_.relay_delay_s));
        boost::system::error_code ec;
        co_await gather.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        while (!announced_.empty()) {
          std::vector<std::int64_t> ids;
          ids.swap(announced_);
          auto removed = co_await writes_.run({}, [&ids](pqxx::work& tx) {
            delete_outbox_rows(tx, ids);
            return true;
          });
          // Rows left behind are published again by the relay after their delay: an
          // identical repeat of an event readers already have.
          if (!removed.ok())
            log::warn("worker",
                      "published result events left in the outbox: " + removed.error().message);
        }
        // In the same step as the check above: an id queued after it starts a removal.
        removing_ = false;
      },
      [this](std::exception_ptr error) {
        if (error)
          removing_ = false;  // it ended before its own reset
      });
}

}  // namespace agentfleet::pg
