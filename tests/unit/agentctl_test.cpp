// agentctl's pure parts: the command line and where settings come from, exit codes and
// error lines, retries, batch progress and its ETA, tables, server-sent events and the two
// shapes of a task's events, limits changes, bills, dead letters. No sockets, no clock:
// times are passed in.

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/codec/task_codec.hpp"
#include "core/domain/build_info.hpp"
#include "tools/agentctl/batch_ids.hpp"
#include "tools/agentctl/batch_progress.hpp"
#include "tools/agentctl/dead_letters.hpp"
#include "tools/agentctl/options.hpp"
#include "tools/agentctl/outcomes.hpp"
#include "tools/agentctl/table.hpp"
#include "tools/agentctl/task_events.hpp"
#include "tools/agentctl/views.hpp"

namespace agentfleet::agentctl {
namespace {

using namespace std::chrono_literals;

Invocation parse(std::vector<std::string> argv) {
  return parse_command_line(argv);
}

Environment env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end() || it->second.empty())
      return std::nullopt;
    return it->second;
  };
}

rapidjson::Document json_doc(const std::string& text) {
  rapidjson::Document doc;
  doc.Parse(text.c_str(), text.size());
  EXPECT_FALSE(doc.HasParseError()) << text;
  return doc;
}

// ---- the command line ---------------------------------------------------------------

TEST(AgentctlOptions, CommandsGroupsArgumentsAndOptions) {
  auto inv = parse({"submit", "完成报告提交", "--user", "u1", "--wait", "--tool=search_items",
                    "--tool", "create_item"});
  ASSERT_NE(inv.command, nullptr);
  EXPECT_EQ(inv.command->name, "submit");
  EXPECT_EQ(inv.args, std::vector<std::string>{"完成报告提交"});
  EXPECT_EQ(inv.value("--user"), "u1");
  EXPECT_TRUE(inv.has("--wait"));
  EXPECT_EQ(inv.values("--tool"), (std::vector<std::string>{"search_items", "create_item"}));

  auto batch = parse({"batch", "submit", "tasks.jsonl", "--user", "u1", "--no-follow"});
  ASSERT_NE(batch.command, nullptr);
  EXPECT_EQ(batch.command->name, "batch submit");
  EXPECT_EQ(batch.args, std::vector<std::string>{"tasks.jsonl"});

  auto stdin_file = parse({"batch", "submit", "-", "--user", "u1"});
  EXPECT_EQ(stdin_file.args, std::vector<std::string>{"-"});

  auto dashed = parse({"submit", "--user", "u1", "--", "--not-an-option"});
  EXPECT_EQ(dashed.args, std::vector<std::string>{"--not-an-option"});
}

TEST(AgentctlOptions, GlobalFlagsGoBeforeOrAfterTheCommandAndTheCommandsOwnNameWins) {
  auto before = parse({"--url", "http://h:1", "--timeout-s", "5", "--json", "status", "ID"});
  EXPECT_EQ(before.globals.url, "http://h:1");
  EXPECT_EQ(before.globals.request_timeout_s, 5);
  EXPECT_TRUE(before.globals.json);

  auto after = parse({"status", "ID", "--api-key", "k", "--timeout-s", "7"});
  EXPECT_EQ(after.globals.api_key, "k");
  EXPECT_EQ(after.globals.request_timeout_s, 7) << "status has no --timeout-s of its own";

  // submit's --timeout-s is the task's; the HTTP deadline stays unset.
  auto submit = parse({"submit", "x", "--user", "u", "--timeout-s", "60"});
  EXPECT_EQ(submit.value("--timeout-s"), "60");
  EXPECT_FALSE(submit.globals.request_timeout_s.has_value());
  auto both = parse({"--timeout-s", "9", "submit", "x", "--user", "u", "--timeout-s", "60",
                     "--request-timeout-s", "11"});
  EXPECT_EQ(both.value("--timeout-s"), "60");
  EXPECT_EQ(both.globals.request_timeout_s, 11);
}

TEST(AgentctlOptions, BadCommandLinesAreUsageErrorsNamingTheProblem) {
  auto message_of = [](std::vector<std::string> argv) {
    try {
      parse(argv);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of({"frobnicate"}).find("unknown command 'frobnicate'"), std::string::npos);
  EXPECT_NE(message_of({"batch", "explode"}).find("submit, list, status, results, cancel"),
            std::string::npos);
  EXPECT_NE(message_of({"batch"}).find("needs a command"), std::string::npos);
  EXPECT_NE(message_of({}).find("a command is needed"), std::string::npos);
  EXPECT_NE(message_of({"status", "ID", "--bogus"}).find("unknown option --bogus for status"),
            std::string::npos);
  EXPECT_NE(message_of({"list", "--user"}).find("--user needs a value"), std::string::npos);
  EXPECT_NE(message_of({"status"}).find("status takes arguments: ID (got 0)"), std::string::npos);
  EXPECT_NE(message_of({"status", "a", "b"}).find("(got 2)"), std::string::npos);
  EXPECT_NE(message_of({"list", "--user", "a", "--user", "b"}).find("--user given twice"),
            std::string::npos);
  EXPECT_NE(message_of({"--timeout-s", "soon", "list"}).find("--timeout-s needs an integer"),
            std::string::npos);
  EXPECT_NE(message_of({"cancel", "ID", "--wait=yes"}).find("unknown option --wait"),
            std::string::npos);
  EXPECT_NE(message_of({"submit", "x", "--wait=yes"}).find("--wait takes no value"),
            std::string::npos);

  // A typo is met with the word it most likely meant.
  EXPECT_NE(message_of({"stauts", "ID"}).find("unknown command 'stauts' (did you mean 'status'?)"),
            std::string::npos);
  EXPECT_NE(message_of({"batch", "sumbit"}).find("(did you mean 'submit'?)"), std::string::npos);
  EXPECT_NE(message_of({"limts"}).find("(did you mean 'limits'?)"), std::string::npos);
  EXPECT_NE(message_of({"list", "--usr", "u"})
                .find("unknown option --usr for list (did you mean '--user'?)"),
            std::string::npos);
  EXPECT_NE(message_of({"list", "--jsno"}).find("(did you mean '--json'?)"), std::string::npos);
  EXPECT_EQ(message_of({"frobnicate"}).find("did you mean"), std::string::npos)
      << "nothing is close: no guess";
  EXPECT_EQ(closest_match("sbmt", {"submit", "status"}), "");
  EXPECT_EQ(closest_match("sumbit", {"submit", "status"}), "submit");
  EXPECT_EQ(closest_match("x", {}), "");

  auto inv = parse({"list", "--user", "u", "--limit", "0"});
  EXPECT_THROW(inv.integer("--limit", 50, 1, 100), UsageError);
  EXPECT_EQ(parse({"list", "--user", "u"}).integer("--limit", 50, 1, 100), 50);
  EXPECT_THROW(parse({"list", "--user", ""}).required("--user"), UsageError);
  EXPECT_THROW(parse({"list"}).required("--user"), UsageError);
}

TEST(AgentctlOptions, VersionNeedsNoCommandAndNamesTheBuild) {
  EXPECT_TRUE(parse({"--version"}).version);
  EXPECT_TRUE(parse({"status", "ID", "--version"}).version);
  EXPECT_EQ(
      version_text().rfind("agentctl " + std::string(agentfleet::build_info().version) + " (", 0),
      0u)
      << version_text();
}

TEST(AgentctlOptions, HelpIsAskedAnywhereAndListsEveryCommandAndTheExitCodes) {
  auto general = parse({"--help"});
  EXPECT_TRUE(general.help);
  EXPECT_EQ(general.command, nullptr);
  const std::string text = general_help();
  for (const auto& c : command_specs()) {
    EXPECT_NE(text.find("  " + c.name), std::string::npos) << c.name;
    const std::string own = command_help(c);
    EXPECT_NE(own.find("usage: agentctl " + c.name), std::string::npos);
    EXPECT_NE(own.find("exit codes:"), std::string::npos);
    for (const auto& o : c.options)
      EXPECT_NE(own.find(o.name), std::string::npos) << c.name << " " << o.name;
  }
  for (const char* code : {"  0  ", "  1  ", "  2  ", "  3  ", "  4  ", "  5  ", "  6  ", "  7  "})
    EXPECT_NE(text.find(code), std::string::npos) << code;
  auto command = parse({"tail", "--help"});
  EXPECT_TRUE(command.help);
  ASSERT_NE(command.command, nullptr);
  EXPECT_EQ(command.command->name, "tail");
  auto group = parse({"dlq", "-h"});
  EXPECT_TRUE(group.help);
  EXPECT_EQ(group.group, "dlq");
  EXPECT_NE(group_help("dlq").find("dlq replay"), std::string::npos);
}

// ---- settings --------------------------------------------------------------------------

TEST(AgentctlSettings, FlagsBeatTheEnvironmentWhichBeatsTheFileWhichBeatsTheDefaults) {
  const FileSettings file = parse_config_file(
      "url: http://file:1/\napi_key: file-key\nkafka_bootstrap: file:9092\ntimeout_s: 12\n"
      "topics: {results: my.results, dlq: my.dlq}\nkafka_properties: {security.protocol: SSL}\n",
      "cfg.yaml");
  GlobalFlags none;
  auto from_file = resolve_settings(none, env_of({}), file, "cfg.yaml");
  EXPECT_EQ(from_file.url, "http://file:1") << "the trailing slash is dropped";
  EXPECT_EQ(from_file.url_source, "config cfg.yaml");
  EXPECT_EQ(from_file.api_key, "file-key");
  EXPECT_EQ(from_file.kafka_bootstrap, "file:9092");
  EXPECT_EQ(from_file.request_timeout, 12s);
  EXPECT_EQ(from_file.topics.results, "my.results");
  EXPECT_EQ(from_file.topics.dlq, "my.dlq");
  EXPECT_EQ(from_file.topics.submit, "agent.tasks.submit");
  EXPECT_EQ(from_file.kafka_properties.at("security.protocol"), "SSL");

  const auto env = env_of({{"AGENTFLEET_URL", "https://env:2"},
                           {"AGENTFLEET_API_KEY", "env-key"},
                           {"AGENTFLEET_KAFKA_BOOTSTRAP", "env:9092"}});
  auto from_env = resolve_settings(none, env, file, "cfg.yaml");
  EXPECT_EQ(from_env.url, "https://env:2");
  EXPECT_EQ(from_env.url_source, "AGENTFLEET_URL");
  EXPECT_EQ(from_env.api_key, "env-key");
  EXPECT_EQ(from_env.api_key_source, "AGENTFLEET_API_KEY");
  EXPECT_EQ(from_env.kafka_bootstrap, "env:9092");

  GlobalFlags flags;
  flags.url = "http://flag:3";
  flags.api_key = "flag-key";
  flags.kafka_bootstrap = "flag:9092";
  flags.request_timeout_s = 4;
  auto from_flags = resolve_settings(flags, env, file, "cfg.yaml");
  EXPECT_EQ(from_flags.url, "http://flag:3");
  EXPECT_EQ(from_flags.url_source, "--url");
  EXPECT_EQ(from_flags.api_key, "flag-key");
  EXPECT_EQ(from_flags.kafka_bootstrap, "flag:9092");
  EXPECT_EQ(from_flags.request_timeout, 4s);

  auto defaults = resolve_settings(none, env_of({}), FileSettings{}, "");
  EXPECT_EQ(defaults.url, "http://127.0.0.1:8080");
  EXPECT_EQ(defaults.url_source, "default");
  EXPECT_TRUE(defaults.api_key.empty());
  EXPECT_EQ(defaults.kafka_bootstrap, "127.0.0.1:9092");
  EXPECT_EQ(defaults.request_timeout, 30s);
  EXPECT_EQ(defaults.topics.results, "agent.tasks.results");

  GlobalFlags bad;
  bad.url = "ftp://x";
  EXPECT_THROW(resolve_settings(bad, env_of({}), FileSettings{}, ""), UsageError);
}

TEST(AgentctlSettings, TheConfigFileIsChosenByFlagThenEnvironmentThenHome) {
  GlobalFlags flags;
  flags.config = "/etc/a.yaml";
  auto chosen = choose_config_file(flags, env_of({{"AGENTCTL_CONFIG", "/b.yaml"}}));
  ASSERT_TRUE(chosen);
  EXPECT_EQ(chosen->path, "/etc/a.yaml");
  EXPECT_TRUE(chosen->required);
  chosen = choose_config_file(GlobalFlags{}, env_of({{"AGENTCTL_CONFIG", "/b.yaml"}}));
  EXPECT_EQ(chosen->path, "/b.yaml");
  EXPECT_TRUE(chosen->required);
  chosen = choose_config_file(GlobalFlags{}, env_of({{"HOME", "/home/op"}}));
  EXPECT_EQ(chosen->path, "/home/op/.config/agentctl/config.yaml");
  EXPECT_FALSE(chosen->required) << "the default file may be missing";
  EXPECT_FALSE(choose_config_file(GlobalFlags{}, env_of({})));
}

TEST(AgentctlSettings, AConfigFileWithAnUnknownKeyOrABadValueIsRefusedWithoutItsSecrets) {
  auto message_of = [](const std::string& text) {
    try {
      parse_config_file(text, "c.yaml");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of("urll: x\n").find("c.yaml: unknown key 'urll'"), std::string::npos);
  EXPECT_NE(message_of("topics: {resluts: x}\n").find("topics.resluts"), std::string::npos);
  EXPECT_NE(message_of("timeout_s: soon\n").find("timeout_s"), std::string::npos);
  EXPECT_NE(message_of("url: [a, b]\n").find("url must be a string"), std::string::npos);
  EXPECT_NE(message_of("- a\n").find("expected a map"), std::string::npos);
  const std::string secret = message_of("api_key: [s3cret-value]\n");
  EXPECT_NE(secret.find("api_key must be a string"), std::string::npos);
  EXPECT_EQ(secret.find("s3cret"), std::string::npos);
  EXPECT_FALSE(parse_config_file("", "c.yaml").url.has_value()) << "an empty file is no settings";
}

TEST(AgentctlSettings, QueriesArePercentEncodedAndTimesCheckedForShape) {
  EXPECT_EQ(query_string({{"from", "2026-11-01T08:00:00+08:00"}, {"user_id", "u 1/二"}}),
            "from=2026-11-01T08%3A00%3A00%2B08%3A00&user_id=u%201%2F%E4%BA%8C");
  EXPECT_EQ(path_segment("a/b"), "a%2Fb");
  EXPECT_TRUE(codec::looks_like_timestamp("2026-11-01"));
  EXPECT_TRUE(codec::looks_like_timestamp("2026-11-01T08:00:00Z"));
  EXPECT_TRUE(codec::looks_like_timestamp("2026-11-01T08:00:00.5+08:00"));
  EXPECT_FALSE(codec::looks_like_timestamp("yesterday"));
  EXPECT_FALSE(codec::looks_like_timestamp("2026-1-01"));
  EXPECT_FALSE(codec::looks_like_timestamp("2026-11-01X08"));
  EXPECT_FALSE(codec::looks_like_timestamp("2026-11-0108:00"));
  EXPECT_TRUE(codec::looks_like_timestamp("2026-11-01 08:00:00z"));
}

// ---- exit codes, errors, retries ---------------------------------------------------------

TEST(AgentctlOutcomes, HttpStatusesAndTaskStatusesMapToTheDocumentedExitCodes) {
  EXPECT_EQ(exit_code_for_http_status(200), 0);
  EXPECT_EQ(exit_code_for_http_status(202), 0);
  EXPECT_EQ(exit_code_for_http_status(404), 3);
  EXPECT_EQ(exit_code_for_http_status(401), 4);
  EXPECT_EQ(exit_code_for_http_status(403), 4);
  for (int status : {400, 405, 409, 413, 422})
    EXPECT_EQ(exit_code_for_http_status(status), 5) << status;
  EXPECT_EQ(exit_code_for_http_status(429), 6);
  for (int status : {0, 500, 502, 503, 504})
    EXPECT_EQ(exit_code_for_http_status(status), 7) << status;
  EXPECT_EQ(exit_code_for_task_status("succeeded"), 0);
  EXPECT_EQ(exit_code_for_task_status("failed"), 1);
  EXPECT_EQ(exit_code_for_task_status("timed_out"), 1);
  EXPECT_EQ(exit_code_for_task_status("cancelled"), 1);
  EXPECT_EQ(exit_code_for_task_status("running"), 7) << "a wait that gave up";
  EXPECT_EQ(exit_code_for_task_status(""), 7);
}

TEST(AgentctlOutcomes, AFailureIsOneLineWithTheApisCodeMessageAndPath) {
  EXPECT_EQ(describe_http_failure(
                "GET", "/v1/tasks/x", 404,
                R"({"error":{"code":"not_found","message":"no task x","path":"/path/task_id"}})"),
            "GET /v1/tasks/x: 404 not_found: no task x (at /path/task_id)");
  EXPECT_EQ(
      describe_http_failure("POST", "/v1/tasks", 400,
                            R"({"error":{"code":"invalid_request","message":"line\nbreak"}})"),
      "POST /v1/tasks: 400 invalid_request: line break");
  EXPECT_EQ(describe_http_failure("GET", "/v1/x", 502, "<html>bad\ngateway</html>"),
            "GET /v1/x: 502: <html>bad gateway</html>");
  EXPECT_EQ(describe_http_failure("GET", "/v1/x", 503, ""), "GET /v1/x: 503");
}

TEST(AgentctlOutcomes, AUrlIsShownWithoutItsCredentials) {
  EXPECT_EQ(url_without_credentials("https://user:pw@host:8443/x?y=1"),
            "https://[redacted]@host:8443/x?y=1");
  EXPECT_EQ(url_without_credentials("http://token@host"), "http://[redacted]@host");
  EXPECT_EQ(url_without_credentials("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
  EXPECT_EQ(url_without_credentials("http://host/a@b"), "http://host/a@b") << "not userinfo";
  EXPECT_EQ(url_credentials("https://user:pw@host:8443/x"), "user:pw");
  EXPECT_EQ(url_credentials("http://host/a@b"), "");
}

TEST(AgentctlOutcomes, OnlyConnectionFailuresAnd503AreRetriedABoundedNumberOfTimes) {
  EXPECT_EQ(retry_delay(0, 3, true, 0, ""), 250ms);
  EXPECT_EQ(retry_delay(1, 3, true, 0, ""), 500ms);
  EXPECT_EQ(retry_delay(2, 3, true, 0, ""), 1000ms);
  EXPECT_FALSE(retry_delay(3, 3, true, 0, "")) << "bounded";
  EXPECT_EQ(retry_delay(0, 3, false, 503, ""), 250ms);
  EXPECT_EQ(retry_delay(0, 3, false, 503, "1"), 1000ms) << "Retry-After";
  EXPECT_EQ(retry_delay(0, 3, false, 503, "3600"), 5000ms) << "capped";
  EXPECT_EQ(retry_delay(0, 3, false, 503, "soon"), 250ms);
  EXPECT_EQ(retry_delay(6, 9, true, 0, ""), 2000ms) << "the backoff is capped";
  for (int status : {200, 400, 404, 429, 500, 502})
    EXPECT_FALSE(retry_delay(0, 3, false, status, "")) << status;
}

// ---- batch progress ------------------------------------------------------------------------

BatchCounts counts(std::int64_t total, std::int64_t queued, std::int64_t running,
                   std::int64_t succeeded, std::int64_t failed) {
  BatchCounts c;
  c.batch_id = "b1";
  c.total = total;
  c.queued = queued;
  c.running = running;
  c.succeeded = succeeded;
  c.failed = failed;
  c.ended = succeeded + failed;
  return c;
}

TEST(AgentctlBatchIds, TheStartOfAnIdStandsForTheOneBatchItBeginsOrSaysWhichItCouldBe) {
  const auto batches = [](const char* text) {
    auto doc = std::make_shared<rapidjson::Document>();
    doc->Parse(text);
    return doc;
  };
  auto one = batches(R"([{"batch_id": "nightly-2026-12-01", "user_id": "alice"}])");
  auto match = match_batch_prefix("nigh", *one);
  EXPECT_EQ(match.batch_id, "nightly-2026-12-01");
  EXPECT_EQ(match.user_id, "alice");
  EXPECT_TRUE(match.problem.empty());

  auto none = match_batch_prefix("nigh", *batches("[]"));
  EXPECT_TRUE(none.none);
  EXPECT_TRUE(none.batch_id.empty());

  auto two = match_batch_prefix("nigh", *batches(R"([{"batch_id": "nightly-2", "user_id": "bob"},
                           {"batch_id": "nightly-1", "user_id": "alice"}])"));
  EXPECT_FALSE(two.none);
  EXPECT_TRUE(two.batch_id.empty());
  EXPECT_EQ(two.problem,
            "the ids of 2 batches begin 'nigh': nightly-2 (bob), nightly-1 (alice); give more "
            "of the id (or --user)");

  std::string many = "[";
  for (int i = 0; i < kBatchPrefixCandidates; ++i)
    many += std::string(i ? "," : "") + R"({"batch_id": "b-)" + std::to_string(i) +
            R"(", "user_id": "u"})";
  auto six = match_batch_prefix("b-", *batches((many + "]").c_str()));
  EXPECT_EQ(six.problem.rfind("the ids of more than 5 batches begin 'b-': b-0 (u), ", 0), 0u)
      << six.problem;
  EXPECT_NE(six.problem.find("b-4 (u), ...;"), std::string::npos) << "five named, then more";
}

TEST(AgentctlProgress, TheRateIsOverTheWindowAndTheEtaIsWhatIsLeftAtThatRate) {
  ProgressMeter meter(60s);
  const auto t0 = ProgressMeter::Clock::time_point{} + 1000s;
  EXPECT_FALSE(meter.rate());
  meter.add(t0, 0);
  EXPECT_FALSE(meter.rate()) << "one sample is no rate";
  EXPECT_FALSE(meter.eta_s(100));
  meter.add(t0 + 10s, 50);
  ASSERT_TRUE(meter.rate());
  EXPECT_DOUBLE_EQ(*meter.rate(), 5.0);
  EXPECT_DOUBLE_EQ(*meter.eta_s(100), 20.0);
  EXPECT_DOUBLE_EQ(*meter.eta_s(0), 0.0);
  // Old samples leave the window: the rate follows the recent pace.
  meter.add(t0 + 70s, 110);
  meter.add(t0 + 130s, 120);
  EXPECT_NEAR(*meter.rate(), 10.0 / 60.0, 1e-9);
  ProgressMeter stalled;
  stalled.add(t0, 5);
  stalled.add(t0 + 5s, 5);
  EXPECT_DOUBLE_EQ(*stalled.rate(), 0.0);
  EXPECT_FALSE(stalled.eta_s(10)) << "nothing ends: no ETA";
}

TEST(AgentctlProgress, TheProgressLineAndTheSummaryLine) {
  EXPECT_EQ(format_duration(0.4), "0s");
  EXPECT_EQ(format_duration(45), "45s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(7620), "2h07m");
  EXPECT_EQ(progress_bar(1, 4, 8), "[##......]");
  EXPECT_EQ(progress_bar(0, 0, 4), "[####]");
  auto c = counts(1000, 800, 80, 110, 10);
  c.timed_out = 3;
  c.ended += 3;
  EXPECT_EQ(format_progress_line(c, 12.5, 70.0),
            "[##..................] 12%  accepted 1000  queued 800  running 80  done 110  "
            "failed 13  12.5/s  ETA 1m10s");
  EXPECT_EQ(format_progress_line(counts(10, 10, 0, 0, 0), std::nullopt, std::nullopt),
            "[....................] 0%  accepted 10  queued 10  running 0  done 0  failed 0  -  "
            "ETA -");
  // Why the queued tasks wait, when the answer says.
  auto held = counts(10, 10, 0, 0, 0);
  held.waiting_reason = "concurrency";
  EXPECT_EQ(format_progress_line(held, 2.0, 5.0),
            "[....................] 0%  accepted 10  queued 10 (concurrency)  running 0  "
            "done 0  failed 0  2.0/s  ETA 5s")
      << "a steady limit: the rate foretells the rest";
  // Throttled by a rate limit: the last minute's rate says nothing of the rest, so no ETA.
  held.waiting_reason = "tokens_per_minute";
  EXPECT_EQ(format_progress_line(held, 9.4, 1.0),
            "[....................] 0%  accepted 10  queued 10 (tokens_per_minute)  running 0  "
            "done 0  failed 0  9.4/s  ETA - (held by tokens_per_minute)");
  auto done = counts(5, 0, 0, 4, 1);
  EXPECT_TRUE(done.finished());
  EXPECT_EQ(done.unsuccessful(), 1);
  // Succeeded is not the same as done what was asked: the result types say how many
  // answered with an error.
  done.action_completed = 2;
  done.error_results = 2;
  EXPECT_EQ(format_batch_summary(done, 83),
            "batch b1 ended: 5 of 5 tasks in 1m23s: succeeded 4, failed 1, timed_out 0, "
            "cancelled 0; results: action_completed 2, need_clarification 0, error 2");
  done.batch_cancelled = true;
  EXPECT_EQ(format_batch_summary(done, 1).rfind("batch b1 cancelled: 5 of 5", 0), 0u);
}

TEST(AgentctlProgress, BatchCountsAreReadFromTheBatchAnswer) {
  auto c = parse_batch_counts(
      R"({"batch_id":"b9","total":7,"cancelled":false,"ended":4,"counts":{"queued":1,)"
      R"("dispatched":1,"running":1,"succeeded":2,"failed":1,"timed_out":0,"cancelled":1},)"
      R"("result_types":{"action_completed":1,"need_clarification":0,"error":1},)"
      R"("waiting_reason":"concurrency"})");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->batch_id, "b9");
  EXPECT_EQ(c->action_completed, 1);
  EXPECT_EQ(c->error_results, 1);
  EXPECT_EQ(c->waiting_reason, "concurrency");
  EXPECT_EQ(c->total, 7);
  EXPECT_EQ(c->ended, 4);
  EXPECT_EQ(c->unsuccessful(), 2);
  EXPECT_FALSE(c->finished());
  EXPECT_FALSE(parse_batch_counts("{\"error\":{}}"));
  EXPECT_FALSE(parse_batch_counts("not json"));
}

// ---- tables ---------------------------------------------------------------------------------

TEST(AgentctlTable, WidthsAreTerminalColumnsAndCellsAreCutWithAnEllipsis) {
  EXPECT_EQ(display_width("abc"), 3u);
  EXPECT_EQ(display_width("完成报告"), 8u);
  EXPECT_EQ(display_width("a完b"), 4u);
  EXPECT_EQ(display_width("e\xcc\x81"), 1u) << "a combining accent takes no column";
  EXPECT_EQ(display_width("\xff"), 1u) << "an invalid byte";
  EXPECT_EQ(display_width("\xc0\xaf"), 2u) << "an overlong form: two invalid bytes";
  EXPECT_EQ(truncate_to_width("abcdef", 4), "abc…");
  EXPECT_EQ(truncate_to_width("完成报告提交", 5), "完成…") << "never half a wide character";
  EXPECT_EQ(truncate_to_width("abc", 3), "abc");
  EXPECT_EQ(pad_to_width("完成", 6), "完成  ");
  EXPECT_EQ(pad_to_width("42", 5, true), "   42");
  EXPECT_EQ(single_line("a\nb\tc"), "a b c");
}

TEST(AgentctlTable, ColumnsFitTheirWidestCellNumbersAlignRightNoTrailingSpaces) {
  Table table({{"MODEL"}, {"CALLS", true}, {"NOTE", false, 6}});
  table.add_row({"sim-model", "3", "完成报告提交"});
  table.add_row({"m", "120"});
  EXPECT_EQ(table.render(),
            "MODEL      CALLS  NOTE\n"
            "sim-model      3  完成…\n"
            "m            120\n");
  EXPECT_EQ(fixed_row({"ab", "7", "rest of the line"}, {4, 3, 0}, {false, true, false}),
            "ab      7  rest of the line\n");
}

// ---- server-sent events -----------------------------------------------------------------------

TEST(AgentctlEvents, TheParserSplitsEventsAcrossPiecesAndSkipsHeartbeats) {
  SseParser parser;
  std::vector<SseEvent> all;
  const std::string stream =
      "id: 0\nevent: step\ndata: {\"step\":0}\n\n: keep-alive\n\nid: 1\r\nevent: delta\r\n"
      "data: {\"a\":1}\r\ndata: {\"b\":2}\r\n\r\n";
  for (char c : stream) {  // one byte at a time: any split works
    for (auto& e : parser.feed(std::string_view(&c, 1)))
      all.push_back(std::move(e));
  }
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].event, "step");
  EXPECT_EQ(all[0].id, "0");
  EXPECT_EQ(all[0].data, "{\"step\":0}");
  EXPECT_EQ(all[1].event, "delta");
  EXPECT_EQ(all[1].data, "{\"a\":1}\n{\"b\":2}");
}

// The result event inside a live done, and the task's history a replayed done carries:
// the same end, as the dispatcher words each.
const char* kLiveDone =
    R"({"version":1,"task_id":"t1","user_id":"u1","seq":9,"attempt":1,"event":"done","step":2,)"
    R"("data":{"version":1,"task_id":"t1","user_id":"u1","status":"succeeded","result":)"
    R"({"type":"action_completed","message":"已完成待办「提交月度报告」","options":[]},)"
    R"("attempt":1,"steps":2,"tool_calls":2,"usage":{"input_tokens":1200,)"
    R"("cached_input_tokens":100,"output_tokens":80},"cost":"0.001234","currency":"CNY",)"
    R"("finished_at":"2026-11-03T10:00:00.000Z"},"at":"2026-11-03T10:00:00.001Z"})";
const char* kReplayedDone =
    R"({"task_id":"t1","user_id":"u1","status":"succeeded","error":null,"error_code":null,)"
    R"("result":{"type":"action_completed","message":"已完成待办「提交月度报告」","options":[]},)"
    R"("usage":{"input_tokens":1200,"cached_input_tokens":100,"output_tokens":80},)"
    R"("cost":"0.001234","currency":"CNY","steps":[{"step":0,"content":"","tool_calls":[],)"
    R"("trace":[]},{"step":1,"content":"","tool_calls":[],"trace":[]}]})";

TEST(AgentctlEvents, ALiveAndAReplayedDoneReadTheSame) {
  auto live = normalise_task_event({"done", kLiveDone, "9"});
  auto replayed = normalise_task_event({"done", kReplayedDone, "5"});
  ASSERT_TRUE(live);
  ASSERT_TRUE(replayed);
  EXPECT_EQ(live->steps, 2);
  EXPECT_EQ(replayed->steps, 2) << "the history's steps, counted";
  const std::string line = format_task_event(*live);
  EXPECT_EQ(line, format_task_event(*replayed));
  EXPECT_EQ(line,
            "done: succeeded action_completed: 已完成待办「提交月度报告」; steps 2; tokens 1200 in "
            "(100 cached), 80 out; cost 0.001234 CNY");
}

TEST(AgentctlEvents, LiveAndReplayedStepsActionsOutcomesAndErrorsReadTheSame) {
  struct Pair {
    std::string event;
    std::string live;
    std::string replayed;
    std::string expected;
  };
  const std::vector<Pair> pairs = {
      {"step",
       R"({"version":1,"task_id":"t","user_id":"u","seq":0,"attempt":1,"event":"step","step":0,"data":{},"at":"x"})",
       R"({"task_id":"t","step":0,"replayed":true,"data":{}})", "step 0"},
      {"delta",
       R"({"version":1,"task_id":"t","user_id":"u","seq":1,"attempt":1,"event":"delta","step":0,"data":{"text":"先搜索"},"at":"x"})",
       R"({"task_id":"t","step":0,"replayed":true,"data":{"text":"先搜索"}})", "  text: 先搜索"},
      {"action",
       R"({"version":1,"task_id":"t","user_id":"u","seq":2,"attempt":1,"event":"action","step":0,"tool":"search_items","data":{"keyword":"报告"},"at":"x"})",
       R"({"task_id":"t","step":0,"tool":"search_items","replayed":true,"data":{"keyword":"报告"}})",
       R"(  call search_items {"keyword":"报告"})"},
      {"execution",
       R"({"version":1,"task_id":"t","user_id":"u","seq":3,"attempt":1,"event":"execution","step":0,"tool":"search_items","data":{"ok":false},"at":"x"})",
       R"({"task_id":"t","step":0,"tool":"search_items","replayed":true,"data":{"ok":false,"status":"error"}})",
       "  search_items: failed"},
      {"error",
       R"j({"version":1,"task_id":"t","user_id":"u","seq":4,"attempt":1,"event":"error","step":1,"data":{"text":"reached max_steps (1)"},"at":"x"})j",
       R"j({"code":"failed","message":"reached max_steps (1)"})j", "error: reached max_steps (1)"},
  };
  for (const auto& p : pairs) {
    SCOPED_TRACE(p.event);
    auto live = normalise_task_event({p.event, p.live, "1"});
    auto replayed = normalise_task_event({p.event, p.replayed, "1"});
    ASSERT_TRUE(live);
    ASSERT_TRUE(replayed);
    EXPECT_EQ(format_task_event(*live), p.expected);
    EXPECT_EQ(format_task_event(*replayed), p.expected);
  }
  EXPECT_FALSE(normalise_task_event({"message", "{}", ""})) << "not an event of a task";
  EXPECT_FALSE(normalise_task_event({"step", "not json", ""}));
  auto failed = normalise_task_event(
      {"done",
       R"j({"task_id":"t","status":"failed","error":"reached max_steps (1)","error_code":null,)j"
       R"("result":null,"usage":{"input_tokens":1,"cached_input_tokens":0,"output_tokens":2},)"
       R"("cost":"0.000001","currency":"CNY","steps":[]})",
       ""});
  ASSERT_TRUE(failed);
  EXPECT_EQ(format_task_event(*failed),
            "done: failed (reached max_steps (1)); steps 0; tokens 1 in (0 cached), 2 out; cost "
            "0.000001 CNY");
}

// ---- views -----------------------------------------------------------------------------------

TEST(AgentctlViews, ALimitsChangeKeepsTheOtherOverridesUnlessReplaced) {
  auto current = json_doc(
      R"({"user_id":"u","tier":"standard","effective":{},"overrides":{"max_concurrency":2,)"
      R"("monthly_budget":"100.000000","tool_permission":"write"}})");
  EXPECT_EQ(limits_put_body(current, {{"requests_per_minute", "30"}}, {}, false),
            R"({"max_concurrency":2,"monthly_budget":"100.000000","requests_per_minute":30,)"
            R"("tool_permission":"write"})");
  EXPECT_EQ(limits_put_body(current, {{"max_concurrency", "4"}}, {"tool_permission"}, false),
            R"({"max_concurrency":4,"monthly_budget":"100.000000"})");
  EXPECT_EQ(limits_put_body(current, {{"tier", "premium"}}, {}, true), R"({"tier":"premium"})");
  EXPECT_THROW(limits_put_body(current, {{"max_concurrency", "0"}}, {}, false), UsageError);
  EXPECT_THROW(limits_put_body(current, {{"monthly_budget", "lots"}}, {}, false), UsageError);
  EXPECT_THROW(limits_put_body(current, {}, {"colour"}, false), UsageError);
}

TEST(AgentctlViews, ABillWithoutTotalsIsAddedUpExactlyPerCurrency) {
  auto models = json_doc(
      R"([{"model":"a","currency":"CNY","calls":2,"input_tokens":10,"cached_input_tokens":1,)"
      R"("output_tokens":5,"cost":"0.100001"},{"model":"b","currency":"CNY","calls":1,)"
      R"("input_tokens":3,"cached_input_tokens":0,"output_tokens":4,"cost":"0.200002"}])");
  const rapidjson::Value none;
  EXPECT_EQ(format_usage(models, none),
            "MODEL  CURRENCY  CALLS  INPUT  CACHED INPUT  OUTPUT      COST\n"
            "a      CNY           2     10             1       5  0.100001\n"
            "b      CNY           1      3             0       4  0.200002\n"
            "TOTAL  CNY           3     13             1       9  0.300003\n");
  auto empty = json_doc("[]");
  EXPECT_EQ(format_usage(empty, empty), "no usage\n");
}

TEST(AgentctlViews, ABillSaysHowMuchOfItIsUnreconciledOrEstimated) {
  auto models = json_doc(
      R"([{"model":"a","currency":"CNY","calls":3,"input_tokens":10,"cached_input_tokens":0,)"
      R"("output_tokens":5,"cost":"0.300000","unreconciled_calls":1,)"
      R"("unreconciled_cost":"0.100000","estimated_calls":2}])");
  auto totals =
      json_doc(R"([{"currency":"CNY","calls":3,"input_tokens":10,"cached_input_tokens":0,)"
               R"("output_tokens":5,"cost":"0.300000","unreconciled_calls":1,)"
               R"("unreconciled_cost":"0.100000","estimated_calls":2}])");
  const std::string text = format_usage(models, totals);
  EXPECT_NE(text.find("TOTAL  CNY           3     10             0       5  0.300000\n"
                      "of which unreconciled (answers lost to their tasks): 1 calls, 0.100000 CNY\n"
                      "of which billed from an estimate (no usage from the provider): 2 calls "
                      "(CNY)\n"),
            std::string::npos)
      << text;
}

TEST(AgentctlViews, AResultEventIsOneLineAndOtherValuesAreNot) {
  const std::string line = format_result_event(
      R"({"version":1,"task_id":"11111111-2222-4333-8444-555555555555","user_id":"u1",)"
      R"("status":"succeeded","result":{"type":"action_completed","message":"done it"},)"
      R"("attempt":1,"steps":2,"tool_calls":1,"usage":{"input_tokens":1,)"
      R"("cached_input_tokens":0,"output_tokens":1},"cost":"0.000010","currency":"CNY",)"
      R"("finished_at":"2026-11-03T10:00:00.000Z"})");
  EXPECT_EQ(line,
            "2026-11-03T10:00:00.000Z  11111111-2222-4333-8444-555555555555  u1            "
            "succeeded  action_completed    steps 2   0.000010 CNY  done it\n");
  EXPECT_NE(format_result_event(
                R"({"task_id":"t","user_id":"a-user-id-longer-than-its-column","status":"failed",)"
                R"("error":"why","steps":0,"cost":"0.000000","currency":"CNY"})")
                .find(" a-user-id-longer-than-its-column  failed     -  "),
            std::string::npos)
      << "identifiers are never cut; no result type shows as -";
  EXPECT_EQ(format_result_event("garbage"), "");
  EXPECT_EQ(format_result_event("{\"x\":1}"), "");
}

TEST(AgentctlViews, AQueuedTaskSaysWhyItWaitsInItsViewTheListAndItsBatch) {
  rapidjson::Document task;
  task.Parse(R"({"task_id":"t1","user_id":"u1","status":"queued",)"
             R"("waiting_reason":"tokens_per_minute","text":"x"})");
  EXPECT_NE(format_task(task, false)
                .find("waiting    tokens_per_minute (the user's tokens_per_minute limit)\n"),
            std::string::npos)
      << format_task(task, false);
  rapidjson::Document list;
  list.Parse(R"([{"task_id":"t1","status":"queued","waiting_reason":"concurrency",)"
             R"("created_at":"c","text":"x"},{"task_id":"t2","status":"succeeded",)"
             R"("waiting_reason":null,"created_at":"c","text":"y"}])");
  const std::string table = format_task_list(list);
  EXPECT_NE(table.find("queued (concurrency)"), std::string::npos) << table;
  EXPECT_EQ(table.find("succeeded ("), std::string::npos) << table;
  // How it ended and what it cost: the error code of one that failed, each one's bill.
  list.Parse(R"([{"task_id":"t3","status":"failed","error_code":"max_steps",)"
             R"("cost":"0.012345","currency":"CNY","created_at":"c","text":"z"},)"
             R"({"task_id":"t4","status":"queued","cost":"0.000000","currency":null,)"
             R"("created_at":"c","text":"w"}])");
  const std::string ended = format_task_list(list);
  EXPECT_NE(ended.find("ERROR"), std::string::npos) << ended;
  EXPECT_NE(ended.find("max_steps"), std::string::npos) << ended;
  EXPECT_NE(ended.find("0.012345 CNY"), std::string::npos) << ended;
  rapidjson::Document batch;
  batch.Parse(R"({"batch_id":"b1","waiting_reason":"fleet_capacity","counts":{},)"
              R"("result_types":{}})");
  EXPECT_NE(format_batch(batch).find("waiting    fleet_capacity (every worker slot"),
            std::string::npos)
      << format_batch(batch);
  // A task that does not wait shows no such line.
  task.Parse(R"({"task_id":"t1","status":"running","waiting_reason":null})");
  EXPECT_EQ(format_task(task, false).find("waiting"), std::string::npos);
}

TEST(AgentctlViews, StatisticsShowRatesDurationsAndCostsAndTheWindow) {
  rapidjson::Document stats;
  stats.Parse(
      R"({"user_id":"u1","from":"2026-11-01","to":null,"tasks":10,"ended":9,)"
      R"("by_status":{"succeeded":6,"failed":3},"success_rate":0.6667,)"
      R"("action_completed_rate":0.5556,)"
      R"("by_result_type":{"action_completed":5,"error":1},"by_strategy":{"default":9},)"
      R"("duration_s":{"avg":1.5,"p95":4.25},"avg_steps":2,"avg_tool_calls":1.25,)"
      R"("tokens":{"input":100,"output":20,"cached_input":40},)"
      R"("cost":[{"cost":"0.100000","currency":"CNY"},{"cost":"0.010000","currency":"USD"}]})");
  const std::string text = format_stats(stats);
  for (const char* line :
       {"user       u1\n", "window     2026-11-01\n", "tasks      10 (9 ended)\n",
        "succeeded  0.6667 of those ended\n", "done       0.5556 of those ended did as asked\n",
        "status     succeeded 6, failed 3\n", "results    action_completed 5, error 1\n",
        "duration   avg 1.500 s, p95 4.250 s\n", "steps      avg 2.00, tool calls avg 1.25\n",
        "tokens     100 in (40 cached), 20 out\n", "cost       0.100000 CNY, 0.010000 USD\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  // No task ended: no rate; every user's when the answer names none.
  stats.Parse(R"({"user_id":null,"tasks":0,"ended":0,"success_rate":null,"cost":[]})");
  const std::string empty = format_stats(stats);
  EXPECT_NE(empty.find("user       every user\n"), std::string::npos) << empty;
  EXPECT_NE(empty.find("succeeded  -\n"), std::string::npos) << empty;
  EXPECT_NE(empty.find("done       -\n"), std::string::npos) << empty;
  EXPECT_NE(empty.find("cost       -\n"), std::string::npos) << empty;
}

TEST(AgentctlViews, ToolsSayWhetherTheUserMayCallThemOnlyWhenTheAnswerSays) {
  rapidjson::Document tools;
  tools.Parse(R"([{"name":"search_items","category":"calendar","permission":"read",)"
              R"("idempotent":true,"timeout_s":60,"permitted":true,"description":"Search."},)"
              R"({"name":"wipe","category":"admin","permission":"admin","idempotent":false,)"
              R"("timeout_s":5,"permitted":false,"description":"Wipe."}])");
  EXPECT_EQ(format_tools(tools, false),
            "NAME          CATEGORY  PERMISSION  IDEMPOTENT  TIMEOUT  PERMITTED\n"
            "search_items  calendar  read        yes            60 s  yes\n"
            "wipe          admin     admin       no              5 s  no\n");
  tools.Parse(R"([{"name":"wipe","category":"admin","permission":"admin","idempotent":false,)"
              R"("timeout_s":5,"description":"Wipe."}])");
  EXPECT_EQ(format_tools(tools, true),
            "NAME  CATEGORY  PERMISSION  IDEMPOTENT  TIMEOUT  DESCRIPTION\n"
            "wipe  admin     admin       no              5 s  Wipe.\n");
}

TEST(AgentctlViews, APlanListsItsStepsAndAPlanNotMadeYetNamesTheTaskToWaitFor) {
  rapidjson::Document plan;
  plan.Parse(R"({"task_id":"t1","status":"succeeded","plan":{"steps":[)"
             R"({"step_number":1,"description":"find it","tool":"search_items","input":{},)"
             R"("expected_output":"a list","estimated_time_s":1.5,"dependencies":[]},)"
             R"({"step_number":2,"description":"change it","tool":"update_item","input":{},)"
             R"("expected_output":"the item","estimated_time_s":2,"dependencies":[1]}],)"
             R"("total_steps":2,"estimated_total_time_s":3.5},)"
             R"("usage":{"input_tokens":10,"output_tokens":5,"cached_input_tokens":0},)"
             R"("cost":"0.001000","currency":"CNY"})");
  const std::string text = format_plan(plan);
  EXPECT_NE(text.find("STEP  TOOL          DESCRIPTION  NEEDS    EST\n"
                      "   1  search_items  find it      -      1.5 s\n"
                      "   2  update_item   change it    1      2.0 s\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("estimate   3.5 s for 2 steps\n"), std::string::npos) << text;
  EXPECT_NE(text.find("cost       0.001000 CNY\n"), std::string::npos) << text;
  plan.Parse(R"({"task_id":"t2","status":"queued"})");
  EXPECT_NE(format_plan(plan).find("agentctl wait t2"), std::string::npos) << format_plan(plan);
}

TEST(AgentctlOptions, TheCompletionScriptNamesEveryCommandAndOptionForBashAndZsh) {
  const std::string bash = completion_script("bash");
  for (const auto& command : command_specs()) {
    EXPECT_NE(bash.find("'" + command.name + "')"), std::string::npos) << command.name;
    for (const auto& option : command.options)
      EXPECT_NE(bash.find(option.name), std::string::npos) << command.name << " " << option.name;
  }
  EXPECT_NE(bash.find("complete -F _agentctl agentctl\n"), std::string::npos);
  EXPECT_EQ(bash.find("bashcompinit"), std::string::npos);
  EXPECT_NE(completion_script("zsh").find("autoload -U +X bashcompinit && bashcompinit\n"),
            std::string::npos);
  EXPECT_THROW(completion_script("fish"), UsageError);
  // The new commands parse as any other.
  const Invocation stats = parse_command_line({"stats", "--user", "u1", "--from", "2026-11-01"});
  ASSERT_NE(stats.command, nullptr);
  EXPECT_EQ(stats.command->name, "stats");
  const Invocation plan = parse_command_line(
      {"plan", "--user", "u1", "text", "--tool", "a", "--tool", "b", "--wait-s", "5"});
  EXPECT_EQ(plan.values("--tool"), (std::vector<std::string>{"a", "b"}));
  EXPECT_THROW(parse_command_line({"tools", "extra"}), UsageError);
}

// ---- dead letters
// -------------------------------------------------------------------------------

TEST(AgentctlDeadLetters, AReplayGoesToItsSourceWithoutDlqHeadersAndSaysWhereItCameFrom) {
  const DeadLetter d = read_dead_letter(2, 17, "u1", "not json",
                                        {{"traceparent", "00-abc"},
                                         {"dlq-reason", "invalid submission at '': invalid JSON"},
                                         {"dlq-source-topic", "agent.tasks.submit"},
                                         {"dlq-source-partition", "1"},
                                         {"dlq-source-offset", "40"}});
  EXPECT_EQ(d.reason, "invalid submission at '': invalid JSON");
  EXPECT_EQ(d.source_topic, "agent.tasks.submit");
  auto m = replay_of(d);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->topic, "agent.tasks.submit");
  EXPECT_EQ(m->key, "u1");
  EXPECT_EQ(m->value, "not json");
  EXPECT_EQ(m->headers, (MessageHeaders{{"traceparent", "00-abc"},
                                        {"dlq-replayed-from", "2:17"},
                                        {"dlq-origin", "agent.tasks.submit:1:40"}}));
  EXPECT_EQ(format_replay(d, *m, true),
            "would send 2:17 -> agent.tasks.submit key u1 (8 bytes, 3 headers), "
            "dlq-replayed-from 2:17, dlq-origin agent.tasks.submit:1:40");

  // A replay that failed again carries the old replay mark and new dlq-* headers; its own
  // replay drops them all.
  const DeadLetter again = read_dead_letter(
      0, 3, "u1", "not json",
      {{"dlq-replayed-from", "2:17"}, {"dlq-reason", "r2"}, {"dlq-source-topic", "t"}});
  EXPECT_EQ(again.replayed_from, "2:17");
  EXPECT_EQ(replay_of(again)->headers, (MessageHeaders{{"dlq-replayed-from", "0:3"}}))
      << "a letter that does not say its source's offset has no origin to send";
  EXPECT_FALSE(replay_of(read_dead_letter(0, 1, "k", "v", {}))) << "no source: no replay";
}

TEST(AgentctlDeadLetters, OffsetsFiltersAndValuePrefixes) {
  EXPECT_EQ(parse_partition_offset("0:17"), std::make_pair(0, std::int64_t{17}));
  for (const char* bad : {"", "0", ":1", "1:", "a:1", "1:b", "-1:2", "1:2:3"})
    EXPECT_FALSE(parse_partition_offset(bad)) << bad;
  const DeadLetter d = read_dead_letter(
      1, 5, "u1", "v", {{"dlq-reason", "queue_full: user"}, {"dlq-source-topic", "s"}});
  DeadLetterFilter f;
  EXPECT_TRUE(f.matches(d));
  f.reason_contains = "queue_full";
  EXPECT_TRUE(f.matches(d));
  f.source_topic = "other";
  EXPECT_FALSE(f.matches(d));
  f = {};
  f.key = "u2";
  EXPECT_FALSE(f.matches(d));
  f = {};
  f.offsets = {{1, 4}};
  EXPECT_FALSE(f.matches(d));
  f.offsets.push_back({1, 5});
  EXPECT_TRUE(f.matches(d));

  EXPECT_EQ(value_prefix("short", 10), "short");
  EXPECT_EQ(value_prefix("0123456789abc", 10), "0123456789…");
  EXPECT_EQ(value_prefix("完成报告", 4), "完…") << "cut on a character boundary";
  EXPECT_EQ(value_prefix("a\nb", 10), "a b");
  EXPECT_NE(dead_letter_json(d).find(R"("reason":"queue_full: user")"), std::string::npos);
}

}  // namespace
}  // namespace agentfleet::agentctl
