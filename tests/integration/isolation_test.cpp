// Isolation and secrets (issue #7, item 6; invariant 8 of DESIGN.md), on the embedded fleet.
//
// Each clause and the test that proves it:
//   - A user's key cannot read, list, cancel or stream another user's task or usage:
//     ApiAuth.AKeyActsOnlyForItsUsersAndAnotherUsersTaskIsNotFound (api_test.cpp: read,
//     long poll, cancel and event stream of another user's task are 404; list, usage and
//     limits of another user 403; submissions and batch uploads for another user 403; limits
//     changes admin only) and ApiUsage.EveryUsersBillIsTheWholeLedgerAndOnlyForAnAdmin
//     (/v1/usage for admins only). Extended here by
//     Isolation.AUsersKeyCannotReachAnotherUsersBatchNorNameAnotherUserInAnyEncoding: another
//     user's batch (status, results, cancel), ids percent-encoded in the query and the path,
//     a repeated user_id parameter, and a refused cancel that leaves the task running.
//   - A tool call always carries the task's user, even when the model's arguments name
//     another user: Isolation.AToolCallCarriesTheTasksUserWhateverTheModelOrTheMessageSays
//     (llm-sim's `impersonate` scenario; tool-sim's records say which user each call was
//     made as), including a dispatch message that names another user and carries a
//     traceparent with a header break in it.
//   - A tool above the user's permission level is refused and audited:
//     Permission.AToolAboveTheUsersLevelIsNotOfferedAndNothingIsSent (sample_tasks_test.cpp:
//     not offered to a function-calling model) and, for a model that calls it anyway,
//     Isolation.AToolAboveTheUsersLevelOrOutsideTheAllowListIsRefusedFedBackAndAudited: the
//     refusal is the model's observation, a `refused` entry in the task's trace,
//     agentfleet_tool_calls_total{outcome="refused"} and a `tool call refused` log line.
//   - TLS verification is on by default and a self-signed model endpoint is refused unless
//     configured: HttpsClient.* (https_client_test.cpp: untrusted and wrong-name
//     certificates refused) and
//     HttpsClient.AModelEndpointWithASelfSignedCertificateIsRefusedAndATrustedOneAnswers.
//   - API keys, model keys and database passwords never appear in logs, errors or the
//     trace: tests/e2e/log_secrets_test.sh (planted secrets in every log, the database's
//     rows and the topics) and Isolation.AnApiKeyIsNeverEchoedInAnAnswerNorWrittenToALog.

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <rapidjson/document.h>

#include <pqxx/pqxx>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/adapters/http/client.hpp"
#include "tests/integration/fleet_client.hpp"
#include "tests/integration/fleet_env.hpp"

namespace agentfleet {
namespace {

using namespace std::chrono_literals;
namespace bhttp = boost::beast::http;
using test::Headers;

using test::api;
using test::at;
using test::env;
using test::fetch;
using test::kAdminKey;
using test::kU1Key;
using test::kU2Key;
using test::num;
using test::parse;
using test::pg_row;
using test::produce;
using test::run_tag;
using test::str;
using test::submit;
using test::url_encode;
using test::wait_terminal;

std::string user(const std::string& name) {
  return "iso-" + name + "-" + run_tag();
}

http::ClientResponse tool_sim(bhttp::verb method, const std::string& target, std::string body = {},
                              Headers headers = {}) {
  return fetch(env()["TOOL_SIM_URL"] + target, method, std::move(body), std::move(headers));
}

void expect_error(const http::ClientResponse& response, int status, const std::string& code,
                  const std::string& path) {
  EXPECT_EQ(response.status, status) << response.body;
  auto doc = parse(response.body);
  EXPECT_EQ(str(at(doc, "error"), "code"), code) << response.body;
  EXPECT_EQ(str(at(doc, "error"), "path"), path) << response.body;
}

std::string submission(const std::string& u, const std::string& text, const std::string& key,
                       const std::string& extra = {}) {
  return R"({"user_id":")" + u + R"(","text":")" + text + R"(","idempotency_key":")" + key + "\"" +
         extra + "}";
}

// The sum over the workers' /metrics of the samples of `name` that carry every label.
double worker_metric(const std::string& name, const std::vector<std::string>& labels) {
  double sum = 0;
  for (const auto& url : test::split_list(env()["AGENTFLEET_WORKER_METRICS_URLS"])) {
    std::istringstream lines(fetch(url + "/metrics", bhttp::verb::get).body);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(name + "{", 0) != 0)
        continue;
      bool all = true;
      for (const auto& label : labels)
        all = all && line.find(label) != std::string::npos;
      if (all)
        sum += std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return sum;
}

// The lines of the fleet's logs (the fixture's run folder) that hold every one of `parts`.
std::vector<std::string> log_lines(const std::string& file_prefix,
                                   const std::vector<std::string>& parts) {
  std::vector<std::string> out;
  const char* dir = std::getenv("AGENTFLEET_TEST_RUN_DIR");
  if (!dir)
    return out;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(dir) + "/logs")) {
    if (entry.path().filename().string().rfind(file_prefix, 0) != 0)
      continue;
    std::ifstream file(entry.path());
    for (std::string line; std::getline(file, line);) {
      bool all = true;
      for (const auto& part : parts)
        all = all && line.find(part) != std::string::npos;
      if (all)
        out.push_back(line);
    }
  }
  return out;
}

// The entries of one step's trace, from the task as the API shows it.
std::vector<const rapidjson::Value*> trace_of(const rapidjson::Value& task, int step) {
  std::vector<const rapidjson::Value*> out;
  const auto& trace = at(task, "trace");
  if (!trace.IsArray())
    return out;
  for (const auto& s : trace.GetArray()) {
    if (num(s, "step") != step)
      continue;
    const auto& calls = at(s, "tool_calls");  // the step's tool calls as they were checked
    if (!calls.IsArray())
      continue;
    for (const auto& c : calls.GetArray())
      out.push_back(&c);
  }
  return out;
}

const rapidjson::Value* trace_entry(const std::vector<const rapidjson::Value*>& entries,
                                    const std::string& tool) {
  for (const auto* e : entries) {
    if (str(*e, "tool") == tool)
      return e;
  }
  return nullptr;
}

// tool-sim's record of executed calls for one user.
rapidjson::Document records_of(const std::string& user_id) {
  auto response = tool_sim(bhttp::verb::get, "/records?user_id=" + url_encode(user_id));
  EXPECT_EQ(response.status, 200) << response.body;
  return parse(response.body);
}

// How many of tool-sim's executed calls made as `user_id` came from the task (by their
// idempotency keys, <task_id>:<step>:<call>).
int calls_of_task(const std::string& user_id, const std::string& task_id) {
  auto records = records_of(user_id);
  int n = 0;
  if (!records.IsArray())
    return -1;
  for (const auto& r : records.GetArray()) {
    if (str(r, "idempotency_key").rfind(task_id + ":", 0) == 0)
      ++n;
  }
  return n;
}

// The headers of the results topic's messages about `task_id` from the topic's current end
// on, read until one arrives (bounded).
class ResultHeaders {
 public:
  ResultHeaders() {
    char errstr[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", env()["AGENTFLEET_KAFKA_BOOTSTRAP"].c_str(),
                      errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "group.id", ("isolation-" + run_tag()).c_str(), errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof(errstr));
    rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    EXPECT_NE(rk_, nullptr) << errstr;
    if (!rk_)
      return;
    const rd_kafka_metadata_t* metadata = nullptr;
    rd_kafka_topic_t* handle = rd_kafka_topic_new(rk_, kTopic, nullptr);
    EXPECT_EQ(rd_kafka_metadata(rk_, 0, handle, &metadata, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_t* assignment = rd_kafka_topic_partition_list_new(8);
    for (int t = 0; metadata && t < metadata->topic_cnt; ++t) {
      for (int p = 0; p < metadata->topics[t].partition_cnt; ++p) {
        const int partition = metadata->topics[t].partitions[p].id;
        std::int64_t low = 0, high = 0;
        rd_kafka_query_watermark_offsets(rk_, kTopic, partition, &low, &high, 10000);
        rd_kafka_topic_partition_list_add(assignment, kTopic, partition)->offset = high;
      }
    }
    if (metadata)
      rd_kafka_metadata_destroy(metadata);
    rd_kafka_topic_destroy(handle);
    rd_kafka_assign(rk_, assignment);
    rd_kafka_topic_partition_list_destroy(assignment);
  }
  ~ResultHeaders() {
    if (rk_) {
      rd_kafka_consumer_close(rk_);
      rd_kafka_destroy(rk_);
    }
  }
  ResultHeaders(const ResultHeaders&) = delete;
  ResultHeaders& operator=(const ResultHeaders&) = delete;

  std::map<std::string, std::string> of(const std::string& task_id) {
    const auto until = std::chrono::steady_clock::now() + 30s;
    while (rk_ && std::chrono::steady_clock::now() < until) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_, 200);
      if (!m)
        continue;
      std::map<std::string, std::string> headers;
      const bool ours = !m->err && m->payload &&
                        std::string(static_cast<const char*>(m->payload), m->len).find(task_id) !=
                            std::string::npos;
      rd_kafka_headers_t* hdrs = nullptr;
      if (ours && rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char* name = nullptr;
        const void* value = nullptr;
        std::size_t size = 0;
        for (std::size_t i = 0; !rd_kafka_header_get_all(hdrs, i, &name, &value, &size); ++i)
          headers[name].assign(value ? static_cast<const char*>(value) : "", size);
      }
      rd_kafka_message_destroy(m);
      if (ours)
        return headers;
    }
    ADD_FAILURE() << "no result event for " << task_id;
    return {};
  }

 private:
  static constexpr const char* kTopic = "agent.tasks.results";
  rd_kafka_t* rk_ = nullptr;
};

// ---------------------------------------------------------------------------------------

TEST(Isolation, AUsersKeyCannotReachAnotherUsersBatchNorNameAnotherUserInAnyEncoding) {
  // u2's batch of slow tasks, uploaded with u2's key.
  const std::string batch_id = user("u2-batch");
  std::string lines;
  for (int i = 0; i < 3; ++i)
    lines += submission("u2", "slow: steps=2", batch_id + "-" + std::to_string(i)) + "\n";
  auto uploaded = fetch(env()["AGENTFLEET_URL"] + "/v1/batches?batch_id=" + batch_id,
                        bhttp::verb::post, lines, {{"Authorization", "Bearer " + kU2Key}});
  ASSERT_EQ(uploaded.status, 201) << uploaded.body;

  // To u1's key it does not exist: status, results and cancel are 404, exactly like an
  // unknown batch, and the cancel changed nothing.
  for (const std::string& id : {batch_id, user("no-such-batch")}) {
    SCOPED_TRACE(id);
    expect_error(api(bhttp::verb::get, "/v1/batches/" + id, kU1Key), 404, "not_found",
                 "/path/batch_id");
    expect_error(api(bhttp::verb::get, "/v1/batches/" + id + "/results", kU1Key), 404, "not_found",
                 "/path/batch_id");
    expect_error(api(bhttp::verb::post, "/v1/batches/" + id + "/cancel", kU1Key), 404, "not_found",
                 "/path/batch_id");
  }
  auto theirs = api(bhttp::verb::get, "/v1/batches/" + batch_id, kU2Key);
  ASSERT_EQ(theirs.status, 200) << theirs.body;
  EXPECT_TRUE(at(parse(theirs.body), "cancelled").IsFalse()) << "u1's cancel did nothing";
  EXPECT_EQ(api(bhttp::verb::get, "/v1/batches/" + batch_id, kAdminKey).status, 200);
  EXPECT_EQ(api(bhttp::verb::get, "/v1/batches/" + batch_id + "/results", kU2Key).status, 200);

  // A running task of u2's, cancelled with u1's key: 404, and it runs to its end.
  const std::string task = submit(submission("u2", "slow: steps=3", user("u2-task")), kU2Key);
  expect_error(api(bhttp::verb::post, "/v1/tasks/" + task + "/cancel", kU1Key), 404, "not_found",
               "/path/task_id");
  EXPECT_FALSE(
      pg_row("SELECT cancel_requested FROM tasks WHERE task_id = $1::uuid", task)[0].as<bool>());

  // u2 named in other spellings: percent-encoded in the query and in the path, a second
  // user_id parameter. Each is u2 (403) or u1 (u1's own tasks only).
  expect_error(api(bhttp::verb::get, "/v1/tasks?user_id=u%32", kU1Key), 403, "forbidden",
               "/query/user_id");
  expect_error(api(bhttp::verb::get, "/v1/users/u%32/usage", kU1Key), 403, "forbidden",
               "/path/user_id");
  expect_error(api(bhttp::verb::get, "/v1/users/u%32/limits", kU1Key), 403, "forbidden",
               "/path/user_id");
  expect_error(api(bhttp::verb::get, "/v1/users/%75%32/usage?from=2026-01-01", kU1Key), 403,
               "forbidden", "/path/user_id");
  auto first_wins = api(bhttp::verb::get, "/v1/tasks?user_id=u1&user_id=u2&limit=500", kU1Key);
  ASSERT_EQ(first_wins.status, 200) << first_wins.body;
  const auto listed = parse(first_wins.body);
  ASSERT_TRUE(at(listed, "tasks").IsArray());
  for (const auto& t : at(listed, "tasks").GetArray())
    EXPECT_EQ(str(t, "user_id"), "u1") << "a second user_id parameter is not a second user";
  expect_error(api(bhttp::verb::get, "/v1/tasks?user_id=u2&user_id=u1", kU1Key), 403, "forbidden",
               "/query/user_id");
  // Batch uploads naming u2 in the query, or in a line, with u1's key.
  expect_error(fetch(env()["AGENTFLEET_URL"] + "/v1/batches?user_id=u%32", bhttp::verb::post,
                     submission("u2", "删除2月30日的日程", user("smuggled")) + "\n",
                     {{"Authorization", "Bearer " + kU1Key}}),
               403, "forbidden", "/query/user_id");
  EXPECT_EQ(pg_row("SELECT count(*) FROM tasks WHERE idempotency_key = $1", user("smuggled"))[0]
                .as<std::int64_t>(),
            0);

  auto done = wait_terminal(task, kU2Key);
  EXPECT_EQ(str(done, "status"), "succeeded") << "u1's cancel stopped u2's task";
  EXPECT_TRUE(at(done, "cancel_requested").IsFalse());
}

TEST(Isolation, AToolCallCarriesTheTasksUserWhateverTheModelOrTheMessageSays) {
  // The victim: u2 of tool-sim's seed, and one of u2's items (read from tool-sim's admin
  // view, so nothing is done as u2 here).
  const std::string victim = "u2";
  const std::string attacker = user("attacker");
  auto seeded = parse(tool_sim(bhttp::verb::get, "/items?user_id=u2").body);
  ASSERT_TRUE(at(seeded, "items").IsArray() && at(seeded, "items").Size() > 0)
      << "u2 has no items in tool-sim";
  const std::string item = str(at(seeded, "items")[0], "id");
  ASSERT_FALSE(item.empty());

  // The attacker's task: the model names the victim in its arguments and deletes the
  // victim's item by id.
  const std::string id =
      submit(submission(attacker, "impersonate: user=" + victim + " item=" + item, "imp-1"));
  auto task = wait_terminal(id);
  ASSERT_EQ(str(task, "status"), "succeeded") << str(task, "error");
  EXPECT_EQ(str(at(task, "result"), "type"), "error");
  EXPECT_EQ(str(at(task, "result"), "message"), "search: invalid_arguments; delete: not_found")
      << "the argument naming a user was refused; the delete ran as the attacker";
  const auto step0 = trace_of(task, 0);
  const auto* search = trace_entry(step0, "search_items");
  ASSERT_NE(search, nullptr) << "no trace entry for the search";
  EXPECT_EQ(str(*search, "status"), "refused");
  EXPECT_NE(str(*search, "result").find("/user_id"), std::string::npos) << str(*search, "result");
  const auto* del = trace_entry(step0, "delete_item");
  ASSERT_NE(del, nullptr) << "no trace entry for the delete";
  EXPECT_EQ(str(*del, "status"), "error");
  EXPECT_EQ(num(*del, "http_status"), 404);

  // tool-sim: the delete was made as the attacker, with the task's idempotency key; no call
  // of the task was made as the victim, whose item is still there.
  auto attacker_calls = records_of(attacker);
  ASSERT_TRUE(attacker_calls.IsArray());
  ASSERT_EQ(attacker_calls.Size(), 1u);
  EXPECT_EQ(str(attacker_calls[0], "tool"), "delete_item");
  EXPECT_EQ(str(attacker_calls[0], "idempotency_key"), id + ":0:1");
  EXPECT_EQ(num(attacker_calls[0], "status"), 404);
  EXPECT_EQ(calls_of_task(victim, id), 0) << "a call of the task was made as the victim";
  auto items = tool_sim(bhttp::verb::get, "/items?user_id=" + url_encode(victim));
  EXPECT_NE(items.body.find("\"" + item + "\""), std::string::npos) << items.body;

  // The same from the dispatch topic: a message naming the victim, for the attacker's task
  // (the row is the truth), with a traceparent of a later version whose extra field holds a
  // header break. The run is the attacker's; the trace id goes on, rebuilt as version 00.
  const std::string forged = pg_row(R"SQL(
      INSERT INTO tasks (task_id, user_id, text, model, timeout_s, schedule_timeout_s, max_steps,
                         priority, request_canonical, status, dispatched_at)
      VALUES (gen_random_uuid(), $1, $2, 'sim-model', 30, 3600, 10, 'interactive', '{}',
              'dispatched', now())
      RETURNING task_id::text)SQL",
                                    attacker, "impersonate: user=" + victim + " item=" + item)[0]
                                 .as<std::string>();
  const std::string trace_id = "4bf92f3577b34da6a3ce929d0e0e" + std::string(4, 'a');
  const std::string parent = "00f067aa0ba902b7";
  ResultHeaders results;
  produce("agent.tasks.dispatch", victim,
          R"({"version":1,"task_id":")" + forged + R"(","user_id":")" + victim +
              R"(","priority":"interactive","dispatched_at":"2026-01-01T00:00:00.000Z"})",
          {{"traceparent", "01-" + trace_id + "-" + parent + "-01-x\r\nX-User-Id: " + victim}});
  auto forged_task = wait_terminal(forged);
  ASSERT_EQ(str(forged_task, "status"), "succeeded") << str(forged_task, "error");
  EXPECT_EQ(str(forged_task, "user_id"), attacker);
  EXPECT_EQ(str(at(forged_task, "result"), "message"),
            "search: invalid_arguments; delete: not_found");
  attacker_calls = records_of(attacker);
  ASSERT_EQ(attacker_calls.Size(), 2u);
  EXPECT_EQ(str(attacker_calls[1], "idempotency_key"), forged + ":0:1");
  EXPECT_EQ(calls_of_task(victim, forged), 0) << "a call of the task was made as the victim";
  EXPECT_NE(tool_sim(bhttp::verb::get, "/items?user_id=u2").body.find("\"" + item + "\""),
            std::string::npos);
  EXPECT_EQ(results.of(forged)["traceparent"], "00-" + trace_id + "-" + parent + "-01")
      << "only a checked traceparent goes on to the model, the tools and the results";
}

TEST(Isolation, AToolAboveTheUsersLevelOrOutsideTheAllowListIsRefusedFedBackAndAudited) {
  // A read-only user; a react_json model, which (unlike function calling, where the tool is
  // not offered at all) calls create_item anyway.
  const std::string reader = user("reader");
  auto limits = api(bhttp::verb::put, "/v1/users/" + reader + "/limits", kAdminKey,
                    R"({"tool_permission":"read"})");
  ASSERT_EQ(limits.status, 200) << limits.body;
  const std::vector<std::string> refused_labels = {"tool=\"create_item\"", "outcome=\"refused\""};
  const double refused_before = worker_metric("agentfleet_tool_calls_total", refused_labels);

  const std::string id = submit(submission(reader, "明天下午3点开会，讨论项目进度", "perm-1",
                                           R"(,"model":"sim-react-model")"));
  auto task = wait_terminal(id);
  ASSERT_EQ(str(task, "status"), "succeeded") << str(task, "error");
  // Fed back: the model read the refusal and said so.
  EXPECT_EQ(str(at(task, "result"), "type"), "error");
  EXPECT_EQ(str(at(task, "result"), "message").rfind("创建日程失败：", 0), 0u)
      << str(at(task, "result"), "message");
  // Audited: the trace, the metric, the log.
  const auto* entry = trace_entry(trace_of(task, 0), "create_item");
  ASSERT_NE(entry, nullptr) << "the refusal is not in the trace";
  EXPECT_EQ(str(*entry, "status"), "refused");
  EXPECT_NE(str(*entry, "result").find("permission_denied"), std::string::npos)
      << str(*entry, "result");
  EXPECT_GE(worker_metric("agentfleet_tool_calls_total", refused_labels), refused_before + 1);
  EXPECT_FALSE(
      log_lines("worker", {"\"task_id\":\"" + id + "\"", "tool call refused", "permission_denied"})
          .empty())
      << "no `tool call refused` line for the task";
  auto calls = records_of(reader);
  ASSERT_TRUE(calls.IsArray());
  EXPECT_EQ(calls.Size(), 0u) << "a call of the read-only user reached tool-sim";

  // A tool outside the task's allow-list: refused by the loop, fed back, in the trace.
  const std::string listed = user("listed");
  const std::string id2 =
      submit(submission(listed, "明天下午3点开会，讨论项目进度", "allow-1",
                        R"(,"model":"sim-react-model","tools":["search_items"])"));
  auto task2 = wait_terminal(id2);
  ASSERT_EQ(str(task2, "status"), "succeeded") << str(task2, "error");
  EXPECT_EQ(str(at(task2, "result"), "message").rfind("创建日程失败：", 0), 0u)
      << str(at(task2, "result"), "message");
  const auto* entry2 = trace_entry(trace_of(task2, 0), "create_item");
  ASSERT_NE(entry2, nullptr) << "the refusal is not in the trace";
  EXPECT_EQ(str(*entry2, "status"), "refused");
  EXPECT_NE(str(*entry2, "result").find("tool_not_allowed"), std::string::npos)
      << str(*entry2, "result");
  EXPECT_EQ(records_of(listed).Size(), 0u);
}

TEST(Isolation, ATierThatAllowsSomeModelsRefusesTheOthersAtSubmissionAndAtTheWorker) {
  // The embedded default's tier `trial` allows sim-model only.
  const std::string trial = user("trial");
  auto limits =
      api(bhttp::verb::put, "/v1/users/" + trial + "/limits", kAdminKey, R"({"tier":"trial"})");
  ASSERT_EQ(limits.status, 200) << limits.body;

  // Refused before it is stored.
  auto refused =
      api(bhttp::verb::post, "/v1/tasks", kAdminKey,
          submission(trial, "bench: steps=1", "trial-1", R"(,"model":"sim-react-model")"));
  expect_error(refused, 403, "model_not_allowed", "/model");
  EXPECT_NE(refused.body.find("allowed: sim-model"), std::string::npos) << refused.body;
  EXPECT_EQ(pg_row("SELECT count(*) FROM tasks WHERE user_id = $1", trial)[0].as<int>(), 0);

  // The allowed model (the default) runs.
  auto allowed = wait_terminal(submit(submission(trial, "bench: steps=1", "trial-2")));
  EXPECT_EQ(str(allowed, "status"), "succeeded") << str(allowed, "error");

  // A batch line is stored as it is: the worker ends it before any model call.
  const std::string batch_id = user("trial-batch");
  auto uploaded =
      fetch(env()["AGENTFLEET_URL"] + "/v1/batches?batch_id=" + batch_id, bhttp::verb::post,
            submission(trial, "bench: steps=1", "trial-3", R"(,"model":"sim-react-model")") + "\n",
            {{"Authorization", "Bearer " + kAdminKey}});
  ASSERT_EQ(uploaded.status, 201) << uploaded.body;
  const std::string id = pg_row(
                             "SELECT task_id::text FROM tasks WHERE user_id = $1 AND "
                             "idempotency_key = 'trial-3'",
                             trial)[0]
                             .as<std::string>();
  auto ended = wait_terminal(id);
  EXPECT_EQ(str(ended, "status"), "failed");
  EXPECT_EQ(str(ended, "error_code"), "model_not_allowed");
  EXPECT_EQ(pg_row("SELECT count(*) FROM usage_ledger WHERE task_id = $1::uuid", id)[0].as<int>(),
            0)
      << "no model call";
}

TEST(Isolation, AnApiKeyIsNeverEchoedInAnAnswerNorWrittenToALog) {
  const std::string planted = "af-planted-key-" + run_tag();
  const std::vector<Headers> attempts = {
      {{"Authorization", "Bearer " + planted}},
      {{"X-API-Key", planted}},
      {{"Authorization", planted}},
      {{"Authorization", "Basic " + planted}},
  };
  for (const Headers& headers : attempts) {
    for (const std::string& target :
         {std::string("/v1/tasks?user_id=u1"),
          std::string("/v1/tasks/00000000-0000-4000-8000-000000000000/events")}) {
      SCOPED_TRACE(headers[0].first + " " + target);
      auto response = fetch(env()["AGENTFLEET_URL"] + target, bhttp::verb::get, {}, headers);
      expect_error(response, 401, "unauthorized", "/header/authorization");
      EXPECT_EQ(response.body.find(planted), std::string::npos) << response.body;
      for (const auto& field : response.headers)
        EXPECT_EQ(std::string(field.value()).find(planted), std::string::npos);
    }
  }
  // A right key acting for another user: its refusal does not quote the key either.
  auto forbidden = api(bhttp::verb::get, "/v1/tasks?user_id=u2", kU1Key);
  EXPECT_EQ(forbidden.status, 403);
  EXPECT_EQ(forbidden.body.find(kU1Key), std::string::npos) << forbidden.body;

  // No log line of any process of the fleet holds the planted key or a real one, although
  // every test of the fleet sends the real ones. The dispatcher writes its lines in order:
  // once the line of a submission sent after the attempts is in its log, theirs are too.
  const std::string marker =
      submit(submission(user("log-marker"), "删除2月30日的日程", user("log-marker")));
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (
      log_lines("dispatcher", {"\"task_id\":\"" + marker + "\"", "\"msg\":\"accepted"}).empty() &&
      std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(50ms);  // polling a bounded wait
  }
  ASSERT_FALSE(
      log_lines("dispatcher", {"\"task_id\":\"" + marker + "\"", "\"msg\":\"accepted"}).empty())
      << "the marker submission's line never reached the dispatcher's log";
  for (const std::string& secret : {planted, kAdminKey, kU1Key, kU2Key}) {
    const auto lines = log_lines("", {secret});
    EXPECT_TRUE(lines.empty()) << secret << " is in a log: " << lines.front();
  }
}

}  // namespace
}  // namespace agentfleet
