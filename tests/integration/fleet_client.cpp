#include "tests/integration/fleet_client.hpp"

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <cctype>
#include <sstream>

#include "tests/integration/contract.hpp"

namespace agentfleet::test {

std::map<std::string, std::string>& env() {
  static std::map<std::string, std::string> values = fleet_env();
  return values;
}

const std::string& run_tag() {
  static const std::string tag =
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count() %
                     1000000000);
  return tag;
}

http::ClientResponse exchange(http::ClientRequest request) {
  boost::asio::io_context io;
  auto future = boost::asio::co_spawn(io, http::fetch(io.get_executor(), std::move(request)),
                                      boost::asio::use_future);
  io.run();
  return future.get();
}

http::ClientResponse fetch(const std::string& url, boost::beast::http::verb method,
                           std::string body, Headers headers, std::chrono::seconds timeout,
                           std::string content_type) {
  http::ClientRequest request;
  request.method = method;
  request.url = url;
  request.body = std::move(body);
  request.content_type = std::move(content_type);
  request.headers = std::move(headers);
  request.deadline = std::chrono::steady_clock::now() + timeout;
  auto response = exchange(std::move(request));
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

std::string url_encode(const std::string& text) {
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

double metric_sum(const std::vector<std::string>& urls, const std::string& prefix) {
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

http::ClientResponse api(boost::beast::http::verb method, const std::string& target,
                         const std::string& key, std::string body, Headers headers,
                         std::chrono::seconds timeout) {
  headers.emplace_back("Authorization", "Bearer " + key);
  return fetch(env()["AGENTFLEET_URL"] + target, method, std::move(body), std::move(headers),
               timeout);
}

std::string submit(const std::string& body, const std::string& key) {
  auto response = api(boost::beast::http::verb::post, "/v1/tasks", key, body);
  EXPECT_EQ(response.status, 201) << response.body;
  return str(parse(response.body), "task_id");
}

rapidjson::Document wait_terminal(const std::string& task_id, const std::string& key) {
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

void produce(const std::string& topic, const std::string& key, const std::string& value,
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

std::vector<std::string> worker_metrics_urls() {
  return split_list(env()["AGENTFLEET_WORKER_METRICS_URLS"]);
}

}  // namespace agentfleet::test
