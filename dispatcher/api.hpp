#pragma once
// The dispatcher's HTTP API (a handler for http::Server): POST /v1/tasks, GET
// /v1/tasks/{id}, /healthz, /readyz. Bodies are validated against the schemas; errors use
// one JSON shape {"error": {"code", "message", "path"}}.
//
// Thread-safety: immutable after construction apart from the scheduler wake-up callback.

#include <functional>

#include "core/adapters/http/server.hpp"
#include "core/adapters/pg/db_pool.hpp"
#include "core/codec/task_codec.hpp"
#include "core/config/config.hpp"

namespace agentfleet::dispatcher {

class Api {
 public:
  Api(const config::Config& config, pg::DbPool& db, std::function<void()> wake_scheduler);
  boost::asio::awaitable<http::Response> handle(http::Request& request);

 private:
  boost::asio::awaitable<http::Response> submit(http::Request& request);
  boost::asio::awaitable<http::Response> get_task(http::Request& request, std::string task_id);
  boost::asio::awaitable<http::Response> ready(http::Request& request);

  const config::Config& config_;
  pg::DbPool& db_;
  std::function<void()> wake_scheduler_;
  codec::SubmissionDefaults defaults_;
};

// A random (version 4) UUID.
std::string new_task_id();
// A W3C traceparent: the incoming one when valid, else a new trace.
std::string traceparent_for(std::string_view incoming);

}  // namespace agentfleet::dispatcher
