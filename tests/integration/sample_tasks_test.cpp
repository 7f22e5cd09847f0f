// The walking skeleton, end to end on the embedded fleet (started by the ctest fixture in
// fleet_fixture.sh): the six sample tasks of the origin documents are submitted over the
// HTTP API, run by the workers against llm-sim and tool-sim, and then checked where users
// look for them: the task rows, steps and ledger in Postgres, exactly one event per task
// on the results topic, and tool-sim's record of side effects.

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <rapidjson/document.h>

#include <pqxx/pqxx>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/adapters/http/client.hpp"
#include "core/codec/json_schema.hpp"
#include "core/codec/json_text.hpp"
#include "core/domain/task.hpp"
#include "tests/integration/fleet_client.hpp"
#include "tests/integration/fleet_env.hpp"

namespace agentfleet {
namespace {

using namespace std::chrono_literals;

using test::fleet_env;
using test::split_list;

http::ClientResponse call(boost::beast::http::verb method, const std::string& url,
                          const std::string& body = {},
                          std::vector<std::pair<std::string, std::string>> headers = {}) {
  http::ClientRequest request;
  request.method = method;
  request.url = url;
  request.body = body;
  request.headers = std::move(headers);
  // The admin key unless the test chose its own credentials (or none: an empty value).
  if (std::none_of(request.headers.begin(), request.headers.end(),
                   [](const auto& h) { return h.first == "Authorization"; })) {
    request.headers.push_back(test::admin_auth());
  }
  request.deadline = std::chrono::steady_clock::now() + 10s;
  return test::exchange(std::move(request));
}

rapidjson::Document parse(const std::string& text) {
  rapidjson::Document doc;
  doc.Parse(text.c_str());
  EXPECT_FALSE(doc.HasParseError()) << text;
  return doc;
}

std::string submit_json(const std::string& user, const std::string& text, const std::string& key) {
  return R"({"user_id":")" + user + R"(","text":")" + text + R"(","idempotency_key":")" + key +
         R"("})";
}

// Waits (bounded) until the task is terminal; returns its JSON.
rapidjson::Document wait_terminal(const std::string& base, const std::string& task_id) {
  const auto until = std::chrono::steady_clock::now() + 90s;
  for (;;) {
    auto response = call(boost::beast::http::verb::get, base + "/v1/tasks/" + task_id);
    EXPECT_EQ(response.status, 200) << response.body;
    rapidjson::Document doc = parse(response.body);
    const std::string status = doc["status"].GetString();
    if (status == "succeeded" || status == "failed" || status == "timed_out" ||
        status == "cancelled") {
      return doc;
    }
    if (std::chrono::steady_clock::now() > until) {
      ADD_FAILURE() << "task " << task_id << " still " << status << " after 90 s";
      return doc;
    }
    std::this_thread::sleep_for(100ms);  // polling interval of a bounded wait
  }
}

struct TopicMessage {
  std::string key;
  std::string value;
  std::map<std::string, std::string> headers;
};

// Every message of `topic` up to the current end of each partition.
std::vector<TopicMessage> read_topic(const std::string& bootstrap, const std::string& topic) {
  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), errstr, sizeof(errstr));
  rd_kafka_conf_set(conf, "group.id", "integration-reader", errstr, sizeof(errstr));
  rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof(errstr));
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
  EXPECT_NE(rk, nullptr) << errstr;
  std::vector<TopicMessage> messages;
  if (!rk)
    return messages;
  const rd_kafka_metadata_t* metadata = nullptr;
  rd_kafka_topic_t* handle = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  EXPECT_EQ(rd_kafka_metadata(rk, 0, handle, &metadata, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_topic_partition_list_t* assignment = rd_kafka_topic_partition_list_new(8);
  std::map<int, std::int64_t> end;
  for (int t = 0; metadata && t < metadata->topic_cnt; ++t) {
    for (int p = 0; p < metadata->topics[t].partition_cnt; ++p) {
      const int partition = metadata->topics[t].partitions[p].id;
      std::int64_t low = 0, high = 0;
      EXPECT_EQ(rd_kafka_query_watermark_offsets(rk, topic.c_str(), partition, &low, &high, 10000),
                RD_KAFKA_RESP_ERR_NO_ERROR);
      if (high > low) {
        end[partition] = high;
        rd_kafka_topic_partition_list_add(assignment, topic.c_str(), partition)->offset = low;
      }
    }
  }
  if (metadata)
    rd_kafka_metadata_destroy(metadata);
  rd_kafka_topic_destroy(handle);
  rd_kafka_assign(rk, assignment);
  rd_kafka_topic_partition_list_destroy(assignment);
  std::map<int, std::int64_t> next;
  const auto until = std::chrono::steady_clock::now() + 30s;
  auto done = [&] {
    for (const auto& [partition, high] : end) {
      if (next[partition] < high)
        return false;
    }
    return true;
  };
  while (!done() && std::chrono::steady_clock::now() < until) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 200);
    if (!m)
      continue;
    if (!m->err) {
      TopicMessage message;
      message.key.assign(static_cast<const char*>(m->key), m->key_len);
      message.value.assign(static_cast<const char*>(m->payload), m->len);
      rd_kafka_headers_t* headers = nullptr;
      if (rd_kafka_message_headers(m, &headers) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char* name = nullptr;
        const void* value = nullptr;
        std::size_t size = 0;
        for (std::size_t i = 0; !rd_kafka_header_get_all(headers, i, &name, &value, &size); ++i)
          message.headers[name].assign(static_cast<const char*>(value), size);
      }
      messages.push_back(std::move(message));
      next[m->partition] = m->offset + 1;
    }
    rd_kafka_message_destroy(m);
  }
  EXPECT_TRUE(done()) << "could not read " << topic << " to its end within 30 s";
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return messages;
}

struct Sample {
  std::string user;
  std::string text;
  std::string result_type;
  int steps;       // model calls
  int tool_calls;  // tool calls that ran
  std::string message_has;
};

const std::vector<Sample>& samples() {
  static const std::vector<Sample> kSamples = {
      {"u1", "2月8日的会议改到晚上8点", "action_completed", 3, 2, "20:00-21:00"},
      {"u1", "明天下午3点开会，讨论项目进度", "action_completed", 2, 1, "15:00-16:00"},
      {"u1", "完成报告提交", "action_completed", 3, 2, "提交月度报告"},
      {"u1", "今天下午去买东西", "action_completed", 2, 1, "去买东西"},
      {"u2", "2月8日的会议改到晚上8点", "need_clarification", 2, 1, "3"},
      {"u2", "删除2月30日的日程", "error", 1, 0, "2月30日"},
  };
  return kSamples;
}

TEST(SampleTasks, EachEndsAsExpectedWithItsRowsLedgerAndExactlyOneResultEvent) {
  auto env = fleet_env();
  const std::string base = env["AGENTFLEET_URL"];
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < samples().size(); ++i) {
    const Sample& s = samples()[i];
    auto response = call(boost::beast::http::verb::post, base + "/v1/tasks",
                         submit_json(s.user, s.text, "sample-" + std::to_string(i)));
    ASSERT_EQ(response.status, 201) << response.body;
    auto doc = parse(response.body);
    // Accepted and not yet run; the scheduler is woken at once, so it may be dispatched.
    const std::string status = doc["status"].GetString();
    EXPECT_TRUE(status == "queued" || status == "dispatched") << status;
    ids.emplace_back(doc["task_id"].GetString());
  }

  for (std::size_t i = 0; i < ids.size(); ++i) {
    const Sample& s = samples()[i];
    SCOPED_TRACE(s.user + ": " + s.text);
    auto task = wait_terminal(base, ids[i]);
    ASSERT_STREQ(task["status"].GetString(), "succeeded") << task["error"].IsString();
    ASSERT_TRUE(task["result"].IsObject());
    EXPECT_EQ(task["result"]["type"].GetString(), s.result_type);
    EXPECT_NE(std::string(task["result"]["message"].GetString()).find(s.message_has),
              std::string::npos)
        << task["result"]["message"].GetString();
    EXPECT_EQ(task["steps"].GetInt(), s.steps);
    EXPECT_EQ(task["tool_calls"].GetInt(), s.tool_calls);
    EXPECT_EQ(task["trace"].GetArray().Size(), static_cast<unsigned>(s.steps));
    if (s.result_type == "need_clarification") {
      EXPECT_EQ(task["result"]["options"].GetArray().Size(), 3u);
    }
  }

  // Postgres is the truth: one step row and one ledger row per model call, the task's
  // totals equal the ledger's, and nothing is left in the outbox.
  pqxx::connection db(env["AGENTFLEET_PG_URL"]);
  pqxx::work tx(db);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const Sample& s = samples()[i];
    SCOPED_TRACE(s.user + ": " + s.text);
    auto row = tx.exec_params1(
        R"SQL(SELECT t.status, t.result_type, t.steps, t.tool_calls, t.attempt,
                 (SELECT count(*) FROM task_steps s WHERE s.task_id = t.task_id),
                 (SELECT count(*) FROM task_steps s WHERE s.task_id = t.task_id
                                                      AND s.observations IS NOT NULL),
                 (SELECT count(*) FROM usage_ledger l WHERE l.task_id = t.task_id),
                 (SELECT count(DISTINCT step) FROM usage_ledger l WHERE l.task_id = t.task_id),
                 t.cost = (SELECT sum(cost) FROM usage_ledger l WHERE l.task_id = t.task_id),
                 t.input_tokens = (SELECT sum(input_tokens) FROM usage_ledger l
                                   WHERE l.task_id = t.task_id),
                 (SELECT bool_and(l.user_id = t.user_id AND l.cost > 0 AND l.input_tokens > 0)
                  FROM usage_ledger l WHERE l.task_id = t.task_id)
          FROM tasks t WHERE t.task_id = $1::uuid)SQL",
        ids[i]);
    EXPECT_EQ(row[0].as<std::string>(), "succeeded");
    EXPECT_EQ(row[1].as<std::string>(), s.result_type);
    EXPECT_EQ(row[2].as<int>(), s.steps);
    EXPECT_EQ(row[3].as<int>(), s.tool_calls);
    EXPECT_EQ(row[4].as<int>(), 1) << "claimed once";
    EXPECT_EQ(row[5].as<int>(), s.steps) << "step rows";
    EXPECT_EQ(row[6].as<int>(), s.tool_calls > 0 ? s.steps - 1 : 0) << "steps with tool results";
    EXPECT_EQ(row[7].as<int>(), s.steps) << "ledger rows";
    EXPECT_EQ(row[8].as<int>(), s.steps) << "distinct ledger steps";
    EXPECT_TRUE(row[9].as<bool>()) << "task cost equals the ledger's";
    EXPECT_TRUE(row[10].as<bool>()) << "task input tokens equal the ledger's";
    EXPECT_TRUE(row[11].as<bool>()) << "every ledger row billed to the task's user";
  }
  tx.commit();
  // The worker deletes a result's outbox row once the broker has it; wait for that (bounded).
  // Only this test's rows: earlier tests' work may still be in the outbox.
  std::string ids_json = "[";
  for (const std::string& id : ids)
    ids_json += (ids_json.size() > 1 ? ",\"" : "\"") + id + "\"";
  ids_json += "]";
  const auto outbox_until = std::chrono::steady_clock::now() + 30s;
  int pending = 0;
  do {
    pqxx::work check(db);
    pending = check
                  .exec_params1(
                      "SELECT count(*) FROM outbox o WHERE EXISTS (SELECT 1 FROM "
                      "jsonb_array_elements_text($1::jsonb) AS t(id) "
                      "WHERE strpos(o.payload, '\"task_id\":\"' || t.id || '\"') > 0)",
                      ids_json)[0]
                  .as<int>();
    check.commit();
    if (pending)
      std::this_thread::sleep_for(100ms);
  } while (pending && std::chrono::steady_clock::now() < outbox_until);
  EXPECT_EQ(pending, 0) << "outbox rows of these tasks still waiting to be published";

  // Exactly one result event per task on the results topic, valid against its schema.
  // (Other tests put garbage and forged events on the topic; only this test's tasks are
  // looked at.)
  std::map<std::string, int> events;
  for (const auto& [key, value, headers] :
       read_topic(env["AGENTFLEET_KAFKA_BOOTSTRAP"], "agent.tasks.results")) {
    rapidjson::Document doc;
    if (!codec::parse_json(doc, value) || !doc.IsObject() || !doc.HasMember("task_id") ||
        !doc["task_id"].IsString() ||
        std::find(ids.begin(), ids.end(), doc["task_id"].GetString()) == ids.end()) {
      continue;
    }
    auto violation = codec::validate_json_text(value, "result_event.schema.json", &doc);
    EXPECT_FALSE(violation) << violation->path << ": " << violation->message << " in " << value;
    if (violation)
      continue;
    EXPECT_EQ(key, doc["user_id"].GetString()) << "keyed by user_id";
    ++events[doc["task_id"].GetString()];
  }
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(events[ids[i]], 1) << "result events for " << samples()[i].text;
  }

  // The dispatch messages the scheduler wrote (in SQL) match their schema, one per task.
  // (Other tests put poison on the topic; only this test's tasks are looked at.)
  std::map<std::string, int> dispatched;
  const std::set<std::string> ours(ids.begin(), ids.end());
  for (const auto& [key, value, headers] :
       read_topic(env["AGENTFLEET_KAFKA_BOOTSTRAP"], "agent.tasks.dispatch")) {
    rapidjson::Document doc;
    if (!codec::parse_json(doc, value) || !doc.IsObject() || !doc.HasMember("task_id") ||
        !doc["task_id"].IsString() || !ours.count(doc["task_id"].GetString())) {
      continue;
    }
    auto violation = codec::validate_json_text(value, "dispatch_message.schema.json", &doc);
    EXPECT_FALSE(violation) << violation->path << ": " << violation->message << " in " << value;
    if (violation)
      continue;
    EXPECT_EQ(key, doc["task_id"].GetString())
        << "keyed by task, so that one user's tasks spread over the partitions";
    ++dispatched[doc["task_id"].GetString()];
  }
  for (const std::string& id : ids)
    EXPECT_EQ(dispatched[id], 1) << "dispatch messages for " << id;

  // The side effects happened, once each: u1's meeting moved, no idempotency replays.
  auto items = call(boost::beast::http::verb::get, env["TOOL_SIM_URL"] + "/items?user_id=u1");
  EXPECT_NE(items.body.find("20:00"), std::string::npos) << items.body;
  // Counted from the records of u1 and u2 (other tests' users share tool-sim).
  int side_effects = 0;
  std::map<std::string, int> executed;
  for (const char* user : {"u1", "u2"}) {
    auto records = parse(
        call(boost::beast::http::verb::get, env["TOOL_SIM_URL"] + "/records?user_id=" + user).body);
    ASSERT_TRUE(records.IsArray());
    for (const auto& r : records.GetArray()) {
      if (r.HasMember("side_effect") && r["side_effect"].IsTrue())
        ++side_effects;
      if (r.HasMember("idempotency_key") && r["idempotency_key"].IsString())
        ++executed[r["idempotency_key"].GetString()];
    }
  }
  for (const auto& [key, times] : executed)
    EXPECT_EQ(times, 1) << key << " executed " << times << " times";
  EXPECT_EQ(side_effects, 4) << "update, create, complete, create";
}

TEST(TaskApi, RejectsBadInputWithTheJsonPathOfTheProblem) {
  auto env = fleet_env();
  const std::string url = env["AGENTFLEET_URL"] + "/v1/tasks";
  struct Case {
    std::string body;
    std::string path;
  };
  const std::vector<Case> cases = {
      {R"({"user_id":"u1"})", "/"},
      {R"({"user_id":"u1","text":"hi","timeout_s":"30"})", "/timeout_s"},
      {R"({"user_id":"u1","text":"hi","metadata":{"colour":"red"}})", "/metadata/colour"},
      {R"({"user_id":"u1","text":"hi","tools":["no_such_tool"]})", "/tools/0"},
      {R"({"user_id":"u1","text":"hi","model":"no-such-model"})", "/model"},
      {R"({"user_id":"u1","text":"hi","priority":"urgent"})", "/priority"},
      {"not json", "/"},
      // Text that is not UTF-8, a NUL character, a header break in the identity.
      {"{\"user_id\":\"u1\",\"text\":\"\xff\xfe\"}", "/"},
      {R"({"user_id":"u1","text":"a\u0000b"})", "/text"},
      {R"({"user_id":"u1\r\nX-User-Id: u2","text":"hi"})", "/user_id"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    auto response = call(boost::beast::http::verb::post, url, c.body);
    EXPECT_EQ(response.status, 400) << response.body;
    auto doc = parse(response.body);
    ASSERT_TRUE(doc.IsObject() && doc.HasMember("error")) << response.body;
    EXPECT_EQ(doc["error"]["path"].GetString(), c.path) << response.body;
    EXPECT_FALSE(std::string(doc["error"]["message"].GetString()).empty());
  }
  std::string long_text(5001 * 3, '\0');
  long_text.clear();
  for (int i = 0; i < 5001; ++i)
    long_text += "字";
  auto too_long = call(boost::beast::http::verb::post, url, submit_json("u1", long_text, "long"));
  EXPECT_EQ(too_long.status, 400);
  EXPECT_NE(too_long.body.find("/text"), std::string::npos) << too_long.body;
}

TEST(TaskApi, SameIdempotencyKeyReturnsTheOriginalTaskAndAnotherBodyConflicts) {
  auto env = fleet_env();
  const std::string url = env["AGENTFLEET_URL"] + "/v1/tasks";
  auto first =
      call(boost::beast::http::verb::post, url, submit_json("u3", "删除2月30日的日程", "k-1"));
  ASSERT_EQ(first.status, 201) << first.body;
  auto again =
      call(boost::beast::http::verb::post, url, submit_json("u3", "删除2月30日的日程", "k-1"));
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_STREQ(parse(first.body)["task_id"].GetString(), parse(again.body)["task_id"].GetString());
  auto other =
      call(boost::beast::http::verb::post, url, submit_json("u3", "今天下午去买东西", "k-1"));
  EXPECT_EQ(other.status, 409) << other.body;
  EXPECT_NE(other.body.find("/idempotency_key"), std::string::npos);
  // The key belongs to the user: another user may use the same key.
  auto other_user =
      call(boost::beast::http::verb::post, url, submit_json("u4", "删除2月30日的日程", "k-1"));
  EXPECT_EQ(other_user.status, 201) << other_user.body;
}

TEST(TaskApi, UnknownTasksAndRoutesAre404) {
  auto env = fleet_env();
  EXPECT_EQ(call(boost::beast::http::verb::get,
                 env["AGENTFLEET_URL"] + "/v1/tasks/00000000-0000-4000-8000-000000000000")
                .status,
            404);
  EXPECT_EQ(
      call(boost::beast::http::verb::get, env["AGENTFLEET_URL"] + "/v1/tasks/not-a-uuid").status,
      404);
  EXPECT_EQ(call(boost::beast::http::verb::get, env["AGENTFLEET_URL"] + "/v1/nothing").status, 404);
  EXPECT_EQ(call(boost::beast::http::verb::get, env["AGENTFLEET_URL"] + "/healthz").status, 200);
  EXPECT_EQ(
      call(boost::beast::http::verb::get, env["AGENTFLEET_DISPATCHER_METRICS_URL"] + "/readyz")
          .status,
      200);
}

}  // namespace
}  // namespace agentfleet

namespace agentfleet {
namespace {

// Rows as a worker that died mid-run leaves them: running, lease expired.
std::string insert_orphan(pqxx::connection& db, const std::string& user, int attempt) {
  pqxx::work tx(db);
  auto id = tx.exec_params1(
      R"SQL(INSERT INTO tasks (task_id, user_id, text, model, timeout_s, schedule_timeout_s,
                               max_steps, priority, request_canonical, status, attempt,
                               worker_id, lease_until, started_at, dispatched_at)
            VALUES (gen_random_uuid(), $1, '删除2月30日的日程', 'sim-model', 30, 3600, 10,
                    'interactive', '{}', 'running', $2, 'worker-that-died',
                    now() - interval '1 second', now(), now())
            RETURNING task_id::text)SQL",
      user, attempt);
  tx.commit();
  return id[0].as<std::string>();
}

TEST(Recovery, AnExpiredLeaseIsDispatchedAgainAndGivenUpAfterMaxAttempts) {
  auto env = fleet_env();
  pqxx::connection db(env["AGENTFLEET_PG_URL"]);
  const std::string resumed = insert_orphan(db, "orphan-1", 1);
  const std::string exhausted = insert_orphan(db, "orphan-2", 5);  // max_attempts is 5

  auto done = wait_terminal(env["AGENTFLEET_URL"], resumed);
  EXPECT_STREQ(done["status"].GetString(), "succeeded");
  EXPECT_EQ(done["attempt"].GetInt(), 2) << "claimed again by a live worker";
  EXPECT_STREQ(done["result"]["type"].GetString(), "error");  // 2月30日 does not exist

  auto given_up = wait_terminal(env["AGENTFLEET_URL"], exhausted);
  EXPECT_STREQ(given_up["status"].GetString(), "failed");
  EXPECT_EQ(given_up["attempt"].GetInt(), 5) << "not dispatched again";
  EXPECT_NE(std::string(given_up["error"].GetString()).find("5 attempts"), std::string::npos);
  ASSERT_TRUE(given_up["error_code"].IsString());
  EXPECT_STREQ(given_up["error_code"].GetString(), "attempts_exhausted");
  EXPECT_TRUE(done["error_code"].IsNull()) << "a success has no error code";

  // Both are announced on the results topic, valid against the schema.
  std::set<std::string> announced;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (announced.size() < 2 && std::chrono::steady_clock::now() < until) {
    for (const auto& [key, value, headers] :
         read_topic(env["AGENTFLEET_KAFKA_BOOTSTRAP"], "agent.tasks.results")) {
      rapidjson::Document doc;
      if (codec::validate_json_text(value, "result_event.schema.json", &doc))
        continue;
      const std::string id = doc["task_id"].GetString();
      if (id == resumed || id == exhausted)
        announced.insert(id);
    }
    if (announced.size() < 2)
      std::this_thread::sleep_for(200ms);  // the relay's next pass
  }
  EXPECT_EQ(announced.size(), 2u);
}

std::string submit(const std::string& base, const std::string& body) {
  auto response = call(boost::beast::http::verb::post, base + "/v1/tasks", body);
  EXPECT_EQ(response.status, 201) << response.body;
  auto doc = parse(response.body);
  return doc.HasMember("task_id") ? doc["task_id"].GetString() : "";
}

// Seconds between the task's start and its end, from Postgres.
double run_seconds(pqxx::connection& db, const std::string& task_id) {
  pqxx::work tx(db);
  auto row = tx.exec_params1(
      "SELECT extract(epoch FROM finished_at - started_at) FROM tasks WHERE task_id = $1::uuid",
      task_id);
  tx.commit();
  return row[0].as<double>();
}

TEST(Deadline, ATaskWhoseDeadlinePassesMidLoopEndsTimedOutBilledForItsCalls) {
  auto env = fleet_env();
  const std::string base = env["AGENTFLEET_URL"];
  // Each model answer takes 600 ms; ten steps cannot fit in 2 s.
  const std::string id = submit(
      base,
      R"({"user_id":"deadline-user","text":"slow: steps=10","timeout_s":2,"idempotency_key":"dl-1"})");
  auto task = wait_terminal(base, id);
  EXPECT_STREQ(task["status"].GetString(), "timed_out");
  ASSERT_TRUE(task["error_code"].IsString());
  EXPECT_STREQ(task["error_code"].GetString(), "deadline");
  EXPECT_TRUE(task["result"].IsNull());
  const int steps = task["steps"].GetInt();
  // At least one answer (600 ms) fits in 2 s however slow the worker; more depend on speed.
  EXPECT_GE(steps, 1) << "the calls made before the deadline were checkpointed";
  EXPECT_LT(steps, 10);
  EXPECT_GT(task["usage"]["input_tokens"].GetInt64(), 0) << "the tokens used so far are billed";

  pqxx::connection db(env["AGENTFLEET_PG_URL"]);
  const double ran = run_seconds(db, id);
  std::printf("deadline overshoot: %.3f s past a 2 s deadline\n", ran - 2.0);
  EXPECT_LT(ran, 2.0 + 1.0) << "ended within 1 s of its deadline";
  pqxx::work tx(db);
  auto ledger = tx.exec_params1(
      "SELECT count(*), count(DISTINCT step), (SELECT cost FROM tasks WHERE task_id = $1::uuid) = "
      "sum(cost) FROM usage_ledger WHERE task_id = $1::uuid",
      id);
  tx.commit();
  EXPECT_EQ(ledger[0].as<int>(), steps) << "one ledger row per model call";
  EXPECT_EQ(ledger[1].as<int>(), steps);
  EXPECT_TRUE(ledger[2].as<bool>()) << "the task's cost is the ledger's";
}

TEST(Cancel, ARunningTaskStopsWithinThePollIntervalEvenDuringAModelCall) {
  auto env = fleet_env();
  const std::string base = env["AGENTFLEET_URL"];
  const std::string id = submit(
      base,
      R"({"user_id":"cancel-user","text":"slow: steps=20","timeout_s":60,"idempotency_key":"cx-1"})");
  pqxx::connection db(env["AGENTFLEET_PG_URL"]);
  // Wait (bounded) until it has checkpointed one model call, then cancel it through the API.
  const auto until = std::chrono::steady_clock::now() + 30s;
  int steps = 0;
  while (steps < 1 && std::chrono::steady_clock::now() < until) {
    pqxx::work tx(db);
    steps = tx.exec_params1("SELECT count(*) FROM task_steps WHERE task_id = $1::uuid", id)[0]
                .as<int>();
    tx.commit();
    if (steps < 1)
      std::this_thread::sleep_for(50ms);
  }
  ASSERT_GE(steps, 1);
  const auto asked = std::chrono::steady_clock::now();
  auto cancel = call(boost::beast::http::verb::post, base + "/v1/tasks/" + id + "/cancel");
  EXPECT_EQ(cancel.status, 202) << "running: the worker is asked to stop; " << cancel.body;
  EXPECT_TRUE(parse(cancel.body)["cancel_requested"].GetBool());
  auto task = wait_terminal(base, id);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  EXPECT_STREQ(task["status"].GetString(), "cancelled");
  EXPECT_LT(task["steps"].GetInt(), 20);
  std::printf("cancelled %.3f s after the request (poll interval 1 s)\n", took);
  EXPECT_LT(took, 3.0) << "observed by the next poll, not after the running model call";
}

TEST(Permission, AToolAboveTheUsersLevelIsNotOfferedAndNothingIsSent) {
  auto env = fleet_env();
  const std::string base = env["AGENTFLEET_URL"];
  pqxx::connection db(env["AGENTFLEET_PG_URL"]);
  {
    pqxx::work tx(db);
    tx.exec0(
        "INSERT INTO user_limits (user_id, tool_permission) VALUES ('reader', 'read') "
        "ON CONFLICT (user_id) DO UPDATE SET tool_permission = 'read'");
    tx.commit();
  }
  // The scenario creates an event (a write tool); a read-only user may not. The tool is
  // not offered to the model, so (like a real model) the simulator cannot call it and
  // answers with an error naming it; a call made anyway would be refused by the worker.
  const std::string id = submit(
      base,
      R"({"user_id":"reader","text":"明天下午3点开会，讨论项目进度","idempotency_key":"perm-1"})");
  auto task = wait_terminal(base, id);
  EXPECT_STREQ(task["status"].GetString(), "succeeded");
  EXPECT_STREQ(task["result"]["type"].GetString(), "error");
  EXPECT_NE(std::string(task["result"]["message"].GetString()).find("create_item"),
            std::string::npos)
      << task["result"]["message"].GetString();
  EXPECT_EQ(task["tool_calls"].GetInt(), 0) << "nothing was sent to the tool";
  auto items =
      call(boost::beast::http::verb::get, env["TOOL_SIM_URL"] + "/items?user_id=reader").body;
  EXPECT_EQ(items.find("讨论项目进度"), std::string::npos) << items;
}

// Produces raw messages (key "poison" unless given), as a broken or hostile producer would.
void produce_raw(const std::string& bootstrap, const std::vector<std::string>& values,
                 const std::string& topic = "agent.tasks.dispatch",
                 const std::string& key = "poison") {
  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), errstr, sizeof(errstr));
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
  ASSERT_NE(rk, nullptr) << errstr;
  for (const std::string& value : values) {
    ASSERT_EQ(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic.c_str()),
                                RD_KAFKA_V_KEY(const_cast<char*>(key.data()), key.size()),
                                RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
              RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  EXPECT_EQ(rd_kafka_flush(rk, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_destroy(rk);
}

TEST(DeadLetters, PoisonMessagesGoToTheDlqWithTheirReasonWhileOtherTasksFlow) {
  auto env = fleet_env();
  const std::string base = env["AGENTFLEET_URL"];
  const std::string unknown = "00000000-0000-4000-8000-00000000dead";
  const std::vector<std::string> poison = {
      "this is not json {", R"({"version":1,"user_id":"poison"})",
      R"({"version":1,"task_id":")" + unknown +
          R"(","user_id":"poison","priority":"interactive","dispatched_at":"2026-01-01T00:00:00.000Z"})"};
  produce_raw(env["AGENTFLEET_KAFKA_BOOTSTRAP"], poison);
  // A task submitted after the poison still runs.
  const std::string id = submit(
      base, R"({"user_id":"after-poison","text":"删除2月30日的日程","idempotency_key":"ap-1"})");
  auto task = wait_terminal(base, id);
  EXPECT_STREQ(task["status"].GetString(), "succeeded");

  std::map<std::string, TopicMessage> letters;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (letters.size() < poison.size() && std::chrono::steady_clock::now() < until) {
    for (auto& message : read_topic(env["AGENTFLEET_KAFKA_BOOTSTRAP"], "agent.tasks.dlq")) {
      // Only this test's letters: other tests send the same bad bytes to other topics.
      const auto source = message.headers.find("dlq-source-topic");
      if (source == message.headers.end() || source->second != "agent.tasks.dispatch")
        continue;
      for (const std::string& p : poison) {
        if (message.value == p)
          letters[p] = message;
      }
    }
    if (letters.size() < poison.size())
      std::this_thread::sleep_for(200ms);
  }
  ASSERT_EQ(letters.size(), poison.size());
  EXPECT_NE(letters[poison[0]].headers["dlq-reason"].find("invalid dispatch message"),
            std::string::npos);
  EXPECT_NE(letters[poison[1]].headers["dlq-reason"].find("task_id"), std::string::npos)
      << letters[poison[1]].headers["dlq-reason"];
  EXPECT_EQ(letters[poison[2]].headers["dlq-reason"], "unknown task " + unknown);
  for (const auto& [value, letter] : letters) {
    EXPECT_EQ(letter.headers.at("dlq-source-topic"), "agent.tasks.dispatch");
    EXPECT_FALSE(letter.headers.at("dlq-source-partition").empty());
    EXPECT_FALSE(letter.headers.at("dlq-source-offset").empty());
  }
}

// The sum of a counter's samples whose line starts with `prefix` in Prometheus text.
double sum_samples(const std::string& text, const std::string& prefix) {
  double sum = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) == 0)
      sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

double worker_metric(std::map<std::string, std::string>& env, const std::string& prefix) {
  double sum = 0;
  for (const std::string& url : split_list(env["AGENTFLEET_WORKER_METRICS_URLS"])) {
    sum += sum_samples(call(boost::beast::http::verb::get, url + "/metrics").body, prefix);
  }
  return sum;
}

TEST(ModelFaults, A429StormWithRetryAfterIsRiddenOutAndNoTaskWithTimeLeftFails) {
  auto env = fleet_env();
  const std::string base = env["AGENTFLEET_URL"];
  const std::string llm = "http://127.0.0.1:" + env["LLM_SIM_PORT"];
  call(boost::beast::http::verb::delete_, llm + "/admin/faults");
  const double retries_before = worker_metric(
      env, "agentfleet_model_retries_total{model=\"sim-model\",reason=\"rate_limited\"");
  // Every model call is answered 429 "retry after 4 s" for 10 s.
  auto fault = call(boost::beast::http::verb::post, llm + "/admin/faults",
                    R"({"mode":"http_429","retry_after_s":4,"duration_s":10})");
  ASSERT_EQ(fault.status, 201) << fault.body;
  const auto storm_start = std::chrono::steady_clock::now();

  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i) {
    ids.push_back(
        submit(base, R"({"user_id":"storm-u)" + std::to_string(i) +
                         R"(","text":"今天下午去买东西","timeout_s":60,"idempotency_key":"storm-)" +
                         std::to_string(i) + R"("})"));
  }
  // This one has 2 s: a wait of 4 s cannot fit, so it ends at once instead of sleeping past
  // its deadline.
  const std::string short_id = submit(
      base,
      R"({"user_id":"storm-short","text":"今天下午去买东西","timeout_s":2,"idempotency_key":"storm-short"})");

  auto short_task = wait_terminal(base, short_id);
  EXPECT_STREQ(short_task["status"].GetString(), "timed_out");
  EXPECT_NE(std::string(short_task["error"].GetString()).find("429"), std::string::npos)
      << short_task["error"].GetString();
  pqxx::connection db(env["AGENTFLEET_PG_URL"]);
  EXPECT_LT(run_seconds(db, short_id), 2.0) << "gave up before its deadline, not after";

  int model_calls = 0;
  for (const std::string& id : ids) {
    auto task = wait_terminal(base, id);
    EXPECT_STREQ(task["status"].GetString(), "succeeded") << task["error"].IsString();
    model_calls += task["steps"].GetInt();
  }
  const double storm_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - storm_start).count();
  EXPECT_GE(storm_s, 10.0) << "the tasks finished after the storm, not during it";

  auto stats = parse(call(boost::beast::http::verb::get, llm + "/stats").body);
  const int served_429 =
      stats["faults"].HasMember("http_429") ? stats["faults"]["http_429"].GetInt() : 0;
  const double retries =
      worker_metric(env,
                    "agentfleet_model_retries_total{model=\"sim-model\",reason=\"rate_limited\"") -
      retries_before;
  std::printf(
      "429 storm: %d answers 429, %.0f retries for %d model calls of 9 tasks; all 8 with "
      "time left succeeded after %.1f s\n",
      served_429, retries, model_calls, storm_s);
  EXPECT_GT(served_429, 0);
  // Retry-After 4 s over a 10 s storm: at most 3 retries per call (the configured bound).
  EXPECT_LE(retries, 3.0 * 9);
  call(boost::beast::http::verb::delete_, llm + "/admin/faults");
}

// llm-sim's count of completions answered in the react_json protocol.
int react_json_requests(const std::string& llm) {
  auto stats = parse(call(boost::beast::http::verb::get, llm + "/stats").body);
  if (!stats.IsObject() || !stats.HasMember("by_protocol") ||
      !stats["by_protocol"].HasMember("react_json")) {
    return 0;
  }
  return stats["by_protocol"]["react_json"].GetInt();
}

TEST(Cancel, ToolResultsThatCameBeforeTheCancelAreInTheTraceAndCounted) {
  auto env = fleet_env();
  const std::string base = env["AGENTFLEET_URL"];
  const std::string tools = env["TOOL_SIM_URL"];
  const std::string answered_metric =
      "agentfleet_tool_calls_total{outcome=\"ok\",tool=\"search_items\"";
  const double answered_before = worker_metric(env, answered_metric);
  // The step's two search_items calls go out together; the first to reach tool-sim is
  // held for 30 s, the other answers at once.
  auto fault = call(boost::beast::http::verb::post, tools + "/admin/faults",
                    R"({"mode":"slow","latency":"fixed:30000","count":1,"tool":"search_items"})");
  ASSERT_EQ(fault.status, 201) << fault.body;
  const std::uint64_t fault_id = parse(fault.body)["id"].GetUint64();
  // Whether the fault has answered its one request (tool-sim lists it, active or ended, with
  // the requests it served).
  const auto taken = [&] {
    auto listed = parse(call(boost::beast::http::verb::get, tools + "/admin/faults").body);
    for (const char* list : {"faults", "ended"}) {
      if (!listed.IsObject() || !listed.HasMember(list) || !listed[list].IsArray())
        continue;
      for (const auto& f : listed[list].GetArray()) {
        if (f["id"].GetUint64() == fault_id)
          return f["served"].GetUint64() >= 1;
      }
    }
    return false;
  };
  const std::string id = submit(
      base,
      R"({"user_id":"cut-short","text":"bench: steps=2 calls=2","timeout_s":60,"idempotency_key":"cs-1"})");
  // Until the worker has the quick answer and the held call is under way.
  const auto until = std::chrono::steady_clock::now() + 30s;
  bool held = false;
  double answered = answered_before;
  while (std::chrono::steady_clock::now() < until) {
    answered = worker_metric(env, answered_metric);
    held = taken();
    if (held && answered >= answered_before + 1)
      break;
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(held) << "the held call never reached tool-sim";
  ASSERT_GE(answered, answered_before + 1) << "the quick call never answered";
  auto cancel = call(boost::beast::http::verb::post, base + "/v1/tasks/" + id + "/cancel");
  EXPECT_EQ(cancel.status, 202) << cancel.body;
  auto task = wait_terminal(base, id);
  call(boost::beast::http::verb::delete_, tools + "/admin/faults");
  ASSERT_STREQ(task["status"].GetString(), "cancelled");
  EXPECT_STREQ(task["error_code"].GetString(), "cancelled");
  EXPECT_EQ(task["tool_calls"].GetInt(), 1) << "the call that answered is counted";
  ASSERT_TRUE(task["trace"].IsArray() && task["trace"].Size() == 1u);
  const auto& calls = task["trace"][0]["tool_calls"];
  ASSERT_TRUE(calls.IsArray() && calls.Size() == 2u);
  std::multiset<std::string> statuses;
  for (const auto& c : calls.GetArray())
    statuses.insert(c["status"].GetString());
  EXPECT_EQ(statuses, (std::multiset<std::string>{"no_answer", "ok"}));
}

TEST(ReactJson, SampleTasksRunEndToEndOnAModelWithoutFunctionCalling) {
  auto env = fleet_env();
  const std::string base = env["AGENTFLEET_URL"];
  const std::string llm = "http://127.0.0.1:" + env["LLM_SIM_PORT"];
  const int react_before = react_json_requests(llm);
  // sim-react-model is llm-sim spoken to in react_json (config/agentfleet.yaml). A fresh
  // user gets a todo created (one side effect); u2's three Feb 8 meetings need a
  // clarification after a search (no side effect, so the other tests' data is unchanged).
  struct Case {
    std::string user;
    std::string text;
    std::string result_type;
    std::string action;  // the tool of step 0
    std::string message_has;
    std::string result_has;  // in the trace's result of that call
  };
  const std::vector<Case> cases = {
      {"react-u1", "今天下午去买东西", "action_completed", "create_item", "去买东西", "去买东西"},
      {"u2", "2月8日的会议改到晚上8点", "need_clarification", "search_items", "3", "晨会"},
  };
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    ids.push_back(submit(base, R"({"user_id":")" + cases[i].user + R"(","text":")" + cases[i].text +
                                   R"(","model":"sim-react-model","idempotency_key":"react-)" +
                                   std::to_string(i) + R"("})"));
    ASSERT_FALSE(ids.back().empty()) << "not accepted: is sim-react-model configured?";
  }

  pqxx::connection db(env["AGENTFLEET_PG_URL"]);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.user + ": " + c.text);
    auto task = wait_terminal(base, ids[i]);
    ASSERT_STREQ(task["status"].GetString(), "succeeded")
        << (task["error"].IsString() ? task["error"].GetString() : "");
    EXPECT_STREQ(task["model"].GetString(), "sim-react-model");
    EXPECT_EQ(task["result"]["type"].GetString(), c.result_type);
    EXPECT_NE(std::string(task["result"]["message"].GetString()).find(c.message_has),
              std::string::npos)
        << task["result"]["message"].GetString();
    if (c.result_type == "need_clarification") {
      EXPECT_EQ(task["result"]["options"].GetArray().Size(), 3u);
    }
    EXPECT_EQ(task["steps"].GetInt(), 2);
    EXPECT_EQ(task["tool_calls"].GetInt(), 1);

    // The trace shows what the model wrote: the react_json object as text, its thought as
    // the reasoning, then the call it asked for with the tool's result.
    const auto& trace = task["trace"];
    ASSERT_EQ(trace.GetArray().Size(), 2u);
    ASSERT_TRUE(trace[0]["content"].IsString());
    const std::string first = trace[0]["content"].GetString();
    rapidjson::Document action;
    ASSERT_TRUE(codec::parse_json(action, first) && action.IsObject()) << first;
    ASSERT_TRUE(action.HasMember("action") && action.HasMember("action_input") &&
                action.HasMember("thought"))
        << first;
    EXPECT_EQ(action["action"].GetString(), c.action) << first;
    EXPECT_TRUE(action["action_input"].IsObject()) << first;
    ASSERT_TRUE(action["thought"].IsString()) << first;
    ASSERT_TRUE(trace[0]["reasoning"].IsString());
    EXPECT_STREQ(trace[0]["reasoning"].GetString(), action["thought"].GetString());
    const auto& calls = trace[0]["tool_calls"];
    ASSERT_EQ(calls.GetArray().Size(), 1u) << first;
    EXPECT_STREQ(calls[0]["call_id"].GetString(), "rj-0");
    EXPECT_EQ(calls[0]["tool"].GetString(), c.action);
    EXPECT_STREQ(calls[0]["status"].GetString(), "ok");
    EXPECT_EQ(calls[0]["http_status"].GetInt(), 200);
    rapidjson::Document input;
    ASSERT_TRUE(codec::parse_json(input, calls[0]["arguments"].GetString()));
    EXPECT_TRUE(input == action["action_input"]) << calls[0]["arguments"].GetString();
    EXPECT_NE(std::string(calls[0]["result"].GetString()).find(c.result_has), std::string::npos)
        << calls[0]["result"].GetString();
    // The answer of step 1 came in a ```json fence (llm-sim fences odd steps), with `final`.
    const std::string last = trace[1]["content"].GetString();
    EXPECT_EQ(last.rfind("```", 0), 0u) << last;
    EXPECT_NE(last.find("\"final\""), std::string::npos) << last;
    EXPECT_EQ(trace[1]["tool_calls"].GetArray().Size(), 0u);

    // One ledger row per model call, billed to the user under the model asked for.
    pqxx::work tx(db);
    auto ledger = tx.exec_params1(
        R"SQL(SELECT count(*), count(DISTINCT step), bool_and(model = 'sim-react-model'),
                     bool_and(user_id = $2 AND cost > 0 AND input_tokens > 0),
                     (SELECT cost FROM tasks WHERE task_id = $1::uuid) = sum(cost)
              FROM usage_ledger WHERE task_id = $1::uuid)SQL",
        ids[i], c.user);
    tx.commit();
    EXPECT_EQ(ledger[0].as<int>(), 2) << "ledger rows";
    EXPECT_EQ(ledger[1].as<int>(), 2) << "distinct ledger steps";
    EXPECT_TRUE(ledger[2].as<bool>()) << "billed under sim-react-model";
    EXPECT_TRUE(ledger[3].as<bool>()) << "billed to the task's user";
    EXPECT_TRUE(ledger[4].as<bool>()) << "the task's cost is the ledger's";
  }

  // The todo exists once; the search changed nothing of u2's.
  auto items = parse(
      call(boost::beast::http::verb::get, env["TOOL_SIM_URL"] + "/items?user_id=react-u1").body);
  ASSERT_TRUE(items["items"].IsArray());
  ASSERT_EQ(items["items"].GetArray().Size(), 1u);
  const auto& todo = items["items"][0];
  ASSERT_TRUE(todo.HasMember("title") && todo.HasMember("time_segment")) << "no todo fields";
  EXPECT_STREQ(todo["title"].GetString(), "去买东西");
  EXPECT_STREQ(todo["time_segment"].GetString(), "afternoon");
  auto u2 = call(boost::beast::http::verb::get, env["TOOL_SIM_URL"] + "/items?user_id=u2").body;
  EXPECT_EQ(u2.find("20:00"), std::string::npos) << u2;

  // llm-sim saw the requests as react_json (its system message said so): four model calls.
  EXPECT_EQ(react_json_requests(llm) - react_before, 4);
}

// Open models served without a tool-call parser write their calls as text; llm-sim's
// *_text styles answer so (config/llm-sim-scenarios.yaml, "text calls: FORMAT").
// DeepSeek's thinking mode (llm-sim's deepseek_thinking style, the `thinking:` scenario)
// answers 400 unless every tool-calling turn's reasoning_content comes back on the next
// calls: a model configured `reasoning_echo: tool_turns` (sim-thinking-model) sends it, one
// that is not (sim-model) is refused at its second call.
TEST(ReasoningEcho, AThinkingModelGetsItsReasoningBackAndIsRefusedWithoutIt) {
  auto env = fleet_env();
  const std::string base = env["AGENTFLEET_URL"];
  const std::string run =
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  const std::string echoed = submit(
      base, R"({"user_id":"thinking","text":"thinking: steps=2","model":"sim-thinking-model",)"
            R"("idempotency_key":"thinking-echo-)" +
                run + R"("})");
  const std::string dropped =
      submit(base, R"({"user_id":"thinking","text":"thinking: steps=2","model":"sim-model",)"
                   R"("idempotency_key":"thinking-drop-)" +
                       run + R"("})");
  ASSERT_FALSE(echoed.empty());
  ASSERT_FALSE(dropped.empty());
  auto ok = wait_terminal(base, echoed);
  ASSERT_STREQ(ok["status"].GetString(), "succeeded")
      << (ok["error"].IsString() ? ok["error"].GetString() : "");
  EXPECT_STREQ(ok["result"]["type"].GetString(), "action_completed");
  EXPECT_STREQ(ok["result"]["message"].GetString(), "thinking 完成：2 步");
  EXPECT_EQ(ok["tool_calls"].GetInt(), 2);
  auto refused = wait_terminal(base, dropped);
  ASSERT_STREQ(refused["status"].GetString(), "failed");
  ASSERT_TRUE(refused["error"].IsString());
  EXPECT_NE(std::string(refused["error"].GetString()).find("reasoning_content"), std::string::npos)
      << refused["error"].GetString();
  ASSERT_TRUE(refused["error_code"].IsString());
  EXPECT_STREQ(refused["error_code"].GetString(), "model_rejected") << "a 400 is not retried";
}

TEST(NoFalseSuccess, CallsAModelWroteAsTextRunAsCalls) {
  auto env = fleet_env();
  const std::string base = env["AGENTFLEET_URL"];
  const std::string run =
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  std::vector<std::pair<std::string, std::string>> ids;
  for (const std::string format : {"hermes", "llama", "mistral", "json"}) {
    ids.emplace_back(
        format, submit(base, R"({"user_id":"text-calls","text":"text calls: )" + format +
                                 R"(","idempotency_key":"text-)" + format + "-" + run + R"("})"));
    ASSERT_FALSE(ids.back().second.empty());
  }
  for (const auto& [format, id] : ids) {
    SCOPED_TRACE(format);
    auto task = wait_terminal(base, id);
    ASSERT_STREQ(task["status"].GetString(), "succeeded")
        << (task["error"].IsString() ? task["error"].GetString() : "");
    EXPECT_STREQ(task["result"]["type"].GetString(), "action_completed");
    EXPECT_STREQ(task["result"]["message"].GetString(), "已按文本调用完成搜索");
    EXPECT_EQ(task["tool_calls"].GetInt(), 1);
    // The trace shows the call read from the text and what the tool answered.
    const auto& trace = task["trace"];
    ASSERT_EQ(trace.GetArray().Size(), 2u);
    const auto& calls = trace[0]["tool_calls"];
    ASSERT_EQ(calls.GetArray().Size(), 1u);
    EXPECT_STREQ(calls[0]["call_id"].GetString(), "text_call_0");
    EXPECT_STREQ(calls[0]["tool"].GetString(), "search_items");
    EXPECT_STREQ(calls[0]["status"].GetString(), "ok");
    EXPECT_STREQ(calls[0]["arguments"].GetString(),
                 R"({"item_type":"any","keyword":"text","limit":1})");
  }
}

TEST(NoFalseSuccess, PlainTextIsAskedAgainAndASuccessNoToolPerformedIsNeverReported) {
  auto env = fleet_env();
  const std::string base = env["AGENTFLEET_URL"];
  const std::string run =
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  const std::string claim =
      submit(base, R"({"user_id":"plain-text","text":"plain claim","idempotency_key":"claim-)" +
                       run + R"("})");
  const std::string act =
      submit(base, R"({"user_id":"plain-text","text":"plain then act","idempotency_key":"act-)" +
                       run + R"("})");
  ASSERT_FALSE(claim.empty());
  ASSERT_FALSE(act.empty());

  pqxx::connection db(env["AGENTFLEET_PG_URL"]);
  auto ledger_rows = [&db](const std::string& id) {
    pqxx::work tx(db);
    const int rows =
        tx.exec_params1("SELECT count(*) FROM usage_ledger WHERE task_id = $1::uuid", id)[0]
            .as<int>();
    tx.commit();
    return rows;
  };

  // Three answers claiming success in text, nothing called: asked again twice, then failed.
  auto claimed = wait_terminal(base, claim);
  ASSERT_STREQ(claimed["status"].GetString(), "failed");
  ASSERT_TRUE(claimed["error"].IsString());
  EXPECT_NE(std::string(claimed["error"].GetString()).find("no tool performed"), std::string::npos)
      << claimed["error"].GetString();
  ASSERT_TRUE(claimed["error_code"].IsString());
  EXPECT_STREQ(claimed["error_code"].GetString(), "unperformed_action");
  EXPECT_TRUE(!claimed.HasMember("result") || claimed["result"].IsNull());
  EXPECT_EQ(claimed["tool_calls"].GetInt(), 0);
  EXPECT_EQ(ledger_rows(claim), 3) << "every answer is billed";

  // Text once, then a search and a finish: the correction got the work done.
  auto acted = wait_terminal(base, act);
  ASSERT_STREQ(acted["status"].GetString(), "succeeded")
      << (acted["error"].IsString() ? acted["error"].GetString() : "");
  EXPECT_STREQ(acted["result"]["type"].GetString(), "action_completed");
  EXPECT_EQ(acted["tool_calls"].GetInt(), 1);
  EXPECT_EQ(ledger_rows(act), 3);
}

TEST(ProgressEvents, ATaskStreamsItsStepsToolCallsTextAndResultInOrder) {
  auto env = fleet_env();
  const std::string base = env["AGENTFLEET_URL"];
  // create a todo (model, then tool), finish (model).
  const std::string id = submit(
      base, R"({"user_id":"events-user","text":"今天下午去买东西","idempotency_key":"ev-1"})");
  auto task = wait_terminal(base, id);
  ASSERT_STREQ(task["status"].GetString(), "succeeded");

  std::vector<std::string> events;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < until) {
    std::map<int, std::string> by_seq;
    for (const auto& [key, value, headers] :
         read_topic(env["AGENTFLEET_KAFKA_BOOTSTRAP"], "agent.tasks.events")) {
      rapidjson::Document doc;
      if (!codec::parse_json(doc, value) || !doc.IsObject() || !doc.HasMember("task_id") ||
          !doc["task_id"].IsString() || std::string(doc["task_id"].GetString()) != id) {
        continue;
      }
      auto violation = codec::validate_json_text(value, "progress_event.schema.json", &doc);
      EXPECT_FALSE(violation) << violation->path << ": " << violation->message << " in " << value;
      if (violation)
        continue;
      EXPECT_EQ(key, "events-user") << "keyed by user_id";
      by_seq[doc["seq"].GetInt()] = doc["event"].GetString();
    }
    events.clear();
    for (const auto& [seq, event] : by_seq)
      events.push_back(event);
    if (!events.empty() && events.back() == "done")
      break;
    std::this_thread::sleep_for(200ms);  // progress is produced without waiting for the broker
  }
  // step 0: the model asks for the todo; the tool runs; step 1: the model finishes.
  EXPECT_EQ(events.front(), "step");
  EXPECT_EQ(events.back(), "done");
  EXPECT_EQ(std::count(events.begin(), events.end(), "step"), 2);
  EXPECT_EQ(std::count(events.begin(), events.end(), "action"), 1);
  EXPECT_EQ(std::count(events.begin(), events.end(), "execution"), 1);
  EXPECT_EQ(std::count(events.begin(), events.end(), "error"), 0);
  const auto action = std::find(events.begin(), events.end(), "action");
  const auto execution = std::find(events.begin(), events.end(), "execution");
  EXPECT_LT(action - events.begin(), execution - events.begin()) << "the call before its result";
}

TEST(Cancel, ATaskNotYetRunningEndsCancelledAtOnceWithItsResultEvent) {
  auto env = fleet_env();
  const std::string base = env["AGENTFLEET_URL"];
  pqxx::connection db(env["AGENTFLEET_PG_URL"]);
  // Dispatched, but its message never reached a worker (recovery would resend it in 60 s).
  std::string id;
  {
    pqxx::work tx(db);
    id = tx.exec1(R"SQL(INSERT INTO tasks (task_id, user_id, text, model, timeout_s,
                          schedule_timeout_s, max_steps, priority, request_canonical, status,
                          dispatched_at)
                        VALUES (gen_random_uuid(), 'cancel-early', '今天下午去买东西',
                                'sim-model', 30, 3600, 10, 'interactive', '{}', 'dispatched', now())
                        RETURNING task_id::text)SQL")[0]
             .as<std::string>();
    tx.commit();
  }
  auto cancel = call(boost::beast::http::verb::post, base + "/v1/tasks/" + id + "/cancel");
  ASSERT_EQ(cancel.status, 200) << cancel.body;
  auto doc = parse(cancel.body);
  EXPECT_STREQ(doc["status"].GetString(), "cancelled");
  EXPECT_STREQ(doc["error"].GetString(), "cancelled before it ran");

  // Cancelling again is harmless; a task that ended otherwise cannot be cancelled.
  EXPECT_EQ(call(boost::beast::http::verb::post, base + "/v1/tasks/" + id + "/cancel").status, 200);
  const std::string done = submit(
      base, R"({"user_id":"cancel-late","text":"删除2月30日的日程","idempotency_key":"cl-1"})");
  wait_terminal(base, done);
  auto late = call(boost::beast::http::verb::post, base + "/v1/tasks/" + done + "/cancel");
  EXPECT_EQ(late.status, 409) << late.body;
  EXPECT_NE(late.body.find("already_ended"), std::string::npos) << late.body;
  EXPECT_EQ(call(boost::beast::http::verb::post,
                 base + "/v1/tasks/00000000-0000-4000-8000-000000000000/cancel")
                .status,
            404);
  EXPECT_EQ(call(boost::beast::http::verb::get, base + "/v1/tasks/" + id + "/cancel").status, 405);

  // Announced once on the results topic, like any other end.
  int announced = 0;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (announced == 0 && std::chrono::steady_clock::now() < until) {
    for (const auto& [key, value, headers] :
         read_topic(env["AGENTFLEET_KAFKA_BOOTSTRAP"], "agent.tasks.results")) {
      rapidjson::Document event;
      if (codec::validate_json_text(value, "result_event.schema.json", &event))
        continue;
      if (std::string(event["task_id"].GetString()) == id) {
        ++announced;
        EXPECT_STREQ(event["status"].GetString(), "cancelled");
      }
    }
    if (announced == 0)
      std::this_thread::sleep_for(200ms);  // the relay's next pass
  }
  EXPECT_EQ(announced, 1);
}

TEST(TaskApi, WaitAnswersWhenTheTaskEndsAndListShowsAUsersTasksNewestFirst) {
  auto env = fleet_env();
  const std::string base = env["AGENTFLEET_URL"];
  // slow: two steps of 600 ms; ?wait=20 answers as soon as it ends, not after 20 s.
  const std::string id =
      submit(base, R"({"user_id":"lister","text":"slow: steps=1","idempotency_key":"list-1"})");
  const auto asked = std::chrono::steady_clock::now();
  auto waited = call(boost::beast::http::verb::get, base + "/v1/tasks/" + id + "?wait=20");
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  ASSERT_EQ(waited.status, 200) << waited.body;
  EXPECT_STREQ(parse(waited.body)["status"].GetString(), "succeeded");
  EXPECT_LT(took, 8.0) << "answered when the task ended";
  // A short wait on a running task answers with it as it is, after the wait.
  const std::string slow =
      submit(base, R"({"user_id":"lister","text":"slow: steps=5","idempotency_key":"list-2"})");
  auto early = call(boost::beast::http::verb::get, base + "/v1/tasks/" + slow + "?wait=1");
  ASSERT_EQ(early.status, 200);
  EXPECT_FALSE(is_terminal(*parse_task_status(parse(early.body)["status"].GetString())));
  EXPECT_EQ(call(boost::beast::http::verb::get, base + "/v1/tasks/" + id + "?wait=31").status, 400);

  auto list = call(boost::beast::http::verb::get, base + "/v1/tasks?user_id=lister&limit=10");
  ASSERT_EQ(list.status, 200) << list.body;
  auto tasks = parse(list.body);
  ASSERT_EQ(tasks["tasks"].Size(), 2u);
  EXPECT_EQ(tasks["tasks"][0]["task_id"].GetString(), slow) << "newest first";
  EXPECT_EQ(tasks["tasks"][1]["task_id"].GetString(), id);
  auto page = parse(
      call(boost::beast::http::verb::get, base + "/v1/tasks?user_id=lister&limit=1&before=" + slow)
          .body);
  ASSERT_EQ(page["tasks"].Size(), 1u);
  EXPECT_EQ(page["tasks"][0]["task_id"].GetString(), id) << "the page after the cursor";
  auto done = parse(
      call(boost::beast::http::verb::get, base + "/v1/tasks?user_id=lister&status=succeeded").body);
  ASSERT_GE(done["tasks"].Size(), 1u);
  for (const auto& task : done["tasks"].GetArray())
    EXPECT_STREQ(task["status"].GetString(), "succeeded");
  // Without user_id: the admin's search of every user's tasks (ApiTasks.TheSearch... checks
  // what it finds).
  EXPECT_EQ(call(boost::beast::http::verb::get, base + "/v1/tasks?limit=1").status, 200);
  EXPECT_EQ(call(boost::beast::http::verb::get, base + "/v1/tasks?user_id=x&status=done").status,
            400);
  EXPECT_EQ(call(boost::beast::http::verb::get, base + "/v1/tasks?user_id=x&limit=0").status, 400);
  wait_terminal(base, slow);
}

TEST(SubmitTopic, SubmissionsFromKafkaBecomeTasksOnceAndBadOnesGoToTheDlq) {
  auto env = fleet_env();
  const std::string base = env["AGENTFLEET_URL"];
  const std::string good =
      R"({"user_id":"topic-user","text":"删除2月30日的日程","idempotency_key":"topic-1"})";
  const std::string keyless = R"({"user_id":"topic-nokey","text":"删除2月30日的日程"})";
  const std::vector<std::string> bad = {
      "not json at all", R"({"user_id":"topic-bad"})",
      R"({"user_id":"topic-bad","text":"x","model":"no-such-model"})"};
  // The good one twice (an upstream retry): one task.
  produce_raw(env["AGENTFLEET_KAFKA_BOOTSTRAP"], {good, good, keyless}, "agent.tasks.submit",
              "topic-user");
  produce_raw(env["AGENTFLEET_KAFKA_BOOTSTRAP"], bad, "agent.tasks.submit", "topic-bad");

  auto tasks_of = [&](const std::string& user) {
    return parse(call(boost::beast::http::verb::get, base + "/v1/tasks?user_id=" + user).body);
  };
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < until &&
         (tasks_of("topic-user")["tasks"].Size() == 0 ||
          tasks_of("topic-nokey")["tasks"].Size() == 0)) {
    std::this_thread::sleep_for(100ms);  // the dispatcher consumes the topic
  }
  auto mine = tasks_of("topic-user");
  ASSERT_EQ(mine["tasks"].Size(), 1u) << "the repeated submission is one task";
  auto task = wait_terminal(base, mine["tasks"][0]["task_id"].GetString());
  EXPECT_STREQ(task["status"].GetString(), "succeeded");
  EXPECT_STREQ(task["idempotency_key"].GetString(), "topic-1");
  auto keyless_tasks = tasks_of("topic-nokey");
  ASSERT_EQ(keyless_tasks["tasks"].Size(), 1u);
  auto keyless_task = wait_terminal(base, keyless_tasks["tasks"][0]["task_id"].GetString());
  EXPECT_EQ(std::string(keyless_task["idempotency_key"].GetString())
                .rfind("kafka:agent.tasks.submit:", 0),
            0u)
      << "keyed by its place in the topic, so a re-read is the same task";

  std::map<std::string, TopicMessage> letters;
  const auto dlq_until = std::chrono::steady_clock::now() + 30s;
  while (letters.size() < bad.size() && std::chrono::steady_clock::now() < dlq_until) {
    for (auto& message : read_topic(env["AGENTFLEET_KAFKA_BOOTSTRAP"], "agent.tasks.dlq")) {
      if (std::find(bad.begin(), bad.end(), message.value) != bad.end())
        letters[message.value] = message;
    }
    if (letters.size() < bad.size())
      std::this_thread::sleep_for(200ms);
  }
  ASSERT_EQ(letters.size(), bad.size());
  EXPECT_NE(letters[bad[0]].headers["dlq-reason"].find("invalid JSON"), std::string::npos)
      << letters[bad[0]].headers["dlq-reason"];
  EXPECT_NE(letters[bad[1]].headers["dlq-reason"].find("text"), std::string::npos)
      << letters[bad[1]].headers["dlq-reason"];
  EXPECT_NE(letters[bad[2]].headers["dlq-reason"].find("'/model': unknown model 'no-such-model'"),
            std::string::npos)
      << letters[bad[2]].headers["dlq-reason"];
  for (const auto& [value, letter] : letters)
    EXPECT_EQ(letter.headers.at("dlq-source-topic"), "agent.tasks.submit");
  EXPECT_EQ(tasks_of("topic-bad")["tasks"].Size(), 0u);
}

}  // namespace
}  // namespace agentfleet
