#pragma once
// What the integration tests that talk to the fleet share: the fixture's values, one HTTP
// exchange on a private io_context (an answer of the API checked against its contract), safe reads
// of JSON answers, one-statement Postgres reads, a message on a topic and the sum of a metric over
// processes' /metrics.

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <rapidjson/document.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/beast/http/verb.hpp>
#include <pqxx/pqxx>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/adapters/http/client.hpp"
#include "tests/integration/contract.hpp"
#include "tests/integration/fleet_env.hpp"
#include "tools/agentctl/json_fields.hpp"

namespace agentfleet::test {

using Headers = std::vector<std::pair<std::string, std::string>>;

// The fixture's env file (fleet_env), read once.
inline std::map<std::string, std::string>& env() {
  static std::map<std::string, std::string> values = fleet_env();
  return values;
}

// This run's tag, in every id a test makes up, so a second run on the same fleet starts
// clean.
inline const std::string& run_tag() {
  static const std::string tag =
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count() %
                     1000000000);
  return tag;
}

// One request to `url`, answered within `timeout`; a transport failure is a test failure
// (and a response with ok() false).
inline http::ClientResponse fetch(const std::string& url, boost::beast::http::verb method,
                                  std::string body = {}, Headers headers = {},
                                  std::chrono::seconds timeout = std::chrono::seconds(15),
                                  std::string content_type = "application/json") {
  boost::asio::io_context io;
  http::ClientRequest request;
  request.method = method;
  request.url = url;
  request.body = std::move(body);
  request.content_type = std::move(content_type);
  request.headers = std::move(headers);
  request.deadline = std::chrono::steady_clock::now() + timeout;
  auto future = boost::asio::co_spawn(io, http::fetch(io.get_executor(), std::move(request)),
                                      boost::asio::use_future);
  io.run();
  auto response = future.get();
  EXPECT_TRUE(response.ok()) << url << ": " << response.error_message;
  // Every answer of the fleet's API is checked against its contract (contract.hpp).
  const std::string& api = env()["AGENTFLEET_URL"];
  if (response.ok() && !api.empty() && url.rfind(api + "/", 0) == 0) {
    if (auto broken =
            Contract::instance().violation(method, url.substr(api.size()), response.status,
                                           response.header("Content-Type"), response.body))
      ADD_FAILURE() << "not as the contract says: " << *broken;
  }
  return response;
}

// Percent-encoding of one URL component (RFC 3986 unreserved characters kept).
inline std::string url_encode(const std::string& text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(c);
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    }
  }
  return out;
}

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
inline double metric_sum(const std::vector<std::string>& urls, const std::string& prefix) {
  double sum = 0;
  for (const auto& url : urls) {
    std::istringstream lines(fetch(url + "/metrics", boost::beast::http::verb::get).body);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(prefix, 0) == 0)
        sum += std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return sum;
}

// The development keys of config/agentfleet.yaml.
inline const std::string kAdminKey = "af-dev-admin-key";
inline const std::string kU1Key = "af-dev-u1-key";  // acts for u1 only
inline const std::string kU2Key = "af-dev-u2-key";  // acts for u2 only

// The dispatcher's API as `key`.
inline http::ClientResponse api(boost::beast::http::verb method, const std::string& target,
                                const std::string& key, std::string body = {}, Headers headers = {},
                                std::chrono::seconds timeout = std::chrono::seconds(15)) {
  headers.emplace_back("Authorization", "Bearer " + key);
  return fetch(env()["AGENTFLEET_URL"] + target, method, std::move(body), std::move(headers),
               timeout);
}

// POST /v1/tasks as `key`, expecting 201; the new task's id.
inline std::string submit(const std::string& body, const std::string& key = kAdminKey) {
  auto response = api(boost::beast::http::verb::post, "/v1/tasks", key, body);
  EXPECT_EQ(response.status, 201) << response.body;
  return str(parse(response.body), "task_id");
}

// The task once it ended, as `key` reads it (bounded long polls, 90 s in all).
inline rapidjson::Document wait_terminal(const std::string& task_id,
                                         const std::string& key = kAdminKey) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  for (;;) {
    auto response = api(boost::beast::http::verb::get, "/v1/tasks/" + task_id + "?wait=30", key, {},
                        {}, std::chrono::seconds(40));
    rapidjson::Document doc = parse(response.body);
    const std::string status = str(doc, "status");
    if (response.status != 200 || status == "succeeded" || status == "failed" ||
        status == "timed_out" || status == "cancelled" ||
        std::chrono::steady_clock::now() > until) {
      EXPECT_EQ(response.status, 200) << response.body;
      return doc;
    }
  }
}

// One message on `topic` of the fleet's broker, as a producer outside the fleet writes it.
inline void produce(const std::string& topic, const std::string& key, const std::string& value,
                    const Headers& headers) {
  char errstr[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", env()["AGENTFLEET_KAFKA_BOOTSTRAP"].c_str(), errstr,
                    sizeof(errstr));
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
  ASSERT_NE(rk, nullptr) << errstr;
  rd_kafka_headers_t* hdrs = rd_kafka_headers_new(headers.size());
  for (const auto& [name, v] : headers) {
    rd_kafka_header_add(hdrs, name.data(), static_cast<ssize_t>(name.size()), v.data(),
                        static_cast<ssize_t>(v.size()));
  }
  ASSERT_EQ(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic.c_str()),
                              RD_KAFKA_V_KEY(const_cast<char*>(key.data()), key.size()),
                              RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                              RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_END),
            RD_KAFKA_RESP_ERR_NO_ERROR);
  EXPECT_EQ(rd_kafka_flush(rk, 15000), RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_destroy(rk);
}

inline std::vector<std::string> worker_metrics_urls() {
  return split_list(env()["AGENTFLEET_WORKER_METRICS_URLS"]);
}

}  // namespace agentfleet::test
