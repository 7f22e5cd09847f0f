#pragma once
// The dispatcher's HTTP API (a handler for http::Server): POST /v1/tasks, GET
// /v1/tasks/{id} (with ?wait=N long polling), GET /v1/tasks (a user's tasks), POST
// /v1/tasks/{id}/cancel, /healthz, /readyz, /metrics. Bodies are validated
// against the schemas; errors use one JSON shape {"error": {"code", "message", "path"}}. Every
// request is counted by route template and status code. `handle_ops` serves only the operations
// routes (/metrics, /healthz, /readyz), for the separate metrics listener.
//
// Thread-safety: immutable after construction apart from the scheduler wake-up callback
// and the metrics (which are thread-safe).

#include <functional>
#include <optional>
#include <string_view>

#include "core/adapters/http/server.hpp"
#include "core/adapters/metrics/dispatcher_metrics.hpp"
#include "core/adapters/pg/db_pool.hpp"
#include "core/codec/task_codec.hpp"
#include "core/config/config.hpp"

namespace agentfleet::dispatcher {

class Api {
 public:
  Api(const config::Config& config, pg::DbPool& db, std::function<void()> wake_scheduler,
      metrics::DispatcherMetrics& metrics);
  boost::asio::awaitable<http::Response> handle(http::Request& request);
  boost::asio::awaitable<http::Response> handle_ops(http::Request& request);

 private:
  boost::asio::awaitable<http::Response> route(http::Request& request);
  // Answers /metrics, /healthz and /readyz; nullopt for any other path.
  boost::asio::awaitable<std::optional<http::Response>> ops(http::Request& request,
                                                            const std::string& path);
  boost::asio::awaitable<http::Response> submit(http::Request& request);
  boost::asio::awaitable<http::Response> get_task(http::Request& request, std::string task_id);
  boost::asio::awaitable<http::Response> cancel_task(http::Request& request, std::string task_id);
  boost::asio::awaitable<http::Response> list_tasks(http::Request& request);
  boost::asio::awaitable<http::Response> ready(http::Request& request);

  const config::Config& config_;
  pg::DbPool& db_;
  std::function<void()> wake_scheduler_;
  metrics::DispatcherMetrics& metrics_;
  codec::SubmissionDefaults defaults_;
};

// The defaults a submission gets from configuration, and the checks beyond its schema
// (the model and tools must exist): shared by the HTTP API and the submit topic.
codec::SubmissionDefaults submission_defaults(const config::Config& config);
std::optional<codec::SchemaViolation> check_references(const config::Config& config,
                                                       const TaskSpec& spec);

// The route template of a request path for the metrics ("/v1/tasks/{id}"); "unmatched"
// for a path no route serves, so raw paths never become label values.
std::string_view route_template(std::string_view path);

// A random (version 4) UUID.
std::string new_task_id();
// A W3C traceparent: the incoming one when valid, else a new trace.
std::string traceparent_for(std::string_view incoming);

}  // namespace agentfleet::dispatcher
