#include "tools/agentctl/api_client.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <thread>

#include "core/codec/json_text.hpp"
#include "tools/agentctl/outcomes.hpp"

namespace agentfleet::agentctl {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

namespace {
template <typename Awaitable>
http::ClientResponse run(Awaitable make) {
  asio::io_context io;
  auto future = asio::co_spawn(io, make(io.get_executor()), asio::use_future);
  io.run();
  return future.get();
}
}  // namespace

http::ClientRequest ApiClient::request(bhttp::verb method, const std::string& target,
                                       std::chrono::seconds extra) const {
  http::ClientRequest r;
  r.method = method;
  r.url = settings_.url + target;
  if (!settings_.api_key.empty())
    r.headers.emplace_back("Authorization", "Bearer " + settings_.api_key);
  r.headers.emplace_back("Accept", "application/json");
  r.deadline = std::chrono::steady_clock::now() + settings_.request_timeout + extra;
  return r;
}

http::ClientResponse ApiClient::get(const std::string& target, std::chrono::seconds extra) const {
  constexpr int kMaxRetries = 3;
  for (int retry = 0;; ++retry) {
    auto response = run([&](asio::any_io_executor executor) {
      return http::fetch(executor, request(bhttp::verb::get, target, extra));
    });
    const bool connect_failure = response.error == http::ClientErrorKind::kConnect;
    if (!connect_failure && !(response.ok() && response.status == 503))
      return response;
    const auto delay = retry_delay(retry, kMaxRetries, connect_failure, response.status,
                                   response.header("Retry-After"));
    if (!delay)
      return response;
    std::this_thread::sleep_for(*delay);
  }
}

http::ClientResponse ApiClient::post(const std::string& target, std::string body,
                                     std::chrono::seconds extra) const {
  return run([&](asio::any_io_executor executor) {
    auto r = request(bhttp::verb::post, target, extra);
    r.body = std::move(body);
    return http::fetch(executor, std::move(r));
  });
}

http::ClientResponse ApiClient::put(const std::string& target, std::string body) const {
  return run([&](asio::any_io_executor executor) {
    auto r = request(bhttp::verb::put, target, std::chrono::seconds(0));
    r.body = std::move(body);
    return http::fetch(executor, std::move(r));
  });
}

http::ClientResponse ApiClient::get_stream(const std::string& target, http::BodySink sink,
                                           std::chrono::seconds idle,
                                           std::chrono::steady_clock::time_point deadline) const {
  return run([&](asio::any_io_executor executor) {
    auto r = request(bhttp::verb::get, target, std::chrono::seconds(0));
    r.headers.back() = {"Accept", "text/event-stream, application/x-ndjson"};
    r.deadline = deadline;
    http::StreamOptions options;
    options.on_body = std::move(sink);
    options.idle_timeout = idle;
    return http::fetch_stream(executor, std::move(r), std::move(options));
  });
}

http::ClientResponse ApiClient::post_stream(const std::string& target, http::BodySource source,
                                            const std::string& content_type) const {
  return run([&](asio::any_io_executor executor) {
    auto r = request(bhttp::verb::post, target, std::chrono::hours(24));
    r.content_type = content_type;
    http::StreamOptions options;
    options.body_source = std::move(source);
    options.idle_timeout = settings_.request_timeout;
    return http::fetch_stream(executor, std::move(r), std::move(options));
  });
}

void ApiClient::check(const http::ClientResponse& response, std::string_view method,
                      const std::string& target) const {
  const std::string path = target.substr(0, target.find('?'));
  if (!response.ok() && response.status != 0) {
    throw CommandFailure(kExitUnavailable, std::string(method) + " " + path +
                                               ": the answer was cut short (" +
                                               response.error_message + ")");
  }
  if (!response.ok()) {
    const std::string url = url_without_credentials(settings_.url);
    if (response.error == http::ClientErrorKind::kTimeout) {
      throw CommandFailure(kExitUnavailable, std::string(method) + " " + path +
                                                 ": no answer in time from " + url + " (" +
                                                 response.error_message + ")");
    }
    if (response.error == http::ClientErrorKind::kProtocol) {
      throw CommandFailure(kExitUnavailable, std::string(method) + " " + path +
                                                 ": no answer from " + url + " (" +
                                                 response.error_message + ")");
    }
    if (response.error == http::ClientErrorKind::kBadUrl) {
      throw CommandFailure(kExitUsage, "the dispatcher URL (from " + settings_.url_source +
                                           ") is not valid: " + url);
    }
    throw CommandFailure(kExitUnavailable, "cannot reach the dispatcher at " + url + " (from " +
                                               settings_.url_source +
                                               "): " + response.error_message);
  }
  if (response.status >= 200 && response.status < 300)
    return;
  std::string message = describe_http_failure(method, path, response.status, response.body);
  if (response.status == 401 && settings_.api_key.empty()) {
    message += "; no API key is set (--api-key, AGENTFLEET_API_KEY or api_key in the config file)";
  } else if (response.status == 401) {
    message += "; the API key from " + settings_.api_key_source + " was not accepted";
  }
  if (response.status == 429 && !response.header("Retry-After").empty())
    message += "; retry after " + response.header("Retry-After") + " s";
  throw CommandFailure(exit_code_for_http_status(response.status), message);
}

rapidjson::Document ApiClient::parse(const http::ClientResponse& response,
                                     const std::string& target) {
  rapidjson::Document doc;
  if (!codec::parse_json(doc, response.body)) {
    throw CommandFailure(kExitUnavailable,
                         target.substr(0, target.find('?')) +
                             ": the answer is not JSON: " + response.body.substr(0, 200));
  }
  return doc;
}

rapidjson::Document ApiClient::get_json(const std::string& target,
                                        std::chrono::seconds extra) const {
  auto response = get(target, extra);
  check(response, "GET", target);
  return parse(response, target);
}

}  // namespace agentfleet::agentctl
