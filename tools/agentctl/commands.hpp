#pragma once
// The subcommands of agentctl, one function each, grouped by what they talk to:
// commands_tasks.cpp (one task over HTTP), commands_batch.cpp (batches),
// commands_admin.cpp (usage, limits, stats, tools), commands_kafka.cpp (the results and dead-letter
// topics). Each returns the process's exit code or throws CommandFailure / UsageError,
// which main turns into one line on stderr and that exit code.

#include <cstdio>
#include <functional>
#include <string>

#include "tools/agentctl/api_client.hpp"
#include "tools/agentctl/options.hpp"

namespace agentfleet::agentctl {

struct Context {
  const Invocation& inv;
  const Settings& settings;
  const ApiClient& api;
  bool stdout_is_tty = false;
};

// The settings for this run: the flags, the environment, the config file (read here).
// Their credentials (the API key, passwords in the URL and the bootstrap servers, Kafka
// properties that hold secrets: log::is_secret_property) are registered then, so note()
// and the logger (librdkafka's lines) never show them.
Settings load_settings(const GlobalFlags& flags);

// Writes `text` to stdout and flushes (output is read by scripts as it comes).
void print(const std::string& text);
// One line on stderr: "agentctl: TEXT", redacted (core/domain/redaction.hpp: URL passwords,
// `password=...`, bearer tokens, and this run's credentials).
void note(const std::string& text);

// A random version 4 UUID ("1b4e28ba-2fa1-4d3b-883f-0016d3cca427", std::random_device):
// the ids agentctl makes up itself (a batch id, an idempotency key, a consumer group).
std::string new_uuid();

// The user a command acts for: --user, else the one user the API key acts for (GET
// /v1/whoami). A key that acts for several users, for any user or as an admin's must name
// one: UsageError, saying which users it may name.
std::string user_for(Context& ctx);

// The batch a command names: `given` is its id, or the start of one (batch_ids.hpp: when no
// batch has the id `given`, the one batch of the key's users, of `user` when not empty, whose
// id begins so, said on stderr). Its whole id, its user (`user`, or the one found) and the
// GET /v1/batches/{id} answer. Throws CommandFailure as that GET of `given` would (404: exit
// 3), or exit 5 when several batches' ids begin so.
struct NamedBatch {
  std::string id;
  std::string user;
  http::ClientResponse found;
};
NamedBatch find_batch(const Context& ctx, const std::string& given, const std::string& user);

// The function of a command ("batch submit"), or null.
using CommandFunction = std::function<int(Context&)>;
CommandFunction command_function(const std::string& name);

int cmd_submit(Context& ctx);
int cmd_status(Context& ctx);
int cmd_wait(Context& ctx);
int cmd_cancel(Context& ctx);
int cmd_retry(Context& ctx);
int cmd_plan(Context& ctx);
int cmd_list(Context& ctx);
int cmd_tail(Context& ctx);  // --task here, the results topic in commands_kafka.cpp
int cmd_tail_results(Context& ctx);
int cmd_batch_submit(Context& ctx);
int cmd_batch_list(Context& ctx);
int cmd_batch_status(Context& ctx);
int cmd_batch_results(Context& ctx);
int cmd_batch_cancel(Context& ctx);
int cmd_batch_retry(Context& ctx);
int cmd_usage(Context& ctx);
int cmd_limits_get(Context& ctx);
int cmd_limits_set(Context& ctx);
int cmd_dlq_list(Context& ctx);
int cmd_dlq_replay(Context& ctx);
int cmd_stats(Context& ctx);
int cmd_tools(Context& ctx);
int cmd_completion(Context& ctx);

}  // namespace agentfleet::agentctl
