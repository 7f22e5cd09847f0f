// api_request_fuzz: the dispatcher's HTTP API on untrusted bytes, without sockets or
// Postgres (see README.md). The input is what a client sends on one connection:
//   - Beast's request_parser<string_body> reads it the way http::Server::serve does: the
//     head with no body limit, then the head route's decision (Api::admit, the real one, on
//     an Api object in auth mode none that is constructed but never started and never
//     reaches its database): a refusal (a JSON error; a request without a body goes on to
//     the next), a stream, or a body limit; a declared Content-Length over that limit
//     refused on the head, the body with the limit, then the next request of a keep-alive
//     connection (at most 4);
//     a streamed route's body as Exchange::read_body reads it (request_parser<buffer_body>
//     in pieces, stream_body_limit), the last request of its connection;
//   - for each request: http::target_path, http::query_param for every parameter the API
//     reads, route_template, traceparent_for, Authenticator::authenticate in each auth mode
//     (api_keys, gateway, none) and Caller::may_act_for, http::make_error / make_response
//     with what the client sent quoted in them (the body must stay a JSON object);
//   - the body codecs of the routes (by the path's segments: dispatcher::path_segments, as
//     Api::route splits them): POST /v1/tasks -> codec::parse_submission (Api's
//     submission_defaults) and check_references; PUT /v1/users/{id}/limits with a valid id ->
//     parse_limits_body, then effective_limits and limits_json (a JSON object); POST /v1/batches
//     (streamed)
//     -> the query's priority, batch_id and user_id checks and, per JSON line,
//     parse_submission with check_references.
// Nothing here throws on input: any exception, crash, leak or UB is a finding.
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/http.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <rapidjson/document.h>

#include "core/adapters/http/server.hpp"
#include "core/adapters/metrics/dispatcher_metrics.hpp"
#include "core/adapters/metrics/metrics_registry.hpp"
#include "core/adapters/pg/api_store.hpp"
#include "core/adapters/pg/db_pool.hpp"
#include "core/codec/json_text.hpp"
#include "core/config/config.hpp"
#include "dispatcher/api.hpp"
#include "dispatcher/auth.hpp"
#include "dispatcher/task_feed.hpp"
#include "dispatcher/user_limits.hpp"

namespace {

namespace bhttp = boost::beast::http;
namespace codec = agentfleet::codec;
namespace config = agentfleet::config;
namespace dispatcher = agentfleet::dispatcher;
namespace http = agentfleet::http;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "api_request_fuzz: invariant broken: %s\n", what);
    std::abort();
  }
}

constexpr std::string_view kBaseConfig = R"(
postgres: {url: "host=/nonexistent-agentfleet-fuzz port=1", pool_size: 1}
kafka: {bootstrap_servers: 127.0.0.1:1}
models: [{name: m1, endpoints: [{url: "http://127.0.0.1:1/v1"}]}]
tools:
  - {name: search_items, description: Finds items., url: "http://127.0.0.1:1/search",
     permission: read, parameters: {type: object}}
billing:
  prices:
    - {model: m1, effective_from: "2026-01-01", input_per_million: "1"}
task_defaults: {model: m1, tier: standard}
tiers:
  - {tier: standard, max_concurrency: 5, requests_per_minute: 100, tokens_per_minute: 200000,
     max_queued: 10000, monthly_budget: "0", weight: 2}
  - {tier: free, max_concurrency: 1, requests_per_minute: 10, monthly_budget: "2.5",
     tool_permission: read}
)";

struct Fixture {
  config::Config api_keys;
  config::Config gateway;
  config::Config none;
  std::vector<std::unique_ptr<dispatcher::Authenticator>> authenticators;
  codec::SubmissionDefaults defaults;
  // Constructed for Api::admit only (auth mode none, so that every route is reached); never
  // started, never handed a request.
  boost::asio::io_context io;
  std::unique_ptr<agentfleet::metrics::MetricsRegistry> registry;
  std::unique_ptr<agentfleet::metrics::DispatcherMetrics> metrics;
  std::unique_ptr<agentfleet::pg::DbPool> db;
  std::unique_ptr<agentfleet::pg::ApiStore> store;
  std::unique_ptr<dispatcher::TaskFeed> feed;
  std::unique_ptr<dispatcher::Api> api;
};

Fixture* make_fixture() {
  auto* f = new Fixture;  // lives until exit
  const std::string base(kBaseConfig);
  f->api_keys = config::load_config_text(
      base + "auth:\n  api_keys:\n    - {name: ops, sha256: " +
          dispatcher::sha256_hex("admin-secret") +
          ", admin: true}\n    - {name: svc, sha256: " + dispatcher::sha256_hex("svc-secret") +
          ", users: [alice]}\n    - {name: up, sha256: " + dispatcher::sha256_hex("any-secret") +
          ", users: [\"*\"]}\n",
      "fuzz.yaml");
  f->gateway = config::load_config_text(
      base + "auth: {mode: gateway, user_header: X-Caller, gateway_keys: [{name: edge, sha256: " +
          dispatcher::sha256_hex("gw-secret") + "}]}\n",
      "fuzz.yaml");
  f->none = config::load_config_text(base + "auth: {mode: none}\n", "fuzz.yaml");
  for (const config::Config* c : {&f->api_keys, &f->gateway, &f->none})
    f->authenticators.push_back(std::make_unique<dispatcher::Authenticator>(c->auth));
  f->defaults = dispatcher::submission_defaults(f->api_keys);
  f->registry = std::make_unique<agentfleet::metrics::MetricsRegistry>();
  f->metrics = std::make_unique<agentfleet::metrics::DispatcherMetrics>(*f->registry, f->api_keys);
  f->db = std::make_unique<agentfleet::pg::DbPool>(f->api_keys.postgres.url, 1, 1000, 1);
  f->store = std::make_unique<agentfleet::pg::ApiStore>(*f->db);
  f->feed = std::make_unique<dispatcher::TaskFeed>(f->io, f->none, nullptr);
  f->api = std::make_unique<dispatcher::Api>(f->none, *f->store, *f->metrics, *f->feed);
  return f;
}

Fixture& fixture() {
  static Fixture* f = make_fixture();
  return *f;
}

bool is_json_object(const std::string& text) {
  rapidjson::Document doc;
  return codec::parse_json(doc, text) && doc.IsObject();
}

bool is_hex(std::string_view text) {
  return text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// A submission the way Api::submit and each batch line check it.
void check_submission(std::string_view body, const codec::SubmissionDefaults& defaults,
                      const std::vector<dispatcher::Caller>& callers) {
  auto parsed = codec::parse_submission(body, defaults);
  auto* submission = std::get_if<codec::Submission>(&parsed);
  if (!submission)
    return;
  for (const auto& caller : callers)
    (void)caller.may_act_for(submission->spec.user_id);
  if (auto problem = dispatcher::check_references(fixture().api_keys, submission->spec))
    require(!problem->path.empty() && !problem->message.empty(), "a reference problem");
}

void handle(http::Request& request, bool streamed) {
  Fixture& f = fixture();
  const std::string target(request.target());
  const std::string path(http::target_path(target));
  require(target.compare(0, path.size(), path) == 0, "target_path is not a prefix");
  const std::string_view route = dispatcher::route_template(path);
  require(route == "unmatched" || route.substr(0, 1) == "/", "route_template");

  std::vector<std::optional<std::string>> query;
  for (const char* name :
       {"user_id", "status", "limit", "before", "wait", "from", "to", "batch_id", "priority"}) {
    query.push_back(http::query_param(target, name));
  }
  const std::string user_id = query[0].value_or("");

  const std::string traceparent = dispatcher::traceparent_for(std::string(request["traceparent"]));
  require(traceparent.size() == 55 && traceparent.compare(0, 3, "00-") == 0 &&
              is_hex(traceparent.substr(3, 32)) && traceparent[35] == '-' &&
              is_hex(traceparent.substr(36, 16)) && traceparent[52] == '-' &&
              is_hex(traceparent.substr(53, 2)),
          "traceparent_for wrote no valid traceparent");

  std::vector<dispatcher::Caller> callers;
  for (const auto& auth : f.authenticators) {
    auto who = auth->authenticate(request);
    if (auto* caller = std::get_if<dispatcher::Caller>(&who)) {
      (void)caller->may_act_for(user_id);
      callers.push_back(std::move(*caller));
    } else {
      const auto& failure = std::get<dispatcher::AuthFailure>(who);
      require(failure.message.find("secret") == std::string::npos, "a key in an auth failure");
    }
  }

  // The error bodies quote the path, the method and ids from the URL.
  const http::Response not_found = http::make_error(
      request, http::Status::not_found, "not_found",
      "no route for " + std::string(request.method_string()) + " " + path, "/path");
  require(is_json_object(not_found.body()), "an error body that is not a JSON object");
  const http::Response forbidden =
      http::make_error(request, http::Status::forbidden, "forbidden",
                       "this key may not act for user '" + user_id + "'", "/query/user_id");
  require(is_json_object(forbidden.body()), "an error body that is not a JSON object");
  (void)http::make_response(request, http::Status::ok, R"({"status":"ok"})");

  const auto parts = dispatcher::path_segments(path);
  if (parts.size() < 2 || parts[0] != "v1")
    return;
  const auto method = request.method();
  if (streamed) {
    if (!(method == bhttp::verb::post && parts.size() == 2 && parts[1] == "batches"))
      return;
    // Api::submit_batch: the query, then one submission per line.
    codec::SubmissionDefaults batch = f.defaults;
    batch.priority = agentfleet::Priority::kBatch;
    if (query[8]) {
      auto priority = agentfleet::parse_priority(*query[8]);
      if (!priority)
        return;
      batch.priority = *priority;
    }
    const std::string batch_id = query[7].value_or("");
    if (!batch_id.empty() && (batch_id.size() > dispatcher::kMaxBatchIdBytes ||
                              dispatcher::id_problem(batch_id, dispatcher::kMaxBatchIdBytes)))
      return;
    if (!user_id.empty() && dispatcher::id_problem(user_id, dispatcher::kMaxUserIdChars))
      return;
    const std::string_view body = request.body();
    std::size_t start = 0;
    while (start < body.size()) {
      const std::size_t nl = body.find('\n', start);
      const std::string_view line =
          body.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
      if (line.find_first_not_of(" \t\r") != std::string_view::npos)
        check_submission(line, batch, callers);
      if (nl == std::string_view::npos)
        break;
      start = nl + 1;
    }
    return;
  }
  if (parts[1] == "tasks" && parts.size() == 2 && method == bhttp::verb::post) {
    check_submission(request.body(), f.defaults, callers);
  } else if (parts[1] == "users" && parts.size() == 4 && parts[3] == "limits" &&
             method == bhttp::verb::put &&
             !dispatcher::id_problem(parts[2], dispatcher::kMaxUserIdChars)) {
    auto parsed = dispatcher::parse_limits_body(f.api_keys, parts[2], request.body());
    if (auto* overrides = std::get_if<agentfleet::pg::UserOverrides>(&parsed)) {
      const auto effective = dispatcher::effective_limits(f.api_keys, *overrides);
      require(is_json_object(dispatcher::limits_json(parts[2], effective, *overrides)),
              "limits_json wrote no JSON object");
    }
  }
}

// Feeds `bytes` to the parser; false when the connection ends here (an error, or the bytes
// ran out before what the parser needs: the server would wait, then time out).
bool feed(bhttp::request_parser<bhttp::string_body>& parser, std::string_view& bytes,
          bool until_done) {
  while (until_done ? !parser.is_done() : !parser.is_header_done()) {
    boost::system::error_code ec;
    const std::size_t used = parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
    bytes.remove_prefix(used);
    if (ec == bhttp::error::need_more || (!ec && used == 0)) {
      if (!bytes.empty() && used > 0)
        continue;
      parser.put_eof(ec);  // the client closed the connection
      return !ec && (until_done ? parser.is_done() : parser.is_header_done());
    }
    if (ec)
      return false;
  }
  return true;
}

// The body of a streamed request, read as Exchange::read_body reads it: the header parser
// moved into a request_parser<buffer_body> (nothing is reserved for the Content-Length),
// pieces of at most kPiece bytes. False when the body cannot be read whole.
bool read_streamed_body(bhttp::request_parser<bhttp::string_body>& header_parser,
                        std::string_view& bytes, const http::ServerOptions& options,
                        std::string& out) {
  bhttp::request_parser<bhttp::buffer_body> parser(std::move(header_parser));
  parser.body_limit(options.stream_body_limit);
  const auto length = parser.content_length();
  if (length && *length > options.stream_body_limit)
    return false;  // read_body fails with body_limit: the upload gets 413
  constexpr std::size_t kPiece = 4096;
  while (!parser.is_done()) {
    const std::size_t old_size = out.size();
    out.resize(old_size + kPiece);
    auto& body = parser.get().body();
    body.data = out.data() + old_size;
    body.size = kPiece;
    body.more = true;
    boost::system::error_code ec;
    const std::size_t used = parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
    bytes.remove_prefix(used);
    out.resize(old_size + (kPiece - body.size));
    body.data = nullptr;
    body.size = 0;
    if (ec == bhttp::error::need_buffer)
      continue;  // the piece is full
    if (ec == bhttp::error::need_more || (!ec && used == 0)) {
      if (!bytes.empty() && used > 0)
        continue;
      parser.put_eof(ec);  // the client closed the connection before the body's end
      return !ec && parser.is_done();
    }
    if (ec)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const http::ServerOptions options;  // the dispatcher's API uses the defaults
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (int n = 0; n < 4 && !bytes.empty(); ++n) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    parser.eager(false);
    if (!feed(parser, bytes, false))
      return 0;
    const http::Admission admission = fixture().api->admit(parser.get());
    if (admission.refusal) {
      require(admission.refusal->result_int() >= 400, "a refusal is an error status");
      require(is_json_object(admission.refusal->body()), "a refusal's body is a JSON object");
      if (!parser.is_done() || !parser.keep_alive())
        return 0;  // the body is never read: the connection closes
      continue;
    }
    if (admission.streamed) {
      http::Request head = parser.get();
      std::string body;
      if (read_streamed_body(parser, bytes, options, body)) {
        head.body() = std::move(body);
        handle(head, true);
      }
      return 0;  // a streamed exchange is the last on its connection
    }
    const std::size_t limit = admission.body_limit.value_or(options.body_limit);
    const auto length = parser.content_length();
    if (length && *length > limit)
      return 0;  // 413 on the head; the connection is closed
    parser.body_limit(limit);
    parser.eager(true);
    if (!feed(parser, bytes, true))
      return 0;
    const bool keep_alive = parser.keep_alive();
    http::Request request = parser.release();
    handle(request, false);
    if (!keep_alive)
      return 0;
  }
  return 0;
}
