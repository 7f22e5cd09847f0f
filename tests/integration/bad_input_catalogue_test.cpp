// Invariant 7 as a catalogue (DESIGN.md): bad input never crashes a process and never
// blocks a partition; a malformed or unknown message goes to the dead-letter topic with the
// reason; an API request gets a 4xx whose body names the JSON path of the problem. Each
// entry point of the fleet gets the same kinds of bad input — malformed JSON, invalid
// UTF-8, deep nesting, huge numbers, wrong types, missing and unknown fields, oversized
// bodies and text, SQL- and header-injection strings, duplicate ids — and each case
// asserts its own outcome: the status, error code and path, or the dead letter and its
// reason. Then: nothing was stored half-way (Postgres counts for the cases' own users),
// every process still answers /healthz, and a valid message sent after the bad ones on the
// same key is processed (the partition moved on).
//
// Runs on the embedded fleet (fleet_fixture.sh); every user, key and batch id carries this
// run's tag, so the file can run again on the same fleet. The older, narrower catalogues
// stay where they are: ApiBadInput (api_test.cpp), TaskApi.RejectsBadInput..., SubmitTopic
// and DeadLetters (sample_tasks_test.cpp).

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <rapidjson/document.h>

#include <pqxx/pqxx>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/adapters/http/client.hpp"
#include "tests/integration/fleet_client.hpp"
#include "tests/integration/fleet_env.hpp"
#include "tests/integration/topic_reader.hpp"

namespace agentfleet {
namespace {

using namespace std::chrono_literals;
namespace bhttp = boost::beast::http;
using test::at;
using test::env;
using test::fetch;
using test::Headers;
using test::Letter;
using test::metric_sum;
using test::parse;
using test::pg_count;
using test::pg_row;
using test::run_tag;
using test::str;
using test::TopicReader;
using test::url_encode;
using test::worker_metrics_urls;

std::string user(const std::string& name) {
  return "cat-" + name + "-" + run_tag();
}

// ---------------------------------------------------------------------------------------
// HTTP

struct Call {
  bhttp::verb method = bhttp::verb::get;
  std::string target;  // path and query, after the dispatcher's URL
  std::string body;
  std::string content_type = "application/json";
  std::string key = "af-dev-admin-key";
  std::chrono::seconds timeout = 15s;
};

http::ClientResponse call(const Call& c) {
  Headers headers;
  if (!c.key.empty())
    headers.emplace_back("Authorization", "Bearer " + c.key);
  return fetch(env()["AGENTFLEET_URL"] + c.target, c.method, c.body, headers, c.timeout,
               c.content_type);
}

http::ClientResponse get(const std::string& target) {
  return call({bhttp::verb::get, target});
}

// The one error shape, {"error":{"code","message","path"}}: the status, the code, a
// message, and the path — exactly `path`, or starting with it when `prefix`. The body is
// valid UTF-8 JSON whatever the request held.
void expect_error(const http::ClientResponse& response, int status, const std::string& code,
                  const std::string& path, bool prefix = false) {
  EXPECT_EQ(response.status, status) << response.body.substr(0, 400);
  EXPECT_EQ(response.header("Content-Type"), "application/json");
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseValidateEncodingFlag>(response.body.c_str(), response.body.size());
  ASSERT_FALSE(doc.HasParseError()) << "not UTF-8 JSON: " << response.body.substr(0, 400);
  const auto& error = at(doc, "error");
  ASSERT_TRUE(error.IsObject()) << response.body.substr(0, 400);
  EXPECT_EQ(str(error, "code"), code) << response.body.substr(0, 400);
  EXPECT_FALSE(str(error, "message").empty()) << response.body.substr(0, 400);
  ASSERT_TRUE(at(error, "path").IsString()) << response.body.substr(0, 400);
  if (prefix) {
    EXPECT_EQ(str(error, "path").rfind(path, 0), 0u)
        << "path should start with " << path << ": " << response.body.substr(0, 400);
  } else {
    EXPECT_EQ(str(error, "path"), path) << response.body.substr(0, 400);
  }
  // Nothing the request held writes a header of its own.
  EXPECT_TRUE(response.header("X-Injected").empty()) << "a header was injected";
}

// Every process of the fleet answers /healthz: the dispatcher (API and metrics ports) and
// each worker's metrics port.
void expect_fleet_alive() {
  std::vector<std::string> urls = {env()["AGENTFLEET_URL"],
                                   env()["AGENTFLEET_DISPATCHER_METRICS_URL"]};
  for (const auto& url : test::split_list(env()["AGENTFLEET_WORKER_METRICS_URLS"]))
    urls.push_back(url);
  EXPECT_GE(urls.size(), 4u) << "a dispatcher and two workers";
  for (const auto& url : urls) {
    auto health = fetch(url + "/healthz", bhttp::verb::get, {}, {});
    EXPECT_EQ(health.status, 200) << url << ": " << health.body;
    EXPECT_NE(health.body.find("\"ok\""), std::string::npos) << url << ": " << health.body;
  }
}

// ---------------------------------------------------------------------------------------
// Postgres

std::int64_t tasks_of(const std::string& user_id) {
  return pg_count("SELECT count(*) FROM tasks WHERE user_id = $1", user_id);
}

// A task row as the scheduler leaves it (dispatched, not claimed), for the dispatch-topic
// cases; only a dispatch message the test sends will run it.
std::string insert_dispatched(const std::string& user_id, const std::string& text) {
  return pg_row(R"SQL(INSERT INTO tasks (task_id, user_id, text, model, timeout_s,
                        schedule_timeout_s, max_steps, priority, request_canonical, status,
                        dispatched_at)
                      VALUES (gen_random_uuid(), $1, $2, 'sim-model', 30, 3600, 10,
                              'interactive', '{}', 'dispatched', now())
                      RETURNING task_id::text)SQL",
                user_id, text)[0]
      .as<std::string>();
}

std::string dispatch_message(const std::string& task_id, const std::string& user_id) {
  return R"({"version":1,"task_id":")" + task_id + R"(","user_id":")" + user_id +
         R"(","priority":"interactive","dispatched_at":"2026-01-01T00:00:00.000Z"})";
}

// Waits (bounded, polling) until the task's row is terminal; returns its status.
std::string wait_terminal_row(const std::string& task_id, std::chrono::seconds limit = 60s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const std::string status =
        pg_row("SELECT status FROM tasks WHERE task_id = $1::uuid", task_id)[0].as<std::string>();
    if (status == "succeeded" || status == "failed" || status == "timed_out" ||
        status == "cancelled" || std::chrono::steady_clock::now() > until) {
      return status;
    }
    std::this_thread::sleep_for(100ms);  // polling a bounded wait
  }
}

// Waits (bounded, polling) until the task's row is running, or `limit` has passed.
void wait_running(const std::string& task_id, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (
      pg_row("SELECT status FROM tasks WHERE task_id = $1::uuid", task_id)[0].as<std::string>() !=
          "running" &&
      std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(50ms);  // polling a bounded wait
  }
}

// ---------------------------------------------------------------------------------------
// Kafka

struct Produced {
  std::string value;
  Headers headers;
  bool null_value = false;  // a message without a value (a tombstone)
};

// Produces the messages, in order, on one key (so on one partition).
void produce(const std::string& topic, const std::string& key, const std::vector<Produced>& all) {
  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", env()["AGENTFLEET_KAFKA_BOOTSTRAP"].c_str(), errstr,
                    sizeof(errstr));
  rd_kafka_conf_set(conf, "message.max.bytes", "10000000", errstr, sizeof(errstr));
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
  ASSERT_NE(rk, nullptr) << errstr;
  for (const Produced& m : all) {
    rd_kafka_headers_t* headers = rd_kafka_headers_new(m.headers.size());
    for (const auto& [name, value] : m.headers) {
      rd_kafka_header_add(headers, name.data(), static_cast<ssize_t>(name.size()), value.data(),
                          static_cast<ssize_t>(value.size()));
    }
    const auto err = rd_kafka_producev(
        rk, RD_KAFKA_V_TOPIC(topic.c_str()),
        RD_KAFKA_V_KEY(const_cast<char*>(key.data()), key.size()),
        RD_KAFKA_V_VALUE(m.null_value ? nullptr : const_cast<char*>(m.value.data()),
                         m.null_value ? 0 : m.value.size()),
        RD_KAFKA_V_HEADERS(headers), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    EXPECT_EQ(err, RD_KAFKA_RESP_ERR_NO_ERROR) << rd_kafka_err2str(err);
    if (err)
      rd_kafka_headers_destroy(headers);  // owned by the message only when produced
  }
  EXPECT_EQ(rd_kafka_flush(rk, 15000), RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_destroy(rk);
}

// The dead letters of the cases, by their `catalogue-case` header.
std::map<std::string, Letter> letters_by_case(const std::vector<Letter>& letters,
                                              const std::string& key) {
  std::map<std::string, Letter> out;
  for (const Letter& l : letters) {
    auto it = l.headers.find("catalogue-case");
    if (l.key == key && it != l.headers.end())
      out[it->second] = l;
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Payloads

std::string nested(int depth, const std::string& inside = "1") {
  return std::string(static_cast<std::size_t>(depth), '[') + inside +
         std::string(static_cast<std::size_t>(depth), ']');
}

std::string chars(int n, const std::string& one = "字") {
  std::string out;
  for (int i = 0; i < n; ++i)
    out += one;
  return out;
}

// A submission for `u` with `extra` members appended (each starting with a comma).
std::string submission(const std::string& u, const std::string& text, const std::string& key,
                       const std::string& extra = {}) {
  return R"({"user_id":")" + u + R"(","text":")" + text + R"(","idempotency_key":")" + key + "\"" +
         extra + "}";
}

// ---------------------------------------------------------------------------------------
// The HTTP API

struct ApiCase {
  std::string name;
  bhttp::verb method;
  std::string target;
  std::string body;
  int status;
  std::string code;
  std::string path;
  bool prefix = false;  // the path starts with `path` (a deep one names every level)
  std::string content_type = "application/json";
};

TEST(BadInputCatalogue, EveryApiEntryPointAnswersEachWithA4xxNamingThePathAndStoresNothing) {
  const std::string u = user("api");          // the submissions' user: nothing may be stored
  const std::string lu = user("api-limits");  // the limits cases' user
  const std::string bp = user("api-batch");   // the batch ids' prefix
  const std::string task = [&] {
    // A real task, for the task routes' query strings.
    auto created = call(
        {bhttp::verb::post, "/v1/tasks", submission(user("api-ok"), "删除2月30日的日程", "ok-1")});
    EXPECT_EQ(created.status, 201) << created.body;
    return str(parse(created.body), "task_id");
  }();
  const std::int64_t batches_before = pg_count("SELECT count(*) FROM batches");
  const std::string sub = "/v1/tasks";
  const std::string good_line = submission(u, "删除2月30日的日程", "line-ok");
  auto batch = [&](int n, int bad, const std::string& bad_line) {
    std::string body;
    for (int i = 1; i <= n; ++i)
      body +=
          (i == bad ? bad_line : submission(u, "bench: steps=1", "l-" + std::to_string(i))) + "\n";
    return body;
  };
  const std::string crlf = "\\r\\nX-Injected: 1";  // as a JSON escape
  const std::string limits = "/v1/users/" + lu + "/limits";
  const std::string nd = "application/x-ndjson";
  const std::vector<ApiCase> cases = {
      // POST /v1/tasks: malformed JSON.
      {"truncated", bhttp::verb::post, sub, R"({"user_id":")" + u + R"(","text":)", 400,
       "invalid_request", "/"},
      {"trailing garbage", bhttp::verb::post, sub, submission(u, "hi", "k") + " x", 400,
       "invalid_request", "/"},
      {"NaN literal", bhttp::verb::post, sub, submission(u, "hi", "k", ",\"timeout_s\":NaN"), 400,
       "invalid_request", "/"},
      {"single quotes", bhttp::verb::post, sub, "{'user_id':'" + u + "','text':'hi'}", 400,
       "invalid_request", "/"},
      {"empty body", bhttp::verb::post, sub, "", 400, "invalid_request", "/"},
      {"null", bhttp::verb::post, sub, "null", 400, "invalid_request", "/"},
      {"an array", bhttp::verb::post, sub, "[" + submission(u, "hi", "k") + "]", 400,
       "invalid_request", "/"},
      // Invalid UTF-8, raw and escaped.
      {"bytes 0xff 0xfe", bhttp::verb::post, sub, submission(u, "\xff\xfe", "k"), 400,
       "invalid_request", "/"},
      {"an overlong encoding of '/'", bhttp::verb::post, sub, submission(u, "\xc0\xaf", "k"), 400,
       "invalid_request", "/"},
      {"an encoded surrogate", bhttp::verb::post, sub, submission(u, "\xed\xa0\x80", "k"), 400,
       "invalid_request", "/"},
      {"an escaped lone surrogate", bhttp::verb::post, sub, submission(u, "\\ud800", "k"), 400,
       "invalid_request", "/"},
      // RapidJSON 1.1 takes a lone low surrogate for a character (bytes that are not UTF-8,
      // which Postgres refuses): as invalid as the high one.
      {"an escaped lone low surrogate", bhttp::verb::post, sub, submission(u, "a\\udc00b", "k"),
       400, "invalid_request", "/"},
      {"a lone low surrogate in user_id", bhttp::verb::post, sub,
       submission(u + "\\udfff", "hi", "k"), 400, "invalid_request", "/"},
      {"a surrogate pair the wrong way round", bhttp::verb::post, sub,
       submission(u, "\\udc00\\ud800", "k"), 400, "invalid_request", "/"},
      {"a NUL character", bhttp::verb::post, sub, submission(u, "a\\u0000b", "k"), 400,
       "invalid_request", "/text"},
      {"invalid UTF-8 in a key", bhttp::verb::post, sub, submission(u, "hi", "k", ",\"\xff\":1"),
       400, "invalid_request", "/"},
      // Deep nesting: 10,000 arrays, where a string is expected and in an unknown field.
      {"10,000 nested arrays in metadata", bhttp::verb::post, sub,
       submission(u, "hi", "k", ",\"metadata\":{\"device_id\":" + nested(10000) + "}"), 400,
       "invalid_request", "/metadata/device_id", true},
      {"10,000 nested arrays in an unknown field", bhttp::verb::post, sub,
       submission(u, "hi", "k", ",\"deep\":" + nested(10000)), 400, "invalid_request", "/deep",
       true},
      {"10,000 nested objects", bhttp::verb::post, sub,
       submission(u, "hi", "k", ",\"deep\":" + chars(10000, "{\"a\":") + "1" + chars(10000, "}")),
       400, "invalid_request", "/deep", true},
      // Huge numbers, negative, -0, floats where integers are required.
      {"timeout_s 1e400", bhttp::verb::post, sub, submission(u, "hi", "k", ",\"timeout_s\":1e400"),
       400, "invalid_request", "/"},
      {"timeout_s 99999999999999999999", bhttp::verb::post, sub,
       submission(u, "hi", "k", ",\"timeout_s\":99999999999999999999"), 400, "invalid_request",
       "/timeout_s"},
      {"timeout_s -1", bhttp::verb::post, sub, submission(u, "hi", "k", ",\"timeout_s\":-1"), 400,
       "invalid_request", "/timeout_s"},
      {"timeout_s -0", bhttp::verb::post, sub, submission(u, "hi", "k", ",\"timeout_s\":-0"), 400,
       "invalid_request", "/timeout_s"},
      {"timeout_s 30.0", bhttp::verb::post, sub, submission(u, "hi", "k", ",\"timeout_s\":30.0"),
       400, "invalid_request", "/timeout_s"},
      {"max_steps 1e1", bhttp::verb::post, sub, submission(u, "hi", "k", ",\"max_steps\":1e1"), 400,
       "invalid_request", "/max_steps"},
      {"schedule_timeout_s 2^63", bhttp::verb::post, sub,
       submission(u, "hi", "k", ",\"schedule_timeout_s\":9223372036854775808"), 400,
       "invalid_request", "/schedule_timeout_s"},
      // Wrong types.
      {"text as a number", bhttp::verb::post, sub,
       R"({"user_id":")" + u + R"(","text":5,"idempotency_key":"k"})", 400, "invalid_request",
       "/text"},
      {"user_id as an object", bhttp::verb::post, sub,
       R"({"user_id":{"id":")" + u + R"("},"text":"hi"})", 400, "invalid_request", "/user_id"},
      {"tools as a string", bhttp::verb::post, sub,
       submission(u, "hi", "k", ",\"tools\":\"search_items\""), 400, "invalid_request", "/tools"},
      {"metadata as a string", bhttp::verb::post, sub,
       submission(u, "hi", "k", ",\"metadata\":\"x\""), 400, "invalid_request", "/metadata"},
      {"idempotency_key as true", bhttp::verb::post, sub,
       R"({"user_id":")" + u + R"(","text":"hi","idempotency_key":true})", 400, "invalid_request",
       "/idempotency_key"},
      // Missing and unknown fields.
      {"no text", bhttp::verb::post, sub, R"({"user_id":")" + u + R"("})", 400, "invalid_request",
       "/"},
      {"no user_id", bhttp::verb::post, sub, R"({"text":"hi"})", 400, "invalid_request", "/"},
      {"an unknown field", bhttp::verb::post, sub, submission(u, "hi", "k", ",\"colour\":\"red\""),
       400, "invalid_request", "/colour"},
      {"task_id given", bhttp::verb::post, sub,
       submission(u, "hi", "k", ",\"task_id\":\"00000000-0000-4000-8000-000000000000\""), 400,
       "invalid_request", "/task_id"},
      {"an unknown metadata field", bhttp::verb::post, sub,
       submission(u, "hi", "k", ",\"metadata\":{\"colour\":1}"), 400, "invalid_request",
       "/metadata/colour"},
      // Oversized text and fields.
      {"text of 5,001 characters", bhttp::verb::post, sub, submission(u, chars(5001), "k"), 400,
       "invalid_request", "/text"},
      {"user_id of 129 characters", bhttp::verb::post, sub,
       submission(std::string(129, 'u'), "hi", "k"), 400, "invalid_request", "/user_id"},
      {"idempotency_key of 257 characters", bhttp::verb::post, sub,
       submission(u, "hi", std::string(257, 'k')), 400, "invalid_request", "/idempotency_key"},
      {"a body over 8 MiB", bhttp::verb::post, sub,
       submission(u, std::string(9 * 1024 * 1024, 'a'), "k"), 413, "payload_too_large", "/"},
      // A submission fits in 64 KiB (5,000 characters take 30 KB even escaped as \uXXXX).
      {"a body over 64 KiB", bhttp::verb::post, sub,
       submission(u, "hi", "k", ",\"metadata\":{\"pad\":\"" + std::string(65 * 1024, 'p') + "\"}"),
       413, "payload_too_large", "/"},
      // Header injection: a line break in anything that could reach a header.
      {"CR LF in user_id", bhttp::verb::post, sub, submission(u + crlf, "hi", "k"), 400,
       "invalid_request", "/user_id"},
      {"CR LF in idempotency_key", bhttp::verb::post, sub, submission(u, "hi", "k" + crlf), 400,
       "invalid_request", "/idempotency_key"},
      {"CR LF in device_id", bhttp::verb::post, sub,
       submission(u, "hi", "k", ",\"metadata\":{\"device_id\":\"d" + crlf + "\"}"), 400,
       "invalid_request", "/metadata/device_id"},
      {"CR LF in batch_id", bhttp::verb::post, sub,
       submission(u, "hi", "k", ",\"batch_id\":\"b" + crlf + "\""), 400, "invalid_request",
       "/batch_id"},
      {"a path in time_zone", bhttp::verb::post, sub,
       submission(u, "hi", "k", ",\"metadata\":{\"time_zone\":\"../../etc/passwd\"}"), 400,
       "invalid_request", "/metadata/time_zone"},

      // POST /v1/batches: one bad line among good ones stores nothing, not even the good lines
      // (dispatcher/README.md, "Batches").
      {"a line of invalid UTF-8", bhttp::verb::post, "/v1/batches?batch_id=" + bp + "-1",
       batch(3, 2, submission(u, "\xff", "l-2")), 400, "invalid_request", "/line/2", false, nd},
      {"a line nested 10,000 deep", bhttp::verb::post, "/v1/batches?batch_id=" + bp + "-2",
       batch(3, 3, submission(u, "hi", "l-3", ",\"deep\":" + nested(10000))), 400,
       "invalid_request", "/line/3/deep", true, nd},
      {"a line of 5,001 characters", bhttp::verb::post, "/v1/batches?batch_id=" + bp + "-3",
       batch(3, 1, submission(u, chars(5001), "l-1")), 400, "invalid_request", "/line/1/text",
       false, nd},
      {"a line over 256 KiB", bhttp::verb::post, "/v1/batches?batch_id=" + bp + "-4",
       batch(3, 2, submission(u, std::string(300 * 1024, 'a'), "l-2")), 400, "invalid_request",
       "/line/2", false, nd},
      {"a line carrying a task_id", bhttp::verb::post, "/v1/batches?batch_id=" + bp + "-5",
       batch(3, 2,
             submission(u, "hi", "l-2", ",\"task_id\":\"00000000-0000-4000-8000-000000000000\"")),
       400, "invalid_request", "/line/2/task_id", false, nd},
      {"a line with a huge number", bhttp::verb::post, "/v1/batches?batch_id=" + bp + "-6",
       batch(2, 2, submission(u, "hi", "l-2", ",\"max_steps\":1e400")), 400, "invalid_request",
       "/line/2", false, nd},
      {"CR LF in the batch id", bhttp::verb::post,
       "/v1/batches?batch_id=" + bp + "%0D%0AX-Injected:%201", good_line + "\n", 400,
       "invalid_request", "/query/batch_id", false, nd},
      {"NUL in the batch id", bhttp::verb::post, "/v1/batches?batch_id=" + bp + "%00x",
       good_line + "\n", 400, "invalid_request", "/query/batch_id", false, nd},
      {"a batch id over 200 bytes", bhttp::verb::post,
       "/v1/batches?batch_id=" + std::string(201, 'b'), good_line + "\n", 400, "invalid_request",
       "/query/batch_id", false, nd},
      {"a user_id of invalid UTF-8", bhttp::verb::post, "/v1/batches?user_id=%FF", good_line + "\n",
       400, "invalid_request", "/query/user_id", false, nd},
      {"an unknown priority", bhttp::verb::post, "/v1/batches?priority=%27%20OR%201%3D1",
       good_line + "\n", 400, "invalid_request", "/query/priority", false, nd},

      // PUT /v1/users/{id}/limits.
      {"limits: malformed", bhttp::verb::put, limits, "{\"max_concurrency\":", 400,
       "invalid_request", "/"},
      {"limits: an array", bhttp::verb::put, limits, "[1]", 400, "invalid_request", "/"},
      {"limits: a lone low surrogate", bhttp::verb::put, limits, R"({"tier":"\udc00"})", 400,
       "invalid_request", "/"},
      {"limits: invalid UTF-8", bhttp::verb::put, limits, "{\"tier\":\"\xff\"}", 400,
       "invalid_request", "/"},
      {"limits: nested 5,000 deep", bhttp::verb::put, limits, "{\"tier\":" + nested(5000) + "}",
       400, "invalid_request", "/"},
      {"limits: over 16 KiB", bhttp::verb::put, limits,
       R"({"tier":")" + std::string(17 * 1024, 't') + "\"}", 413, "payload_too_large", "/"},
      {"limits: a string number", bhttp::verb::put, limits, R"({"max_concurrency":"5"})", 400,
       "invalid_request", "/max_concurrency"},
      {"limits: 1e400", bhttp::verb::put, limits, R"({"max_concurrency":1e400})", 400,
       "invalid_request", "/"},
      {"limits: past 32 bits", bhttp::verb::put, limits, R"({"max_concurrency":2147483648})", 400,
       "invalid_request", "/max_concurrency"},
      {"limits: 99999999999999999999", bhttp::verb::put, limits,
       R"({"tokens_per_minute":99999999999999999999})", 400, "invalid_request",
       "/tokens_per_minute"},
      {"limits: negative", bhttp::verb::put, limits, R"({"max_queued":-1})", 400, "invalid_request",
       "/max_queued"},
      {"limits: -0", bhttp::verb::put, limits, R"({"max_concurrency":-0})", 400, "invalid_request",
       "/max_concurrency"},
      {"limits: a float", bhttp::verb::put, limits, R"({"requests_per_minute":1.5})", 400,
       "invalid_request", "/requests_per_minute"},
      {"limits: a budget of 1e400", bhttp::verb::put, limits, R"({"monthly_budget":"1e400"})", 400,
       "invalid_request", "/monthly_budget"},
      {"limits: a budget past int64 micros", bhttp::verb::put, limits,
       R"({"monthly_budget":"99999999999999999999"})", 400, "invalid_request", "/monthly_budget"},
      {"limits: an unknown tier", bhttp::verb::put, limits, R"({"tier":"'; DROP TABLE tasks;--"})",
       400, "invalid_request", "/tier"},
      {"limits: an unknown permission", bhttp::verb::put, limits, R"({"tool_permission":"root"})",
       400, "invalid_request", "/tool_permission"},
      {"limits: an unknown field", bhttp::verb::put, limits, R"({"colour":1})", 400,
       "invalid_request", "/colour"},

      // Query strings.
      {"list: user_id of invalid UTF-8", bhttp::verb::get, "/v1/tasks?user_id=%FF", "", 400,
       "invalid_request", "/query/user_id"},
      {"list: user_id with NUL", bhttp::verb::get, "/v1/tasks?user_id=a%00b", "", 400,
       "invalid_request", "/query/user_id"},
      {"list: user_id with CR LF", bhttp::verb::get, "/v1/tasks?user_id=a%0D%0AX-Injected:%201", "",
       400, "invalid_request", "/query/user_id"},
      {"list: user_id of 129 characters", bhttp::verb::get,
       "/v1/tasks?user_id=" + std::string(129, 'u'), "", 400, "invalid_request", "/query/user_id"},
      {"list: limit 1e3", bhttp::verb::get, "/v1/tasks?user_id=" + u + "&limit=1e3", "", 400,
       "invalid_request", "/query/limit"},
      {"list: limit 99999999999999999999", bhttp::verb::get,
       "/v1/tasks?user_id=" + u + "&limit=99999999999999999999", "", 400, "invalid_request",
       "/query/limit"},
      {"list: limit -0", bhttp::verb::get, "/v1/tasks?user_id=" + u + "&limit=-0", "", 400,
       "invalid_request", "/query/limit"},
      {"list: SQL in status", bhttp::verb::get,
       "/v1/tasks?user_id=" + u + "&status=queued%27%20OR%20%271%27%3D%271", "", 400,
       "invalid_request", "/query/status"},
      {"list: SQL in before", bhttp::verb::get,
       "/v1/tasks?user_id=" + u + "&before=%27%20OR%201%3D1--", "", 400, "invalid_request",
       "/query/before"},
      {"wait: 1e400", bhttp::verb::get, "/v1/tasks/" + task + "?wait=1e400", "", 400,
       "invalid_request", "/query/wait"},
      {"wait: 99999999999999999999", bhttp::verb::get,
       "/v1/tasks/" + task + "?wait=99999999999999999999", "", 400, "invalid_request",
       "/query/wait"},
      {"wait: a float", bhttp::verb::get, "/v1/tasks/" + task + "?wait=0.5", "", 400,
       "invalid_request", "/query/wait"},
      {"usage: from of invalid UTF-8", bhttp::verb::get, "/v1/users/" + u + "/usage?from=%FF", "",
       400, "invalid_request", "/query/from"},
      {"usage: SQL in from", bhttp::verb::get,
       "/v1/users/" + u + "/usage?from=2026-01-01%27%3B%20DROP%20TABLE%20tasks%3B--", "", 400,
       "invalid_request", "/query/from"},
      {"usage: a five-digit year", bhttp::verb::get, "/v1/users/" + u + "/usage?to=99999-01-01", "",
       400, "invalid_request", "/query/to"},
      {"usage: hour 25", bhttp::verb::get, "/v1/users/" + u + "/usage?from=2026-01-01T25:00:00Z",
       "", 400, "invalid_request", "/query"},

      // Path segments (percent-decoded).
      {"usage: a user id of invalid UTF-8", bhttp::verb::get, "/v1/users/%FF/usage", "", 400,
       "invalid_request", "/path/user_id"},
      {"usage: a user id with NUL", bhttp::verb::get, "/v1/users/a%00b/usage", "", 400,
       "invalid_request", "/path/user_id"},
      {"limits: a user id with CR LF", bhttp::verb::put, "/v1/users/a%0D%0AX-Injected:%201/limits",
       "{}", 400, "invalid_request", "/path/user_id"},
      {"limits: a user id of 129 characters", bhttp::verb::get,
       "/v1/users/" + std::string(129, 'u') + "/limits", "", 400, "invalid_request",
       "/path/user_id"},
      {"task: SQL in the id", bhttp::verb::get, "/v1/tasks/%27%3B%20DROP%20TABLE%20tasks%3B--", "",
       404, "not_found", "/path/task_id"},
      {"task: invalid UTF-8 in the id", bhttp::verb::get, "/v1/tasks/%FF%FE", "", 404, "not_found",
       "/path/task_id"},
      {"cancel: a huge id", bhttp::verb::post, "/v1/tasks/" + std::string(5000, '9') + "/cancel",
       "", 404, "not_found", "/path/task_id"},
      {"events: invalid UTF-8 in the id", bhttp::verb::get, "/v1/tasks/%FF/events", "", 404,
       "not_found", "/path/task_id"},
      {"batch: invalid UTF-8 in the id", bhttp::verb::get, "/v1/batches/%FF", "", 404, "not_found",
       "/path/batch_id"},
      {"batch results: CR LF in the id", bhttp::verb::get, "/v1/batches/a%0D%0Ab/results", "", 404,
       "not_found", "/path/batch_id"},
      {"batch cancel: NUL in the id", bhttp::verb::post, "/v1/batches/a%00b/cancel", "", 404,
       "not_found", "/path/batch_id"},
      {"an unknown route", bhttp::verb::get, "/v1/tasks/" + task + "/%FF", "", 404, "not_found",
       "/path"},
  };
  for (const ApiCase& c : cases) {
    SCOPED_TRACE(c.name);
    Call request{c.method, c.target, c.body, c.content_type};
    if (c.target.rfind("/v1/tasks/", 0) == 0 && c.target.find("/events") != std::string::npos) {
      // Event streams are asked for as such.
      Headers headers = {{"Authorization", "Bearer af-dev-admin-key"},
                         {"Accept", "text/event-stream"}};
      expect_error(fetch(env()["AGENTFLEET_URL"] + c.target, c.method, c.body, headers), c.status,
                   c.code, c.path, c.prefix);
      continue;
    }
    expect_error(call(request), c.status, c.code, c.path, c.prefix);
  }

  // Nothing of it stored: no task of the user, no batch, no limits row (neither for the
  // limits user nor for a user id with a line break in it).
  EXPECT_EQ(tasks_of(u), 0) << "a refused submission or batch line was stored";
  EXPECT_EQ(pg_count("SELECT count(*) FROM batches WHERE batch_id LIKE $1", bp + "%"), 0);
  EXPECT_EQ(pg_count("SELECT count(*) FROM batches"), batches_before)
      << "another test may add batches meanwhile; none of ours";
  EXPECT_EQ(pg_count("SELECT count(*) FROM user_limits WHERE user_id = $1", lu), 0);
  EXPECT_EQ(pg_count("SELECT count(*) FROM user_limits WHERE user_id LIKE 'a%X-Injected%'"), 0);
  expect_fleet_alive();
}

TEST(BadInputCatalogue, InjectionStringsAreStoredVerbatimOrRefusedAndNeverExecuted) {
  // SQL in every id a client chooses: accepted by the schema (no control characters), so it
  // must round-trip exactly through every route that names it.
  const std::string u = user("sql") + "'; DROP TABLE tasks;--";
  const std::string key = "k'); DELETE FROM tasks WHERE ('1'='1";
  const std::string text = "'; TRUNCATE tasks, batches, usage_ledger; --";
  const std::int64_t all_tasks = pg_count("SELECT count(*) FROM tasks");
  auto created = call({bhttp::verb::post, "/v1/tasks", submission(u, text, key)});
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string id = str(parse(created.body), "task_id");
  auto read = parse(get("/v1/tasks/" + id).body);
  EXPECT_EQ(str(read, "user_id"), u);
  EXPECT_EQ(str(read, "idempotency_key"), key);
  EXPECT_EQ(str(read, "text"), text);
  auto row =
      pg_row("SELECT user_id, idempotency_key, text FROM tasks WHERE task_id = $1::uuid", id);
  EXPECT_EQ(row[0].as<std::string>(), u);
  EXPECT_EQ(row[1].as<std::string>(), key);
  EXPECT_EQ(row[2].as<std::string>(), text);
  EXPECT_GE(pg_count("SELECT count(*) FROM tasks"), all_tasks + 1) << "the table is all there";

  // The same key again: the same task, not a second one; another body: 409.
  auto again = call({bhttp::verb::post, "/v1/tasks", submission(u, text, key)});
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(str(parse(again.body), "task_id"), id);
  expect_error(call({bhttp::verb::post, "/v1/tasks", submission(u, text + "!", key)}), 409,
               "idempotency_conflict", "/idempotency_key");
  EXPECT_EQ(tasks_of(u), 1);

  // The user in a query string and in a path, percent-encoded: the same user.
  auto list = call({bhttp::verb::get, "/v1/tasks?user_id=" + url_encode(u)});
  ASSERT_EQ(list.status, 200) << list.body;
  auto tasks = parse(list.body);
  ASSERT_TRUE(at(tasks, "tasks").IsArray());
  ASSERT_EQ(at(tasks, "tasks").Size(), 1u) << list.body;
  EXPECT_EQ(str(at(tasks, "tasks")[0], "task_id"), id);
  auto usage = call({bhttp::verb::get, "/v1/users/" + url_encode(u) + "/usage"});
  ASSERT_EQ(usage.status, 200) << usage.body;
  EXPECT_EQ(str(parse(usage.body), "user_id"), u) << "the path names the user, decoded";
  auto limits = call(
      {bhttp::verb::put, "/v1/users/" + url_encode(u) + "/limits", R"({"max_concurrency":3})"});
  ASSERT_EQ(limits.status, 200) << limits.body;
  EXPECT_EQ(str(parse(limits.body), "user_id"), u);
  EXPECT_EQ(pg_count("SELECT max_concurrency FROM user_limits WHERE user_id = $1", u), 3);

  // LIKE wildcards match nothing but themselves.
  const std::string wild = user("wild");
  ASSERT_EQ(
      call({bhttp::verb::post, "/v1/tasks", submission(wild + "-a", "删除2月30日的日程", "w")})
          .status,
      201);
  auto none = parse(call({bhttp::verb::get, "/v1/tasks?user_id=" + url_encode(wild + "-%")}).body);
  ASSERT_TRUE(at(none, "tasks").IsArray());
  EXPECT_EQ(at(none, "tasks").Size(), 0u) << "'%' is not a pattern";
  auto none2 = parse(call({bhttp::verb::get, "/v1/tasks?user_id=" + url_encode(wild + "-_")}).body);
  EXPECT_EQ(at(none2, "tasks").Size(), 0u) << "'_' is not a pattern";

  // A batch id with SQL in it: stored as it is, found again by the path that names it.
  const std::string batch_id = user("sql-batch") + "'; DROP TABLE batches;--";
  auto uploaded =
      call({bhttp::verb::post, "/v1/batches?batch_id=" + url_encode(batch_id),
            submission(user("sql-b"), "删除2月30日的日程", "b-1") + "\n", "application/x-ndjson"});
  ASSERT_EQ(uploaded.status, 201) << uploaded.body;
  EXPECT_EQ(str(parse(uploaded.body), "batch_id"), batch_id);
  // Its Location is percent-encoded, and leads to it.
  const std::string location = uploaded.header("Location");
  EXPECT_EQ(location.find_first_of("' ;"), std::string::npos) << location;
  auto led_to = call({bhttp::verb::get, location});
  ASSERT_EQ(led_to.status, 200) << location << ": " << led_to.body;
  EXPECT_EQ(str(parse(led_to.body), "batch_id"), batch_id);
  auto found = call({bhttp::verb::get, "/v1/batches/" + url_encode(batch_id)});
  ASSERT_EQ(found.status, 200) << found.body;
  EXPECT_EQ(str(parse(found.body), "batch_id"), batch_id);
  EXPECT_EQ(pg_count("SELECT count(*) FROM batches WHERE batch_id = $1", batch_id), 1);

  // A header break in the batch id writes no header: refused before anything is stored.
  auto injected = call(
      {bhttp::verb::post, "/v1/batches?batch_id=" + url_encode(user("hdr") + "\r\nX-Injected: 1"),
       submission(user("hdr-b"), "删除2月30日的日程", "h-1") + "\n", "application/x-ndjson"});
  expect_error(injected, 400, "invalid_request", "/query/batch_id");
  EXPECT_EQ(tasks_of(user("hdr-b")), 0);
  expect_fleet_alive();
}

// ---------------------------------------------------------------------------------------
// The submit topic (consumed by the dispatcher)

struct TopicCase {
  std::string name;
  Produced message;
  std::string reason;  // what the dead letter's dlq-reason must contain
};

TEST(BadInputCatalogue, TheSubmitTopicDeadLettersEachWithItsReasonAndTheNextSubmissionRuns) {
  const std::string key = user("submit-key");
  const std::string u = user("submit-bad");
  const std::string crlf = "\\r\\nX-Injected: 1";
  const std::vector<TopicCase> cases = {
      {"not JSON", {"this is not json {"}, "invalid submission at '': invalid JSON"},
      {"truncated", {R"({"user_id":")" + u + R"(","text":)"}, "invalid JSON"},
      {"trailing garbage", {submission(u, "hi", "t-1") + "}"}, "invalid JSON"},
      {"NaN", {submission(u, "hi", "t-2", ",\"timeout_s\":NaN")}, "invalid JSON"},
      {"single quotes", {"{'user_id':'" + u + "','text':'hi'}"}, "invalid JSON"},
      {"an empty value", {""}, "invalid JSON"},
      {"no value at all", {"", {}, true}, "invalid JSON"},
      {"null", {"null"}, "invalid submission at ''"},
      {"bytes 0xff", {submission(u, "\xff", "t-3")}, "invalid JSON"},
      {"an overlong encoding", {submission(u, "\xc0\xaf", "t-4")}, "invalid JSON"},
      {"an escaped lone surrogate", {submission(u, "\\udc00", "t-5")}, "invalid JSON"},
      {"a NUL character", {submission(u, "a\\u0000", "t-6")}, "'/text'"},
      {"10,000 nested arrays in metadata",
       {submission(u, "hi", "t-7", ",\"metadata\":{\"device_id\":" + nested(10000) + "}")},
       "'/metadata/device_id/0/0"},
      {"timeout_s 1e400", {submission(u, "hi", "t-8", ",\"timeout_s\":1e400")}, "invalid JSON"},
      {"timeout_s 99999999999999999999",
       {submission(u, "hi", "t-9", ",\"timeout_s\":99999999999999999999")},
       "'/timeout_s'"},
      {"timeout_s -0", {submission(u, "hi", "t-10", ",\"timeout_s\":-0")}, "'/timeout_s'"},
      {"max_steps 2.5", {submission(u, "hi", "t-11", ",\"max_steps\":2.5")}, "'/max_steps'"},
      {"text as a number", {R"({"user_id":")" + u + R"(","text":7})"}, "'/text'"},
      {"user_id as an object", {R"({"user_id":{"u":1},"text":"hi"})"}, "'/user_id'"},
      {"no text", {R"({"user_id":")" + u + R"("})"}, "text"},
      {"an unknown field", {submission(u, "hi", "t-12", ",\"colour\":1")}, "'/colour'"},
      {"an unknown metadata field",
       {submission(u, "hi", "t-13", ",\"metadata\":{\"x\":1}")},
       "'/metadata/x'"},
      {"text of 5,001 characters", {submission(u, chars(5001), "t-14")}, "'/text'"},
      {"CR LF in user_id", {submission(u + crlf, "hi", "t-15")}, "'/user_id'"},
      {"CR LF in idempotency_key", {submission(u, "hi", "t-16" + crlf)}, "'/idempotency_key'"},
      {"an unknown model",
       {submission(u, "hi", "t-17", ",\"model\":\"'; DROP TABLE tasks;--\"")},
       "'/model': unknown model"},
      {"an unknown tool",
       {submission(u, "hi", "t-18", ",\"tools\":[\"rm -rf\"]")},
       "'/tools/0': unknown tool"},
  };
  // A valid submission, its repeat (an upstream retry: one task), the same key with another
  // body (a conflict: a dead letter), a user id with SQL in it (stored verbatim), and after
  // all of them, on the same key, the submission that shows the partition moved on.
  const std::string dup_user = user("submit-dup");
  const std::string sql_user = user("submit-sql") + "'); DROP TABLE tasks;--";
  const std::string next_user = user("submit-next");
  std::vector<Produced> messages;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    Produced m = cases[i].message;
    m.headers.emplace_back("catalogue-case", std::to_string(i));
    messages.push_back(m);
  }
  const std::string dup = submission(dup_user, "删除2月30日的日程", "dup-1");
  messages.push_back({dup, {{"catalogue-case", "dup-a"}}});
  messages.push_back({dup, {{"catalogue-case", "dup-b"}}});
  messages.push_back(
      {submission(dup_user, "今天下午去买东西", "dup-1"), {{"catalogue-case", "conflict"}}});
  messages.push_back({submission(sql_user, "删除2月30日的日程", "sql-1"), {}});
  messages.push_back({submission(next_user, "删除2月30日的日程", "next-1"), {}});

  const double rejected_before =
      metric_sum({env()["AGENTFLEET_DISPATCHER_METRICS_URL"]},
                 R"(agentfleet_tasks_submitted_total{outcome="rejected",source="topic"})");
  TopicReader dlq("agent.tasks.dlq");
  produce("agent.tasks.submit", key, messages);

  // The partition moved on: the last submission became a task, and ran.
  const auto until = std::chrono::steady_clock::now() + 45s;
  while (tasks_of(next_user) == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(100ms);  // the dispatcher consumes the topic
  ASSERT_EQ(tasks_of(next_user), 1) << "the submission after the bad ones was not stored";
  const std::string next_id =
      pg_row("SELECT task_id::text FROM tasks WHERE user_id = $1", next_user)[0].as<std::string>();
  EXPECT_EQ(wait_terminal_row(next_id), "succeeded");

  // Each bad one is a dead letter naming its problem, with the message as it was sent.
  const std::size_t expected = cases.size() + 1;  // and the conflict
  auto letters = letters_by_case(
      dlq.read_until([&](const auto& all) { return letters_by_case(all, key).size() >= expected; }),
      key);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    auto it = letters.find(std::to_string(i));
    ASSERT_NE(it, letters.end()) << "no dead letter";
    const Letter& letter = it->second;
    EXPECT_NE(letter.headers.at("dlq-reason").find(cases[i].reason), std::string::npos)
        << letter.headers.at("dlq-reason");
    EXPECT_EQ(letter.headers.at("dlq-source-topic"), "agent.tasks.submit");
    EXPECT_FALSE(letter.headers.at("dlq-source-offset").empty());
    EXPECT_EQ(letter.value, cases[i].message.value) << "the message as it was sent";
  }
  ASSERT_TRUE(letters.count("conflict"));
  EXPECT_NE(letters["conflict"].headers.at("dlq-reason").find("'dup-1' was used with a different"),
            std::string::npos)
      << letters["conflict"].headers.at("dlq-reason");
  EXPECT_FALSE(letters.count("dup-a") || letters.count("dup-b")) << "a repeat is no dead letter";

  // Nothing of the bad ones stored; the repeat is one task; the SQL user round-trips.
  EXPECT_EQ(tasks_of(u), 0);
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id LIKE $1", user("submit-bad") + "%"),
            0);
  EXPECT_EQ(tasks_of(dup_user), 1) << "the repeated submission is one task";
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE user_id = $1 AND idempotency_key = 'sql-1'",
                     sql_user),
            1);
  EXPECT_GE(metric_sum({env()["AGENTFLEET_DISPATCHER_METRICS_URL"]},
                       R"(agentfleet_tasks_submitted_total{outcome="rejected",source="topic"})"),
            rejected_before + static_cast<double>(expected));
  expect_fleet_alive();
}

// ---------------------------------------------------------------------------------------
// The dispatch topic (consumed by the workers)

TEST(BadInputCatalogue, TheDispatchTopicDeadLettersEachWithItsReasonAndTheNextTaskRuns) {
  const std::string key = user("dispatch-key");
  const std::string u = user("dispatch");
  // A task id no row has: this run's tag in the last group.
  const std::string unknown =
      "00000000-0000-4000-8000-" + std::string(12 - run_tag().size(), '0') + run_tag();
  const std::vector<TopicCase> cases = {
      {"not JSON", {"{not json"}, "invalid dispatch message at '': invalid JSON"},
      {"an empty value", {""}, "invalid dispatch message at '': invalid JSON"},
      {"no value at all", {"", {}, true}, "invalid dispatch message at '': invalid JSON"},
      {"trailing garbage", {dispatch_message(unknown, u) + "]"}, "invalid JSON"},
      {"bytes 0xff", {"{\"version\":1,\"task_id\":\"\xff\"}"}, "invalid JSON"},
      {"an escaped lone surrogate", {R"({"version":1,"user_id":"\udfff"})"}, "invalid JSON"},
      {"10,000 nested arrays", {"{\"version\":" + nested(10000) + "}"}, "'/version"},
      {"an array", {"[" + dispatch_message(unknown, u) + "]"}, "at ''"},
      {"version 1e400", {R"({"version":1e400})"}, "invalid JSON"},
      {"version 2",
       {R"({"version":2,"task_id":")" + unknown + R"(","user_id":")" + u +
        R"(","priority":"interactive","dispatched_at":"x"})"},
       "'/version'"},
      {"no task_id",
       {R"({"version":1,"user_id":")" + u + R"(","priority":"interactive","dispatched_at":"x"})"},
       "task_id"},
      {"task_id as a number",
       {R"({"version":1,"task_id":42,"user_id":")" + u +
        R"(","priority":"interactive","dispatched_at":"x"})"},
       "'/task_id'"},
      {"SQL as the task_id", {dispatch_message("'; DROP TABLE tasks;--", u)}, "'/task_id'"},
      {"user_id as an object",
       {R"({"version":1,"task_id":")" + unknown +
        R"(","user_id":{"id":"x"},"priority":"interactive","dispatched_at":"x"})"},
       "'/user_id'"},
      {"an unknown field",
       {R"({"version":1,"task_id":")" + unknown + R"(","user_id":")" + u +
        R"(","priority":"interactive","dispatched_at":"x","attempt":7})"},
       "'/attempt'"},
      {"an unknown task", {dispatch_message(unknown, u)}, "unknown task " + unknown},
  };
  // A dispatch for a task that ended already (another attempt's message, delivered again):
  // skipped, not run again, not a dead letter.
  auto created =
      call({bhttp::verb::post, "/v1/tasks", submission(u, "删除2月30日的日程", "ended")});
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string ended = str(parse(created.body), "task_id");
  ASSERT_EQ(wait_terminal_row(ended), "succeeded");
  auto ended_row = [&] {
    auto r = pg_row(
        "SELECT status, attempt, finished_at::text, steps FROM tasks WHERE task_id = $1::uuid",
        ended);
    return r[0].as<std::string>() + "/" + r[1].as<std::string>() + "/" + r[2].as<std::string>() +
           "/" + r[3].as<std::string>();
  };
  const std::string ended_before = ended_row();
  // And one for a task running under another claim (its lease held): skipped too, the run
  // goes on undisturbed as attempt 1. Nine answers of 600 ms: it still runs when the
  // messages below go out.
  auto slow = call({bhttp::verb::post, "/v1/tasks", submission(u, "slow: steps=8", "running")});
  ASSERT_EQ(slow.status, 201) << slow.body;
  const std::string running = str(parse(slow.body), "task_id");
  wait_running(running, 30s);
  ASSERT_EQ(
      pg_row("SELECT status FROM tasks WHERE task_id = $1::uuid", running)[0].as<std::string>(),
      "running")
      << "the task to dispatch again did not start within 30 s";

  // After the bad ones, on the same key (so the same partition and worker): a task that only
  // this message dispatches.
  const std::string next = insert_dispatched(u, "删除2月30日的日程");
  std::vector<Produced> messages;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    Produced m = cases[i].message;
    m.headers.emplace_back("catalogue-case", std::to_string(i));
    messages.push_back(m);
  }
  messages.push_back({dispatch_message(ended, u), {{"catalogue-case", "ended"}}});
  messages.push_back({dispatch_message(running, u), {{"catalogue-case", "running"}}});
  messages.push_back({dispatch_message(next, u), {{"catalogue-case", "next"}}});

  const double skipped_before =
      metric_sum(worker_metrics_urls(), R"(agentfleet_task_claims_total{outcome="skipped"})");
  const double letters_before = metric_sum(worker_metrics_urls(), "agentfleet_dead_letters_total{");
  TopicReader dlq("agent.tasks.dlq");
  produce("agent.tasks.dispatch", key, messages);

  EXPECT_EQ(wait_terminal_row(next), "succeeded") << "the partition did not move on";
  auto letters = letters_by_case(dlq.read_until([&](const auto& all) {
    return letters_by_case(all, key).size() >= cases.size();
  }),
                                 key);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    auto it = letters.find(std::to_string(i));
    ASSERT_NE(it, letters.end()) << "no dead letter";
    EXPECT_NE(it->second.headers.at("dlq-reason").find(cases[i].reason), std::string::npos)
        << it->second.headers.at("dlq-reason");
    EXPECT_EQ(it->second.headers.at("dlq-source-topic"), "agent.tasks.dispatch");
    EXPECT_EQ(it->second.value, cases[i].message.value);
  }
  EXPECT_FALSE(letters.count("ended")) << "a stale dispatch is skipped, not a dead letter";
  EXPECT_FALSE(letters.count("running")) << "a repeated dispatch is skipped, not a dead letter";
  EXPECT_EQ(wait_terminal_row(running), "succeeded");
  auto ran = pg_row("SELECT attempt, steps FROM tasks WHERE task_id = $1::uuid", running);
  EXPECT_EQ(ran[0].as<int>(), 1) << "the repeated dispatch claimed the running task again";
  EXPECT_EQ(ran[1].as<int>(), 9) << "eight steps of a call, then the answer";
  EXPECT_FALSE(letters.count("next"));
  EXPECT_EQ(ended_row(), ended_before) << "the ended task was not claimed or changed again";
  EXPECT_GE(metric_sum(worker_metrics_urls(), R"(agentfleet_task_claims_total{outcome="skipped"})"),
            skipped_before + 2);
  EXPECT_GE(metric_sum(worker_metrics_urls(), "agentfleet_dead_letters_total{"),
            letters_before + static_cast<double>(cases.size()));
  EXPECT_EQ(pg_count("SELECT count(*) FROM tasks WHERE task_id = $1::uuid", unknown), 0)
      << "an unknown task is not made up";
  expect_fleet_alive();
}

// ---------------------------------------------------------------------------------------
// The results and events topics (read by every dispatcher's feed)

// An event stream read to its end (bounded), as (event, data) pairs.
std::vector<std::pair<std::string, std::string>> read_stream(const std::string& task_id) {
  Headers headers = {{"Authorization", "Bearer af-dev-admin-key"}, {"Accept", "text/event-stream"}};
  auto response = fetch(env()["AGENTFLEET_URL"] + "/v1/tasks/" + task_id + "/events",
                        bhttp::verb::get, {}, headers, 60s);
  EXPECT_EQ(response.status, 200) << response.body;
  std::vector<std::pair<std::string, std::string>> events;
  std::istringstream lines(response.body);
  std::string event;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("event: ", 0) == 0)
      event = line.substr(7);
    else if (line.rfind("data: ", 0) == 0)
      events.emplace_back(event, line.substr(6));
  }
  return events;
}

TEST(BadInputCatalogue, TheFeedIgnoresBadResultsAndEventsAndAnswersWaitersFromTheRow) {
  const std::string u = user("feed");
  // A task that runs for several seconds (ten model answers of 600 ms, max_steps' worth),
  // with a long poll and an event stream waiting on it.
  auto created = call({bhttp::verb::post, "/v1/tasks", submission(u, "slow: steps=9", "feed-1")});
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string id = str(parse(created.body), "task_id");
  const std::vector<std::string> dispatcher_metrics = {env()["AGENTFLEET_DISPATCHER_METRICS_URL"]};
  const auto open_waits = [&](std::string_view kind) {
    return metric_sum(dispatcher_metrics,
                      "agentfleet_api_open_waits{kind=\"" + std::string(kind) + "\"}");
  };
  const double polls_before = open_waits("long_poll");
  const double streams_before = open_waits("event_stream");
  auto poll = std::async(std::launch::async, [&] {
    return call({bhttp::verb::get,
                 "/v1/tasks/" + id + "?wait=30",
                 {},
                 "application/json",
                 "af-dev-admin-key",
                 40s});
  });
  auto stream = std::async(std::launch::async, [&] { return read_stream(id); });
  wait_running(id, 30s);
  const auto until = std::chrono::steady_clock::now() + 30s;
  // The long poll and the stream are subscribed to the feed (each gauge counts a wait from
  // its subscription on) before the garbage goes out.
  while (
      (open_waits("long_poll") <= polls_before || open_waits("event_stream") <= streams_before) &&
      std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(50ms);  // polling a bounded wait
  }
  ASSERT_GT(open_waits("long_poll"), polls_before) << "the long poll never opened";
  ASSERT_GT(open_waits("event_stream"), streams_before) << "the event stream never opened";

  // Garbage on both topics, a result and progress events that say the task ended while it
  // runs, and token counts that overflow.
  const std::string unknown = "00000000-0000-4000-8000-00000000feed";
  const std::string forged_result =
      R"({"version":1,"task_id":")" + id + R"(","user_id":")" + u +
      R"(","status":"succeeded","result":{"type":"action_completed","message":"forged","options":[]},"attempt":1,"steps":1,"tool_calls":0,"usage":{"input_tokens":1,"cached_input_tokens":0,"output_tokens":1},"cost":"0","currency":"CNY","finished_at":"2026-01-01T00:00:00.000Z"})";
  const std::string overflow =
      R"({"version":1,"task_id":")" + unknown + R"(","user_id":")" + u +
      R"(","status":"succeeded","attempt":1,"usage":{"input_tokens":9223372036854775807,"output_tokens":9223372036854775807}})";
  const std::string negative =
      R"({"version":1,"task_id":")" + unknown + R"(","user_id":")" + u +
      R"(","status":"failed","attempt":1,"usage":{"input_tokens":-9223372036854775808,"output_tokens":-1}})";
  const std::vector<Produced> garbage = {
      {"not json"},
      {""},
      {"", {}, true},
      {"\xff\xfe"},
      {"[1,2,3]"},
      {"null"},
      {"{\"task_id\":" + nested(10000) + "}"},
      {R"({"task_id":42})"},
      {R"({"task_id":")" + id + R"(","event":7})"},
      {R"({"task_id":")" + id + R"(","user_id":{"x":1},"usage":"lots"})"},
  };
  std::vector<Produced> results = garbage;
  results.push_back({forged_result});
  results.push_back({overflow});
  results.push_back({negative});
  std::vector<Produced> events = garbage;
  events.push_back({R"({"version":1,"task_id":")" + id + R"(","user_id":")" + u +
                    R"(","seq":999,"attempt":1,"event":"error","step":0,"data":{"forged":true}})"});
  events.push_back({R"({"version":1,"task_id":")" + id + R"(","user_id":")" + u +
                    R"(","seq":1000,"attempt":1,"event":"done","step":0,"data":)" + forged_result +
                    "}"});
  events.push_back({R"({"version":1,"task_id":")" + id +
                    R"(","event":"done","step":2147483647,"seq":-2147483648})"});
  produce("agent.tasks.results", u, results);
  produce("agent.tasks.events", u, events);
  // The forged endings were on the topics while the task ran, or what follows proves nothing.
  ASSERT_EQ(pg_row("SELECT status FROM tasks WHERE task_id = $1::uuid", id)[0].as<std::string>(),
            "running")
      << "the task ended before the forged events went out";

  // The long poll answers with the task as the row has it once it really ended, and the
  // stream ends with the real result: neither believed the forged ending.
  auto answered = poll.get();
  ASSERT_EQ(answered.status, 200) << answered.body;
  auto doc = parse(answered.body);
  EXPECT_EQ(str(doc, "status"), "succeeded") << answered.body.substr(0, 300);
  EXPECT_EQ(str(at(doc, "result"), "message"), "slow 完成：9 步") << answered.body.substr(0, 300);
  EXPECT_EQ(wait_terminal_row(id), "succeeded");
  const auto shown = stream.get();
  ASSERT_FALSE(shown.empty());
  EXPECT_EQ(shown.back().first, "done");
  EXPECT_EQ(
      std::count_if(shown.begin(), shown.end(), [](const auto& e) { return e.first == "done"; }),
      1);
  EXPECT_EQ(
      std::count_if(shown.begin(), shown.end(), [](const auto& e) { return e.first == "error"; }),
      0)
      << "a forged error event reached the stream of a task that succeeded";
  EXPECT_NE(shown.back().second.find("slow 完成：9 步"), std::string::npos) << shown.back().second;
  EXPECT_EQ(shown.back().second.find("forged"), std::string::npos) << shown.back().second;
  for (const auto& [event, data] : shown)
    EXPECT_EQ(data.find("\"forged\""), std::string::npos) << event << ": " << data;

  // The feed is still there: another task's long poll is answered as it ends.
  auto again = call({bhttp::verb::post, "/v1/tasks", submission(u, "删除2月30日的日程", "feed-2")});
  ASSERT_EQ(again.status, 201);
  auto second = call({bhttp::verb::get,
                      "/v1/tasks/" + str(parse(again.body), "task_id") + "?wait=30",
                      {},
                      "application/json",
                      "af-dev-admin-key",
                      40s});
  EXPECT_EQ(str(parse(second.body), "status"), "succeeded");
  expect_fleet_alive();
}

}  // namespace
}  // namespace agentfleet
