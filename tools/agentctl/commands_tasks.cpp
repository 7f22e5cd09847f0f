// One task over HTTP: submit, status, wait, cancel, list, and `tail --task` (its
// server-sent events).
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <optional>
#include <tuple>

#include "core/codec/json_text.hpp"
#include "tools/agentctl/commands.hpp"
#include "tools/agentctl/json_fields.hpp"
#include "tools/agentctl/outcomes.hpp"
#include "tools/agentctl/task_events.hpp"
#include "tools/agentctl/views.hpp"

namespace agentfleet::agentctl {

namespace {
using Clock = std::chrono::steady_clock;

const char* const kStatuses[] = {"queued", "dispatched", "running",  "succeeded",
                                 "failed", "timed_out",  "cancelled"};

bool is_terminal(const std::string& status) {
  return status == "succeeded" || status == "failed" || status == "timed_out" ||
         status == "cancelled";
}

std::string task_path(const std::string& id) {
  return "/v1/tasks/" + path_segment(id);
}

void show_task(const Context& ctx, const rapidjson::Value& task, const std::string& body,
               bool trace) {
  print(ctx.settings.json ? body + "\n" : format_task(task, trace));
}

// Long polls (at most 30 s each) until the task ends or `wait_timeout_s` passes (0: no
// bound); shows it; the exit code of its status (7 when it had not ended).
int wait_and_show(const Context& ctx, const std::string& id, std::int64_t wait_timeout_s,
                  bool trace) {
  const auto started = Clock::now();
  const auto until = wait_timeout_s > 0 ? started + std::chrono::seconds(wait_timeout_s)
                                        : Clock::time_point::max();
  for (;;) {
    std::int64_t wait_s = 30;
    if (wait_timeout_s > 0) {
      // Rounded up: a last part of a second is one more long poll, not a burst of ?wait=0.
      const auto left = std::chrono::ceil<std::chrono::seconds>(until - Clock::now()).count();
      wait_s = std::clamp<std::int64_t>(left, 1, 30);
    }
    const std::string target = task_path(id) + "?wait=" + std::to_string(wait_s);
    auto response = ctx.api.get(target, std::chrono::seconds(wait_s));
    ctx.api.check(response, "GET", target);
    auto doc = ApiClient::parse(response, target);
    const std::string status = json::str(doc, "status");
    if (is_terminal(status) || Clock::now() >= until) {
      show_task(ctx, doc, response.body, trace);
      if (!is_terminal(status)) {
        note("task " + id + " is still " + status + " after " + std::to_string(wait_timeout_s) +
             " s; `agentctl wait " + id + "` goes on waiting");
      }
      return exit_code_for_task_status(status);
    }
  }
}

void member(rapidjson::Writer<rapidjson::StringBuffer>& w, const char* name,
            const std::string& value) {
  w.Key(name);
  w.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
}

// The instruction: the argument or --text, one of them (UsageError naming `command`).
std::string text_argument(const Invocation& inv, const std::string& command) {
  if (!inv.args.empty() && inv.has("--text"))
    throw UsageError(command + ": give the text as the argument or with --text, not both");
  std::string text = inv.args.empty() ? inv.value("--text") : inv.args[0];
  if (text.empty())
    throw UsageError(command + ": the text is required (the argument or --text)");
  return text;
}

// "tools": the --tool values, when any was given (the task's allow-list).
void tools_member(rapidjson::Writer<rapidjson::StringBuffer>& w, const Invocation& inv) {
  if (!inv.has("--tool"))
    return;
  w.Key("tools");
  w.StartArray();
  for (const auto& tool : inv.values("--tool"))
    w.String(tool.data(), static_cast<rapidjson::SizeType>(tool.size()));
  w.EndArray();
}

std::string choice(const Invocation& inv, const std::string& name,
                   std::initializer_list<const char*> allowed) {
  const std::string value = inv.value(name);
  if (value.empty())
    return value;
  std::string listed;
  for (const char* a : allowed) {
    if (value == a)
      return value;
    listed += (listed.empty() ? "" : ", ") + std::string(a);
  }
  throw UsageError(name + " must be one of " + listed + ", not '" + value + "'");
}
// POSTs a request that creates a task under `idempotency_key` (`what`: "task", "retry";
// `again`: the command to run again) and prints it (its id; the task with --json); with
// --wait, waits for it and shows it. When no answer came, the error says the request may
// have been stored and how to get it without a second one; `found` is the note for an
// answer that the key named a task already.
int post_task(Context& ctx, const std::string& target, const std::string& body,
              const std::string& idempotency_key, const std::string& what, const std::string& again,
              const std::string& found) {
  const Invocation& inv = ctx.inv;
  const std::int64_t wait_timeout = inv.integer("--wait-timeout-s", 300, 0, 30 * 86400);
  auto response = ctx.api.post(target, body);
  try {
    ctx.api.check(response, "POST", target);
  } catch (const CommandFailure& e) {
    // An answer, or a request that never went out (refused, a bad URL): nothing is unknown.
    if (response.ok() ||
        (response.status == 0 && response.error != http::ClientErrorKind::kTimeout &&
         response.error != http::ClientErrorKind::kProtocol))
      throw;
    throw CommandFailure(e.code, std::string(e.what()) + "; the " + what +
                                     " may have been stored: run the same " + again +
                                     " with --idempotency-key " + idempotency_key +
                                     " to get it rather than a second one");
  }
  auto doc = ApiClient::parse(response, target);
  const std::string id = json::str(doc, "task_id");
  if (response.status == 200)
    note(found + id);
  if (!inv.has("--wait")) {
    print(ctx.settings.json ? response.body + "\n" : id + "\n");
    return kExitOk;
  }
  if (!ctx.settings.json)
    note("task " + id + " submitted, waiting for its result");
  return wait_and_show(ctx, id, wait_timeout, false);
}
}  // namespace

std::string user_for(Context& ctx) {
  if (ctx.inv.has("--user"))
    return ctx.inv.required("--user");
  const std::string target = "/v1/whoami";
  auto response = ctx.api.get(target);
  ctx.api.check(response, "GET", target);
  const auto doc = ApiClient::parse(response, target);
  std::vector<std::string> users;
  if (const auto& ids = json::at(doc, "user_ids"); ids.IsArray()) {
    for (const auto& id : ids.GetArray()) {
      if (id.IsString())
        users.emplace_back(id.GetString(), id.GetStringLength());
    }
  }
  const bool any = json::flag(doc, "admin") || json::flag(doc, "any_user");
  if (!any && users.size() == 1)
    return users.front();
  const std::string command = ctx.inv.command ? ctx.inv.command->name + ": " : std::string();
  if (any) {
    throw UsageError(command + "--user is required: this API key acts for any user");
  }
  std::string names;
  for (const std::string& u : users)
    names += (names.empty() ? "" : ", ") + u;
  throw UsageError(command + "--user is required: this API key acts for " +
                   std::to_string(users.size()) + " users" +
                   (users.empty() ? std::string() : " (" + names + ")"));
}

int cmd_submit(Context& ctx) {
  const Invocation& inv = ctx.inv;
  const std::string user = user_for(ctx);
  const std::string text = text_argument(inv, "submit");
  const std::string priority = choice(inv, "--priority", {"interactive", "batch"});

  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  member(w, "user_id", user);
  member(w, "text", text);
  if (inv.has("--model"))
    member(w, "model", inv.value("--model"));
  if (!priority.empty())
    member(w, "priority", priority);
  for (const auto& [flag, name, hi] :
       {std::tuple<const char*, const char*, std::int64_t>{"--timeout-s", "timeout_s", 86400},
        {"--schedule-timeout-s", "schedule_timeout_s", 30 * 86400},
        {"--max-steps", "max_steps", 1000},
        {"--max-tokens", "max_tokens", 1'000'000'000}}) {
    if (auto n = inv.integer(flag, 1, hi)) {
      w.Key(name);
      w.Int64(*n);
    }
  }
  // A decimal string, as the API takes it: the server checks its form.
  if (inv.has("--max-cost"))
    member(w, "max_cost", inv.value("--max-cost"));
  // A key of agentctl's own when none is given: a submit whose answer was lost can be run
  // again with it and is stored once (the same key and body give the task stored first).
  const std::string idempotency_key =
      inv.has("--idempotency-key") ? inv.value("--idempotency-key") : "agentctl-" + new_uuid();
  member(w, "idempotency_key", idempotency_key);
  if (inv.has("--batch"))
    member(w, "batch_id", inv.value("--batch"));
  tools_member(w, inv);
  if (inv.has("--time-zone") || inv.has("--locale") || inv.has("--device-id")) {
    w.Key("metadata");
    w.StartObject();
    for (const auto& [flag, name] :
         {std::pair<const char*, const char*>{"--time-zone", "time_zone"},
          {"--locale", "locale"},
          {"--device-id", "device_id"}}) {
      if (inv.has(flag))
        member(w, name, inv.value(flag));
    }
    w.EndObject();
  }
  w.EndObject();
  return post_task(ctx, "/v1/tasks", std::string(buffer.GetString(), buffer.GetSize()),
                   idempotency_key, "task", "submit",
                   "this idempotency key and body were submitted before: task ");
}

int cmd_status(Context& ctx) {
  const std::string target = task_path(ctx.inv.args[0]);
  auto response = ctx.api.get(target);
  ctx.api.check(response, "GET", target);
  show_task(ctx, ApiClient::parse(response, target), response.body, ctx.inv.has("--trace"));
  return kExitOk;
}

int cmd_wait(Context& ctx) {
  return wait_and_show(ctx, ctx.inv.args[0],
                       ctx.inv.integer("--wait-timeout-s", 300, 0, 30 * 86400),
                       ctx.inv.has("--trace"));
}

int cmd_cancel(Context& ctx) {
  const std::string& id = ctx.inv.args[0];
  const std::string target = task_path(id) + "/cancel";
  auto response = ctx.api.post(target, "");
  ctx.api.check(response, "POST", target);
  auto doc = ApiClient::parse(response, target);
  if (ctx.settings.json) {
    print(response.body + "\n");
  } else if (response.status == 202) {
    print("task " + id + ": cancel requested; it is running and stops within moments\n");
  } else {
    print("task " + id + ": " + json::str(doc, "status") + "\n");
  }
  return kExitOk;
}

int cmd_retry(Context& ctx) {
  const Invocation& inv = ctx.inv;
  const std::string& id = inv.args[0];
  const std::string target = task_path(id) + "/retry";
  // As with submit: a retry whose answer was lost, run again with its key, is stored once.
  const std::string idempotency_key =
      inv.has("--idempotency-key") ? inv.value("--idempotency-key") : "agentctl-" + new_uuid();
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  member(w, "idempotency_key", idempotency_key);
  w.EndObject();
  return post_task(ctx, target, std::string(buffer.GetString(), buffer.GetSize()), idempotency_key,
                   "retry", "retry", "this idempotency key was used for a retry before: task ");
}

int cmd_plan(Context& ctx) {
  const Invocation& inv = ctx.inv;
  const std::string user = user_for(ctx);
  const std::string text = text_argument(inv, "plan");
  const std::int64_t wait_s = inv.integer("--wait-s", 30, 0, 30);
  const std::string idempotency_key =
      inv.has("--idempotency-key") ? inv.value("--idempotency-key") : "agentctl-" + new_uuid();
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  member(w, "user_id", user);
  member(w, "text", text);
  if (inv.has("--model"))
    member(w, "model", inv.value("--model"));
  if (auto timeout = inv.integer("--timeout-s", 1, 86400)) {
    w.Key("timeout_s");
    w.Int64(*timeout);
  }
  tools_member(w, inv);
  member(w, "idempotency_key", idempotency_key);
  w.Key("wait_s");
  w.Int64(wait_s);
  w.EndObject();
  const std::string target = "/v1/plan";
  auto response = ctx.api.post(target, std::string(buffer.GetString(), buffer.GetSize()),
                               std::chrono::seconds(wait_s));
  ctx.api.check(response, "POST", target);
  auto doc = ApiClient::parse(response, target);
  print(ctx.settings.json ? response.body + "\n" : format_plan(doc));
  // 202: not made within wait_s; the view names the task to wait for.
  return response.status == 202 ? kExitUnavailable : kExitOk;
}

int cmd_list(Context& ctx) {
  const Invocation& inv = ctx.inv;
  const std::string status = inv.value("--status");
  if (!status.empty() &&
      std::find(std::begin(kStatuses), std::end(kStatuses), status) == std::end(kStatuses)) {
    throw UsageError(
        "--status must be one of queued, dispatched, running, succeeded, failed, "
        "timed_out, cancelled, not '" +
        status + "'");
  }
  choice(inv, "--result-type", {"action_completed", "need_clarification", "error"});
  // The search's filters, each the server's (GET /v1/tasks); empty ones are left out.
  std::vector<std::pair<std::string, std::string>> filters;
  for (const auto& [option, param] :
       std::initializer_list<std::pair<const char*, const char*>>{{"--user", "user_id"},
                                                                  {"--status", "status"},
                                                                  {"--result-type", "result_type"},
                                                                  {"--error-code", "error_code"},
                                                                  {"--model", "model"},
                                                                  {"--batch", "batch_id"},
                                                                  {"--session", "session_id"},
                                                                  {"--text", "q"},
                                                                  {"--since", "since"},
                                                                  {"--until", "until"}}) {
    if (std::string value = inv.value(option); !value.empty())
      filters.emplace_back(param, std::move(value));
  }
  if (!inv.value("--batch").empty()) {
    // The batch named by its id or the start of one: its tasks are its user's.
    const NamedBatch batch = find_batch(ctx, inv.value("--batch"), inv.value("--user"));
    for (auto& [param, value] : filters) {
      if (param == "batch_id")
        value = batch.id;
    }
    if (!inv.has("--user") && !batch.user.empty())
      filters.emplace_back("user_id", batch.user);
  }
  const bool counted = inv.has("--count");
  std::int64_t left = inv.integer("--limit", 50, 1, 1000000);
  rapidjson::Document all;
  all.SetObject();
  rapidjson::Value tasks(rapidjson::kArrayType);
  std::string before;
  std::optional<std::int64_t> total;
  bool capped = false;
  while (left > 0) {
    const std::int64_t page = std::min<std::int64_t>(left, 500);
    auto query = filters;
    query.emplace_back("limit", std::to_string(page));
    if (!before.empty())
      query.emplace_back("before", before);
    else if (counted)
      query.emplace_back("count", "true");  // once, with the first page
    auto doc = ctx.api.get_json("/v1/tasks?" + query_string(query));
    if (before.empty() && counted) {
      total = json::num(doc, "total", 0);
      capped = json::flag(doc, "total_capped");
    }
    const auto& got = json::at(doc, "tasks");
    if (!got.IsArray())
      break;
    for (const auto& t : got.GetArray())
      tasks.PushBack(rapidjson::Value(t, all.GetAllocator()), all.GetAllocator());
    left -= got.Size();
    before = json::str(doc, "next_before");
    if (before.empty())
      break;
  }
  all.AddMember("tasks", tasks, all.GetAllocator());
  if (total) {
    all.AddMember("total", *total, all.GetAllocator());
    all.AddMember("total_capped", capped, all.GetAllocator());
  }
  if (ctx.settings.json) {
    print(json::text_of(all) + "\n");
  } else {
    print(format_task_list(all["tasks"]));
    if (total) {
      print((capped ? "more than " : "") + std::to_string(*total) +
            (*total == 1 && !capped ? " task matches\n" : " tasks match\n"));
    }
  }
  return kExitOk;
}

namespace {
// `tail --user U`: the user's results over the API (GET /v1/results), with the key.
int tail_user_results(Context& ctx) {
  const Invocation& inv = ctx.inv;
  const std::string user = inv.required("--user");
  const std::int64_t count = inv.integer("--count", 0, 1, 100000000);
  const std::int64_t for_s = inv.integer("--timeout-s", 0, 1, 30 * 86400);
  const auto deadline = for_s > 0 ? Clock::now() + std::chrono::seconds(for_s)
                                  : Clock::now() + std::chrono::hours(25);
  const auto idle =
      std::max<std::chrono::seconds>(ctx.settings.request_timeout, std::chrono::seconds(60));
  SseParser parser;
  std::int64_t shown = 0;
  bool opened = false;
  auto sink = [&](std::string_view piece) {
    if (!opened) {
      note("following the results of " + user + " (new results)");
      opened = true;
    }
    for (const SseEvent& e : parser.feed(piece)) {
      if (e.event == "gap") {
        note("results of " + user + " may have been missed here (list them: agentctl list --user " +
             user + ")");
        continue;
      }
      if (e.event != "result")
        continue;
      if (ctx.settings.json) {
        print(e.data + "\n");
      } else {
        const std::string line = format_result_event(e.data);
        print(line.empty() ? "(not a result event)\n" : line);
      }
      if (count > 0 && ++shown >= count)
        return false;
    }
    return true;
  };
  const std::string target = "/v1/results?" + query_string({{"user_id", user}});
  auto response = ctx.api.get_stream(target, sink, idle, deadline);
  if (count > 0 && shown >= count)
    return kExitOk;
  if (Clock::now() >= deadline) {
    if (count > 0) {
      throw CommandFailure(kExitUnavailable, std::to_string(shown) + " of " +
                                                 std::to_string(count) + " results within " +
                                                 std::to_string(for_s) + " s");
    }
    return kExitOk;
  }
  ctx.api.check(response, "GET", target);
  throw CommandFailure(kExitUnavailable,
                       "the results stream ended (streams close after an hour; run again to go "
                       "on, and list what ended meanwhile)");
}
}  // namespace

int cmd_tail(Context& ctx) {
  if (ctx.inv.has("--kafka")) {
    if (ctx.inv.has("--task"))
      throw UsageError("tail --kafka takes no --task");
    return cmd_tail_results(ctx);
  }
  if (ctx.inv.has("--from-beginning"))
    throw UsageError("tail --from-beginning reads the results topic: add --kafka");
  if (!ctx.inv.has("--task")) {
    if (!ctx.inv.has("--user"))
      throw UsageError(
          "tail needs --user U (a user's results), --task ID (a task's events) or --kafka (the "
          "results topic, an operator's tool)");
    return tail_user_results(ctx);
  }
  for (const char* flag : {"--user", "--count"}) {
    if (ctx.inv.has(flag))
      throw UsageError(std::string("tail --task takes no ") + flag);
  }
  const std::string id = ctx.inv.required("--task");
  const std::int64_t give_up_s = ctx.inv.integer("--timeout-s", 0, 0, 30 * 86400);
  const auto deadline = give_up_s > 0 ? Clock::now() + std::chrono::seconds(give_up_s)
                                      : Clock::now() + std::chrono::hours(25);
  // The dispatcher sends a heartbeat comment every stream_heartbeat_s (15 s by default).
  const auto idle =
      std::max<std::chrono::seconds>(ctx.settings.request_timeout, std::chrono::seconds(60));
  SseParser parser;
  std::optional<std::string> final_status;
  auto sink = [&](std::string_view piece) {
    for (const SseEvent& e : parser.feed(piece)) {
      const auto event = normalise_task_event(e);
      if (ctx.settings.json) {
        rapidjson::Document data;
        const bool is_json = codec::parse_json(data, e.data);
        print("{\"event\":" + json::quoted(e.event) + ",\"id\":" + json::quoted(e.id) +
              ",\"data\":" + (is_json ? json::text_of(data) : json::quoted(e.data)) + "}\n");
      } else if (event) {
        print(format_task_event(*event) + "\n");
      }
      if (e.event == "done") {
        final_status = event ? event->status : std::string();
        return false;
      }
    }
    return true;
  };
  const std::string target = task_path(id) + "/events";
  auto response = ctx.api.get_stream(target, sink, idle, deadline);
  if (final_status)
    return exit_code_for_task_status(*final_status);
  if (!response.ok() && Clock::now() >= deadline) {
    throw CommandFailure(kExitUnavailable,
                         "task " + id + " did not end within " + std::to_string(give_up_s) + " s");
  }
  ctx.api.check(response, "GET", target);
  throw CommandFailure(kExitUnavailable,
                       "the event stream of task " + id +
                           " ended before the task did (streams close after an hour; run "
                           "again to go on)");
}

}  // namespace agentfleet::agentctl
