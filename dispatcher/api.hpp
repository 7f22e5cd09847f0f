#pragma once
// The dispatcher's HTTP API (a handler for http::Server): tasks (submit, list, read with
// ?wait=N long polling, cancel, their events as server-sent events), users' results as they
// end (server-sent events), batches (upload as JSON Lines, streamed; progress, results,
// cancel), usage, limits, the tool registry and direct tool calls, statistics, plans, the
// operations routes (/healthz, /readyz, /metrics) and the API's contract
// (GET /v1/openapi.json, schemas/openapi.yaml, which describes every route).
// The routes are declared once, in dispatcher/routes.hpp. Each request is decided on its
// head before any body byte is read (`admit`, the server's head route): no caller, no
// route, the wrong method, not an admin, or a body over the route's limit is refused then.
// Every route but the operations ones needs a caller (Authenticator): 401 without one; a
// caller may act only for its users (403 on a collection or submission for another user,
// 404 for another user's task or batch, so ids do not leak); limits may be changed, and
// every user's usage read, by admins only. Bodies are validated against the schemas;
// errors use one JSON shape {"error": {"code", "message", "path"}}. Every request is
// counted by route template and status code. `handle_ops` serves only the operations
// routes, for the metrics listener.
//
// Thread-safety: runs on the dispatcher's single io_context thread (TaskFeed needs it);
// the database work goes through DbPool.

#include <boost/asio/thread_pool.hpp>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/adapters/http/server.hpp"
#include "core/adapters/metrics/dispatcher_metrics.hpp"
#include "core/adapters/metrics/scrape_refresh.hpp"
#include "core/codec/json_schema.hpp"
#include "core/codec/task_codec.hpp"
#include "core/config/config.hpp"
#include "core/limits/clock.hpp"
#include "core/ports/api_store.hpp"
#include "core/ports/tool_client.hpp"
#include "dispatcher/auth.hpp"
#include "dispatcher/completion_rate.hpp"
#include "dispatcher/console.hpp"
#include "dispatcher/dead_letters.hpp"
#include "dispatcher/routes.hpp"
#include "dispatcher/submission_rules.hpp"
#include "dispatcher/task_feed.hpp"
#include "dispatcher/waiter_limits.hpp"

namespace agentfleet::dispatcher {

class Api {
 public:
  // `console`: the web console's files (name, contents) served at /ui/; none: 404 there.
  // `completions`: the ends the task feed saw, for GET /v1/fleet (none: 0 per second).
  // `wake_relay`: the API wrote outbox rows (the result events of tasks a cancel ended).
  // `store`: where every handler reads and writes (pg::ApiStore; a fake in the unit tests);
  // it must outlive the Api, as must `clock`: the time every handler reads (deadlines,
  // waits, latencies).
  Api(const config::Config& config, ports::ApiStore& store, metrics::DispatcherMetrics& metrics,
      TaskFeed& feed, ConsoleFiles console = {}, const CompletionRate* completions = nullptr,
      std::function<void()> wake_relay = {},
      const limits::Clock& clock = limits::SteadyClock::instance());
  ~Api();
  // The server's head route: refuses, streams, or reads the body whole with the route's
  // limit. Refusals are counted in the request metrics here.
  http::Admission admit(const http::Request& head);
  boost::asio::awaitable<http::Response> handle(http::Request& request);
  boost::asio::awaitable<http::Response> handle_ops(http::Request& request);
  boost::asio::awaitable<void> stream(http::Exchange& exchange);
  // Counts the slow gauges now (at start, so that the first scrape finds the fleet's counts,
  // not zeros), unless a count is under way or fresh.
  boost::asio::awaitable<void> count_gauges_now();
  // At shutdown, before the I/O stops: ends a dead-letter read under way.
  void stop() { dead_letters_.stop(); }

  // A request that may go to its route's handler, and who sent it.
  struct Routed {
    RouteMatch match;
    Caller caller;
  };
  // What answers a route: a handler of the whole request (its body read first), or one of
  // the exchange that reads the body and writes the answer itself (`answered`: the status of
  // a whole answer it gave). Each route of routes() is bound to one, of its kind.
  using Whole = boost::asio::awaitable<http::Response> (*)(Api&, http::Request&, const Routed&);
  using Streamed = boost::asio::awaitable<void> (*)(Api&, http::Exchange&, const Routed&,
                                                    int& answered);
  struct Binding {
    RouteId id;
    std::variant<Whole, Streamed> handler;
  };
  // The handlers, one per route, in the order of RouteId.
  static const std::vector<Binding>& bindings();

 private:
  // The route of a request and its caller, or the answer that refuses it; by the head.
  std::variant<http::Response, Routed> resolve(const http::Request& head) const;
  boost::asio::awaitable<http::Response> route(http::Request& request, const Routed& routed);
  // Counts the slow gauges under `claim` (see gauges_).
  boost::asio::awaitable<void> count_gauges(metrics::ScrapeRefresh::Claim claim);
  // Answers /metrics, /healthz and /readyz; nullopt for any other path.
  boost::asio::awaitable<std::optional<http::Response>> ops(http::Request& request,
                                                            const std::string& path);
  boost::asio::awaitable<http::Response> submit(http::Request& request, const Caller& caller);
  // GET /v1/fleet (admin).
  boost::asio::awaitable<http::Response> fleet(const http::Request& request);
  // GET /v1/dead-letters and POST /v1/dead-letters/replay (admin).
  boost::asio::awaitable<http::Response> dead_letters(const http::Request& request);
  boost::asio::awaitable<http::Response> replay_dead_letters(const http::Request& request);
  // Stores a checked submission (the queue limit, idempotency); the refusal as a response.
  boost::asio::awaitable<std::variant<http::Response, ports::InsertResult>> store_submission(
      http::Request& request, const codec::Submission& submission,
      const std::string& retry_of = {});
  // POST /v1/plan (api_tools.cpp): a plan_only task, answered with its plan once made.
  boost::asio::awaitable<http::Response> plan(http::Request& request, const Caller& caller);
  // The whole task id a path names: itself when it is one, else the one task of the
  // caller's its prefix stands for (task_id_prefix.hpp); the 404, 409 ambiguous_id or 503
  // answer instead.
  boost::asio::awaitable<std::variant<http::Response, std::string>> full_task_id(
      const http::Request& request, const Caller& caller, const std::string& id);
  boost::asio::awaitable<http::Response> get_task(http::Request& request, const Caller& caller,
                                                  std::string task_id);
  // The task's JSON as `caller` may read it, once it has ended or after `wait_s` seconds;
  // the 404 (or 503) answer instead when it may not.
  boost::asio::awaitable<std::variant<http::Response, std::string>> read_task(
      http::Request& request, const Caller& caller, const std::string& task_id, int wait_s);
  boost::asio::awaitable<http::Response> cancel_task(http::Request& request, const Caller& caller,
                                                     std::string task_id);
  // POST /v1/tasks/{id}/retry: a new task with the ended task's request.
  boost::asio::awaitable<http::Response> retry_task(http::Request& request, const Caller& caller,
                                                    std::string task_id);
  // The retry of `task_id` under `key` (empty: none): 201 with the new task, 200 with the one
  // a retry under that key made before, or the refusal.
  boost::asio::awaitable<http::Response> retry_one(http::Request& request, const Caller& caller,
                                                   const std::string& task_id,
                                                   const std::string& key);
  boost::asio::awaitable<http::Response> list_tasks(http::Request& request, const Caller& caller);
  boost::asio::awaitable<http::Response> usage(http::Request& request, const Caller& caller,
                                               std::string user_id);
  // The bill of one user, or of every user (nullopt), over ?from=&to=.
  boost::asio::awaitable<http::Response> usage_of(http::Request& request,
                                                  std::optional<std::string> user_id);
  boost::asio::awaitable<http::Response> limits(http::Request& request, const Caller& caller,
                                                std::string user_id);
  // The batch a route's {id} names for this caller (batch_names.hpp; ?user_id= may name its
  // user); the 404, 403, 409 ambiguous_id or 503 answer instead.
  boost::asio::awaitable<std::variant<http::Response, ports::BatchHeader>> find_caller_batch(
      const http::Request& request, const Caller& caller, const std::string& name);
  // GET /v1/batches: the batches of ?user_id=, else of the caller's users (every user's for
  // a key acting for any), newest first, a page of ?limit= (20) created ?before= a time,
  // whose ids begin with ?prefix= when given.
  boost::asio::awaitable<http::Response> list_batches(http::Request& request, const Caller& caller);
  boost::asio::awaitable<http::Response> get_batch(http::Request& request, const Caller& caller,
                                                   std::string batch_id);
  boost::asio::awaitable<http::Response> cancel_batch(http::Request& request, const Caller& caller,
                                                      std::string batch_id);
  // POST /v1/batches/{id}/retry: retries of the batch's failed tasks, a slice at a time.
  boost::asio::awaitable<http::Response> retry_batch(http::Request& request, const Caller& caller,
                                                     std::string batch_id);
  boost::asio::awaitable<http::Response> ready(http::Request& request);
  // api_tools.cpp: GET /v1/tools, POST /v1/tools/{name}:call, GET /v1/stats.
  boost::asio::awaitable<http::Response> list_tools(http::Request& request, const Caller& caller);
  boost::asio::awaitable<http::Response> call_tool(http::Request& request, const Caller& caller,
                                                   std::string tool);
  boost::asio::awaitable<http::Response> stats(http::Request& request, const Caller& caller);
  // The user's tool permission level: their override, else their tier's.
  boost::asio::awaitable<Result<config::Permission>> permission_of(const std::string& user_id);
  // The streamed routes; `answered` gets the status of a whole (error) response.
  boost::asio::awaitable<void> submit_batch(http::Exchange& exchange, const Caller& caller,
                                            int& answered);
  boost::asio::awaitable<void> batch_results(http::Exchange& exchange, const Caller& caller,
                                             int& answered, std::string batch_id);
  boost::asio::awaitable<void> task_events(http::Exchange& exchange, const Caller& caller,
                                           int& answered, std::string task_id);
  // GET /v1/results?user_id=: the user's result events as their tasks end.
  boost::asio::awaitable<void> results(http::Exchange& exchange, const Caller& caller,
                                       int& answered);

  const config::Config& config_;
  const limits::Clock& clock_;
  ports::ApiStore& store_;
  std::function<void()> wake_relay_;
  metrics::DispatcherMetrics& metrics_;
  // The slow gauges (live tasks by status, the due outbox): a scrape that finds their last
  // count older than metrics.refresh_interval_s starts count_gauges() and answers with the
  // last count; nobody scraping, nothing is counted.
  metrics::ScrapeRefresh gauges_;
  ConsoleFiles console_;
  const CompletionRate* completions_;
  TaskFeed& feed_;
  Authenticator auth_;
  SubmissionRules rules_;
  // Event streams and long polls open, per caller and on this replica.
  WaiterLimits waiters_;
  // Blocking work of batch uploads (each holds a transaction on its own connection).
  std::unique_ptr<boost::asio::thread_pool> batch_pool_;
  // Direct tool calls: the tools' argument schemas, and a client made on first use (on the
  // io thread, whose executor it keeps).
  std::map<std::string, std::shared_ptr<codec::CompiledSchema>> tool_schemas_;
  std::unique_ptr<ports::ToolClient> tool_client_;
  // GET /v1/dead-letters, POST /v1/dead-letters/replay: one Kafka read at a time.
  DeadLetterDesk dead_letters_;
};

// The registry as GET /v1/tools answers it: {"tools": [{name, description, category,
// parameters (the JSON Schema), permission, idempotent, timeout_s, permitted?}], "count"};
// with `user_permission`, each tool says whether that level may call it.
std::string tool_registry_json(const config::Config& config,
                               std::optional<config::Permission> user_permission);

// GET /v1/whoami's answer: {"key_name", "admin", "any_user", "user_ids", "trace_link"}
// (telemetry.trace_link; null when empty).
std::string whoami_json(const Caller& caller, const std::string& trace_link = {});

}  // namespace agentfleet::dispatcher
