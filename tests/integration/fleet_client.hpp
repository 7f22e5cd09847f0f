#pragma once
// What the integration tests that talk to the fleet share: the fixture's values, one HTTP
// exchange on a private io_context (an answer of the API checked against its contract), safe reads
// of JSON answers, one-statement Postgres reads, a message on a topic and the sum of a metric over
// processes' /metrics. The functions that run the HTTP client or librdkafka are compiled once,
// in fleet_client.cpp: defined here, each test file would compile the client's coroutine
// machinery again (about 9 s of the sanitizer build's compiler time a file).

#include <rapidjson/document.h>
#include <boost/beast/http/verb.hpp>
#include <pqxx/pqxx>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/adapters/http/client.hpp"
#include "tests/integration/fleet_env.hpp"
#include "tools/agentctl/json_fields.hpp"

namespace agentfleet::test {

using Headers = std::vector<std::pair<std::string, std::string>>;

// The fixture's env file (fleet_env), read once.
std::map<std::string, std::string>& env();

// This run's tag, in every id a test makes up, so a second run on the same fleet starts
// clean.
const std::string& run_tag();

// One exchange on a private io_context, within the request's deadline; nothing is checked,
// the caller judges the answer.
http::ClientResponse exchange(http::ClientRequest request);

// One request to `url`, answered within `timeout`; a transport failure is a test failure
// (and a response with ok() false).
http::ClientResponse fetch(const std::string& url, boost::beast::http::verb method,
                           std::string body = {}, Headers headers = {},
                           std::chrono::seconds timeout = std::chrono::seconds(15),
                           std::string content_type = "application/json");

// Percent-encoding of one URL component (RFC 3986 unreserved characters kept).
std::string url_encode(const std::string& text);

// Reads of answers that may not have the expected shape (RapidJSON asserts on a member of
// a non-object): a missing member reads as null, "" or -1. parse() of a non-JSON text is a
// document with a parse error, for the caller to check where it matters.
inline rapidjson::Document parse(const std::string& text) {
  rapidjson::Document doc;
  doc.Parse(text.c_str(), text.size());
  return doc;
}

// at(), str(), num(): agentctl's reads of the same answers.
using agentctl::json::at;
using agentctl::json::num;
using agentctl::json::str;

// One statement in a transaction of its own on the fleet's database; the one row it returns.
template <typename... Args>
pqxx::row pg_row(const std::string& sql, const Args&... args) {
  pqxx::connection db(env()["AGENTFLEET_PG_URL"]);
  pqxx::work tx(db);
  pqxx::row row = tx.exec_params1(sql, args...);
  tx.commit();
  return row;
}

template <typename... Args>
std::int64_t pg_count(const std::string& sql, const Args&... args) {
  return pg_row(sql, args...)[0].template as<std::int64_t>();
}

// The sum of the samples of a series (a metric name with the start of its labels, such as
// `agentfleet_tool_calls_total{outcome="refused"`) over the given processes' /metrics.
double metric_sum(const std::vector<std::string>& urls, const std::string& prefix);

// The development keys of config/agentfleet.yaml.
inline const std::string kAdminKey = "af-dev-admin-key";
inline const std::string kU1Key = "af-dev-u1-key";  // acts for u1 only
inline const std::string kU2Key = "af-dev-u2-key";  // acts for u2 only

// The dispatcher's API as `key`.
http::ClientResponse api(boost::beast::http::verb method, const std::string& target,
                         const std::string& key, std::string body = {}, Headers headers = {},
                         std::chrono::seconds timeout = std::chrono::seconds(15));

// POST /v1/tasks as `key`, expecting 201; the new task's id.
std::string submit(const std::string& body, const std::string& key = kAdminKey);

// The task once it ended, as `key` reads it (bounded long polls, 90 s in all).
rapidjson::Document wait_terminal(const std::string& task_id, const std::string& key = kAdminKey);

// One message on `topic` of the fleet's broker, as a producer outside the fleet writes it.
void produce(const std::string& topic, const std::string& key, const std::string& value,
             const Headers& headers);

std::vector<std::string> worker_metrics_urls();

}  // namespace agentfleet::test
