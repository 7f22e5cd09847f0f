#include "tools/agentctl/options.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>

#include "core/domain/build_info.hpp"
#include "tools/agentctl/outcomes.hpp"

namespace agentfleet::agentctl {

namespace {
const OptionSpec kUser{"--user", "U", "the user the tasks belong to"};
const OptionSpec kBatchUser{"--user", "U",
                            "the batch's user: needed only by a key acting for several users "
                            "who each have a batch of this id (batch ids are each user's); "
                            "ID may be the start of one (4 characters or more)"};
// For the commands that take it from the API key when it acts for one user (user_for()).
const OptionSpec kUserOrKeys{"--user", "U",
                             "the user the tasks belong to (default: the one user the API key "
                             "acts for)"};
const OptionSpec kWaitTimeout{"--wait-timeout-s", "N",
                              "give up waiting after N seconds (default 300; 0: no bound)"};
}  // namespace

const std::vector<OptionSpec>& global_options() {
  static const std::vector<OptionSpec> options = {
      {"--url", "URL",
       "the dispatcher's API (else $AGENTFLEET_URL, the config file, "
       "http://127.0.0.1:8080)"},
      {"--api-key", "KEY", "the API key (else $AGENTFLEET_API_KEY, the config file)"},
      {"--kafka-bootstrap", "HOSTS",
       "Kafka bootstrap servers, for tail and dlq (else $AGENTFLEET_KAFKA_BOOTSTRAP, the config "
       "file, 127.0.0.1:9092)"},
      {"--config", "FILE",
       "the config file (else $AGENTCTL_CONFIG, else ~/.config/agentctl/config.yaml)"},
      {"--timeout-s", "N",
       "deadline of each HTTP request in seconds (default 30; long polls add their wait); "
       "before the command name, or on a command without a --timeout-s of its own"},
      {"--request-timeout-s", "N", "the same deadline, on any command"},
      {"--json", "", "print the API's JSON (JSON lines for streams) instead of text"},
      {"--help", "", "this help"},
      {"--version", "", "print agentctl's version and exit"},
  };
  return options;
}

const std::vector<CommandSpec>& command_specs() {
  static const std::vector<CommandSpec> commands = {
      {"submit",
       "[TEXT]",
       "submit one task; --wait waits for its result",
       "Prints the task id (or, with --wait, the finished task). The text is the argument or\n"
       "--text. With --wait: exit 0 when the task succeeded, 1 when it failed, timed out or\n"
       "was cancelled, 7 when --wait-timeout-s passed first (the task id is printed; `agentctl\n"
       "wait ID` goes on waiting). Without --idempotency-key one is made up: when no answer\n"
       "came, the error names it, and the same submit with it is stored only once.",
       0,
       1,
       {kUserOrKeys,
        {"--text", "TEXT", "the instruction (instead of the argument)"},
        {"--model", "M", "a configured model (default: the fleet's)"},
        {"--priority", "P", "interactive (default) or batch"},
        {"--timeout-s", "N", "the task's execution deadline in seconds"},
        {"--schedule-timeout-s", "N", "how long it may wait in the queue"},
        {"--max-steps", "N", "most model calls"},
        {"--max-tokens", "N", "most tokens its model calls may use, input and output"},
        {"--max-cost", "AMOUNT", "most its model calls may cost, in the budget currency"},
        {"--idempotency-key", "K",
         "submitting the same key and body again returns the task (default: one is made up)"},
        {"--batch", "ID", "the batch the task belongs to"},
        {"--tool", "NAME", "allow this tool (repeatable; default: every tool)", true},
        {"--time-zone", "TZ", "the user's time zone (metadata)"},
        {"--locale", "L", "the user's locale (metadata)"},
        {"--device-id", "D", "the user's device (metadata)"},
        {"--wait", "", "wait for the result (long polls of up to 30 s) and print it"},
        kWaitTimeout}},
      {"status",
       "ID",
       "show a task: status, result, steps, usage, cost",
       "Exit 0 whatever the task's status (use `wait` to act on it).",
       1,
       1,
       {{"--trace", "", "also show every step: the model's text and each tool call"}}},
      {"wait",
       "ID",
       "wait for a task to end and show it",
       "Exit 0 when it succeeded, 1 when it failed, timed out or was cancelled, 7 when\n"
       "--wait-timeout-s passed first.",
       1,
       1,
       {kWaitTimeout, {"--trace", "", "also show every step"}}},
      {"cancel",
       "ID",
       "cancel a task",
       "A queued task ends cancelled at once; a running one is asked to stop (its worker\n"
       "stops it within a moment). A task that already ended otherwise is exit 5.",
       1,
       1,
       {}},
      {"retry",
       "ID",
       "run an ended task again: a new task with its request, linked to it",
       "Prints the new task's id (with --wait, the finished task; exit codes as submit's).\n"
       "The new task asks what the first asked, outside its batch, with retry_of naming it.\n"
       "A task still queued or running is exit 5 (cancel it first). Without\n"
       "--idempotency-key one is made up: when no answer came, the error names it.",
       1,
       1,
       {{"--idempotency-key", "K",
         "retrying with the same key again returns the retry made (default: one is made up)"},
        {"--wait", "", "wait for the result (long polls of up to 30 s) and print it"},
        kWaitTimeout}},
      {"plan",
       "[TEXT]",
       "make a plan (plan_execute's planner alone) and show its steps",
       "POST /v1/plan: the planner runs as a task of its own (strategy plan_only: queued,\n"
       "limited, billed and traced like any task); no tool is called. Waits up to --wait-s\n"
       "(default 30) for the plan. Exit 0 with the plan; 7 when it was not made in time (the\n"
       "task id is printed: `agentctl wait ID` waits for it), or when no usable plan came\n"
       "(502 plan_failed) or it timed out (504).",
       0,
       1,
       {kUserOrKeys,
        {"--text", "TEXT", "the instruction (instead of the argument)"},
        {"--model", "M", "a configured model (default: the fleet's)"},
        {"--tool", "NAME", "a tool the plan may use (repeatable; default: every tool)", true},
        {"--timeout-s", "N", "the planning task's execution deadline in seconds"},
        {"--wait-s", "N", "wait up to N seconds for the plan (0-30, default 30)"},
        {"--idempotency-key", "K",
         "asking again with the same key returns the same plan (default: one is made up)"}}},
      {"list",
       "",
       "search tasks, newest first: every user's the key acts for, or --user's",
       "The server filters: each option narrows the search. Without --user, the tasks of\n"
       "every user the key acts for (every user's for an admin key). Follows the API's\n"
       "pages until --limit tasks are shown; --count prints how many match (up to 10,000).",
       0,
       0,
       {{"--user", "U", "the tasks of this user only"},
        {"--status", "S",
         "only tasks in this status (queued, dispatched, running, succeeded, "
         "failed, timed_out, cancelled)"},
        {"--result-type", "T",
         "only tasks whose result is of this type (action_completed, need_clarification, "
         "error)"},
        {"--error-code", "C", "only tasks that ended with this error code"},
        {"--model", "M", "only tasks of this model"},
        {"--batch", "ID", "only the tasks of this batch"},
        {"--session", "S", "only the tasks of this session"},
        {"--text", "WORDS", "only tasks whose text holds this (ignoring case)"},
        {"--since", "TIME", "only tasks created at or after this date or RFC 3339 time"},
        {"--until", "TIME", "only tasks created before this date or RFC 3339 time"},
        {"--count", "", "print how many tasks match"},
        {"--limit", "N", "at most N tasks (default 50)"}}},
      {"tail",
       "",
       "follow a user's results, one task's events, or (operators) the results topic",
       "--user U: the user's results as their tasks end, over the API with your key\n"
       "(GET /v1/results), from now on.\n"
       "--task ID: the task's server-sent events until it ends (exit 0 when it\n"
       "succeeded, 1 otherwise; a task that already ended is replayed from its trace).\n"
       "--kafka: an operator's tool, every user's results read from the results topic by a\n"
       "Kafka consumer (a group of its own that never commits; needs Kafka ACLs to read\n"
       "that topic), from the end unless --from-beginning; --user filters it.",
       0,
       0,
       {{"--task", "ID", "follow this task's events"},
        {"--user", "U", "this user's results (with --kafka: only this user's)"},
        {"--kafka", "", "read the results topic directly (operators)"},
        {"--from-beginning", "", "with --kafka: start at the oldest result kept"},
        {"--count", "N", "stop after N results (exit 7 if --timeout-s passes first)"},
        {"--timeout-s", "N",
         "--user: stop after N seconds; --kafka: after N seconds in which no result arrived "
         "(of any user), exit 7 if Kafka was never joined; --task: give up after N seconds"}}},
      {"batch submit",
       "FILE.jsonl",
       "upload a batch (JSON Lines; - reads stdin) and follow it to the end",
       "Streams the file to POST /v1/batches, then shows the progress until every task\n"
       "ended (on a terminal one line redrawn; otherwise a line every few seconds) and a\n"
       "final summary line. Exit 0 when every task succeeded, 1 otherwise, 7 when\n"
       "--wait-timeout-s passed first. Interrupting stops the following, not the batch.\n"
       "When the whole file was sent but no answer came, whether the batch was stored is\n"
       "unknown: the error names its id for `agentctl batch status ID`.",
       1,
       1,
       {kUser,
        {"--batch-id", "ID", "the batch's id (default: a UUID is made up)"},
        {"--priority", "P", "batch (default) or interactive"},
        {"--no-follow", "", "print the batch id once uploaded and exit"},
        {"--wait-timeout-s", "N", "stop following after N seconds (default: no bound)"},
        {"--interval-s", "N",
         "seconds between progress lines when not on a terminal (default 5)"}}},
      {"batch list",
       "",
       "list batches, newest first, with their progress",
       "The batches of --user, else of every user the key acts for (every user's for an\n"
       "admin key): id, user, created, ended of total, succeeded, not succeeded (failed,\n"
       "timed_out or cancelled) and the result types (a task can succeed with an error).",
       0,
       0,
       {{"--user", "U", "the batches of this user"},
        {"--limit", "N", "at most N batches (default 20)"}}},
      {"batch status",
       "ID",
       "show a batch's counts per status and result type, and usage",
       "",
       1,
       1,
       {kBatchUser}},
      {"batch results",
       "ID",
       "stream a batch's results (a table, or JSON Lines with --json)",
       "",
       1,
       1,
       {kBatchUser}},
      {"batch cancel",
       "ID",
       "cancel a batch: its tasks not yet running end cancelled, running ones stop",
       "",
       1,
       1,
       {kBatchUser}},
      {"batch retry",
       "ID",
       "retry a batch's failed tasks (failed, timed_out, or an error result), each once",
       "Each failed task is retried as `agentctl retry` would, under a key of the server's:\n"
       "running this again retries nothing twice. The retries belong to no batch;\n"
       "`agentctl batch results ID` names each one beside the task it retries. Exit 6 when\n"
       "the user's queue filled up before every failed task was retried (run it again).",
       1,
       1,
       {kBatchUser}},
      {"usage",
       "",
       "the bill per model: calls, tokens, cost, totals per currency",
       "One of --user, --batch or --all (an admin key); --batch with --user names the\n"
       "batch's user (batch ids are each user's). --from and --to take a date\n"
       "(2026-11-01) or an RFC 3339 time; they do not apply to a batch.",
       0,
       0,
       {{"--user", "U", "the bill of this user (with --batch: the batch's user)"},
        {"--batch", "ID", "the bill of this batch"},
        {"--all", "", "the bill of every user (admin)"},
        {"--from", "TIME", "from this date or time (inclusive)"},
        {"--to", "TIME", "up to this date or time (exclusive)"}}},
      {"stats",
       "",
       "success statistics of the tasks created in a window",
       "Tasks, how many ended, per status, result type and strategy, the success rate\n"
       "(succeeded / ended), how many did as asked (succeeded with action_completed /\n"
       "ended: a task can succeed with an error answer), durations (started to finished),\n"
       "steps, tool calls, tokens and cost. --user U, else every user's (an admin key).\n"
       "--from and --to take a date\n"
       "(2026-11-01) or an RFC 3339 time.",
       0,
       0,
       {{"--user", "U", "the statistics of this user (default: every user's, admin)"},
        {"--from", "TIME", "tasks created from this date or time (inclusive)"},
        {"--to", "TIME", "up to this date or time (exclusive)"}}},
      {"tools",
       "",
       "list the tools models may call: permission, idempotent, timeout",
       "With --user, whether that user's permission level allows each one.",
       0,
       0,
       {{"--user", "U", "say whether this user may call each tool"},
        {"--describe", "", "add each tool's description"}}},
      {"limits get", "U", "show a user's effective limits and overrides", "", 1, 1, {}},
      {"limits set",
       "U",
       "change a user's limit overrides (admin)",
       "Reads the current overrides and changes only the given ones (PUT replaces them\n"
       "all), unless --replace. --unset NAME drops one override (the tier's value applies);\n"
       "--clear drops them all. Two admins changing one user at once: the last one wins.",
       1,
       1,
       {{"--tier", "T", "the user's tier"},
        {"--max-concurrency", "N", "tasks dispatched or running at once"},
        {"--requests-per-minute", "N", "tasks started per minute"},
        {"--tokens-per-minute", "N", "model tokens per minute"},
        {"--max-queued", "N", "tasks waiting in the queue"},
        {"--monthly-budget", "AMOUNT", "spend per month, a decimal (\"0\": unlimited)"},
        {"--tool-permission", "P", "read, write, execute or admin"},
        {"--unset", "NAME", "drop this override (repeatable)", true},
        {"--replace", "", "the given overrides replace all of them"},
        {"--clear", "", "drop every override"}}},
      {"dlq list",
       "",
       "list the dead letters (read from the oldest to the end of the topic)",
       "Prints partition:offset, the reason, where the message came from, its key and the\n"
       "start of its value.",
       0,
       0,
       {{"--topic-filter", "T", "only dead letters from this source topic"},
        {"--reason", "R", "only those whose reason contains R"},
        {"--key", "K", "only those with this message key"},
        {"--count", "N", "stop after N"},
        {"--timeout-s", "N", "give up reading after N seconds (default 30; exit 7)"}}},
      {"dlq replay",
       "",
       "send dead letters back to their source topic",
       "Each goes to its dlq-source-topic with its key, value and headers, minus the dlq-*\n"
       "headers, plus dlq-replayed-from: PARTITION:OFFSET and dlq-origin:\n"
       "TOPIC:PARTITION:OFFSET (where it was first read). Fix the cause first: a message\n"
       "that is still bad is dead-lettered again. Replaying a letter twice is safe: a\n"
       "submission without an idempotency_key is keyed by its origin, so the second\n"
       "replay finds the task the first made.",
       0,
       0,
       {{"--offset", "P:O", "the dead letter at partition P, offset O (repeatable)", true},
        {"--all", "", "every dead letter (that matches the filters)"},
        {"--topic-filter", "T", "only dead letters from this source topic"},
        {"--reason", "R", "only those whose reason contains R"},
        {"--key", "K", "only those with this message key"},
        {"--dry-run", "", "print what would be sent, send nothing"},
        {"--timeout-s", "N", "give up reading or sending after N seconds (default 30; exit 7)"}}},
      {"completion",
       "SHELL",
       "print the shell completion script for bash or zsh",
       "bash: `source <(agentctl completion bash)` in ~/.bashrc, or save the script as\n"
       "/etc/bash_completion.d/agentctl. zsh: `source <(agentctl completion zsh)` in\n"
       "~/.zshrc (it uses bash's completion through bashcompinit). It completes commands,\n"
       "options and the values of --status, --priority and --tool-permission.",
       1,
       1,
       {}},
  };
  return commands;
}

namespace {
const std::vector<std::string> kGroups = {"batch", "limits", "dlq"};

// The optimal string alignment distance of a and b.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i)
    d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j)
    d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// " (did you mean 'X'?)" for the closest of `candidates`, or "".
std::string suggestion(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string match = closest_match(word, candidates);
  return match.empty() ? "" : " (did you mean '" + match + "'?)";
}

// The top-level words: commands without a group, and the groups.
std::vector<std::string> top_level_words() {
  std::vector<std::string> words(kGroups.begin(), kGroups.end());
  for (const auto& c : command_specs()) {
    if (c.name.find(' ') == std::string::npos)
      words.push_back(c.name);
  }
  return words;
}

std::vector<std::string> subcommand_words(std::string_view group) {
  std::vector<std::string> words;
  for (const auto& c : command_specs()) {
    if (c.name.rfind(std::string(group) + " ", 0) == 0)
      words.push_back(c.name.substr(group.size() + 1));
  }
  return words;
}

std::vector<std::string> option_names(const CommandSpec* command) {
  std::vector<std::string> names;
  if (command) {
    for (const auto& o : command->options)
      names.push_back(o.name);
  }
  for (const auto& o : global_options())
    names.push_back(o.name);
  return names;
}

const CommandSpec* find_command(const std::string& name) {
  for (const auto& c : command_specs()) {
    if (c.name == name)
      return &c;
  }
  return nullptr;
}

const OptionSpec* find_option(const std::vector<OptionSpec>& options, std::string_view name) {
  for (const auto& o : options) {
    if (o.name == name)
      return &o;
  }
  return nullptr;
}

std::string subcommands_of(std::string_view group) {
  std::string out;
  for (const auto& c : command_specs()) {
    if (c.name.rfind(std::string(group) + " ", 0) == 0) {
      if (!out.empty())
        out += ", ";
      out += c.name.substr(group.size() + 1);
    }
  }
  return out;
}

void set_global(GlobalFlags& g, const std::string& name, const std::string& value) {
  if (name == "--url") {
    g.url = value;
  } else if (name == "--api-key") {
    g.api_key = value;
  } else if (name == "--kafka-bootstrap") {
    g.kafka_bootstrap = value;
  } else if (name == "--config") {
    g.config = value;
  } else if (name == "--timeout-s" || name == "--request-timeout-s") {
    g.request_timeout_s = static_cast<int>(parse_integer(value, 1, 86400, name));
  } else if (name == "--json") {
    g.json = true;
  }
}
}  // namespace

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  const std::size_t allowed = word.size() <= 4 ? 1 : word.size() <= 8 ? 2 : 3;
  std::string best;
  std::size_t best_distance = allowed + 1;
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string version_text() {
  return version_line("agentctl");
}

std::int64_t parse_integer(std::string_view text, std::int64_t lo, std::int64_t hi,
                           std::string_view what) {
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < lo ||
      value > hi) {
    throw UsageError(std::string(what) + " needs an integer from " + std::to_string(lo) + " to " +
                     std::to_string(hi) + ", not '" + std::string(text) + "'");
  }
  return value;
}

std::string Invocation::value(const std::string& name, const std::string& fallback) const {
  auto it = options.find(name);
  return it == options.end() || it->second.empty() ? fallback : it->second.back();
}

std::vector<std::string> Invocation::values(const std::string& name) const {
  auto it = options.find(name);
  return it == options.end() ? std::vector<std::string>{} : it->second;
}

std::optional<std::int64_t> Invocation::integer(const std::string& name, std::int64_t lo,
                                                std::int64_t hi) const {
  if (!has(name))
    return std::nullopt;
  return parse_integer(value(name), lo, hi, name);
}

std::int64_t Invocation::integer(const std::string& name, std::int64_t fallback, std::int64_t lo,
                                 std::int64_t hi) const {
  return integer(name, lo, hi).value_or(fallback);
}

std::string Invocation::required(const std::string& name) const {
  const std::string v = value(name);
  if (v.empty()) {
    throw UsageError((command ? command->name + ": " : std::string()) + name + " " +
                     (has(name) ? "may not be empty" : "is required"));
  }
  return v;
}

Invocation parse_command_line(const std::vector<std::string>& argv) {
  Invocation inv;
  std::vector<std::string> words;  // command words and arguments, in order
  bool options_ended = false;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (options_ended || arg.size() < 2 || arg[0] != '-' || arg == "-") {
      if (!inv.command && !options_ended) {
        // Still looking for the command's name.
        const std::string candidate = inv.group.empty() ? arg : inv.group + " " + arg;
        if (inv.group.empty() && std::find(kGroups.begin(), kGroups.end(), arg) != kGroups.end()) {
          inv.group = arg;
          continue;
        }
        inv.command = find_command(candidate);
        if (!inv.command) {
          if (!inv.group.empty()) {
            throw UsageError("unknown command '" + candidate + "'" +
                             suggestion(arg, subcommand_words(inv.group)) + " (" + inv.group +
                             " has: " + subcommands_of(inv.group) + ")");
          }
          throw UsageError("unknown command '" + arg + "'" + suggestion(arg, top_level_words()) +
                           " (see agentctl --help)");
        }
        continue;
      }
      inv.args.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_ended = true;
      if (!inv.command)
        throw UsageError("a command is needed before --");
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      inv.help = true;
      continue;
    }
    if (arg == "--version") {
      inv.version = true;
      continue;
    }
    std::string name = arg;
    std::optional<std::string> inline_value;
    if (const auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    const OptionSpec* spec = inv.command ? find_option(inv.command->options, name) : nullptr;
    const bool global = spec == nullptr;
    if (!spec)
      spec = find_option(global_options(), name);
    if (!spec) {
      throw UsageError("unknown option " + name +
                       (inv.command ? " for " + inv.command->name : std::string()) +
                       suggestion(name, option_names(inv.command)) + " (see agentctl " +
                       (inv.command ? inv.command->name + " " : std::string()) + "--help)");
    }
    std::string value;
    if (!spec->value_name.empty()) {
      if (inline_value) {
        value = *inline_value;
      } else if (i + 1 < argv.size()) {
        value = argv[++i];
      } else {
        throw UsageError(name + " needs a value (" + spec->value_name + ")");
      }
    } else if (inline_value) {
      throw UsageError(name + " takes no value");
    }
    if (global) {
      set_global(inv.globals, name, value);
      continue;
    }
    auto& slot = inv.options[name];
    if (!slot.empty() && !spec->repeatable)
      throw UsageError(name + " given twice");
    slot.push_back(value);
  }
  if (inv.help || inv.version)
    return inv;
  if (!inv.command) {
    if (!inv.group.empty()) {
      throw UsageError("'" + inv.group + "' needs a command: " + subcommands_of(inv.group) +
                       " (see agentctl " + inv.group + " --help)");
    }
    throw UsageError("a command is needed (see agentctl --help)");
  }
  if (inv.args.size() < inv.command->min_args || inv.args.size() > inv.command->max_args) {
    const std::string expected =
        inv.command->synopsis.empty() ? "no arguments" : "arguments: " + inv.command->synopsis;
    throw UsageError(inv.command->name + " takes " + expected + " (got " +
                     std::to_string(inv.args.size()) + ")");
  }
  return inv;
}

namespace {
constexpr std::size_t kHelpIndent = 28;
constexpr std::size_t kHelpWidth = 96;

// "  left" padded to the help column, then `text` wrapped at kHelpWidth.
std::string help_line(std::string left, const std::string& text) {
  if (left.size() < kHelpIndent)
    left.resize(kHelpIndent, ' ');
  else
    left += "\n" + std::string(kHelpIndent, ' ');
  std::string out = left;
  std::size_t column = kHelpIndent;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string::npos)
      end = text.size();
    const std::string word = text.substr(start, end - start);
    if (column > kHelpIndent && column + 1 + word.size() > kHelpWidth) {
      out += "\n" + std::string(kHelpIndent, ' ');
      column = kHelpIndent;
    } else if (column > kHelpIndent) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    start = end + 1;
  }
  return out + "\n";
}

std::string option_lines(const std::vector<OptionSpec>& options) {
  std::string out;
  for (const auto& o : options)
    out += help_line("  " + o.name + (o.value_name.empty() ? "" : " " + o.value_name), o.help);
  return out;
}
}  // namespace

std::string general_help() {
  std::string out =
      "agentctl: submit and follow agentfleet tasks and batches, read the bill, set limits,\n"
      "replay dead letters.\n\n"
      "usage: agentctl [GLOBAL OPTIONS] COMMAND [ARGS] [OPTIONS]\n\ncommands:\n";
  for (const auto& c : command_specs())
    out += help_line("  " + c.name + (c.synopsis.empty() ? "" : " " + c.synopsis), c.summary);
  out += "\nglobal options:\n" + option_lines(global_options());
  out +=
      "\nsettings: flags, then $AGENTFLEET_URL, $AGENTFLEET_API_KEY, $AGENTFLEET_KAFKA_BOOTSTRAP,\n"
      "then the config file (YAML: url, api_key, kafka_bootstrap, timeout_s, topics,\n"
      "kafka_properties).\n\n";
  out += exit_code_help();
  out += "\n`agentctl COMMAND --help` describes a command.\n";
  return out;
}

std::string group_help(std::string_view group) {
  std::string out = "usage: agentctl " + std::string(group) + " COMMAND ...\n\ncommands:\n";
  for (const auto& c : command_specs()) {
    if (c.name.rfind(std::string(group) + " ", 0) == 0)
      out += help_line("  " + c.name + (c.synopsis.empty() ? "" : " " + c.synopsis), c.summary);
  }
  return out;
}

std::string command_help(const CommandSpec& command) {
  std::string out =
      "usage: agentctl " + command.name + (command.synopsis.empty() ? "" : " " + command.synopsis) +
      (command.options.empty() ? "" : " [OPTIONS]") + "\n\n" + command.summary + ".\n";
  if (!command.details.empty())
    out += command.details + "\n";
  if (!command.options.empty())
    out += "\noptions:\n" + option_lines(command.options);
  out += "\nglobal options:\n" + option_lines(global_options());
  out += "\n" + exit_code_help();
  return out;
}

namespace {
std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words)
    out += (out.empty() ? "" : " ") + w;
  return out;
}

std::vector<std::string> option_names(const std::vector<OptionSpec>& options, bool with_value) {
  std::vector<std::string> names;
  for (const auto& o : options) {
    if (!with_value || !o.value_name.empty())
      names.push_back(o.name);
  }
  return names;
}
}  // namespace

std::string completion_script(std::string_view shell) {
  if (shell != "bash" && shell != "zsh")
    throw UsageError("completion: the shell must be bash or zsh, not '" + std::string(shell) + "'");
  // Options that take a value, of every command: their value is not a command word.
  std::vector<std::string> valued = option_names(global_options(), true);
  for (const auto& c : command_specs()) {
    for (const auto& name : option_names(c.options, true)) {
      if (std::find(valued.begin(), valued.end(), name) == valued.end())
        valued.push_back(name);
    }
  }
  std::string out = "# agentctl completion for " + std::string(shell) +
                    ": source <(agentctl completion " + std::string(shell) + ")\n";
  if (shell == "zsh")
    out += "autoload -U +X bashcompinit && bashcompinit\n";
  out +=
      "_agentctl() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
      "  local cmd='' word i skip=0\n"
      "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      "    word=${COMP_WORDS[i]}\n"
      "    if ((skip)); then skip=0; continue; fi\n"
      "    case \" " +
      joined(valued) +
      " \" in\n"
      "      *\" $word \"*) skip=1; continue ;;\n"
      "    esac\n"
      "    [[ $word == -* ]] && continue\n"
      "    case \"$cmd\" in\n"
      "      '') cmd=$word ;;\n";
  for (const auto& g : kGroups)
    out += "      " + g + ") cmd=\"" + g + " $word\" ;;\n";
  out +=
      "      *) break ;;\n"
      "    esac\n"
      "  done\n"
      "  case \"$prev\" in\n"
      "    --status) COMPREPLY=($(compgen -W 'queued dispatched running succeeded failed "
      "timed_out cancelled' -- \"$cur\")); return ;;\n"
      "    --priority) COMPREPLY=($(compgen -W 'interactive batch' -- \"$cur\")); return ;;\n"
      "    --tool-permission) COMPREPLY=($(compgen -W 'read write execute admin' -- \"$cur\")); "
      "return ;;\n"
      "    --config) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n"
      "  esac\n"
      "  case \" " +
      joined(valued) +
      " \" in\n"
      "    *\" $prev \"*) COMPREPLY=(); return ;;\n"
      "  esac\n"
      "  local opts='" +
      joined(option_names(global_options(), false)) +
      "'\n"
      "  case \"$cmd\" in\n";
  for (const auto& c : command_specs()) {
    out +=
        "    '" + c.name + "') opts=\"$opts " + joined(option_names(c.options, false)) + "\" ;;\n";
  }
  out +=
      "  esac\n"
      "  if [[ $cur == -* ]]; then\n"
      "    COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\")); return\n"
      "  fi\n"
      "  case \"$cmd\" in\n"
      "    '') COMPREPLY=($(compgen -W '" +
      joined(top_level_words()) + "' -- \"$cur\")) ;;\n";
  for (const auto& g : kGroups)
    out += "    " + g + ") COMPREPLY=($(compgen -W '" + joined(subcommand_words(g)) +
           "' -- \"$cur\")) ;;\n";
  out +=
      "    'batch submit') COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n"
      "    completion) COMPREPLY=($(compgen -W 'bash zsh' -- \"$cur\")) ;;\n"
      "    *) COMPREPLY=() ;;\n"
      "  esac\n"
      "}\n"
      "complete -F _agentctl agentctl\n";
  return out;
}

// ---- settings -----------------------------------------------------------------------------

std::optional<ConfigFileChoice> choose_config_file(const GlobalFlags& flags,
                                                   const Environment& env) {
  if (flags.config)
    return ConfigFileChoice{*flags.config, true};
  if (auto path = env("AGENTCTL_CONFIG"))
    return ConfigFileChoice{*path, true};
  if (auto home = env("HOME"))
    return ConfigFileChoice{*home + "/.config/agentctl/config.yaml", false};
  return std::nullopt;
}

FileSettings parse_config_file(std::string_view text, const std::string& file_name) {
  FileSettings out;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    throw UsageError(file_name + ": not YAML: " + e.msg + " (line " +
                     std::to_string(e.mark.line + 1) + ")");
  }
  if (root.IsNull())
    return out;
  if (!root.IsMap())
    throw UsageError(file_name + ": expected a map of settings");
  auto scalar = [&](const YAML::Node& node, const std::string& key) {
    if (!node.IsScalar())
      throw UsageError(file_name + ": " + key + " must be a string");
    return node.as<std::string>();
  };
  auto string_map = [&](const YAML::Node& node, const std::string& key,
                        const std::vector<std::string>& allowed) {
    std::map<std::string, std::string> m;
    if (node.IsNull())
      return m;
    if (!node.IsMap())
      throw UsageError(file_name + ": " + key + " must be a map");
    for (const auto& entry : node) {
      const std::string name = entry.first.as<std::string>();
      if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
        throw UsageError(file_name + ": unknown key '" + key + "." + name +
                         "' (expected submit, results, events or dlq)");
      }
      m[name] = scalar(entry.second, key + "." + name);
    }
    return m;
  };
  for (const auto& entry : root) {
    const std::string key = entry.first.as<std::string>();
    const YAML::Node& value = entry.second;
    if (key == "url") {
      out.url = scalar(value, key);
    } else if (key == "api_key") {
      if (!value.IsScalar())
        throw UsageError(file_name + ": api_key must be a string");
      out.api_key = value.as<std::string>();
    } else if (key == "kafka_bootstrap") {
      out.kafka_bootstrap = scalar(value, key);
    } else if (key == "timeout_s") {
      out.timeout_s =
          static_cast<int>(parse_integer(scalar(value, key), 1, 86400, file_name + ": timeout_s"));
    } else if (key == "topics") {
      out.topics = string_map(value, key, {"submit", "results", "events", "dlq"});
    } else if (key == "kafka_properties") {
      out.kafka_properties = string_map(value, key, {});
    } else {
      throw UsageError(file_name + ": unknown key '" + key +
                       "' (expected url, api_key, kafka_bootstrap, timeout_s, topics, "
                       "kafka_properties)");
    }
  }
  return out;
}

Settings resolve_settings(const GlobalFlags& flags, const Environment& env,
                          const FileSettings& file, const std::string& file_name) {
  Settings s;
  const std::string from_file = "config " + file_name;
  if (flags.url) {
    s.url = *flags.url;
    s.url_source = "--url";
  } else if (auto url = env("AGENTFLEET_URL")) {
    s.url = *url;
    s.url_source = "AGENTFLEET_URL";
  } else if (file.url) {
    s.url = *file.url;
    s.url_source = from_file;
  }
  while (!s.url.empty() && s.url.back() == '/')
    s.url.pop_back();
  if (s.url.rfind("http://", 0) != 0 && s.url.rfind("https://", 0) != 0) {
    throw UsageError("the dispatcher URL (from " + s.url_source +
                     ") must start with http:// or https://");
  }
  if (flags.api_key) {
    s.api_key = *flags.api_key;
    s.api_key_source = "--api-key";
  } else if (auto key = env("AGENTFLEET_API_KEY")) {
    s.api_key = *key;
    s.api_key_source = "AGENTFLEET_API_KEY";
  } else if (file.api_key) {
    s.api_key = *file.api_key;
    s.api_key_source = from_file;
  }
  if (flags.kafka_bootstrap) {
    s.kafka_bootstrap = *flags.kafka_bootstrap;
  } else if (auto bootstrap = env("AGENTFLEET_KAFKA_BOOTSTRAP")) {
    s.kafka_bootstrap = *bootstrap;
  } else if (file.kafka_bootstrap) {
    s.kafka_bootstrap = *file.kafka_bootstrap;
  }
  if (flags.request_timeout_s) {
    s.request_timeout = std::chrono::seconds(*flags.request_timeout_s);
  } else if (file.timeout_s) {
    s.request_timeout = std::chrono::seconds(*file.timeout_s);
  }
  for (const auto& [name, topic] : file.topics) {
    (name == "submit"    ? s.topics.submit
     : name == "results" ? s.topics.results
     : name == "events"  ? s.topics.events
                         : s.topics.dlq) = topic;
  }
  s.kafka_properties = file.kafka_properties;
  s.json = flags.json;
  return s;
}

std::string path_segment(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u >= 'A' && u <= 'Z') || (u >= 'a' && u <= 'z') || (u >= '0' && u <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xf]);
    }
  }
  return out;
}

std::string query_string(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string out;
  for (const auto& [name, value] : params) {
    if (!out.empty())
      out += '&';
    out += path_segment(name) + "=" + path_segment(value);
  }
  return out;
}

}  // namespace agentfleet::agentctl
