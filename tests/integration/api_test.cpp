// The dispatcher's HTTP API as a user meets it, on the embedded fleet (the ctest fixture
// in fleet_fixture.sh): every endpoint's happy path, long polls answered the moment the
// result lands, event streams live and replayed, API keys acting only for their users, and
// the catalogue of bad input, each a 4xx of the one error shape with nothing stored.
// Postgres is the truth the answers are checked against. Each test has users of its own
// (api-<test>-<run>), so the file can run again on the same fleet.

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>
#include <pqxx/pqxx>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/adapters/http/client.hpp"
#include "core/adapters/http/stream_client.hpp"
#include "core/domain/task.hpp"
#include "dispatcher/openapi.hpp"
#include "tests/integration/contract.hpp"
#include "tests/integration/fleet_client.hpp"
#include "tests/integration/fleet_env.hpp"

namespace agentfleet {
namespace {

using namespace std::chrono_literals;
namespace bhttp = boost::beast::http;
using test::at;
using test::num;
using test::pg_count;
using test::pg_row;
using test::str;
using Headers = std::vector<std::pair<std::string, std::string>>;

const std::string kU1Key = "af-dev-u1-key";  // acts for u1 only
const std::string kU2Key = "af-dev-u2-key";  // acts for u2 only

const std::string& base_url() {
  static const std::string url = test::fleet_env()["AGENTFLEET_URL"];
  return url;
}

const std::string& pg_url() {
  static const std::string url = test::fleet_env()["AGENTFLEET_PG_URL"];
  return url;
}

const std::string& admin_key() {
  static const std::string key = test::fleet_env()["AGENTFLEET_API_KEY"];
  return key;
}

// This run's users: api-<name>-<run>, so a second run on the same fleet starts clean.
std::string user(const std::string& name) {
  static const std::string run =
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count() %
                     1000000000);
  return "api-" + name + "-" + run;
}

struct Call {
  bhttp::verb method = bhttp::verb::get;
  std::string path;  // and query, after the dispatcher's URL
  std::string body;
  std::string key = admin_key();  // empty: no credentials
  Headers headers;
  std::string content_type = "application/json";
  std::chrono::seconds timeout = 15s;
};

// Every answer is checked against the API's contract (test::fetch, contract.hpp).
http::ClientResponse call(Call c) {
  if (!c.key.empty())
    c.headers.emplace_back("Authorization", "Bearer " + c.key);
  return test::fetch(base_url() + c.path, c.method, std::move(c.body), std::move(c.headers),
                     c.timeout, c.content_type);
}

http::ClientResponse get(const std::string& path, const std::string& key = admin_key()) {
  return call({bhttp::verb::get, path, {}, key});
}

http::ClientResponse post(const std::string& path, const std::string& body,
                          const std::string& key = admin_key()) {
  return call({bhttp::verb::post, path, body, key});
}

http::ClientResponse post_batch(const std::string& query, const std::string& lines,
                                const std::string& key = admin_key()) {
  return call({bhttp::verb::post, "/v1/batches" + query, lines, key, {}, "application/x-ndjson"});
}

rapidjson::Document parse(const std::string& text) {
  rapidjson::Document doc;
  doc.Parse(text.c_str(), text.size());
  EXPECT_FALSE(doc.HasParseError()) << "not JSON: " << text.substr(0, 500);
  return doc;
}

// Safe reads of answers that may not have the expected shape (fleet_client.hpp): a missing
// element reads as null, a non-array as empty.
const rapidjson::Value& item(const rapidjson::Value& v, rapidjson::SizeType i) {
  static const rapidjson::Value kNull;
  return v.IsArray() && i < v.Size() ? v[i] : kNull;
}

std::size_t size_of(const rapidjson::Value& v) {
  return v.IsArray() ? v.Size() : 0;
}

rapidjson::Value::ConstArray array_of(const rapidjson::Value& v) {
  static const rapidjson::Value kEmpty(rapidjson::kArrayType);
  return v.IsArray() ? v.GetArray() : kEmpty.GetArray();
}

// Members of an object; -1 for anything else.
std::int64_t members(const rapidjson::Value& v) {
  return v.IsObject() ? static_cast<std::int64_t>(v.MemberCount()) : -1;
}

bool has(const rapidjson::Value& v, const char* name) {
  return v.IsObject() && v.HasMember(name);
}

// The sum of an object's integer members.
std::int64_t sum_of(const rapidjson::Value& v) {
  std::int64_t sum = 0;
  if (v.IsObject()) {
    for (const auto& m : v.GetObject())
      sum += m.value.IsInt64() ? m.value.GetInt64() : 0;
  }
  return sum;
}

bool is_terminal_status(const std::string& status) {
  auto parsed = parse_task_status(status);
  return parsed && is_terminal(*parsed);
}

std::string submission(const std::string& user_id, const std::string& text, const std::string& key,
                       const std::string& extra = {}) {
  return R"({"user_id":")" + user_id + R"(","text":")" + text + R"(","idempotency_key":")" + key +
         "\"" + extra + "}";
}

// Submits (201 expected) and returns the task id.
std::string submit(const std::string& body, const std::string& key = admin_key()) {
  auto response = post("/v1/tasks", body, key);
  EXPECT_EQ(response.status, 201) << response.body;
  auto doc = parse(response.body);
  return str(doc, "task_id");
}

// The task once it ended (bounded: long polls of up to 30 s for 90 s).
rapidjson::Document wait_terminal(const std::string& task_id) {
  const auto until = std::chrono::steady_clock::now() + 90s;
  for (;;) {
    auto response = call({bhttp::verb::get,
                          "/v1/tasks/" + task_id + "?wait=30",
                          {},
                          admin_key(),
                          {},
                          "application/json",
                          40s});
    EXPECT_EQ(response.status, 200) << response.body;
    auto doc = parse(response.body);
    if (response.status != 200 || is_terminal_status(str(doc, "status")))
      return doc;
    if (std::chrono::steady_clock::now() > until) {
      ADD_FAILURE() << "task " << task_id << " still " << str(doc, "status") << " after 90 s";
      return doc;
    }
  }
}

// The one error shape: {"error":{"code","message","path"}}, every member a non-empty
// string, the path starting with `path`.
void expect_error(const http::ClientResponse& response, int status, const std::string& path,
                  const std::string& code = {}) {
  EXPECT_EQ(response.status, status) << response.body;
  EXPECT_EQ(response.header("Content-Type"), "application/json");
  rapidjson::Document doc;
  doc.Parse(response.body.c_str(), response.body.size());
  ASSERT_FALSE(doc.HasParseError()) << response.body;
  ASSERT_TRUE(doc.IsObject() && doc.HasMember("error") && at(doc, "error").IsObject())
      << response.body;
  const auto& error = at(doc, "error");
  EXPECT_FALSE(str(error, "code").empty()) << response.body;
  EXPECT_FALSE(str(error, "message").empty()) << response.body;
  ASSERT_TRUE(at(error, "path").IsString()) << response.body;
  EXPECT_EQ(str(error, "path").rfind(path, 0), 0u)
      << "path should start with " << path << ": " << response.body;
  if (!code.empty()) {
    EXPECT_EQ(str(error, "code"), code) << response.body;
  }
}

// ---------------------------------------------------------------------------------------
// Happy paths

TEST(ApiTasks, ARetryAsksAgainWhatAnEndedTaskAskedAndNamesTheFirst) {
  const std::string u = user("retry");
  const std::string first = submit(submission(u, "bench: steps=1 calls=1", "retry-first",
                                              R"(,"max_steps":4,"metadata":{"device_id":"d9"})"));
  EXPECT_EQ(str(wait_terminal(first), "status"), "succeeded");

  auto retried = post("/v1/tasks/" + first + "/retry", R"({"idempotency_key":"retry-1"})");
  ASSERT_EQ(retried.status, 201) << retried.body;
  auto doc = parse(retried.body);
  const std::string retry = str(doc, "task_id");
  EXPECT_NE(retry, first);
  EXPECT_EQ(retried.header("Location"), "/v1/tasks/" + retry);
  EXPECT_EQ(str(doc, "retry_of"), first);
  EXPECT_EQ(str(doc, "user_id"), u);
  EXPECT_EQ(str(doc, "text"), "bench: steps=1 calls=1");
  EXPECT_EQ(num(doc, "max_steps"), 4);
  EXPECT_EQ(str(at(doc, "metadata"), "device_id"), "d9");
  EXPECT_EQ(str(doc, "idempotency_key"), "retry-1") << "its own key";
  EXPECT_EQ(str(doc, "status"), "queued");
  // The same key again: the retry already made, not a second one.
  auto again = post("/v1/tasks/" + first + "/retry", R"({"idempotency_key":"retry-1"})");
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(str(parse(again.body), "task_id"), retry);
  // Without a key, each retry is a task of its own.
  auto keyless = post("/v1/tasks/" + first + "/retry", "");
  ASSERT_EQ(keyless.status, 201) << keyless.body;
  EXPECT_NE(str(parse(keyless.body), "task_id"), retry);
  EXPECT_EQ(str(wait_terminal(retry), "status"), "succeeded");
  EXPECT_EQ(str(wait_terminal(str(parse(keyless.body), "task_id")), "status"), "succeeded");
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE retry_of = $1::uuid", first), 2);

  // A task still running is not retried; another user's task, or none, is not found.
  const std::string running =
      submit(submission(u, "slow: steps=20", "retry-running", R"(,"timeout_s":120)"));
  expect_error(post("/v1/tasks/" + running + "/retry", ""), 409, "/path/task_id", "task_not_ended");
  EXPECT_EQ(post("/v1/tasks/" + running + "/cancel", "").status / 100, 2);
  expect_error(post("/v1/tasks/" + first + "/retry", "", "af-dev-u1-key"), 404, "/path/task_id",
               "not_found");
  expect_error(post("/v1/tasks/00000000-0000-4000-8000-000000000000/retry", ""), 404,
               "/path/task_id", "not_found");
  // A body other than {"idempotency_key": K} is refused, naming what.
  expect_error(post("/v1/tasks/" + first + "/retry", "[1]"), 400, "/", "invalid_request");
  expect_error(post("/v1/tasks/" + first + "/retry", R"({"text":"x"})"), 400, "/text",
               "invalid_request");
  expect_error(post("/v1/tasks/" + first + "/retry", R"({"idempotency_key":7})"), 400,
               "/idempotency_key", "invalid_request");
  expect_error(post("/v1/tasks/" + first + "/retry", R"({"idempotency_key":""})"), 400,
               "/idempotency_key", "invalid_request");
  // A key names one retry of one task: used again to retry another task, or with a plain
  // submission, it is a conflict, not that retry.
  expect_error(post("/v1/tasks/" + retry + "/retry", R"({"idempotency_key":"retry-1"})"), 409,
               "/idempotency_key", "idempotency_conflict");
  expect_error(post("/v1/tasks", submission(u, "bench: steps=1 calls=1", "retry-1")), 409,
               "/idempotency_key", "idempotency_conflict");
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE retry_of = $1::uuid", first), 2)
      << "nothing stored by the refused ones";
}

TEST(ApiTasks, AShortIdPrefixStandsForTheOneTaskOfTheCallersThatBeginsWithIt) {
  const std::string u = user("prefix");
  const std::string first = submit(submission(u, "bench: steps=1 calls=1", "prefix-1"));
  EXPECT_EQ(str(wait_terminal(first), "status"), "succeeded");
  const std::string prefix = first.substr(0, 8);

  // Read, its events, cancel and retry: each answers for the whole id.
  auto read = get("/v1/tasks/" + prefix);
  ASSERT_EQ(read.status, 200) << read.body;
  EXPECT_EQ(str(parse(read.body), "task_id"), first);
  std::string upper = first.substr(0, 13);
  for (char& c : upper)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(str(parse(get("/v1/tasks/" + upper).body), "task_id"), first) << "any case";
  auto events = get("/v1/tasks/" + prefix + "/events");
  EXPECT_EQ(events.status, 200);
  EXPECT_NE(events.body.find("event: done"), std::string::npos) << events.body;
  EXPECT_NE(events.body.find(first), std::string::npos) << events.body;
  expect_error(post("/v1/tasks/" + prefix + "/cancel", ""), 409, "/path/task_id", "already_ended");
  auto retried = post("/v1/tasks/" + prefix + "/retry", R"({"idempotency_key":"prefix-retry"})");
  ASSERT_EQ(retried.status, 201) << retried.body;
  EXPECT_EQ(str(parse(retried.body), "retry_of"), first);
  // Ended before the copy below, so nothing of this test runs on when it returns.
  EXPECT_EQ(str(wait_terminal(str(parse(retried.body), "task_id")), "status"), "succeeded");

  // Another user's task is not found by its prefix; too short a prefix is no id.
  expect_error(get("/v1/tasks/" + prefix, kU1Key), 404, "/path/task_id", "not_found");
  auto too_short = get("/v1/tasks/" + first.substr(0, 4));
  expect_error(too_short, 404, "/path/task_id", "not_found");
  EXPECT_NE(too_short.body.find("at least 8 characters of one (this has 4)"), std::string::npos)
      << too_short.body;
  expect_error(get("/v1/tasks/" + first.substr(0, 7)), 404, "/path/task_id", "not_found");

  // A second task of the user's beginning alike (a copy of the first under another id):
  // the prefix is ambiguous and names both; more of the id tells them apart.
  const std::string twin =
      prefix + (first[9] == '0' ? "-1000" : "-0000") + "-4000-8000-000000000000";
  // The copy goes again however the test ends: the fleet's other tests see this user's
  // tasks as they were made.
  struct RemoveTwin {
    std::string id;
    ~RemoveTwin() {
      try {
        pqxx::connection db(pg_url());
        pqxx::work tx(db);
        tx.exec_params("DELETE FROM tasks WHERE task_id = $1::uuid", id);
        tx.commit();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "the copy " << id << " was not removed: " << e.what();
      }
    }
  } remove_twin{twin};
  {
    pqxx::connection db(pg_url());
    pqxx::work tx(db);
    tx.exec_params(
        "INSERT INTO tasks SELECT (jsonb_populate_record(NULL::tasks, to_jsonb(t) || "
        "jsonb_build_object('task_id', $2::text, 'idempotency_key', 'prefix-twin'))).* "
        "FROM tasks t WHERE task_id = $1::uuid",
        first, twin);
    tx.commit();
  }
  auto ambiguous = get("/v1/tasks/" + prefix);
  expect_error(ambiguous, 409, "/path/task_id", "ambiguous_id");
  EXPECT_NE(ambiguous.body.find(first), std::string::npos) << ambiguous.body;
  EXPECT_NE(ambiguous.body.find(twin), std::string::npos) << ambiguous.body;
  EXPECT_EQ(str(parse(get("/v1/tasks/" + first.substr(0, 10)).body), "task_id"), first);
  EXPECT_EQ(str(parse(get("/v1/tasks/" + twin.substr(0, 10)).body), "task_id"), twin);
}

// The search an operator starts from: every user's tasks for an admin key, only its own
// user's for a user's key; each filter applied by the server; counted and paged.
TEST(ApiTasks, TheSearchFindsAnyUsersTaskByTextAndEachFilterNarrowsIt) {
  const std::string a = user("search-a"), b = user("search-b");
  const std::string word = "Word" + a.substr(a.size() - 8);
  std::string lower = word;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::string bought = submit(submission(a, "今天下午去买东西 " + word, "s-1"));
  const std::string missing = submit(submission(a, "删除2月30日的日程", "s-2"));
  const std::string others = submit(submission(b, "今天下午去买东西 " + lower, "s-3"));
  for (const std::string& id : {bought, missing, others})
    ASSERT_TRUE(is_terminal_status(str(wait_terminal(id), "status"))) << id;

  auto ids_of = [](const rapidjson::Document& page) {
    std::vector<std::string> ids;
    for (const auto& t : array_of(at(page, "tasks")))
      ids.push_back(str(t, "task_id"));
    return ids;
  };
  // By text, ignoring case, across users, newest first, counted.
  auto found = get("/v1/tasks?q=" + lower + "&count=true");
  ASSERT_EQ(found.status, 200) << found.body;
  const auto page = parse(found.body);
  EXPECT_EQ(ids_of(page), (std::vector<std::string>{others, bought}));
  EXPECT_EQ(num(page, "total"), 2);
  EXPECT_TRUE(at(page, "total_capped").IsFalse());
  EXPECT_TRUE(at(page, "next_before").IsNull());
  // A page of one names the next.
  const auto first = parse(get("/v1/tasks?q=" + word + "&limit=1").body);
  EXPECT_EQ(str(first, "next_before"), others);
  const auto second =
      parse(get("/v1/tasks?q=" + word + "&limit=1&before=" + str(first, "next_before")).body);
  EXPECT_EQ(ids_of(second), (std::vector<std::string>{bought}));
  // Each filter narrows it.
  EXPECT_EQ(ids_of(parse(get("/v1/tasks?user_id=" + a + "&result_type=error").body)),
            (std::vector<std::string>{missing}));
  EXPECT_EQ(ids_of(parse(get("/v1/tasks?user_id=" + a + "&result_type=action_completed").body)),
            (std::vector<std::string>{bought}));
  EXPECT_EQ(ids_of(parse(get("/v1/tasks?q=" + word + "&model=sim-model&status=succeeded").body)),
            (std::vector<std::string>{others, bought}));
  EXPECT_TRUE(ids_of(parse(get("/v1/tasks?q=" + word + "&model=no-such-model").body)).empty());
  EXPECT_TRUE(ids_of(parse(get("/v1/tasks?q=" + word + "&until=2000-01-01").body)).empty());
  EXPECT_EQ(ids_of(parse(get("/v1/tasks?q=" + word + "&since=2000-01-01").body)).size(), 2u);
  EXPECT_TRUE(ids_of(parse(get("/v1/tasks?q=" + word + "&session_id=none-" + a).body)).empty());
  // A user's key finds only its user's tasks, whatever it searches for.
  auto theirs = get("/v1/tasks?q=" + word, kU1Key);
  ASSERT_EQ(theirs.status, 200) << theirs.body;
  EXPECT_TRUE(ids_of(parse(theirs.body)).empty()) << theirs.body;
  expect_error(get("/v1/tasks?user_id=" + a, kU1Key), 403, "/query/user_id", "forbidden");
  // A time Postgres cannot read, and a filter out of bounds, are the caller's mistakes.
  expect_error(get("/v1/tasks?since=2026-02-30"), 400, "/query/since", "invalid_request");
  expect_error(get("/v1/tasks?result_type=fine"), 400, "/query/result_type", "invalid_request");
}

TEST(ApiTasks, SubmitReadListAndCancelAnswerWithTheTaskWhereItLives) {
  const std::string u = user("tasks");
  // One task at a time for this user, so a second one waits queued.
  auto limits = call({bhttp::verb::put, "/v1/users/" + u + "/limits", R"({"max_concurrency":1})"});
  ASSERT_EQ(limits.status, 200) << limits.body;

  auto created = post("/v1/tasks", submission(u, "2月8日的会议改到晚上8点", "t-1"));
  ASSERT_EQ(created.status, 201) << created.body;
  auto doc = parse(created.body);
  const std::string first = str(doc, "task_id");
  ASSERT_EQ(first.size(), 36u) << created.body;
  EXPECT_EQ(created.header("Location"), "/v1/tasks/" + first);
  EXPECT_EQ(str(doc, "user_id"), u);
  EXPECT_EQ(str(doc, "text"), "2月8日的会议改到晚上8点");
  EXPECT_EQ(str(doc, "idempotency_key"), "t-1");
  EXPECT_EQ(str(doc, "model"), "sim-model") << "the configured default";
  EXPECT_TRUE(str(doc, "status") == "queued" || str(doc, "status") == "dispatched") << created.body;

  auto read = get("/v1/tasks/" + first);
  ASSERT_EQ(read.status, 200) << read.body;
  EXPECT_EQ(str(parse(read.body), "task_id"), first);

  auto done = wait_terminal(first);
  ASSERT_EQ(str(done, "status"), "succeeded") << str(done, "error");
  // This user has no meeting that day: the search finds none, the answer says so.
  EXPECT_EQ(str(at(done, "result"), "type"), "error");
  EXPECT_NE(str(at(done, "result"), "message").find("未找到"), std::string::npos);
  EXPECT_EQ(num(done, "steps"), 2);
  EXPECT_EQ(num(done, "tool_calls"), 1);
  ASSERT_TRUE(at(done, "trace").IsArray());
  EXPECT_EQ(size_of(at(done, "trace")), 2u);
  EXPECT_EQ(pg_count("SELECT steps FROM tasks WHERE task_id = $1::uuid", first), 2);

  // A long one runs; the next waits behind it and is cancelled before it starts.
  const std::string running = submit(submission(u, "slow: steps=20", "t-2"));
  const std::string queued = submit(submission(u, "删除2月30日的日程", "t-3"));
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (pg_count("SELECT count(*) FROM tasks WHERE task_id = $1::uuid AND status = 'running'",
                  running) == 0 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(50ms);  // polling a bounded wait
  }
  ASSERT_EQ(str(parse(get("/v1/tasks/" + running).body), "status"), "running");
  ASSERT_EQ(str(parse(get("/v1/tasks/" + queued).body), "status"), "queued")
      << "max_concurrency 1 holds it back";

  auto cancel_queued = post("/v1/tasks/" + queued + "/cancel", "");
  ASSERT_EQ(cancel_queued.status, 200) << cancel_queued.body;
  EXPECT_EQ(str(parse(cancel_queued.body), "status"), "cancelled") << "at once";
  EXPECT_EQ(post("/v1/tasks/" + queued + "/cancel", "").status, 200) << "again: harmless";

  auto cancel_running = post("/v1/tasks/" + running + "/cancel", "");
  ASSERT_EQ(cancel_running.status, 202) << cancel_running.body;
  auto stopped = wait_terminal(running);
  EXPECT_EQ(str(stopped, "status"), "cancelled");
  EXPECT_LT(num(stopped, "steps"), 20) << "stopped, not run to the end";
  expect_error(post("/v1/tasks/" + first + "/cancel", ""), 409, "/path/task_id", "already_ended");

  auto row =
      pg_row("SELECT status, started_at IS NULL FROM tasks WHERE task_id = $1::uuid", queued);
  EXPECT_EQ(row[0].as<std::string>(), "cancelled");
  EXPECT_TRUE(row[1].as<bool>()) << "the cancelled task never started";

  // The list: newest first, summaries, filters, pages.
  auto list = get("/v1/tasks?user_id=" + u);
  ASSERT_EQ(list.status, 200) << list.body;
  auto tasks = parse(list.body);
  ASSERT_TRUE(at(tasks, "tasks").IsArray());
  ASSERT_EQ(size_of(at(tasks, "tasks")), 3u) << list.body;
  EXPECT_EQ(str(item(at(tasks, "tasks"), 0), "task_id"), queued);
  EXPECT_EQ(str(item(at(tasks, "tasks"), 1), "task_id"), running);
  EXPECT_EQ(str(item(at(tasks, "tasks"), 2), "task_id"), first);
  for (const auto& t : array_of(at(tasks, "tasks"))) {
    EXPECT_FALSE(has(t, "trace")) << "summaries without the trace";
    EXPECT_EQ(str(t, "user_id"), u);
  }
  auto cancelled = parse(get("/v1/tasks?user_id=" + u + "&status=cancelled").body);
  ASSERT_EQ(size_of(at(cancelled, "tasks")), 2u);
  for (const auto& t : array_of(at(cancelled, "tasks")))
    EXPECT_EQ(str(t, "status"), "cancelled");
  auto page = parse(get("/v1/tasks?user_id=" + u + "&limit=1&before=" + queued).body);
  ASSERT_EQ(size_of(at(page, "tasks")), 1u);
  EXPECT_EQ(str(item(at(page, "tasks"), 0), "task_id"), running) << "the page after the cursor";
}

TEST(ApiContract, TheContractIsServedWithoutAKeyAndAnAnswerOutsideItIsCaught) {
  auto served = call({bhttp::verb::get, "/v1/openapi.json", {}, ""});
  ASSERT_EQ(served.status, 200) << served.body;
  EXPECT_EQ(served.header("Content-Type"), "application/json");
  EXPECT_EQ(served.body, dispatcher::openapi_json());
  auto doc = parse(served.body);
  EXPECT_EQ(str(doc, "openapi").rfind("3.1", 0), 0u);

  // The check every answer of these tests goes through finds what the contract forbids.
  auto& contract = test::Contract::instance();
  const std::string task = submit(submission(user("contract"), "bench: steps=1 calls=1", "c-1"));
  auto answer = get("/v1/tasks/" + task);
  ASSERT_EQ(answer.status, 200);
  EXPECT_EQ(contract.violation(bhttp::verb::get, "/v1/tasks/" + task, 200, "application/json",
                               answer.body),
            std::nullopt);
  // A task without its status, a status the route never answers, a route it does not have.
  // (The member removed from the parsed task: a task under way has "status" in its trace
  // too, which jsonb writes before the task's own.)
  rapidjson::Document without_status = parse(answer.body);
  ASSERT_TRUE(without_status.IsObject() && without_status.HasMember("status")) << answer.body;
  without_status.RemoveMember("status");
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  without_status.Accept(writer);
  const std::string broken(buffer.GetString(), buffer.GetSize());
  EXPECT_NE(
      contract.violation(bhttp::verb::get, "/v1/tasks/" + task, 200, "application/json", broken),
      std::nullopt);
  EXPECT_NE(contract.violation(bhttp::verb::get, "/v1/tasks/" + task, 201, "application/json",
                               answer.body),
            std::nullopt);
  EXPECT_NE(
      contract.violation(bhttp::verb::delete_, "/v1/tasks/" + task, 200, "application/json", "{}"),
      std::nullopt);
}

TEST(ApiUsage, PerModelCallsTokensAndCostAreTheLedgerSumsAndAFutureRangeIsEmpty) {
  const std::string u = user("usage");
  const std::string a = submit(submission(u, "bench: steps=2 calls=1", "u-1"));
  const std::string b =
      submit(submission(u, "bench: steps=1 calls=1", "u-2", R"(,"model":"sim-react-model")"));
  ASSERT_EQ(str(wait_terminal(a), "status"), "succeeded");
  ASSERT_EQ(str(wait_terminal(b), "status"), "succeeded");

  // The range around now, in the database's own terms.
  auto range = pg_row(
      "SELECT (now() - interval '1 day')::date::text, (now() + interval '2 days')::date::text");
  const std::string from = range[0].as<std::string>();
  const std::string to = range[1].as<std::string>();
  auto response = get("/v1/users/" + u + "/usage?from=" + from + "&to=" + to);
  ASSERT_EQ(response.status, 200) << response.body;
  auto usage = parse(response.body);
  EXPECT_EQ(str(usage, "user_id"), u);
  EXPECT_EQ(str(usage, "from"), from);
  ASSERT_TRUE(at(usage, "models").IsArray());
  ASSERT_EQ(size_of(at(usage, "models")), 2u) << response.body;

  pqxx::connection db(pg_url());
  pqxx::work tx(db);
  auto ledger = tx.exec_params(
      R"SQL(SELECT model, currency, count(*), count(DISTINCT task_id), sum(input_tokens),
                   sum(cached_input_tokens), sum(output_tokens),
                   to_char(sum(cost), 'FM999999999999990.000000')
            FROM usage_ledger WHERE user_id = $1 GROUP BY model, currency ORDER BY model)SQL",
      u);
  auto tasks = tx.exec_params1(
      "SELECT to_char(sum(cost), 'FM999999999999990.000000') FROM tasks WHERE user_id = $1", u);
  tx.commit();
  ASSERT_EQ(ledger.size(), 2u);
  for (std::size_t i = 0; i < ledger.size(); ++i) {
    const auto& m = item(at(usage, "models"), static_cast<rapidjson::SizeType>(i));
    SCOPED_TRACE(ledger[i][0].as<std::string>());
    EXPECT_EQ(str(m, "model"), ledger[i][0].as<std::string>());
    EXPECT_EQ(str(m, "currency"), ledger[i][1].as<std::string>());
    EXPECT_EQ(num(m, "calls"), ledger[i][2].as<std::int64_t>());
    EXPECT_EQ(num(m, "tasks"), ledger[i][3].as<std::int64_t>());
    EXPECT_EQ(num(m, "input_tokens"), ledger[i][4].as<std::int64_t>());
    EXPECT_EQ(num(m, "cached_input_tokens"), ledger[i][5].as<std::int64_t>());
    EXPECT_EQ(num(m, "output_tokens"), ledger[i][6].as<std::int64_t>());
    EXPECT_EQ(str(m, "cost"), ledger[i][7].as<std::string>());
    EXPECT_GT(num(m, "input_tokens"), 0);
    EXPECT_EQ(num(m, "tasks"), 1);
  }
  // One ledger row per model call: bench steps=2 is three calls, steps=1 two.
  EXPECT_EQ(str(item(at(usage, "models"), 0), "model"), "sim-model");
  EXPECT_EQ(num(item(at(usage, "models"), 0), "calls"), 3);
  EXPECT_EQ(str(item(at(usage, "models"), 1), "model"), "sim-react-model");
  EXPECT_EQ(num(item(at(usage, "models"), 1), "calls"), 2);
  ASSERT_EQ(size_of(at(usage, "totals")), 1u);
  EXPECT_EQ(num(item(at(usage, "totals"), 0), "calls"), 5);
  EXPECT_EQ(str(item(at(usage, "totals"), 0), "cost"), tasks[0].as<std::string>())
      << "the bill is what the tasks cost";

  // Without a range: everything; a range in the future or the past: nothing.
  EXPECT_EQ(size_of(at(parse(get("/v1/users/" + u + "/usage").body), "models")), 2u);
  for (const std::string& query : std::vector<std::string>{
           "?from=2099-01-01", "?to=2000-01-01T00:00:00Z", "?from=" + to + "T00:00:00%2B00:00"}) {
    SCOPED_TRACE(query);
    auto empty = get("/v1/users/" + u + "/usage" + query);
    ASSERT_EQ(empty.status, 200) << empty.body;
    auto doc = parse(empty.body);
    ASSERT_TRUE(at(doc, "models").IsArray());
    EXPECT_EQ(size_of(at(doc, "models")), 0u) << empty.body;
    EXPECT_EQ(size_of(at(doc, "totals")), 0u) << empty.body;
  }
}

TEST(ApiUsage, EveryUsersBillIsTheWholeLedgerAndOnlyForAnAdmin) {
  const std::string a = user("fleet-a");
  const std::string b = user("fleet-b");
  const std::string ta = submit(submission(a, "bench: steps=1 calls=1", "f-1"));
  const std::string tb = submit(submission(b, "bench: steps=2 calls=1", "f-2"));
  ASSERT_EQ(str(wait_terminal(ta), "status"), "succeeded");
  ASSERT_EQ(str(wait_terminal(tb), "status"), "succeeded");

  auto range = pg_row(
      "SELECT (now() - interval '1 day')::date::text, (now() + interval '2 days')::date::text");
  const std::string from = range[0].as<std::string>();
  const std::string to = range[1].as<std::string>();
  // The ledger's totals per currency over the range, unreconciled charges included (calls
  // whose answers were lost to their tasks; docs/billing.md), as the API words them.
  auto ledger_totals = [&] {
    pqxx::connection db(pg_url());
    pqxx::work tx(db);
    auto rows = tx.exec_params(
        R"SQL(SELECT currency, count(*), sum(input_tokens), sum(cached_input_tokens),
                     sum(output_tokens), to_char(sum(cost), 'FM999999999999990.000000')
              FROM (SELECT currency, input_tokens, cached_input_tokens, output_tokens, cost,
                           called_at FROM usage_ledger
                    UNION ALL
                    SELECT currency, input_tokens, cached_input_tokens, output_tokens, cost,
                           called_at FROM usage_unreconciled) billed
              WHERE called_at >= $1::timestamptz AND called_at < $2::timestamptz
              GROUP BY currency ORDER BY currency)SQL",
        from, to);
    tx.commit();
    std::vector<std::tuple<std::string, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                           std::string>>
        out;
    for (const auto& r : rows) {
      out.emplace_back(r[0].as<std::string>(), r[1].as<std::int64_t>(), r[2].as<std::int64_t>(),
                       r[3].as<std::int64_t>(), r[4].as<std::int64_t>(), r[5].as<std::string>());
    }
    return out;
  };
  // Tasks of earlier tests may still bill while this one reads: compare once the ledger
  // stood still around the request (bounded in time, not in tries: a busy fleet bills for a
  // while).
  bool compared = false;
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (!compared && std::chrono::steady_clock::now() < until) {
    const auto before = ledger_totals();
    auto response = get("/v1/usage?from=" + from + "&to=" + to);
    const auto after = ledger_totals();
    ASSERT_EQ(response.status, 200) << response.body;
    if (before != after) {
      std::this_thread::sleep_for(200ms);  // polling a bounded wait
      continue;
    }
    compared = true;
    auto usage = parse(response.body);
    EXPECT_TRUE(at(usage, "user_id").IsNull()) << response.body;
    EXPECT_EQ(str(usage, "from"), from);
    EXPECT_EQ(str(usage, "to"), to);
    ASSERT_EQ(size_of(at(usage, "totals")), after.size()) << response.body;
    for (std::size_t i = 0; i < after.size(); ++i) {
      const auto& t = item(at(usage, "totals"), static_cast<rapidjson::SizeType>(i));
      EXPECT_EQ(str(t, "currency"), std::get<0>(after[i]));
      EXPECT_EQ(num(t, "calls"), std::get<1>(after[i]));
      EXPECT_EQ(num(t, "input_tokens"), std::get<2>(after[i]));
      EXPECT_EQ(num(t, "cached_input_tokens"), std::get<3>(after[i]));
      EXPECT_EQ(num(t, "output_tokens"), std::get<4>(after[i]));
      EXPECT_EQ(str(t, "cost"), std::get<5>(after[i]));
    }
    // Both users' calls are in it: one step of one call is two model calls, two steps three.
    std::int64_t calls = 0;
    for (const auto& m : array_of(at(usage, "models")))
      calls += num(m, "calls");
    std::int64_t total_calls = 0;
    for (const auto& t : after)
      total_calls += std::get<1>(t);
    EXPECT_GE(calls, 5);
    EXPECT_EQ(calls, total_calls) << "the models add up to the totals";
  }
  EXPECT_TRUE(compared) << "the ledger never stood still for one request";

  // A user's key may not read everyone's bill; bad input is a 400 naming the parameter.
  expect_error(get("/v1/usage", kU1Key), 403, "/header/authorization", "forbidden");
  expect_error(get("/v1/usage?from=yesterday"), 400, "/query/from", "invalid_request");
  expect_error(post("/v1/usage", "{}"), 405, "/method");
  auto empty = parse(get("/v1/usage?from=2099-01-01").body);
  EXPECT_EQ(size_of(at(empty, "models")), 0u);
  EXPECT_EQ(size_of(at(empty, "totals")), 0u);
}

TEST(ApiLimits, AnAdminPutReplacesTheOverridesAndGetShowsTheEffectiveLimits) {
  const std::string u = user("limits");
  auto before = get("/v1/users/" + u + "/limits");
  ASSERT_EQ(before.status, 200) << before.body;
  auto doc = parse(before.body);
  EXPECT_EQ(str(doc, "tier"), "standard") << "task_defaults.tier";
  EXPECT_EQ(num(at(doc, "effective"), "max_concurrency"), 5);
  EXPECT_EQ(num(at(doc, "effective"), "requests_per_minute"), 100);
  EXPECT_EQ(members(at(doc, "overrides")), 0);

  auto put = call({bhttp::verb::put, "/v1/users/" + u + "/limits",
                   R"({"tier":"free","max_concurrency":3,"tool_permission":"read"})"});
  ASSERT_EQ(put.status, 200) << put.body;
  doc = parse(put.body);
  EXPECT_EQ(str(doc, "tier"), "free");
  EXPECT_EQ(num(at(doc, "effective"), "max_concurrency"), 3) << "the override";
  EXPECT_EQ(num(at(doc, "effective"), "requests_per_minute"), 20) << "the free tier's";
  EXPECT_EQ(str(at(doc, "effective"), "tool_permission"), "read");
  EXPECT_EQ(str(at(doc, "overrides"), "tier"), "free");
  EXPECT_EQ(num(at(doc, "overrides"), "max_concurrency"), 3);
  EXPECT_FALSE(has(at(doc, "overrides"), "requests_per_minute"));
  EXPECT_EQ(pg_count("SELECT max_concurrency FROM user_limits WHERE user_id = $1", u), 3);

  // GET shows the same; null clears one override (the tier's value again).
  auto read = parse(get("/v1/users/" + u + "/limits").body);
  EXPECT_EQ(num(at(read, "effective"), "max_concurrency"), 3);
  EXPECT_EQ(str(at(read, "overrides"), "tier"), "free");
  auto cleared = call({bhttp::verb::put, "/v1/users/" + u + "/limits",
                       R"({"tier":"free","max_concurrency":null})"});
  ASSERT_EQ(cleared.status, 200) << cleared.body;
  doc = parse(cleared.body);
  EXPECT_EQ(num(at(doc, "effective"), "max_concurrency"), 2) << "the free tier's";
  EXPECT_FALSE(has(at(doc, "overrides"), "max_concurrency")) << cleared.body;
  EXPECT_FALSE(has(at(doc, "overrides"), "tool_permission")) << "PUT replaces, not merges";
  EXPECT_EQ(str(at(doc, "effective"), "tool_permission"), "write");
  // Nothing overridden: the default tier again.
  doc = parse(call({bhttp::verb::put, "/v1/users/" + u + "/limits", "{}"}).body);
  EXPECT_EQ(str(doc, "tier"), "standard");
  EXPECT_EQ(num(at(doc, "effective"), "max_concurrency"), 5);
  EXPECT_EQ(members(at(doc, "overrides")), 0);
}

std::vector<std::string> lines_of(const std::string& body) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < body.size()) {
    std::size_t nl = body.find('\n', start);
    if (nl == std::string::npos)
      nl = body.size();
    if (nl > start)
      lines.push_back(body.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

// The batch's counts add up: per status to the total, the ended ones to `ended`.
void expect_counts_add_up(const rapidjson::Document& batch, std::int64_t total) {
  EXPECT_EQ(sum_of(at(batch, "counts")), total);
  EXPECT_EQ(num(batch, "total"), total);
  const auto& c = at(batch, "counts");
  EXPECT_EQ(num(batch, "ended"),
            num(c, "succeeded") + num(c, "failed") + num(c, "timed_out") + num(c, "cancelled"));
  EXPECT_LE(sum_of(at(batch, "result_types")), num(batch, "ended"))
      << "only ended tasks have a result";
}

// Reads the batch until all `total` of its tasks ended or `limit` passed (polling a bounded
// wait), checking at every look that its counts add up; returns the last view.
rapidjson::Document wait_batch_ended(const std::string& batch_id, std::int64_t total,
                                     std::chrono::seconds limit) {
  rapidjson::Document batch;
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto response = get("/v1/batches/" + batch_id);
    EXPECT_EQ(response.status, 200) << response.body;
    batch = parse(response.body);
    if (response.status != 200)
      return batch;
    expect_counts_add_up(batch, total);
    if (num(batch, "ended") == total || std::chrono::steady_clock::now() > until)
      return batch;
    std::this_thread::sleep_for(100ms);
  }
}

TEST(ApiBatches, FiftyLinesInCountsAddUpAndTheResultsListEachTaskOnce) {
  const std::string u = user("batch");
  const std::string batch_id = u + "-b";
  std::string body, unnamed;
  for (int i = 0; i < 50; ++i) {
    const std::string text = i % 2 ? "删除2月30日的日程" : "bench: steps=1 calls=1";
    // Lines may name the batch or leave it out.
    const std::string extra = i % 3 ? "" : R"(,"batch_id":")" + batch_id + "\"";
    body += submission(u, text, "b-" + std::to_string(i), extra) + "\n";
    unnamed += submission(u, text, "b-" + std::to_string(i)) + "\n";
    if (i == 9)
      body += "\n";  // a blank line is no task, and numbers no line
  }
  auto created = post_batch("?batch_id=" + batch_id, body);
  ASSERT_EQ(created.status, 201) << created.body;
  EXPECT_EQ(created.header("Location"), "/v1/batches/" + batch_id + "?user_id=" + u)
      << "a key acting for several users is told whose batch";
  auto answer = parse(created.body);
  EXPECT_EQ(str(answer, "batch_id"), batch_id);
  EXPECT_EQ(str(answer, "user_id"), u);
  EXPECT_EQ(num(answer, "lines"), 50);
  EXPECT_EQ(num(answer, "accepted"), 50);
  EXPECT_EQ(num(answer, "duplicates"), 0);
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE batch_id = $1 AND user_id = $2 AND "
                     "priority = 'batch'",
                     batch_id, u),
            50);

  // Progress, until every task ended (bounded); the counts add up at every look.
  const rapidjson::Document batch = wait_batch_ended(batch_id, 50, 90s);
  ASSERT_EQ(num(batch, "ended"), 50) << "the batch did not end within 90 s";
  EXPECT_EQ(num(at(batch, "counts"), "succeeded"), 50);
  EXPECT_EQ(num(at(batch, "result_types"), "action_completed"), 25);
  EXPECT_EQ(num(at(batch, "result_types"), "error"), 25) << "2月30日 does not exist";
  EXPECT_TRUE(at(batch, "cancelled").IsFalse());
  std::int64_t calls = 0, estimated = 0;
  for (const auto& m : array_of(at(batch, "usage"))) {
    calls += num(m, "calls");
    estimated += num(m, "estimated_calls");
  }
  EXPECT_EQ(calls, pg_count("SELECT count(*) FROM usage_ledger WHERE batch_id = $1", batch_id));
  EXPECT_EQ(estimated, pg_count("SELECT count(*) FROM usage_ledger WHERE batch_id = $1 AND "
                                "usage_estimated",
                                batch_id));

  // The results: one JSON object a line, every task of the batch exactly once, ended, in
  // the order of the upload's lines, each naming its line (as /line/N would) and its text.
  auto results = get("/v1/batches/" + batch_id + "/results");
  ASSERT_EQ(results.status, 200);
  EXPECT_EQ(results.header("Content-Type"), "application/x-ndjson");
  std::map<std::string, int> seen;
  std::set<std::string> keys;
  std::int64_t expected_line = 1;
  for (const std::string& line : lines_of(results.body)) {
    auto doc = parse(line);
    ASSERT_TRUE(doc.IsObject()) << line;
    ++seen[str(doc, "task_id")];
    keys.insert(str(doc, "idempotency_key"));
    EXPECT_TRUE(is_terminal_status(str(doc, "status"))) << line;
    EXPECT_TRUE(at(doc, "result").IsObject()) << line;
    EXPECT_EQ(num(doc, "line"), expected_line) << line;
    EXPECT_EQ(str(doc, "idempotency_key"), "b-" + std::to_string(expected_line - 1)) << line;
    EXPECT_EQ(str(doc, "text"), expected_line % 2 ? "bench: steps=1 calls=1" : "删除2月30日的日程")
        << line;
    EXPECT_EQ(str(doc, "trace_id").size(), 32u) << line;
    EXPECT_TRUE(at(doc, "retried_as").IsNull()) << line;
    ++expected_line;
  }
  pqxx::connection db(pg_url());
  pqxx::work tx(db);
  std::set<std::string> stored;
  for (const auto& row :
       tx.exec_params("SELECT task_id::text FROM tasks WHERE batch_id = $1", batch_id)) {
    stored.insert(row[0].as<std::string>());
  }
  tx.commit();
  EXPECT_EQ(seen.size(), 50u);
  EXPECT_EQ(stored.size(), 50u);
  for (const auto& [id, times] : seen) {
    EXPECT_EQ(times, 1) << id;
    EXPECT_TRUE(stored.count(id)) << id << " is not a task of the batch";
  }
  EXPECT_EQ(keys.size(), 50u);

  // The same lines again, as another batch: every line is a duplicate, no task is added.
  auto again = post_batch("?batch_id=" + batch_id + "-again", unnamed);
  ASSERT_EQ(again.status, 201) << again.body;
  EXPECT_EQ(num(parse(again.body), "accepted"), 0);
  EXPECT_EQ(num(parse(again.body), "duplicates"), 50);
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = $1", u), 50);

  // "Retry the failed ones": the 25 that ended in an error, a slice of 10 at a time, each
  // once however often it is asked; the results then name each one's retry.
  std::int64_t retried = 0;
  std::string after;
  for (int slice = 0; slice < 5; ++slice) {
    auto sliced = post(
        "/v1/batches/" + batch_id + "/retry?limit=10" + (after.empty() ? "" : "&after=" + after),
        "");
    ASSERT_EQ(sliced.status, 200) << sliced.body;
    const auto done = parse(sliced.body);
    EXPECT_TRUE(at(done, "stopped").IsNull()) << sliced.body;
    retried += num(done, "retried");
    if (at(done, "next_after").IsNull())
      break;
    after = str(done, "next_after");
  }
  EXPECT_EQ(retried, 25);
  auto twice = post("/v1/batches/" + batch_id + "/retry", "");
  ASSERT_EQ(twice.status, 200) << twice.body;
  EXPECT_EQ(num(parse(twice.body), "retried"), 0) << twice.body;
  EXPECT_EQ(num(parse(twice.body), "already_retried"), 25) << twice.body;
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = $1 AND batch_id IS NULL "
                     "AND retry_of IS NOT NULL",
                     u),
            25);
  int named = 0;
  for (const std::string& line : lines_of(get("/v1/batches/" + batch_id + "/results").body)) {
    const auto doc = parse(line);
    const bool failed = str(at(doc, "result"), "type") == "error";
    EXPECT_EQ(at(doc, "retried_as").IsObject(), failed) << line;
    if (failed) {
      const std::string retry = str(at(doc, "retried_as"), "task_id");
      EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE task_id = $1::uuid AND retry_of = "
                         "$2::uuid",
                         retry, str(doc, "task_id")),
                1)
          << line;
      ++named;
    }
  }
  EXPECT_EQ(named, 25);
}

// A line whose idempotency key names a task submitted with another request is answered as
// that submission would be (409, naming the line and the task), and nothing of the batch is
// stored; the same request under the key is a duplicate.
TEST(ApiBatches, ALineWhoseKeyNamesAnotherRequestRefusesTheBatchWithA409) {
  const std::string u = user("bconflict");
  const std::string earlier = submit(submission(u, "删除2月30日的日程", "k-1"));
  const std::string other = submission(u, "把周会改到晚上8点", "k-2");
  auto refused = post_batch("?batch_id=" + u + "-b",
                            other + "\n" + submission(u, "今天下午去买东西", "k-1") + "\n");
  ASSERT_EQ(refused.status, 409) << refused.body;
  auto error = parse(refused.body);
  EXPECT_EQ(str(at(error, "error"), "code"), "idempotency_conflict");
  EXPECT_EQ(str(at(error, "error"), "path"), "/line/2/idempotency_key");
  EXPECT_NE(str(at(error, "error"), "message").find(earlier), std::string::npos) << refused.body;
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = $1", u), 1)
      << "nothing of the batch stored";

  // Two lines of one upload with one key and two requests: the second names the first.
  auto twice =
      post_batch("?batch_id=" + u + "-d", submission(u, "今天下午去买东西", "k-3") + "\n" + other +
                                              "\n" + submission(u, "改第二个", "k-3") + "\n");
  ASSERT_EQ(twice.status, 409) << twice.body;
  EXPECT_EQ(str(at(parse(twice.body), "error"), "path"), "/line/3/idempotency_key");
  EXPECT_NE(twice.body.find("line 1 of this batch"), std::string::npos) << twice.body;

  auto duplicate = post_batch("?batch_id=" + u + "-c",
                              other + "\n" + submission(u, "删除2月30日的日程", "k-1") + "\n");
  ASSERT_EQ(duplicate.status, 201) << duplicate.body;
  EXPECT_EQ(num(parse(duplicate.body), "accepted"), 1);
  EXPECT_EQ(num(parse(duplicate.body), "duplicates"), 1);
}

// A batch id is its user's (issue: a client-chosen id another tenant used answered 409
// batch_exists, which told the caller it exists). Two users each have a batch of one name,
// each key sees its own; a caller acting for both names the user, and is told to when it
// does not.
TEST(ApiBatches, TwoUsersEachHaveABatchOfOneNameAndEachKeySeesItsOwn) {
  const std::string name = user("nightly");
  auto ones = post_batch("?batch_id=" + name,
                         submission("u1", "删除2月30日的日程", name + "-1") + "\n", kU1Key);
  ASSERT_EQ(ones.status, 201) << ones.body;
  EXPECT_EQ(ones.header("Location"), "/v1/batches/" + name) << "a key of one user";
  auto twos = post_batch("?batch_id=" + name,
                         submission("u2", "删除2月30日的日程", name + "-2") + "\n" +
                             submission("u2", "把周会改到晚上8点", name + "-3") + "\n",
                         kU2Key);
  ASSERT_EQ(twos.status, 201) << twos.body;
  EXPECT_EQ(str(parse(twos.body), "batch_id"), name);
  expect_error(post_batch("?batch_id=" + name,
                          submission("u2", "今天下午去买东西", name + "-4") + "\n", kU2Key),
               409, "/query/batch_id", "batch_exists");

  auto one = get("/v1/batches/" + name, kU1Key);
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(str(parse(one.body), "user_id"), "u1");
  EXPECT_EQ(str(parse(one.body), "batch_id"), name);
  EXPECT_EQ(num(parse(one.body), "total"), 1);
  auto two = get("/v1/batches/" + name, kU2Key);
  ASSERT_EQ(two.status, 200) << two.body;
  EXPECT_EQ(str(parse(two.body), "user_id"), "u2");
  EXPECT_EQ(num(parse(two.body), "total"), 2);
  auto results = get("/v1/batches/" + name + "/results", kU2Key);
  ASSERT_EQ(results.status, 200) << results.body;
  EXPECT_EQ(std::count(results.body.begin(), results.body.end(), '\n'), 2) << results.body;
  EXPECT_EQ(results.body.find("u1"), std::string::npos) << results.body;
  const std::string a_task = results.body.substr(results.body.find("\"task_id\":\"") + 11, 36);
  EXPECT_EQ(str(parse(get("/v1/tasks/" + a_task, kU2Key).body), "batch_id"), name)
      << "its tasks name the batch as its user did";
  expect_error(get("/v1/batches/" + name + "?user_id=u2", kU1Key), 403, "/query/user_id",
               "forbidden");
  // A user's tasks of their batch, filtered by the server.
  auto listed = parse(get("/v1/tasks?user_id=u2&batch_id=" + name, kU2Key).body);
  EXPECT_EQ(size_of(at(listed, "tasks")), 2u);
  for (const auto& t : array_of(at(listed, "tasks")))
    EXPECT_EQ(str(t, "batch_id"), name);
  EXPECT_EQ(size_of(at(parse(get("/v1/tasks?user_id=u1&batch_id=" + name, kU1Key).body), "tasks")),
            1u);
  EXPECT_EQ(size_of(at(parse(get("/v1/tasks?user_id=u1&batch_id=" + name + "-none", kU1Key).body),
                       "tasks")),
            0u);

  // The admin's key acts for both: the name alone is ambiguous, its user tells.
  auto ambiguous = get("/v1/batches/" + name);
  expect_error(ambiguous, 409, "/query/user_id", "ambiguous_id");
  EXPECT_NE(str(at(parse(ambiguous.body), "error"), "message").find("u1, u2"), std::string::npos)
      << ambiguous.body;
  auto named = get("/v1/batches/" + name + "?user_id=u2");
  ASSERT_EQ(named.status, 200) << named.body;
  EXPECT_EQ(num(parse(named.body), "total"), 2);
  auto third = post_batch("?batch_id=" + name,
                          submission(user("nightly-u3"), "删除2月30日的日程", name + "-5") + "\n");
  ASSERT_EQ(third.status, 201) << third.body;
  EXPECT_EQ(third.header("Location"), "/v1/batches/" + name + "?user_id=" + user("nightly-u3"))
      << "a key acting for several users is told whose";

  // u2 cancels theirs; u1's batch of the name is not touched.
  auto cancelled = call({bhttp::verb::post, "/v1/batches/" + name + "/cancel", "", kU2Key});
  ASSERT_EQ(cancelled.status, 200) << cancelled.body;
  EXPECT_EQ(str(parse(cancelled.body), "user_id"), "u2");
  EXPECT_TRUE(at(parse(get("/v1/batches/" + name, kU1Key).body), "cancelled").IsFalse());
}

// GET /v1/batches: an admin finds any user's batches, newest first with their progress, and
// pages through them; a key of one user sees only its own.
TEST(ApiBatches, TheListShowsEveryUsersBatchesToAnAdminAndItsOwnToAUsersKey) {
  const std::string name = user("listed");
  for (const auto& [key, owner] : {std::pair{kU1Key, "u1"}, std::pair{kU2Key, "u2"}}) {
    auto created =
        post_batch("?batch_id=" + name,
                   submission(owner, "删除2月30日的日程", name + "-" + owner) + "\n", key);
    ASSERT_EQ(created.status, 201) << created.body;
  }
  // Every user's, page by page (other tests upload meanwhile) until both are found.
  std::vector<std::string> users;
  std::string previous;
  for (int pages = 0; pages < 50 && users.size() < 2; ++pages) {
    auto all = get("/v1/batches?limit=100" +
                   (previous.empty() ? "" : "&before=" + test::url_encode(previous)));
    ASSERT_EQ(all.status, 200) << all.body;
    auto doc = parse(all.body);
    if (size_of(at(doc, "batches")) == 0)
      break;
    for (const auto& b : array_of(at(doc, "batches"))) {
      const std::string created = str(b, "created_at");
      if (!previous.empty()) {
        EXPECT_LE(created, previous) << "newest first";
      }
      previous = created;
      if (str(b, "batch_id") == name) {
        users.push_back(str(b, "user_id"));
        EXPECT_EQ(num(b, "total"), 1);
        EXPECT_EQ(sum_of(at(b, "counts")), 1) << all.body;
      }
    }
  }
  EXPECT_EQ(users, (std::vector<std::string>{"u2", "u1"})) << "newest first";

  auto own = get("/v1/batches", kU1Key);
  ASSERT_EQ(own.status, 200) << own.body;
  const auto own_doc = parse(own.body);
  for (const auto& b : array_of(at(own_doc, "batches")))
    EXPECT_EQ(str(b, "user_id"), "u1") << own.body;
  expect_error(get("/v1/batches?user_id=u2", kU1Key), 403, "/query/user_id", "forbidden");

  // A page of one, then the next from the last one's time.
  auto first = parse(get("/v1/batches?user_id=u2&limit=1").body);
  ASSERT_EQ(size_of(at(first, "batches")), 1u);
  const std::string newest = str(item(at(first, "batches"), 0), "created_at");
  auto next = parse(get("/v1/batches?user_id=u2&limit=1&before=" + test::url_encode(newest)).body);
  for (const auto& b : array_of(at(next, "batches")))
    EXPECT_LT(str(b, "created_at"), newest);
  expect_error(get("/v1/batches?limit=0"), 400, "/query/limit", "invalid_request");
  expect_error(get("/v1/batches?before=yesterday"), 400, "/query/before", "invalid_request");
  expect_error(get("/v1/batches?before=2026-02-30"), 400, "/query/before", "invalid_request");
}

TEST(ApiBatches, ACancelledBatchStartsNoTaskAfterwardsAndEveryTaskEnds) {
  const std::string u = user("bcancel");
  const std::string batch_id = u + "-b";
  std::string body;
  for (int i = 0; i < 20; ++i)
    body += submission(u, "slow: steps=1", "c-" + std::to_string(i)) + "\n";
  auto created = post_batch("?batch_id=" + batch_id, body);
  ASSERT_EQ(created.status, 201) << created.body;
  ASSERT_EQ(num(parse(created.body), "accepted"), 20);

  // Cancel once some run (five at a time: the standard tier's max_concurrency).
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (pg_count("SELECT count(*) FROM tasks WHERE batch_id = $1 AND started_at IS NOT NULL",
                  batch_id) == 0 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(50ms);  // polling a bounded wait
  }
  auto cancel = post("/v1/batches/" + batch_id + "/cancel", "");
  ASSERT_EQ(cancel.status, 200) << cancel.body;
  auto answer = parse(cancel.body);
  EXPECT_TRUE(at(answer, "cancelled").IsTrue());
  const std::int64_t started = pg_count(
      "SELECT count(*) FROM tasks WHERE batch_id = $1 AND started_at IS NOT NULL", batch_id);
  EXPECT_GE(started, 1);
  EXPECT_LT(started, 20);

  // Every task ends (bounded); none that had not started when the cancel answered starts.
  const rapidjson::Document batch = wait_batch_ended(batch_id, 20, 30s);
  ASSERT_EQ(num(batch, "ended"), 20) << "running tasks stop within cancel_poll_ms";
  EXPECT_EQ(num(at(batch, "counts"), "cancelled") + num(at(batch, "counts"), "succeeded"), 20);
  EXPECT_GE(num(at(batch, "counts"), "cancelled"), 20 - started);
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE batch_id = $1 AND started_at IS NOT NULL",
                     batch_id),
            started)
      << "a task of the cancelled batch started afterwards";
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE batch_id = $1 AND started_at IS NULL AND "
                     "status <> 'cancelled'",
                     batch_id),
            0);
  // The results say the same.
  for (const std::string& line : lines_of(get("/v1/batches/" + batch_id + "/results").body)) {
    const std::string status = str(parse(line), "status");
    EXPECT_TRUE(status == "cancelled" || status == "succeeded") << line;
  }
}

// A cancel racing the scheduler pass the upload woke, which admits every task at once
// (max_concurrency 20): none of them may start after the cancel answered.
TEST(ApiBatches, ACancelRightAfterTheUploadLetsNoTaskStart) {
  const std::string u = user("brace");
  const std::string batch_id = u + "-b";
  auto limits = call({bhttp::verb::put, "/v1/users/" + u + "/limits", R"({"max_concurrency":20})"});
  ASSERT_EQ(limits.status, 200) << limits.body;
  std::string body;
  for (int i = 0; i < 20; ++i)
    body += submission(u, "slow: steps=1", "r-" + std::to_string(i)) + "\n";
  ASSERT_EQ(post_batch("?batch_id=" + batch_id, body).status, 201);
  auto cancel = post("/v1/batches/" + batch_id + "/cancel", "");
  ASSERT_EQ(cancel.status, 200) << cancel.body;
  const std::int64_t started = pg_count(
      "SELECT count(*) FROM tasks WHERE batch_id = $1 AND started_at IS NOT NULL", batch_id);

  const rapidjson::Document batch = wait_batch_ended(batch_id, 20, 30s);
  ASSERT_EQ(num(batch, "ended"), 20);
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE batch_id = $1 AND started_at IS NOT NULL",
                     batch_id),
            started)
      << "a task of the cancelled batch started afterwards";
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE batch_id = $1 AND started_at IS NULL AND "
                     "status <> 'cancelled'",
                     batch_id),
            0);
  std::printf("cancel right after the upload: %lld of 20 had started\n",
              static_cast<long long>(started));
}

// A counter of the dispatcher's /metrics (0 when it has no such series yet).
double metric(const std::string& text, const std::string& series) {
  const std::string line = series + " ";
  for (std::size_t at = text.find(line); at != std::string::npos; at = text.find(line, at + 1)) {
    if (at == 0 || text[at - 1] == '\n')
      return std::stod(text.substr(at + line.size()));
  }
  return 0;
}

// GET on the dispatcher's operations port (metrics.port, which the fleet sets).
http::ClientResponse ops_get(const std::string& path) {
  return test::fetch(test::env()["AGENTFLEET_DISPATCHER_METRICS_URL"] + path, bhttp::verb::get, {},
                     {}, 15s, "application/json");
}

TEST(ApiOps, ReadinessAndMetricsAreOnTheOperationsPortOnlyAndLivenessOnBoth) {
  for (const auto& health : {get("/healthz", ""), ops_get("/healthz")}) {
    EXPECT_EQ(health.status, 200) << health.body;
    EXPECT_EQ(str(parse(health.body), "status"), "ok");
  }
  auto ready = ops_get("/readyz");
  EXPECT_EQ(ready.status, 200) << ready.body;
  EXPECT_EQ(str(parse(ready.body), "status"), "ready");
  // It says whether commits wait for a synchronous standby: the fleet's Postgres has none.
  EXPECT_NE(ready.body.find(R"("synchronous_replication":false)"), std::string::npos) << ready.body;
  EXPECT_NE(ready.body.find("synchronous_standby_names is empty"), std::string::npos) << ready.body;
  // Nobody on the API's network reads the metrics or makes the dispatcher ping Postgres.
  for (const std::string path : {"/readyz", "/metrics"}) {
    auto refused = get(path, "");
    EXPECT_EQ(refused.status, 404) << path << ": " << refused.body;
    EXPECT_NE(refused.body.find("operations port"), std::string::npos) << refused.body;
    EXPECT_EQ(get(path, admin_key()).status, 404) << path << " with a key";
  }
  auto before = ops_get("/metrics");
  ASSERT_EQ(before.status, 200);
  EXPECT_EQ(before.header("Content-Type").rfind("text/plain", 0), 0u)
      << before.header("Content-Type");

  // Requests are counted by route and the status they were answered with, streamed routes
  // (batches, event streams) included.
  const std::string stream_404 =
      R"(agentfleet_http_requests_total{code="404",route="/v1/tasks/{id}/events"})";
  const std::string batch_400 = R"(agentfleet_http_requests_total{code="400",route="/v1/batches"})";
  const std::string health_200 = R"(agentfleet_http_requests_total{code="200",route="/healthz"})";
  EXPECT_GE(metric(before.body, health_200), 1) << before.body;
  call({bhttp::verb::get,
        "/v1/tasks/00000000-0000-4000-8000-000000000000/events",
        {},
        admin_key(),
        {{"Accept", "text/event-stream"}}});
  post_batch("", "");
  auto after = ops_get("/metrics");
  EXPECT_EQ(metric(after.body, stream_404), metric(before.body, stream_404) + 1);
  EXPECT_EQ(metric(after.body, batch_400), metric(before.body, batch_400) + 1);
}

// ---------------------------------------------------------------------------------------
// Long polls

// Long polls of one task opened `stagger` apart; each answer's arrival (wall clock).
struct Poll {
  http::ClientResponse response;
  std::chrono::system_clock::time_point arrived;
};

std::vector<Poll> staggered_polls(const std::string& task_id, int polls,
                                  std::chrono::milliseconds stagger) {
  boost::asio::io_context io;
  std::vector<Poll> out(static_cast<std::size_t>(polls));
  for (int i = 0; i < polls; ++i) {
    boost::asio::co_spawn(
        io,
        [&, i]() -> boost::asio::awaitable<void> {
          boost::asio::steady_timer timer(io, stagger * i);
          co_await timer.async_wait(boost::asio::use_awaitable);
          http::ClientRequest request;
          request.method = bhttp::verb::get;
          request.url = base_url() + "/v1/tasks/" + task_id + "?wait=30";
          request.headers.emplace_back("Authorization", "Bearer " + admin_key());
          request.deadline = std::chrono::steady_clock::now() + 40s;
          Poll& poll = out[static_cast<std::size_t>(i)];
          poll.response = co_await http::fetch(io.get_executor(), std::move(request));
          poll.arrived = std::chrono::system_clock::now();
        },
        boost::asio::detached);
  }
  io.run();
  return out;
}

TEST(ApiLongPoll, AnswersTheMomentTheResultLandsAndAShortWaitWithTheTaskAsItIs) {
  const std::string u = user("longpoll");
  // slow: three model answers of 600 ms. Four long polls opened 250 ms apart: answered
  // from the feed they all go out together right after finished_at; answered by the
  // once-a-second re-read of the row instead, each would go out at its own tick, spread
  // over most of a second.
  double worst = 0;
  for (int run = 0; run < 2; ++run) {
    const std::string id = submit(submission(u, "slow: steps=2", "lp-" + std::to_string(run)));
    const auto polls = staggered_polls(id, 4, 250ms);
    auto row = pg_row(
        "SELECT extract(epoch FROM finished_at)::float8, "
        "extract(epoch FROM finished_at - started_at)::float8 FROM tasks WHERE task_id = $1::uuid",
        id);
    const double finished = row[0].as<double>();
    EXPECT_GT(row[1].as<double>(), 1.5) << "three answers of 600 ms";
    double first = 1e18, last = 0;
    for (std::size_t i = 0; i < polls.size(); ++i) {
      SCOPED_TRACE("poll " + std::to_string(i));
      ASSERT_TRUE(polls[i].response.ok()) << polls[i].response.error_message;
      ASSERT_EQ(polls[i].response.status, 200) << polls[i].response.body;
      EXPECT_EQ(str(parse(polls[i].response.body), "status"), "succeeded");
      const double at = std::chrono::duration<double>(polls[i].arrived.time_since_epoch()).count();
      first = std::min(first, at);
      last = std::max(last, at);
      worst = std::max(worst, at - finished);
      std::printf("long poll %d.%zu: answered %.3f s after finished_at\n", run, i, at - finished);
      EXPECT_GE(at - finished, -0.05) << "not before the task ended";
      // Generous for a sanitizer build on a busy machine; what tells the feed from the
      // once-a-second re-read of the row is the spread below.
      EXPECT_LT(at - finished, 1.5) << "the answer goes out when the result lands";
    }
    std::printf("long poll %d: answers spread over %.3f s\n", run, last - first);
    // Answered by each poll's own once-a-second re-read, polls opened 250 ms apart would be
    // answered 0.75 s apart; from the feed, together.
    EXPECT_LT(last - first, 0.4) << "answered together, the moment the result landed";
  }
  std::printf("long poll: worst answer %.3f s after finished_at\n", worst);

  // A short wait on a task still running: after about the wait, with the task as it is.
  const std::string slow = submit(submission(u, "slow: steps=5", "lp-slow"));
  const auto asked = std::chrono::steady_clock::now();
  auto early = get("/v1/tasks/" + slow + "?wait=1");
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  ASSERT_EQ(early.status, 200) << early.body;
  EXPECT_FALSE(is_terminal_status(str(parse(early.body), "status"))) << early.body;
  EXPECT_GE(took, 0.95);
  EXPECT_LT(took, 3.0);
  post("/v1/tasks/" + slow + "/cancel", "");
  EXPECT_EQ(str(wait_terminal(slow), "status"), "cancelled");
}

// ---------------------------------------------------------------------------------------
// A user's results (GET /v1/results)

struct ResultsSeen {
  http::ClientResponse response;
  std::vector<std::string> task_ids;  // of the `result` events, in order
  std::vector<std::string> users;
  bool opened = false;
};

// Follows GET /v1/results?user_id= with `key` until `want` results came or `within` passed;
// `opened` is set as soon as the stream has begun (its first comment).
void follow_results(const std::string& user, const std::string& key, std::size_t want,
                    std::chrono::seconds within, ResultsSeen& seen, std::atomic<bool>& opened) {
  boost::asio::io_context io;
  std::string pending;
  http::ClientRequest request;
  request.method = bhttp::verb::get;
  request.url = base_url() + "/v1/results?user_id=" + test::url_encode(user);
  request.headers.emplace_back("Authorization", "Bearer " + key);
  request.headers.emplace_back("Accept", "text/event-stream");
  request.deadline = std::chrono::steady_clock::now() + within;
  http::StreamOptions options;
  options.idle_timeout = within;
  options.on_body = [&](std::string_view piece) {
    opened = true;
    pending.append(piece);
    for (std::size_t end = pending.find("\n\n"); end != std::string::npos;
         end = pending.find("\n\n")) {
      const std::string block = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (block.find("event: result\n") == std::string::npos)
        continue;
      const auto data = block.find("data: ");
      rapidjson::Document doc;
      doc.Parse(block.c_str() + data + 6);
      EXPECT_FALSE(doc.HasParseError()) << block;
      if (doc.HasParseError())
        continue;
      seen.task_ids.push_back(str(doc, "task_id"));
      seen.users.push_back(str(doc, "user_id"));
    }
    return seen.task_ids.size() < want;
  };
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        seen.response =
            co_await http::fetch_stream(io.get_executor(), std::move(request), std::move(options));
      },
      boost::asio::detached);
  io.run();
}

TEST(ApiResults, AUsersStreamCarriesEachOfItsResultsOnceAndNothingForgedOrOfOthers) {
  const std::string u = user("results");
  const std::string other = user("results-other");
  ResultsSeen seen;
  std::atomic<bool> opened{false};
  std::thread follower([&] { follow_results(u, admin_key(), 3, 60s, seen, opened); });
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (!opened && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(20ms);  // polling a bounded wait: the stream has begun
  ASSERT_TRUE(opened) << "the results stream never opened";
  // A forged result for the user on the topic (no such task), another user's task, then
  // three of the user's.
  test::produce("agent.tasks.results", u,
                R"({"version":1,"task_id":"00000000-0000-4000-8000-0000000f0e9d","user_id":")" + u +
                    R"(","status":"succeeded","attempt":1})",
                {});
  const std::string theirs = submit(submission(other, "bench: steps=1 calls=1", "r-other"));
  std::vector<std::string> mine;
  for (int i = 0; i < 3; ++i)
    mine.push_back(submit(submission(u, "bench: steps=1 calls=1", "r-" + std::to_string(i))));
  follower.join();
  ASSERT_EQ(seen.task_ids.size(), 3u)
      << "status " << seen.response.status << " " << seen.response.error_message;
  EXPECT_EQ(std::set<std::string>(seen.task_ids.begin(), seen.task_ids.end()),
            std::set<std::string>(mine.begin(), mine.end()));
  for (const auto& who : seen.users)
    EXPECT_EQ(who, u);
  EXPECT_EQ(str(wait_terminal(theirs), "status"), "succeeded");

  // A key acts only for its users; the user is required.
  auto refused = call({bhttp::verb::get,
                       "/v1/results?user_id=" + test::url_encode(u),
                       {},
                       test::kU1Key,
                       {{"Accept", "text/event-stream"}},
                       "application/json",
                       10s});
  EXPECT_EQ(refused.status, 403) << refused.body;
  auto missing =
      call({bhttp::verb::get, "/v1/results", {}, admin_key(), {}, "application/json", 10s});
  EXPECT_EQ(missing.status, 400) << missing.body;
  EXPECT_NE(missing.body.find("/query/user_id"), std::string::npos) << missing.body;
}

// ---------------------------------------------------------------------------------------
// Event streams

struct SseEvent {
  int id = -1;
  std::string event;
  std::string data;
};

std::vector<SseEvent> parse_sse(const std::string& body) {
  std::vector<SseEvent> events;
  SseEvent current;
  bool any = false;
  std::size_t start = 0;
  while (start <= body.size()) {
    std::size_t nl = body.find('\n', start);
    if (nl == std::string::npos)
      nl = body.size();
    const std::string line = body.substr(start, nl - start);
    start = nl + 1;
    if (line.empty()) {
      if (any)
        events.push_back(current);
      current = SseEvent{};
      any = false;
    } else if (line[0] == ':') {
      continue;  // a comment: keep-alive
    } else if (line.rfind("id: ", 0) == 0) {
      current.id = std::stoi(line.substr(4));
      any = true;
    } else if (line.rfind("event: ", 0) == 0) {
      current.event = line.substr(7);
      any = true;
    } else if (line.rfind("data: ", 0) == 0) {
      current.data += line.substr(6);
      any = true;
    } else {
      ADD_FAILURE() << "not a server-sent event line: " << line;
    }
  }
  EXPECT_FALSE(any) << "the stream ended inside an event";
  return events;
}

// What a stream showed, comparable across streams: (event, step, tool); error and done
// have step -1.
using Shown = std::tuple<std::string, int, std::string>;

std::vector<Shown> open_stream(const std::string& task_id, const std::string& label) {
  auto response = call({bhttp::verb::get,
                        "/v1/tasks/" + task_id + "/events",
                        {},
                        admin_key(),
                        {{"Accept", "text/event-stream"}},
                        "application/json",
                        60s});
  EXPECT_EQ(response.status, 200) << response.body;
  EXPECT_EQ(response.header("Content-Type"), "text/event-stream");
  std::vector<Shown> shown;
  const auto events = parse_sse(response.body);
  for (std::size_t i = 0; i < events.size(); ++i) {
    const SseEvent& e = events[i];
    SCOPED_TRACE(label + " event " + std::to_string(i) + ": " + e.event + " " + e.data);
    EXPECT_EQ(e.id, static_cast<int>(i)) << "ids count up from 0";
    rapidjson::Document data;
    data.Parse(e.data.c_str(), e.data.size());
    EXPECT_FALSE(data.HasParseError());
    EXPECT_TRUE(data.IsObject());
    const bool ending = e.event == "done" || e.event == "error";
    int step = -1;
    if (!ending) {
      EXPECT_EQ(str(data, "task_id"), task_id);
      step = static_cast<int>(num(data, "step"));
      EXPECT_GE(step, 0);
    }
    shown.emplace_back(e.event, step, str(data, "tool"));
  }
  std::printf("%s stream:", label.c_str());
  for (const auto& [event, step, tool] : shown)
    std::printf(" %s%s", event.c_str(), step >= 0 ? std::to_string(step).c_str() : "");
  std::printf("\n");
  EXPECT_FALSE(shown.empty());
  if (!shown.empty()) {
    EXPECT_EQ(std::get<0>(shown.back()), "done") << label << ": the stream ends with done";
  }
  EXPECT_EQ(std::count_if(shown.begin(), shown.end(),
                          [](const Shown& s) { return std::get<0>(s) == "done"; }),
            1)
      << label << ": exactly one done";
  return shown;
}

TEST(ApiLongPoll, WaitersReadTheRowOnTheResultNotOnEveryEventOrSecond) {
  // A task of ten model answers of 600 ms (about 6 s, some thirty progress events) with six
  // long polls and two event streams on it. Each waiter reads the row when it starts, when
  // the result comes and on its safety timer (5 s after its first read); a read every
  // second, or on each progress event, would be 6 to 40 reads a waiter.
  const std::string u = user("rereads");
  const std::vector<std::string> dispatcher = {test::env()["AGENTFLEET_DISPATCHER_METRICS_URL"]};
  const auto rereads = [&](std::string_view kind) {
    return test::metric_sum(
        dispatcher, "agentfleet_api_waiter_rereads_total{kind=\"" + std::string(kind) + "\"}");
  };
  const double polls_before = rereads("long_poll");
  const double streams_before = rereads("event_stream");
  const std::string id = submit(submission(u, "slow: steps=9", "rereads-1"));
  auto streams = std::async(std::launch::async, [&] {
    auto first = std::async(std::launch::async, [&] { return open_stream(id, "first"); });
    auto second = open_stream(id, "second");
    return std::make_pair(first.get(), second);
  });
  const auto polls = staggered_polls(id, 6, 100ms);
  auto row = pg_row(
      "SELECT extract(epoch FROM finished_at - started_at)::float8, status FROM "
      "tasks WHERE task_id = $1::uuid",
      id);
  EXPECT_GT(row[0].as<double>(), 4.0) << "ten answers of 600 ms";
  for (const auto& poll : polls) {
    ASSERT_TRUE(poll.response.ok()) << poll.response.error_message;
    ASSERT_EQ(poll.response.status, 200) << poll.response.body;
    EXPECT_EQ(str(parse(poll.response.body), "status"), "succeeded");
  }
  const auto [first, second] = streams.get();
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(std::get<0>(first.back()), "done");
  EXPECT_EQ(first, second) << "both streams showed the same events";
  const double poll_reads = rereads("long_poll") - polls_before;
  const double stream_reads = rereads("event_stream") - streams_before;
  std::printf("6 long polls read the row %.0f times after their first; 2 streams %.0f times\n",
              poll_reads, stream_reads);
  // Per waiter: the result and the safety timer (at 5 s, then 15 s on a slow machine), a gap
  // or two at most (a rebalance of the feed).
  EXPECT_LE(poll_reads, 6 * 4);
  EXPECT_LE(stream_reads, 2 * 4);
  EXPECT_GE(poll_reads, 6) << "each long poll read the row when the result came";
}

// The events of a task that ran `steps` model calls with `calls` tool calls each (the
// last step finishes): per step `step`, then its tool calls (`action`), then their
// outcomes (`execution`); then `done`.
std::vector<Shown> expected_events(int steps, int calls, const std::string& tool) {
  std::vector<Shown> out;
  for (int s = 0; s < steps; ++s) {
    out.emplace_back("step", s, "");
    if (s + 1 == steps)
      break;
    for (int c = 0; c < calls; ++c)
      out.emplace_back("action", s, tool);
    for (int c = 0; c < calls; ++c)
      out.emplace_back("execution", s, tool);
  }
  out.emplace_back("done", -1, "");
  return out;
}

TEST(ApiEvents, ALiveAndAReplayedStreamShowTheSameEventsEndingWithOneDone) {
  const std::string u = user("events");
  struct Case {
    std::string text;
    std::vector<Shown> expected;
  };
  const std::vector<Case> cases = {
      // Fast: the result can land before the progress events reach the dispatcher.
      {"bench: steps=2 calls=2", expected_events(3, 2, "search_items")},
      // A sample whose first answer has text (delta): the search finds no meeting for
      // this user, so nothing is changed.
      {"2月8日的会议改到晚上8点",
       {{"step", 0, ""},
        {"delta", 0, ""},
        {"action", 0, "search_items"},
        {"execution", 0, "search_items"},
        {"step", 1, ""},
        {"done", -1, ""}}},
      {"slow: steps=2", expected_events(3, 1, "search_items")},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].text);
    const std::string id = submit(submission(u, cases[i].text, "ev-" + std::to_string(i)));
    const auto live = open_stream(id, "live");
    const auto replayed = open_stream(id, "replayed");
    EXPECT_EQ(str(wait_terminal(id), "status"), "succeeded");
    EXPECT_EQ(live, cases[i].expected);
    EXPECT_EQ(replayed, cases[i].expected);
    EXPECT_EQ(live, replayed);
  }

  // A stream opened mid-run (the first step done, the second model call under way) gets
  // the history and then the rest, the same events once each.
  const std::string id = submit(submission(u, "slow: steps=3", "ev-mid"));
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (pg_count("SELECT count(*) FROM task_steps WHERE task_id = $1::uuid AND trace IS NOT NULL",
                  id) == 0 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(20ms);  // polling a bounded wait
  }
  const auto middle = open_stream(id, "mid-run");
  EXPECT_EQ(middle, expected_events(4, 1, "search_items"));

  // Another user's task and an unknown id are not found.
  expect_error(call({bhttp::verb::get,
                     "/v1/tasks/" + id + "/events",
                     {},
                     kU1Key,
                     {{"Accept", "text/event-stream"}}}),
               404, "/path/task_id", "not_found");
  expect_error(call({bhttp::verb::get,
                     "/v1/tasks/00000000-0000-4000-8000-000000000000/events",
                     {},
                     admin_key(),
                     {{"Accept", "text/event-stream"}}}),
               404, "/path/task_id", "not_found");
}

TEST(ApiEvents, ATaskThatFailedSaysWhyWithItsErrorCodeInTheTaskAndItsErrorEvent) {
  const std::string u = user("events-fail");
  // Three model steps needed, one allowed: the task ends failed with max_steps.
  const std::string id =
      submit(submission(u, "bench: steps=3 calls=1", "ef-1", R"(,"max_steps":1)"));
  auto done = wait_terminal(id);
  ASSERT_EQ(str(done, "status"), "failed") << str(done, "error");
  EXPECT_EQ(str(done, "error_code"), "max_steps") << str(done, "error");
  const auto response = call({bhttp::verb::get,
                              "/v1/tasks/" + id + "/events",
                              {},
                              admin_key(),
                              {{"Accept", "text/event-stream"}},
                              "application/json",
                              60s});
  ASSERT_EQ(response.status, 200) << response.body;
  int errors = 0;
  for (const SseEvent& e : parse_sse(response.body)) {
    if (e.event != "error")
      continue;
    ++errors;
    const auto data = parse(e.data);
    EXPECT_EQ(str(data, "error_code"), "max_steps") << e.data;
    EXPECT_EQ(str(data, "text"), str(done, "error")) << e.data;
  }
  EXPECT_EQ(errors, 1) << response.body;
}

// ---------------------------------------------------------------------------------------
// Auth

TEST(ApiAuth, AKeyActsOnlyForItsUsersAndAnotherUsersTaskIsNotFound) {
  // No key, a wrong key: 401 with a challenge, on plain and streamed routes alike.
  for (const Call& c : std::vector<Call>{
           {bhttp::verb::get, "/v1/tasks?user_id=u1", {}, ""},
           {bhttp::verb::post, "/v1/tasks", submission("u1", "x", "auth-nokey"), ""},
           {bhttp::verb::get, "/v1/tasks?user_id=u1", {}, "not-a-key"},
           {bhttp::verb::get, "/v1/tasks?user_id=u1", {}, "", {{"X-API-Key", "not-a-key"}}},
           {bhttp::verb::post, "/v1/batches", submission("u1", "x", "auth-nokey"), ""},
       }) {
    SCOPED_TRACE(c.path + " key '" + c.key + "'");
    auto response = call(c);
    expect_error(response, 401, "/header/authorization", "unauthorized");
    EXPECT_EQ(response.header("WWW-Authenticate"), "Bearer");
  }
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE idempotency_key = 'auth-nokey'"), 0);
  // X-API-Key works as well as Bearer.
  EXPECT_EQ(
      call({bhttp::verb::get, "/v1/tasks?user_id=u1", {}, "", {{"X-API-Key", kU1Key}}}).status,
      200);

  // u2's task, as u1 sees it: not found (not forbidden: ids do not leak).
  const std::string key2 = "auth-u2-" + user("auth");
  const std::string theirs = submit(submission("u2", "slow: steps=1", key2), kU2Key);
  const std::string unknown = "00000000-0000-4000-8000-000000000000";
  for (const std::string& id : {theirs, unknown}) {
    SCOPED_TRACE(id);
    expect_error(get("/v1/tasks/" + id, kU1Key), 404, "/path/task_id", "not_found");
    expect_error(get("/v1/tasks/" + id + "?wait=1", kU1Key), 404, "/path/task_id", "not_found");
    expect_error(post("/v1/tasks/" + id + "/cancel", "", kU1Key), 404, "/path/task_id",
                 "not_found");
    expect_error(call({bhttp::verb::get,
                       "/v1/tasks/" + id + "/events",
                       {},
                       kU1Key,
                       {{"Accept", "text/event-stream"}}}),
                 404, "/path/task_id", "not_found");
  }
  EXPECT_EQ(get("/v1/tasks/" + theirs, kU2Key).status, 200) << "its owner reads it";
  EXPECT_EQ(get("/v1/tasks/" + theirs).status, 200) << "the admin reads it";

  // u2's collections and submissions for u2: forbidden to u1's key, nothing stored.
  expect_error(get("/v1/tasks?user_id=u2", kU1Key), 403, "/query/user_id", "forbidden");
  expect_error(get("/v1/users/u2/usage", kU1Key), 403, "/path/user_id", "forbidden");
  expect_error(get("/v1/users/u2/limits", kU1Key), 403, "/path/user_id", "forbidden");
  const std::string key1 = "auth-u1-" + user("auth");
  expect_error(post("/v1/tasks", submission("u2", "删除2月30日的日程", key1), kU1Key), 403,
               "/user_id", "forbidden");
  expect_error(post_batch("", submission("u2", "删除2月30日的日程", key1) + "\n", kU1Key), 403,
               "/line/1/user_id", "forbidden");
  expect_error(
      post_batch("?user_id=u2", submission("u2", "删除2月30日的日程", key1) + "\n", kU1Key), 403,
      "/query/user_id", "forbidden");
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE idempotency_key = $1", key1), 0);
  // Limits are for admins only, even a key's own user's.
  const auto u1_limits = pg_count("SELECT count(*) FROM user_limits WHERE user_id = 'u1'");
  expect_error(call({bhttp::verb::put, "/v1/users/u1/limits", R"({"max_concurrency":1})", kU1Key}),
               403, "/header/authorization", "forbidden");
  EXPECT_EQ(pg_count("SELECT count(*) FROM user_limits WHERE user_id = 'u1'"), u1_limits);
  EXPECT_EQ(get("/v1/users/u1/limits", kU1Key).status, 200) << "reading its own is fine";
  EXPECT_EQ(get("/v1/users/u1/usage", kU1Key).status, 200);

  // u1's cancel did nothing: u2's task runs to its end.
  auto done = wait_terminal(theirs);
  EXPECT_EQ(str(done, "status"), "succeeded");
  EXPECT_TRUE(at(done, "cancel_requested").IsFalse());

  // Operations routes need no key.
  EXPECT_EQ(get("/healthz", "").status, 200);
  for (const std::string path : {"/healthz", "/readyz", "/metrics"})
    EXPECT_EQ(ops_get(path).status, 200) << path;
}

// What a client sends on a connection of its own, and what arrives until the dispatcher
// answers whole or closes (at most `limit`).
std::string raw_exchange(const std::string& text, std::chrono::seconds limit = 10s) {
  const std::string url = base_url();  // http://host:port
  const auto colon = url.rfind(':');
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket(io);
  socket.connect({boost::asio::ip::make_address(url.substr(7, colon - 7)),
                  static_cast<unsigned short>(std::stoi(url.substr(colon + 1)))});
  boost::asio::write(socket, boost::asio::buffer(text));
  std::string got;
  const auto until = std::chrono::steady_clock::now() + limit;
  socket.non_blocking(true);
  while (std::chrono::steady_clock::now() < until) {
    char buf[4096];
    boost::system::error_code ec;
    const std::size_t n = socket.read_some(boost::asio::buffer(buf), ec);
    if (ec == boost::asio::error::would_block) {
      std::this_thread::sleep_for(5ms);
      continue;
    }
    if (ec)
      break;
    got.append(buf, n);
    const auto end = got.find("\r\n\r\n");
    const auto length = got.find("Content-Length: ");
    if (end != std::string::npos && length != std::string::npos && length < end &&
        got.size() >= end + 4 + std::stoul(got.substr(length + 16)))
      break;
  }
  return got;
}

TEST(ApiAuth, ABodyIsNeverReadBeforeTheCallerIsKnownNorBeyondItsRoutesLimit) {
  const std::string before = ops_get("/metrics").body;
  // 8 MiB announced, none sent, no key: 401 on the head alone.
  const std::string nokey = raw_exchange(
      "POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 8388608\r\n\r\n");
  EXPECT_EQ(nokey.substr(0, nokey.find("\r\n")), "HTTP/1.1 401 Unauthorized") << nokey;
  EXPECT_NE(nokey.find("WWW-Authenticate: Bearer"), std::string::npos) << nokey;
  EXPECT_NE(nokey.find("Connection: close"), std::string::npos) << nokey;
  // With a key, a submission over 64 KiB is refused on its head too.
  const std::string big =
      raw_exchange("POST /v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + admin_key() +
                   "\r\nContent-Type: application/json\r\nContent-Length: 70000\r\n\r\n");
  EXPECT_EQ(big.substr(0, big.find("\r\n")), "HTTP/1.1 413 Payload Too Large") << big;
  EXPECT_NE(big.find("exceeds 65536 bytes"), std::string::npos) << big;
  // A route that does not exist, or the wrong method: answered on the head as well.
  const std::string nowhere =
      raw_exchange("POST /v1/nowhere HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + admin_key() +
                   "\r\nContent-Length: 8388608\r\n\r\n");
  EXPECT_EQ(nowhere.substr(0, nowhere.find("\r\n")), "HTTP/1.1 404 Not Found") << nowhere;
  auto wrong = call({bhttp::verb::delete_, "/v1/tasks", {}, admin_key()});
  expect_error(wrong, 405, "/method", "method_not_allowed");
  EXPECT_EQ(wrong.header("Allow"), "POST, GET");
  // Counted under their routes, never under a raw path.
  const std::string after = ops_get("/metrics").body;
  const std::string submit_401 = R"(agentfleet_http_requests_total{code="401",route="/v1/tasks"})";
  const std::string submit_413 = R"(agentfleet_http_requests_total{code="413",route="/v1/tasks"})";
  EXPECT_EQ(metric(after, submit_401), metric(before, submit_401) + 1);
  EXPECT_EQ(metric(after, submit_413), metric(before, submit_413) + 1);
}

// A connection that sent `text` and read the answer's head (up to its blank line); the
// status line, and the socket kept open (an event stream goes on).
struct HeldConnection {
  std::unique_ptr<boost::asio::ip::tcp::socket> socket;
  std::string status;
};
HeldConnection hold(boost::asio::io_context& io, const std::string& text) {
  const std::string url = base_url();
  const auto colon = url.rfind(':');
  HeldConnection held{std::make_unique<boost::asio::ip::tcp::socket>(io), {}};
  held.socket->connect({boost::asio::ip::make_address(url.substr(7, colon - 7)),
                        static_cast<unsigned short>(std::stoi(url.substr(colon + 1)))});
  boost::asio::write(*held.socket, boost::asio::buffer(text));
  held.socket->non_blocking(true);
  std::string got;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (got.find("\r\n\r\n") == std::string::npos && std::chrono::steady_clock::now() < until) {
    char buf[1024];
    boost::system::error_code ec;
    const std::size_t n = held.socket->read_some(boost::asio::buffer(buf), ec);
    if (ec == boost::asio::error::would_block) {
      std::this_thread::sleep_for(2ms);
      continue;
    }
    if (ec)
      break;
    got.append(buf, n);
  }
  held.status = got.substr(0, got.find("\r\n"));
  return held;
}

TEST(ApiAuth, AKeyHoldsAtMostItsShareOfEventStreamsAndOtherKeysStillGetTheirs) {
  // A task's streams stay open while it has not ended: the one the test holds them on runs
  // 50 steps of 600 ms at least (about 30 s; the default max_steps, 10, would end it within
  // 8). On a loaded machine holding 100 streams may outlast even that: a stream of an ended
  // task closes and gives its place back, so the share is judged only when the task is
  // seen not ended after the 101st stream was answered (all 100 were open then), on a new
  // task otherwise (three tries).
  std::string task;
  auto events_of = [&](const std::string& key) {
    return "GET /v1/tasks/" + task +
           "/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
           "Authorization: Bearer " +
           key + "\r\n\r\n";
  };
  boost::asio::io_context io;
  std::vector<HeldConnection> held;
  constexpr int kShare = 100;  // dispatcher.max_streams_per_caller in config/agentfleet.yaml
  std::string over;
  bool still_running = false;
  for (int attempt = 0; attempt < 3 && !still_running; ++attempt) {
    if (!task.empty())
      post("/v1/tasks/" + task + "/cancel", "", kU2Key);
    held.clear();
    task = submit(submission("u2", "slow: steps=50",
                             "streams-cap-" + user("cap") + "-" + std::to_string(attempt),
                             R"(,"max_steps":50,"timeout_s":600)"),
                  kU2Key);
    for (int i = 0; i < kShare; ++i) {
      held.push_back(hold(io, events_of(kU2Key)));
      ASSERT_EQ(held.back().status, "HTTP/1.1 200 OK") << "stream " << i;
    }
    over = raw_exchange(events_of(kU2Key));
    const std::string status = str(parse(get("/v1/tasks/" + task, kU2Key).body), "status");
    still_running = status == "queued" || status == "dispatched" || status == "running";
  }
  ASSERT_TRUE(still_running) << "each of three tasks ended before its 100 streams were held";
  EXPECT_EQ(over.substr(0, over.find("\r\n")), "HTTP/1.1 429 Too Many Requests") << over;
  EXPECT_NE(over.find("Retry-After: 1"), std::string::npos) << over;
  EXPECT_NE(over.find("too_many_waiting"), std::string::npos) << over;
  // Another key's stream of the same task is its own share.
  HeldConnection admin = hold(io, events_of(admin_key()));
  EXPECT_EQ(admin.status, "HTTP/1.1 200 OK");
  // Closed streams give their places back (noticed when the dispatcher next writes or
  // reads: within a heartbeat at most; the test tries for 30 s).
  held.clear();
  std::string again;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < until) {
    HeldConnection one = hold(io, events_of(kU2Key));
    again = one.status;
    if (again == "HTTP/1.1 200 OK")
      break;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(again, "HTTP/1.1 200 OK");
  post("/v1/tasks/" + task + "/cancel", "", kU2Key);
}

// ---------------------------------------------------------------------------------------
// The bad-input catalogue

TEST(ApiBadInput, EachIsAClear4xxOfTheErrorShapeAndNothingIsStored) {
  const std::string u = user("bad");
  // This test's users (api-bad-<run>, api-bad-<name>-<run>, ...): tasks of other tests may
  // still be arriving (a submission on the submit topic is stored when the dispatcher reads
  // it), so the whole table is not counted.
  const std::string ours = "api-bad%-" + u.substr(u.rfind('-') + 1) + "%";
  const auto our_tasks = [&] {
    return pg_count("SELECT count(*) FROM tasks WHERE user_id LIKE $1", ours);
  };
  const std::int64_t tasks_before = our_tasks();
  const std::int64_t batches_before = pg_count("SELECT count(*) FROM batches");
  struct Case {
    std::string name;
    std::string body;
    std::string path;
  };
  std::string long_text;
  for (int i = 0; i < 5001; ++i)
    long_text += "字";  // 5,001 characters, 15,003 bytes
  std::string deep = "1";
  for (int i = 0; i < 200; ++i)
    deep = "[" + deep + "]";
  const std::vector<Case> cases = {
      {"malformed JSON", R"({"user_id":")" + u + R"(","text":)", "/"},
      {"not an object", "[]", "/"},
      {"text as a number", R"({"user_id":")" + u + R"(","text":5})", "/text"},
      {"timeout_s as a string", submission(u, "hi", "bad-1", R"(,"timeout_s":"30")"), "/timeout_s"},
      {"text of 5,001 characters", submission(u, long_text, "bad-2"), "/text"},
      {"text of 5,001 ASCII characters", submission(u, std::string(5001, 'a'), "bad-3"), "/text"},
      {"an unknown field", submission(u, "hi", "bad-4", R"(,"colour":"red")"), "/colour"},
      {"an unknown metadata field", submission(u, "hi", "bad-5", R"(,"metadata":{"colour":1})"),
       "/metadata/colour"},
      {"invalid UTF-8", submission(u, "\xff\xfe", "bad-6"), "/"},
      {"an overlong UTF-8 encoding", submission(u, "\xc0\xaf", "bad-7"), "/"},
      {"a lone surrogate", submission(u, "\xed\xa0\x80", "bad-8"), "/"},
      {"deep nesting", submission(u, "hi", "bad-9", R"(,"metadata":{"device_id":)" + deep + "}"),
       "/metadata"},
      {"a number too big for a double", submission(u, "hi", "bad-10", R"(,"timeout_s":1e400)"),
       "/"},
      {"a number too big for an integer",
       submission(u, "hi", "bad-11", R"(,"timeout_s":99999999999999999999999)"), "/timeout_s"},
      {"max_steps past 32 bits", submission(u, "hi", "bad-12", R"(,"max_steps":4294967297)"),
       "/max_steps"},
      {"a negative timeout", submission(u, "hi", "bad-13", R"(,"timeout_s":-1)"), "/timeout_s"},
      {"an unknown model", submission(u, "hi", "bad-14", R"(,"model":"no-such-model")"), "/model"},
      {"an unknown tool", submission(u, "hi", "bad-15", R"(,"tools":["search_items","nope"])"),
       "/tools/1"},
      {"an unknown priority", submission(u, "hi", "bad-16", R"(,"priority":"urgent")"),
       "/priority"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    expect_error(post("/v1/tasks", c.body), 400, c.path, "invalid_request");
  }
  // The limit counts characters, not bytes: 5,000 three-byte characters are fine.
  const std::string ok_user = user("bad-ok");
  std::string longest;
  for (int i = 0; i < 5000; ++i)
    longest += "字";
  EXPECT_EQ(post("/v1/tasks", submission(ok_user, longest, "ok-1")).status, 201);

  // Query parameters.
  const std::string task = submit(submission(ok_user, "删除2月30日的日程", "ok-2"));
  for (const std::string wait : {"abc", "31", "-1", "1.5", ""}) {
    SCOPED_TRACE("wait=" + wait);
    expect_error(get("/v1/tasks/" + task + "?wait=" + wait), 400, "/query/wait");
  }
  for (const std::string limit : {"0", "501", "ten"}) {
    SCOPED_TRACE("limit=" + limit);
    expect_error(get("/v1/tasks?user_id=" + ok_user + "&limit=" + limit), 400, "/query/limit");
  }
  expect_error(get("/v1/tasks?user_id=" + ok_user + "&status=done"), 400, "/query/status");
  expect_error(get("/v1/tasks?user_id=" + ok_user + "&before=yesterday"), 400, "/query/before");
  // Without user_id the search reads every user the key acts for; a bad filter is refused.
  expect_error(get("/v1/tasks?user_id=" + ok_user + "&q=%00"), 400, "/query/q");
  expect_error(get("/v1/tasks?count=maybe"), 400, "/query/count");
  // Another user's task, a bad key.
  expect_error(get("/v1/tasks/" + task, kU1Key), 404, "/path/task_id", "not_found");
  expect_error(get("/v1/tasks/" + task, "af-dev-u3-key"), 401, "/header/authorization",
               "unauthorized");

  // Usage with a malformed range.
  expect_error(get("/v1/users/" + ok_user + "/usage?from=yesterday"), 400, "/query/from");
  expect_error(get("/v1/users/" + ok_user + "/usage?to=2026-13"), 400, "/query/to");
  expect_error(get("/v1/users/" + ok_user + "/usage?from=2026-02-30"), 400, "/query");

  // Limits: an unknown field, a negative max_concurrency; nothing stored.
  const std::string limited = user("bad-limits");
  expect_error(call({bhttp::verb::put, "/v1/users/" + limited + "/limits", R"({"colour":1})"}), 400,
               "/colour");
  expect_error(
      call({bhttp::verb::put, "/v1/users/" + limited + "/limits", R"({"max_concurrency":-1})"}),
      400, "/max_concurrency");
  expect_error(call({bhttp::verb::put, "/v1/users/" + limited + "/limits", "[1]"}), 400, "/");
  EXPECT_EQ(pg_count("SELECT count(*) FROM user_limits WHERE user_id = $1", limited), 0);

  // Batches: one bad line among good ones, lines of two users, no lines at all.
  auto lines = [&](int n, int bad, const std::string& bad_line, const std::string& prefix) {
    std::string body;
    for (int i = 1; i <= n; ++i) {
      body += (i == bad ? bad_line
                        : submission(u, "bench: steps=1 calls=1", prefix + std::to_string(i))) +
              "\n";
    }
    return body;
  };
  struct BatchCase {
    std::string name;
    std::string body;
    std::string path;
  };
  const std::vector<BatchCase> batch_cases = {
      {"a bad line among good ones",
       lines(5, 3, submission(u, "hi", "bl-3", R"(,"timeout_s":"x")"), "bl-"), "/line/3/timeout_s"},
      // Past the first slice of 1,000 rows, written (uncommitted) before the bad line.
      {"a bad line after 1,000 good ones",
       lines(1200, 1100, submission(u, "hi", "bm-1100", R"(,"model":"nope")"), "bm-"),
       "/line/1100/model"},
      {"a line that is not JSON", lines(3, 2, "{not json", "bn-"), "/line/2"},
      {"two users", lines(3, 2, submission(u + "-other", "hi", "bo-2"), "bo-"), "/line/2/user_id"},
      {"a line naming another batch",
       lines(3, 3, submission(u, "hi", "bp-3", R"(,"batch_id":"another")"), "bp-"),
       "/line/3/batch_id"},
      {"no lines", "", "/line/1"},
      {"blank lines only", "\n\n  \n", "/line/1"},
  };
  for (std::size_t i = 0; i < batch_cases.size(); ++i) {
    const BatchCase& c = batch_cases[i];
    SCOPED_TRACE(c.name);
    const std::string batch_id = u + "-bad-" + std::to_string(i);
    expect_error(post_batch("?batch_id=" + batch_id, c.body), 400, c.path, "invalid_request");
    EXPECT_EQ(pg_count("SELECT count(*) FROM batches WHERE batch_id = $1", batch_id), 0)
        << "no batch row";
  }
  expect_error(post_batch("?batch_id=" + u + "-p&priority=urgent", lines(1, 0, "", "bq-")), 400,
               "/query/priority");
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = $1", u), 0)
      << "no task of a refused submission or batch is stored";
  EXPECT_EQ(our_tasks(), tasks_before + 2) << "only ok_user's two";
  EXPECT_EQ(pg_count("SELECT count(*) FROM batches"), batches_before);

  // A batch id the user used before: 409, the first batch as it was, nothing added. Another
  // user's batch of that id is theirs (batch ids are each user's).
  const std::string reused = u + "-reused";
  const std::string good_user = user("bad-batch");
  auto first =
      post_batch("?batch_id=" + reused, submission(good_user, "删除2月30日的日程", "br-1") + "\n");
  ASSERT_EQ(first.status, 201) << first.body;
  expect_error(
      post_batch("?batch_id=" + reused, submission(good_user, "删除2月30日的日程", "br-2") + "\n"),
      409, "/query/batch_id", "batch_exists");
  const std::string other_user = user("bad-other");
  auto theirs =
      post_batch("?batch_id=" + reused, submission(other_user, "删除2月30日的日程", "br-3") + "\n");
  ASSERT_EQ(theirs.status, 201) << theirs.body;
  EXPECT_EQ(str(parse(theirs.body), "batch_id"), reused);
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE batch_id = $1", reused), 1);
  EXPECT_EQ(pg_count("SELECT total FROM batches WHERE batch_id = $1", reused), 1);
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE idempotency_key = 'br-2'"), 0);
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = $1", other_user), 1);
}

// ---------------------------------------------------------------------------------------
// Batch uploads that cannot fit, or trickle

// A plain connection to the API, for requests written by hand.
boost::asio::ip::tcp::socket api_socket(boost::asio::io_context& io) {
  const std::string url = base_url();
  const auto colon = url.rfind(':');
  boost::asio::ip::tcp::socket socket(io);
  socket.connect({boost::asio::ip::make_address(url.substr(7, colon - 7)),
                  static_cast<unsigned short>(std::stoi(url.substr(colon + 1)))});
  return socket;
}

std::string batch_lines_of(const std::string& u, int n, const std::string& prefix) {
  std::string lines;
  for (int i = 0; i < n; ++i) {
    lines += R"({"user_id":")" + u + R"(","text":"bench: steps=1 calls=1","idempotency_key":")" +
             prefix + std::to_string(i) + "\"}\n";
  }
  return lines;
}

// Starts a chunked batch upload of `lines` for user `u` as `batch`, as `key`, and waits
// (bounded) until `staged` of its tasks are stored, staged; the body is left open.
boost::asio::ip::tcp::socket start_upload(boost::asio::io_context& io, const std::string& u,
                                          const std::string& batch, const std::string& lines,
                                          std::int64_t staged,
                                          const std::string& key = admin_key()) {
  boost::asio::ip::tcp::socket socket = api_socket(io);
  char size[16];
  std::snprintf(size, sizeof size, "%zx\r\n", lines.size());
  boost::asio::write(socket,
                     boost::asio::buffer("POST /v1/batches?user_id=" + u + "&batch_id=" + batch +
                                         " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key +
                                         "\r\nContent-Type: application/x-ndjson\r\n"
                                         "Transfer-Encoding: chunked\r\n\r\n" +
                                         size + lines + "\r\n"));
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (pg_count("SELECT count(*) FROM tasks WHERE user_id = $1 AND status = 'staged'", u) <
             staged &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(20ms);  // polling a bounded wait
  return socket;
}

// Ends an upload start_upload began; its answer, read until its JSON's last member.
std::string end_upload(boost::asio::ip::tcp::socket& socket) {
  boost::asio::write(socket, boost::asio::buffer(std::string("0\r\n\r\n")));
  std::string got;
  boost::system::error_code ec;
  char buf[4096];
  while (got.find("\"duplicates\"") == std::string::npos && !ec)
    got.append(buf, socket.read_some(boost::asio::buffer(buf), ec));
  return got;
}

TEST(ApiBatchLimits, AnUploadThatCannotFitIsRefusedBeforeItsBodyOrAsSoonAsItOutgrowsTheQueue) {
  const std::string u = user("batch-room");
  // One request a minute: the first task runs, the next three wait queued, filling a queue
  // of three.
  auto limits = call({bhttp::verb::put, "/v1/users/" + u + "/limits",
                      R"({"max_queued":3,"requests_per_minute":1})"});
  ASSERT_EQ(limits.status, 200) << limits.body;
  // Ten lines into a queue of three: refused as soon as they outgrow it; nothing stored.
  auto over = post_batch("?user_id=" + u, batch_lines_of(u, 10, "over-"));
  EXPECT_EQ(over.status, 429) << over.body;
  EXPECT_EQ(over.header("Retry-After"), "60");
  EXPECT_EQ(str(at(parse(over.body), "error"), "code"), "queue_full") << over.body;
  EXPECT_NE(over.body.find("the upload was stopped and nothing was stored"), std::string::npos)
      << over.body;
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = $1", u), 0);
  EXPECT_EQ(pg_count("SELECT count(*) FROM batches WHERE user_id = $1", u), 0);

  // The first is dispatched before the others are submitted (while it waits, a fourth
  // would find the queue of three full).
  const std::string first = submit(submission(u, "bench: steps=1 calls=1", "room-0"));
  const auto dispatched_by = std::chrono::steady_clock::now() + 30s;
  while (pg_count("SELECT count(*) FROM tasks WHERE task_id = $1::uuid AND status = 'queued'",
                  first) > 0 &&
         std::chrono::steady_clock::now() < dispatched_by)
    std::this_thread::sleep_for(20ms);  // polling a bounded wait
  for (int i = 1; i < 4; ++i)
    submit(submission(u, "bench: steps=1 calls=1", "room-" + std::to_string(i)));
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (pg_count("SELECT count(*) FROM tasks WHERE user_id = $1 AND status = 'queued'", u) < 3 &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(50ms);  // polling a bounded wait
  ASSERT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = $1 AND status = 'queued'", u), 3);
  // The queue is full: an upload announcing 8 MiB is refused on its head, none of it sent.
  const std::string full = raw_exchange(
      "POST /v1/batches?user_id=" + u + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
      admin_key() + "\r\nContent-Type: application/x-ndjson\r\nContent-Length: 8388608\r\n\r\n");
  EXPECT_EQ(full.substr(0, full.find("\r\n")), "HTTP/1.1 429 Too Many Requests") << full;
  EXPECT_NE(full.find("Retry-After: 60"), std::string::npos) << full;
  EXPECT_NE(full.find("the queue is full"), std::string::npos) << full;
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = $1", u), 4);
  EXPECT_EQ(call({bhttp::verb::put, "/v1/users/" + u + "/limits", "{}"}).status, 200);
}

TEST(ApiBatchLimits, AnUploadUnderWayHoldsNoTransactionAndItsTasksWaitUnseenUntilItEnds) {
  // A slice of 1,000 lines is committed as it arrives, staged: no transaction stays open
  // while the client sends, yet no read shows the tasks and no scheduler starts them until
  // the body ends and the upload is sealed.
  const std::string u = user("staged");
  const std::string batch =
      "staged-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket =
      start_upload(io, u, batch, batch_lines_of(u, 1200, "staged-"), 1000);
  // The first slice at least (the rest goes in once it is full or a second later).
  EXPECT_GE(pg_count("SELECT count(*) FROM tasks WHERE user_id = $1 AND status = 'staged'", u),
            1000);
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = $1 AND status <> 'staged'", u), 0);
  // Held means open for longer than any short transaction of the fleet's own (a scheduler
  // pass may be caught between two statements at any moment). The client stays silent for
  // a second and a half: a transaction left open for the next slice (or one opened with
  // the request) would be idle in it by then.
  std::this_thread::sleep_for(1500ms);  // the silence under test, not a wait for an event
  EXPECT_EQ(pg_count("SELECT count(*) FROM pg_stat_activity "
                     "WHERE state LIKE 'idle in transaction%' AND pid <> pg_backend_pid() "
                     "AND xact_start < clock_timestamp() - interval '1 second'"),
            0);
  auto list = get("/v1/tasks?user_id=" + u);
  ASSERT_EQ(list.status, 200) << list.body;
  EXPECT_EQ(size_of(at(parse(list.body), "tasks")), 0u) << list.body;
  EXPECT_EQ(get("/v1/batches/" + batch).status, 404);

  const std::string got = end_upload(socket);
  EXPECT_EQ(got.substr(0, got.find("\r\n")), "HTTP/1.1 201 Created") << got;
  EXPECT_NE(got.find("\"accepted\":1200"), std::string::npos) << got;
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = $1 AND status = 'staged'", u), 0);
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = $1", u), 1200);
  auto shown = get("/v1/batches/" + batch);
  EXPECT_EQ(shown.status, 200) << shown.body;
  EXPECT_EQ(call({bhttp::verb::post, "/v1/batches/" + batch + "/cancel", ""}).status, 200);
}

TEST(ApiBatchLimits, AKeyHeldByAnUploadUnderWayIsRefusedForNowNeverTakenForADuplicate) {
  // An upload under way holds its lines' keys in staged tasks that may yet be deleted (the
  // upload refused). Until it ends, another submission with such a key is told to retry,
  // not answered with a task that may never exist, and another upload (the same file sent
  // again under a new batch id) stores nothing rather than counting its lines duplicates.
  const std::string u = user("held");
  const std::string batch =
      "held-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  boost::asio::io_context io;
  // A full slice of 1,000 lines goes in as it arrives.
  boost::asio::ip::tcp::socket socket =
      start_upload(io, u, batch, batch_lines_of(u, 1000, "held-"), 1000);
  ASSERT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = $1 AND status = 'staged'", u),
            1000);

  auto single = post("/v1/tasks", submission(u, "bench: steps=1 calls=1", "held-1"));
  expect_error(single, 503, "/idempotency_key", "idempotency_key_pending");
  EXPECT_FALSE(single.header("Retry-After").empty());
  EXPECT_NE(single.body.find(batch), std::string::npos) << single.body;
  // The same caller's second upload for the user waits for its share of the replica's
  // uploads (max_batch_uploads_per_caller, 1): refused before its lines are read. (Through
  // another caller or replica, its held keys would answer 503 idempotency_key_pending;
  // tests/pg/batch_pgtest.cpp holds the store's side of that.)
  auto again = post_batch("?user_id=" + u, batch_lines_of(u, 3, "held-"));
  EXPECT_EQ(again.status, 429) << again.body;
  EXPECT_EQ(str(at(parse(again.body), "error"), "code"), "too_many_uploads") << again.body;
  EXPECT_EQ(again.header("Retry-After"), "5");
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = $1", u), 1000)
      << "only the first upload's staged tasks";
  EXPECT_EQ(pg_count("SELECT count(*) FROM batches WHERE user_id = $1", u), 1);

  const std::string got = end_upload(socket);
  EXPECT_EQ(got.substr(0, got.find("\r\n")), "HTTP/1.1 201 Created") << got;
  // Sealed: the key names a stored task from now on (whose request, a batch's line, was
  // another).
  expect_error(post("/v1/tasks", submission(u, "bench: steps=1 calls=1", "held-1")), 409,
               "/idempotency_key", "idempotency_conflict");
  auto duplicate = post_batch("?user_id=" + u, batch_lines_of(u, 3, "held-"));
  EXPECT_EQ(duplicate.status, 201) << duplicate.body;
  EXPECT_NE(duplicate.body.find("\"duplicates\":3"), std::string::npos) << duplicate.body;
  EXPECT_EQ(call({bhttp::verb::post, "/v1/batches/" + batch + "/cancel", ""}).status, 200);
}

// Issue 39, item 1: two uploads by u2 held both of the replica's upload slots, and every
// upload of u1 meanwhile was answered 429. A caller now holds at most its share
// (max_batch_uploads_per_caller, 1 by default); another tenant's upload is served.
TEST(ApiBatchLimits, OneTenantsUploadsLeaveTheOtherSlotToAnotherTenant) {
  boost::asio::io_context io;
  const std::string batch =
      "share-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  ASSERT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = 'u2' AND status = 'staged'"), 0);
  // A full slice goes in as it arrives (its tasks staged): the upload holds its slot.
  boost::asio::ip::tcp::socket held =
      start_upload(io, "u2", batch, batch_lines_of("u2", 1000, batch + "-"), 1000, kU2Key);
  ASSERT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = 'u2' AND status = 'staged'"),
            1000);

  auto second = post_batch("", batch_lines_of("u2", 1, batch + "-again-"), kU2Key);
  EXPECT_EQ(second.status, 429) << second.body;
  EXPECT_EQ(str(at(parse(second.body), "error"), "code"), "too_many_uploads") << second.body;
  EXPECT_EQ(second.header("Retry-After"), "5");
  EXPECT_NE(second.body.find("max_batch_uploads_per_caller"), std::string::npos) << second.body;

  // u1's upload is read (its second line names another user: 400, nothing stored) rather
  // than refused for want of a slot.
  auto other = post_batch(
      "", batch_lines_of("u1", 1, batch + "-u1-") + batch_lines_of("u2", 1, "x"), kU1Key);
  expect_error(other, 400, "/line/2/user_id", "invalid_request");

  // The held upload ends without its last chunk: nothing of it stays, and u2 may upload again.
  held.close();
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (pg_count("SELECT count(*) FROM tasks WHERE user_id = 'u2' AND status = 'staged'") > 0 &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(20ms);  // polling a bounded wait
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = 'u2' AND status = 'staged'"), 0);
  // Its slot is given back once its answer is done, just after the delete: asked again
  // while 429 (Retry-After), within a bound.
  http::ClientResponse after = post_batch("", "{ not json\n", kU2Key);
  const auto freed_by = std::chrono::steady_clock::now() + 20s;
  while (after.status == 429 && std::chrono::steady_clock::now() < freed_by) {
    std::this_thread::sleep_for(50ms);  // polling a bounded wait
    after = post_batch("", "{ not json\n", kU2Key);
  }
  expect_error(after, 400, "/line/1", "invalid_request");
}

// What a chunked batch upload for `u` that sends `chunk(i)` every `every` was answered, read
// to the end of its error code, and how many seconds after its head the answer's head came
// (at most 30 s of sending).
struct Trickled {
  std::string answer;
  double took = 0;
};
Trickled trickle(const std::string& u, const std::function<std::string(int)>& chunk,
                 std::chrono::milliseconds every) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket = api_socket(io);
  boost::asio::write(
      socket, boost::asio::buffer("POST /v1/batches?user_id=" + u +
                                  " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + admin_key() +
                                  "\r\nContent-Type: application/x-ndjson\r\n"
                                  "Transfer-Encoding: chunked\r\n\r\n"));
  socket.non_blocking(true);
  std::string got;
  const auto started = std::chrono::steady_clock::now();
  int sent = 0;
  auto next_chunk = started;
  while (std::chrono::steady_clock::now() < started + 30s &&
         got.find("\r\n\r\n") == std::string::npos) {
    if (std::chrono::steady_clock::now() >= next_chunk) {
      const std::string data = chunk(sent++);
      char size[16];
      std::snprintf(size, sizeof size, "%zx\r\n", data.size());
      boost::system::error_code ec;
      boost::asio::write(socket, boost::asio::buffer(std::string(size) + data + "\r\n"), ec);
      next_chunk += every;
    }
    char buf[4096];
    boost::system::error_code ec;
    const std::size_t n = socket.read_some(boost::asio::buffer(buf), ec);
    if (ec == boost::asio::error::would_block) {
      std::this_thread::sleep_for(20ms);  // polling a bounded wait
      continue;
    }
    if (ec)
      break;
    got.append(buf, n);
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  boost::system::error_code ec;
  char buf[4096];
  socket.non_blocking(false);
  while (got.find("\r\n\r\n") != std::string::npos &&
         got.find("}}", got.find("\r\n\r\n")) == std::string::npos && !ec)
    got.append(buf, socket.read_some(boost::asio::buffer(buf), ec));
  return {got, took};
}

TEST(ApiBatchLimits, AnUploadBelowTheMinimumRateIsCutWithA408AndStoresNothing) {
  // The fleet holds uploads to 8,192 bytes a second after their first 3 s
  // (AGENTFLEET_BATCH_UPLOAD_RATE_WINDOW_S in the fixture). One line a second is far less.
  const std::string u = user("trickle");
  const Trickled cut = trickle(
      u, [&u](int i) { return batch_lines_of(u, 1, "trickle-" + std::to_string(i)); }, 1s);
  const std::string& got = cut.answer;
  EXPECT_EQ(got.substr(0, got.find("\r\n")), "HTTP/1.1 408 Request Timeout") << got;
  // Read a second past the window (the rate is looked at as lines arrive); well before the
  // upload's overall bound.
  EXPECT_LT(cut.took, 15.0) << got;
  EXPECT_GE(cut.took, 3.0) << got;
  EXPECT_NE(got.find("upload_too_slow"), std::string::npos) << got;
  EXPECT_NE(got.find("nothing was stored"), std::string::npos) << got;
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = $1", u), 0);
  EXPECT_EQ(pg_count("SELECT count(*) FROM batches WHERE user_id = $1", u), 0);
}

// Issue 39, item 1: an upload of nothing but blank lines, 8 KiB a second, met the pace (it
// counted bytes) and held an upload slot for the hour of batch_upload_timeout_s. Blank
// lines are not tasks and earn no time: 64 KiB a second of them is cut past the window.
TEST(ApiBatchLimits, AnUploadOfBlankLinesIsCutPastTheWindowHoweverFastItSendsThem) {
  const std::string u = user("blank");
  const Trickled cut = trickle(
      u, [](int) { return std::string(16 * 1024, '\n'); }, 250ms);
  const std::string& got = cut.answer;
  EXPECT_EQ(got.substr(0, got.find("\r\n")), "HTTP/1.1 408 Request Timeout") << got;
  EXPECT_LT(cut.took, 15.0) << got;
  EXPECT_GE(cut.took, 3.0) << got;
  EXPECT_NE(got.find("upload_too_slow"), std::string::npos) << got;
  EXPECT_NE(got.find("of blank lines, which are not tasks"), std::string::npos) << got;
  EXPECT_EQ(pg_count("SELECT count(*) FROM batches WHERE user_id = $1", u), 0);
}

}  // namespace
}  // namespace agentfleet
