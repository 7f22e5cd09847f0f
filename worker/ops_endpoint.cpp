#include "worker/ops_endpoint.hpp"

#include "core/adapters/log.hpp"

namespace agentfleet::worker {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

OpsEndpoint::OpsEndpoint(asio::any_io_executor executor, OpsEndpointOptions options,
                         metrics::MetricsRegistry& registry, ReadinessCheck readiness,
                         Refresh refresh)
    : options_(std::move(options)),
      registry_(registry),
      readiness_(std::move(readiness)),
      refresh_(std::move(refresh)),
      server_(executor, http::ServerOptions{options_.host, options_.port},
              [this](http::Request& request) { return handle(request); }),
      readings_(limits::SteadyClock::instance(), options_.refresh_interval) {}

OpsEndpoint::~OpsEndpoint() {
  stop();
}

void OpsEndpoint::start() {
  server_.start();
  log::write(
      "info", "worker",
      "metrics on http://" + options_.host + ":" + std::to_string(server_.port()) + "/metrics");
  if (!refresh_)
    return;
  // A first reading at start, so that the first scrape finds every series.
  {
    std::lock_guard lock(mutex_);
    if (auto claim = readings_.claim(); claim && !asked_)
      asked_.emplace(std::move(claim));
  }
  refresher_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait(lock, [this] { return stopping_ || asked_.has_value(); });
      if (stopping_)
        return;
      metrics::ScrapeRefresh::Claim claim = std::move(*asked_);
      asked_.reset();
      lock.unlock();
      try {
        refresh_();
        claim.succeeded();
      } catch (const std::exception& e) {
        log::warn("worker", std::string("metrics refresh: ") + e.what());
      }
      lock.lock();
    }
  });
}

void OpsEndpoint::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  server_.stop();
  if (refresher_.joinable())
    refresher_.join();
}

asio::awaitable<http::Response> OpsEndpoint::handle(http::Request& request) {
  const std::string target(request.target());
  const std::string path(http::target_path(target));
  if (request.method() != bhttp::verb::get && request.method() != bhttp::verb::head) {
    co_return http::make_error(request, http::Status::method_not_allowed, "method_not_allowed",
                               "use GET");
  }
  if (path == "/metrics") {
    // A reading older than the interval is taken on the refresher's thread, beside this
    // answer, which carries the last one.
    if (refresh_) {
      if (auto claim = readings_.claim()) {
        {
          std::lock_guard lock(mutex_);
          asked_.emplace(std::move(claim));
        }
        wake_.notify_all();
      }
    }
    co_return http::make_response(request, http::Status::ok, registry_.render(),
                                  std::string(metrics::kContentType));
  }
  if (path == "/healthz") {
    // Answered on the worker's io_context: reaching here means its loop is turning.
    co_return http::make_response(request, http::Status::ok, R"({"status":"ok"})");
  }
  if (path == "/readyz") {
    const Readiness readiness = co_await readiness_();
    if (!readiness.ready) {
      co_return http::make_error(request, http::Status::service_unavailable, "not_ready",
                                 readiness.reason);
    }
    co_return http::make_response(
        request, http::Status::ok,
        readiness.body.empty() ? std::string(R"({"status":"ready"})") : readiness.body);
  }
  co_return http::make_error(request, http::Status::not_found, "not_found", "no route " + path);
}

}  // namespace agentfleet::worker
