#pragma once
// agentctl's calls to the dispatcher's API, made synchronously (each on a private
// io_context) with the project's HTTP client: the API key on every request, a deadline on
// every call (the request timeout, plus the wait of a long poll), bounded retries with
// backoff for GETs only (a connection failure or a 503), streamed bodies for uploads,
// event streams and JSON Lines downloads. Failures become CommandFailure with the exit
// code of outcomes.hpp and one line naming the request and the API's error; the API key is
// never part of a message.
//
// Not thread-safe: one command uses it from its one thread.

#include <rapidjson/document.h>

#include <chrono>
#include <string>
#include <string_view>

#include "core/adapters/http/client.hpp"
#include "core/adapters/http/stream_client.hpp"
#include "tools/agentctl/options.hpp"

namespace agentfleet::agentctl {

class ApiClient {
 public:
  explicit ApiClient(const Settings& settings) : settings_(settings) {}

  // `target` is the path and query ("/v1/tasks/ID?wait=30"). `extra` lengthens the deadline
  // (a long poll's wait). GETs are retried up to 3 times on a connection failure or a 503.
  http::ClientResponse get(const std::string& target,
                           std::chrono::seconds extra = std::chrono::seconds(0)) const;
  // `extra` lengthens the deadline (a POST that waits, such as /v1/plan's wait_s). Never
  // retried.
  http::ClientResponse post(const std::string& target, std::string body,
                            std::chrono::seconds extra = std::chrono::seconds(0)) const;
  http::ClientResponse put(const std::string& target, std::string body) const;

  // A GET whose 2xx body goes to `sink` as it arrives; each read may take up to `idle`,
  // the whole call until `deadline`.
  http::ClientResponse get_stream(const std::string& target, http::BodySink sink,
                                  std::chrono::seconds idle,
                                  std::chrono::steady_clock::time_point deadline) const;
  // A POST whose body comes from `source` (chunked); each write or read may take up to the
  // request timeout, the whole upload up to a day.
  http::ClientResponse post_stream(const std::string& target, http::BodySource source,
                                   const std::string& content_type) const;

  // Throws CommandFailure unless `response` is a 2xx answer: a transport failure is exit 7
  // ("cannot reach the dispatcher at URL"), an HTTP status its exit code with the API's
  // error message and path.
  void check(const http::ClientResponse& response, std::string_view method,
             const std::string& target) const;
  // `response.body` as JSON (CommandFailure exit 7 when it is not).
  static rapidjson::Document parse(const http::ClientResponse& response, const std::string& target);

  // get/post/put, then check, then parse.
  rapidjson::Document get_json(const std::string& target,
                               std::chrono::seconds extra = std::chrono::seconds(0)) const;

  const Settings& settings() const { return settings_; }

 private:
  http::ClientRequest request(boost::beast::http::verb method, const std::string& target,
                              std::chrono::seconds extra) const;
  const Settings& settings_;
};

}  // namespace agentfleet::agentctl
