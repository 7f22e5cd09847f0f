#pragma once
// The worker's operations listener on metrics.host:metrics.port: GET /metrics (the
// Prometheus text format), /healthz and /readyz. It runs on the worker's io_context, so a
// /healthz answer itself shows the I/O loop is responsive; /readyz asks a readiness check
// the worker supplies (consumer started, Postgres reachable, not draining). The gauges that
// need a blocking round trip (consumer lag) are read by `refresh` on a thread of the
// endpoint's own at start, then when a scrape finds the last reading older than
// metrics.refresh_interval_s; the scrape answers with the last reading
// (metrics::ScrapeRefresh), and a worker nobody scrapes asks the broker nothing for them.
//
// Lifecycle: construct, start() binds (throws on bind failure), stop() or the destructor
// closes the listener and joins the refresh thread; stop it before the objects the
// callbacks use. Thread-safety: start/stop from the owning thread; the callbacks run on
// the io_context (readiness) and on the refresh thread (refresh).

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/adapters/http/server.hpp"
#include "core/adapters/metrics/metrics_registry.hpp"
#include "core/adapters/metrics/scrape_refresh.hpp"

namespace agentfleet::worker {

struct Readiness {
  bool ready = false;
  std::string reason;  // why not, when not ready
  std::string body;    // the answer when ready; empty: {"status":"ready"}
};

struct OpsEndpointOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0 picks a free port (tests); the caller skips the endpoint when off
  std::chrono::seconds refresh_interval{15};
};

class OpsEndpoint {
 public:
  using ReadinessCheck = std::function<boost::asio::awaitable<Readiness>()>;
  using Refresh = std::function<void()>;

  OpsEndpoint(boost::asio::any_io_executor executor, OpsEndpointOptions options,
              metrics::MetricsRegistry& registry, ReadinessCheck readiness, Refresh refresh = {});
  ~OpsEndpoint();
  OpsEndpoint(const OpsEndpoint&) = delete;
  OpsEndpoint& operator=(const OpsEndpoint&) = delete;

  void start();
  void stop();
  std::uint16_t port() const { return server_.port(); }

 private:
  boost::asio::awaitable<http::Response> handle(http::Request& request);

  OpsEndpointOptions options_;
  metrics::MetricsRegistry& registry_;
  ReadinessCheck readiness_;
  Refresh refresh_;
  http::Server server_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  // When the last reading was taken; a scrape's claim to a new one, for the refresher.
  metrics::ScrapeRefresh readings_;
  std::optional<metrics::ScrapeRefresh::Claim> asked_;
  std::thread refresher_;
};

}  // namespace agentfleet::worker
