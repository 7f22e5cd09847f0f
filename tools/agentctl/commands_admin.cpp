// The bill (usage), per-user limits, success statistics and the tool registry.
#include "core/codec/task_codec.hpp"
#include "tools/agentctl/commands.hpp"
#include "tools/agentctl/json_fields.hpp"
#include "tools/agentctl/outcomes.hpp"
#include "tools/agentctl/views.hpp"

namespace agentfleet::agentctl {

namespace {
// "from" and "to" for the query, from --from and --to: each a date or an RFC 3339 time.
std::vector<std::pair<std::string, std::string>> period_query(const Invocation& inv) {
  std::vector<std::pair<std::string, std::string>> period;
  for (const char* flag : {"--from", "--to"}) {
    if (!inv.has(flag))
      continue;
    const std::string value = inv.value(flag);
    if (!codec::looks_like_timestamp(value)) {
      throw UsageError(std::string(flag) +
                       " needs a date (2026-11-01) or an RFC 3339 time "
                       "(2026-11-01T08:00:00+08:00), not '" +
                       value + "'");
    }
    period.emplace_back(flag + 2, value);
  }
  return period;
}
}  // namespace

int cmd_usage(Context& ctx) {
  const Invocation& inv = ctx.inv;
  // --user beside --batch names the batch's user.
  const int scopes =
      (inv.has("--user") && !inv.has("--batch")) + inv.has("--batch") + inv.has("--all");
  if (scopes != 1)
    throw UsageError("usage needs exactly one of --user U, --batch ID or --all");
  const auto period = period_query(inv);
  if (inv.has("--batch") && !period.empty())
    throw UsageError("--from and --to do not apply to a batch (its usage is the whole batch)");
  std::string target;
  std::string title;
  http::ClientResponse response;
  if (inv.has("--batch")) {
    // The batch's own answer carries its usage (its id may be given by its start).
    NamedBatch batch = find_batch(ctx, inv.required("--batch"), inv.value("--user"));
    target = "/v1/batches/" + path_segment(batch.id);
    response = std::move(batch.found);
  } else {
    target = inv.has("--all") ? std::string("/v1/usage")
                              : "/v1/users/" + path_segment(inv.required("--user")) + "/usage";
    if (!period.empty())
      target += "?" + query_string(period);
    response = ctx.api.get(target);
    ctx.api.check(response, "GET", target);
  }
  auto doc = ApiClient::parse(response, target);
  if (ctx.settings.json) {
    print(response.body + "\n");
    return kExitOk;
  }
  static const rapidjson::Value kNone;
  if (inv.has("--batch")) {
    print("usage of batch " + json::str(doc, "batch_id") + " (user " + json::str(doc, "user_id") +
          ")\n" + format_usage(json::at(doc, "usage"), kNone));
    return kExitOk;
  }
  std::string head =
      inv.has("--all") ? "usage of every user" : "usage of user " + inv.value("--user");
  const std::string from = json::str(doc, "from");
  const std::string to = json::str(doc, "to");
  if (!from.empty())
    head += " from " + from;
  if (!to.empty())
    head += " to " + to;
  print(head + "\n" + format_usage(json::at(doc, "models"), json::at(doc, "totals")));
  return kExitOk;
}

namespace {
std::string limits_path(const std::string& user) {
  return "/v1/users/" + path_segment(user) + "/limits";
}
}  // namespace

int cmd_limits_get(Context& ctx) {
  const std::string target = limits_path(ctx.inv.args[0]);
  auto response = ctx.api.get(target);
  ctx.api.check(response, "GET", target);
  print(ctx.settings.json ? response.body + "\n"
                          : format_limits(ApiClient::parse(response, target)));
  return kExitOk;
}

int cmd_limits_set(Context& ctx) {
  const Invocation& inv = ctx.inv;
  const std::string target = limits_path(inv.args[0]);
  std::map<std::string, std::string> set;
  for (const char* flag :
       {"--tier", "--max-concurrency", "--requests-per-minute", "--tokens-per-minute",
        "--max-queued", "--monthly-budget", "--tool-permission"}) {
    if (!inv.has(flag))
      continue;
    std::string name = flag + 2;
    for (char& c : name) {
      if (c == '-')
        c = '_';
    }
    set[name] = inv.value(flag);
  }
  const auto unset = inv.values("--unset");
  std::string body;
  if (inv.has("--clear")) {
    if (!set.empty() || !unset.empty() || inv.has("--replace"))
      throw UsageError("limits set: --clear drops every override; give no other change with it");
    body = "{}";
  } else if (set.empty() && unset.empty()) {
    throw UsageError(
        "limits set: nothing to change (give --max-concurrency N, ..., --unset NAME "
        "or --clear)");
  } else if (inv.has("--replace")) {
    static const rapidjson::Value kNone;
    body = limits_put_body(kNone, set, unset, true);
  } else {
    // PUT replaces every override: start from the current ones.
    body = limits_put_body(ctx.api.get_json(target), set, unset, false);
  }
  auto response = ctx.api.put(target, body);
  ctx.api.check(response, "PUT", target);
  print(ctx.settings.json ? response.body + "\n"
                          : format_limits(ApiClient::parse(response, target)));
  return kExitOk;
}

int cmd_stats(Context& ctx) {
  const Invocation& inv = ctx.inv;
  auto query = period_query(inv);
  if (inv.has("--user"))
    query.emplace_back("user_id", inv.value("--user"));
  const std::string target = "/v1/stats" + (query.empty() ? "" : "?" + query_string(query));
  auto response = ctx.api.get(target);
  ctx.api.check(response, "GET", target);
  print(ctx.settings.json ? response.body + "\n"
                          : format_stats(ApiClient::parse(response, target)));
  return kExitOk;
}

int cmd_tools(Context& ctx) {
  const Invocation& inv = ctx.inv;
  const std::string target =
      "/v1/tools" +
      (inv.has("--user") ? "?" + query_string({{"user_id", inv.value("--user")}}) : std::string());
  auto response = ctx.api.get(target);
  ctx.api.check(response, "GET", target);
  if (ctx.settings.json) {
    print(response.body + "\n");
    return kExitOk;
  }
  auto doc = ApiClient::parse(response, target);
  print(format_tools(json::at(doc, "tools"), inv.has("--describe")));
  return kExitOk;
}

}  // namespace agentfleet::agentctl
