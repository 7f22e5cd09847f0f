// agentfleet-tool-sim: the demo calendar/todo tool service over HTTP. Flags and HTTP wiring
// only; the behaviour lives in ToolService (tool_service.hpp). See README.md.

#include "core/adapters/http/server.hpp"
#include "tools/llm_sim/fault_schedule.hpp"
#include "tools/llm_sim/latency.hpp"
#include "tools/llm_sim/timing_log.hpp"
#include "tools/tool_sim/seed.hpp"
#include "tools/tool_sim/time_model.hpp"
#include "tools/tool_sim/tool_service.hpp"

#include <rapidjson/document.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <unistd.h>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace http = agentfleet::http;
namespace tool_sim = agentfleet::tool_sim;
namespace sim = agentfleet::sim;

constexpr std::string_view kUsage = R"(usage: agentfleet-tool-sim [flags]

The demo calendar/todo tool service (search_items, create_item, update_item, delete_item,
complete_todo, get_event_groups) that agentfleet workers call over HTTP.

  --host HOST          address to listen on (default 127.0.0.1)
  --port N             port; 0 picks a free one (default 0)
  --port-file PATH     write the bound port to PATH (atomically: temp file + rename)
  --seed FILE          YAML seed of users, groups and items (default: no items)
  --latency DIST       delay before every tool call: fixed:MS, uniform:MIN:MAX or
                       lognormal:MEDIAN:SIGMA (default fixed:0)
  --latency-ms N       the same as --latency fixed:N
  --failure-rate P     answer this share of tool calls (0..1) with 500 before executing
                       them (no side effect, no idempotency record; default 0)
  --random-seed N      seed of the random source (latency, failure rate; default 1)
  --envelope data|bare results as {"data": RESULT} or the bare RESULT (default bare)
  --utc-offset +HH:MM  fixed offset for "today" and timestamps (default +08:00)
  --threads N          io_context threads (default 1)
  --max-keys N         idempotency keys kept before the oldest are forgotten (default 1000000)
  --keyless-tools A,B  these tools keep no idempotency keys, as a service without support
                       for them: every call executes (default: none)
  --timing-log PATH    append one line per executed tool call: the tool, the traceparent's
                       trace id, received and answered (µs since the epoch); tools/bench
  --help               this text

Always prints "listening on http://HOST:PORT" on stdout once ready. SIGINT/SIGTERM exit 0.
Run-time control: GET|POST|DELETE /admin/faults, GET|POST /admin/latency (see README.md).
)";

struct Flags {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string port_file;
  std::string seed;
  sim::LatencyDistribution latency;
  double failure_rate = 0;
  std::uint64_t random_seed = 1;
  tool_sim::Envelope envelope = tool_sim::Envelope::kBare;
  int utc_offset_minutes = 8 * 60;
  int threads = 1;
  long long max_keys = 1000000;
  std::vector<std::string> keyless_tools;
  std::string timing_log;
};

struct UsageError {
  std::string message;
};

long long parse_number(const std::string& flag, const std::string& text, long long min,
                       long long max) {
  std::size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || value < min || value > max) {
    throw UsageError{flag + ": expected an integer in " + std::to_string(min) + ".." +
                     std::to_string(max) + ", got '" + text + "'"};
  }
  return value;
}

// Returns nullopt for --help.
std::optional<Flags> parse_flags(int argc, char** argv) {
  Flags flags;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::optional<std::string> inline_value;
    if (const auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    if (flag == "--help" || flag == "-h")
      return std::nullopt;
    const auto value = [&]() -> std::string {
      if (inline_value)
        return *inline_value;
      if (i + 1 >= args.size())
        throw UsageError{flag + ": missing value"};
      return args[++i];
    };
    if (flag == "--host") {
      flags.host = value();
    } else if (flag == "--port") {
      flags.port = static_cast<int>(parse_number(flag, value(), 0, 65535));
    } else if (flag == "--port-file") {
      flags.port_file = value();
    } else if (flag == "--seed") {
      flags.seed = value();
    } else if (flag == "--timing-log") {
      flags.timing_log = value();
    } else if (flag == "--latency-ms") {
      flags.latency = sim::LatencyDistribution::fixed(
          static_cast<double>(parse_number(flag, value(), 0, 600000)));
    } else if (flag == "--latency") {
      std::string problem;
      const auto latency = sim::parse_latency(value(), &problem);
      if (!latency)
        throw UsageError{"--latency: " + problem};
      flags.latency = *latency;
    } else if (flag == "--failure-rate") {
      const std::string text = value();
      std::size_t used = 0;
      double rate = -1;
      try {
        rate = std::stod(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != text.size() || !(rate >= 0 && rate <= 1))
        throw UsageError{"--failure-rate: expected a number from 0 to 1, got '" + text + "'"};
      flags.failure_rate = rate;
    } else if (flag == "--random-seed") {
      flags.random_seed = static_cast<std::uint64_t>(
          parse_number(flag, value(), 0, std::numeric_limits<long long>::max()));
    } else if (flag == "--envelope") {
      const std::string text = value();
      if (text == "data")
        flags.envelope = tool_sim::Envelope::kData;
      else if (text == "bare")
        flags.envelope = tool_sim::Envelope::kBare;
      else
        throw UsageError{"--envelope: expected data or bare, got '" + text + "'"};
    } else if (flag == "--utc-offset") {
      const std::string text = value();
      const auto offset = tool_sim::parse_utc_offset(text);
      if (!offset)
        throw UsageError{"--utc-offset: expected +HH:MM or -HH:MM, got '" + text + "'"};
      flags.utc_offset_minutes = *offset;
    } else if (flag == "--threads") {
      flags.threads = static_cast<int>(parse_number(flag, value(), 1, 64));
    } else if (flag == "--max-keys") {
      flags.max_keys = parse_number(flag, value(), 1, 1000000000);
    } else if (flag == "--keyless-tools") {
      std::stringstream names(value());
      for (std::string name; std::getline(names, name, ',');) {
        const auto& known = tool_sim::ToolService::tool_names();
        if (std::find(known.begin(), known.end(), name) == known.end())
          throw UsageError{"--keyless-tools: no tool named '" + name + "'"};
        flags.keyless_tools.push_back(name);
      }
    } else {
      throw UsageError{"unknown flag '" + args[i] + "'"};
    }
  }
  return flags;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_port_file(const std::string& path, std::uint16_t port) {
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::trunc);
    out << port << "\n";
    if (!out.flush())
      throw std::runtime_error("cannot write " + temp);
  }
  std::filesystem::rename(temp, path);
}

std::string_view header(const http::Request& request, std::string_view name) {
  const auto value = request[boost::beast::string_view(name.data(), name.size())];
  return {value.data(), value.size()};
}

// The latency POST /admin/latency changes; --latency is the starting value.
class LatencySetting {
 public:
  explicit LatencySetting(sim::LatencyDistribution latency) : latency_(latency) {}
  sim::LatencyDistribution get() {
    std::lock_guard lock(mutex_);
    return latency_;
  }
  void set(sim::LatencyDistribution latency) {
    std::lock_guard lock(mutex_);
    latency_ = latency;
  }

 private:
  std::mutex mutex_;
  sim::LatencyDistribution latency_;
};

struct App {
  tool_sim::ToolService* service = nullptr;
  std::string seed_path;
  sim::LatencyDistribution flag_latency;
  sim::RandomSource* random = nullptr;
  sim::FaultSchedule* faults = nullptr;
  LatencySetting* latency = nullptr;
  sim::TimingLog* timing = nullptr;  // --timing-log, when given
};

// The modes tool-sim serves; a fault may be scoped to one tool ("tool": "create_item").
sim::FaultRules tool_fault_rules() {
  using sim::FaultMode;
  sim::FaultRules rules;
  rules.modes = {
      FaultMode::kHttp429,          FaultMode::kHttp500, FaultMode::kHttp502, FaultMode::kHttp503,
      FaultMode::kCloseMidResponse, FaultMode::kNotJson, FaultMode::kHang,    FaultMode::kSlow};
  rules.scope_key = "tool";
  rules.require_bound = true;
  return rules;
}

http::Reply reply_of(http::Response response) {
  http::Reply reply;
  reply.response = std::move(response);
  return reply;
}

// GET, POST and DELETE /admin/faults.
http::Response admin_faults(App* app, const http::Request& request) {
  using verb = boost::beast::http::verb;
  if (request.method() == verb::get)
    return http::make_response(request, http::Status::ok, app->faults->list_json());
  if (request.method() == verb::delete_) {
    const auto all = http::query_param(
        std::string_view(request.target().data(), request.target().size()), "all");
    const std::size_t cleared = app->faults->clear(all && (*all == "1" || *all == "true"));
    return http::make_response(request, http::Status::ok,
                               "{\"cleared\":" + std::to_string(cleared) + "}");
  }
  if (request.method() != verb::post)
    return http::make_error(request, http::Status::method_not_allowed, "method_not_allowed",
                            "use GET, POST or DELETE /admin/faults");
  auto parsed = sim::parse_fault_spec(request.body(), tool_fault_rules());
  if (auto* problem = std::get_if<sim::FaultSpecError>(&parsed))
    return http::make_error(request, http::Status::bad_request, "invalid_fault", problem->message,
                            problem->path);
  const std::uint64_t id = app->faults->add(std::get<sim::FaultSpec>(std::move(parsed)));
  return http::make_response(request, http::Status::created, "{\"id\":" + std::to_string(id) + "}");
}

// GET and POST /admin/latency: {"latency":"uniform:50:300"}; null goes back to --latency.
http::Response admin_latency(App* app, const http::Request& request) {
  using verb = boost::beast::http::verb;
  if (request.method() == verb::post) {
    rapidjson::Document document;
    document.Parse(request.body().data(), request.body().size());
    std::string error = "expected a JSON object {\"latency\": \"uniform:50:300\"}";
    std::optional<sim::LatencyDistribution> latency;
    if (!document.HasParseError() && document.IsObject() && document.HasMember("latency")) {
      if (document["latency"].IsNull())
        latency = app->flag_latency;
      else if (document["latency"].IsString())
        latency = sim::parse_latency(document["latency"].GetString(), &error);
    }
    if (!latency)
      return http::make_error(request, http::Status::bad_request, "invalid_latency", error,
                              "/latency");
    app->latency->set(*latency);
  } else if (request.method() != verb::get) {
    return http::make_error(request, http::Status::method_not_allowed, "method_not_allowed",
                            "use GET or POST /admin/latency");
  }
  return http::make_response(request, http::Status::ok,
                             "{\"latency\":\"" + app->latency->get().describe() + "\"}");
}

// Re-reads the seed file, so edits are picked up without a restart.
void reset(App& app) {
  app.service->reset(app.seed_path.empty() ? std::string() : read_file(app.seed_path));
}

asio::awaitable<http::Response> handle(App* app, http::Request& request);

// Tool calls, with their faults and latency; every other route answers through handle().
asio::awaitable<http::Reply> handle_reply(App* app, http::Request& request) {
  const auto target = request.target();
  const std::string_view path = http::target_path(std::string_view(target.data(), target.size()));
  constexpr std::string_view kToolsPrefix = "/tools/";
  if (path.substr(0, kToolsPrefix.size()) != kToolsPrefix ||
      request.method() != boost::beast::http::verb::post) {
    co_return reply_of(co_await handle(app, request));
  }
  const auto received = std::chrono::system_clock::now();
  tool_sim::ToolCall call{path.substr(kToolsPrefix.size()), header(request, "X-User-Id"),
                          header(request, "Idempotency-Key"), request.body()};
  {
    const std::string_view attempt = header(request, "X-Task-Attempt");
    int value = 0;
    const auto [end, error] =
        std::from_chars(attempt.data(), attempt.data() + attempt.size(), value);
    if (error == std::errc() && end == attempt.data() + attempt.size() && value > 0)
      call.attempt = value;
  }
  std::optional<sim::FaultSpec> fault = app->faults->next(std::nullopt);
  if (!fault) {
    sim::FaultTarget fault_target;
    fault_target.scope = call.tool;
    fault = app->faults->next(fault_target);
  }
  const bool delivery_fault = fault && (fault->mode == sim::FaultMode::kCloseMidResponse ||
                                        fault->mode == sim::FaultMode::kSlow);
  if (fault && !delivery_fault) {
    // Answered before the tool runs: no side effect and no idempotency record.
    const tool_sim::ToolResponse refused = app->service->refuse(call, *fault);
    http::Reply reply = reply_of(
        http::make_response(request, static_cast<http::Status>(refused.status), refused.body));
    for (const auto& [name, value] : sim::retry_headers(*fault))
      reply.response.set(name, value);
    reply.response.set("X-Tool-Sim-Fault", std::string(sim::fault_mode_name(fault->mode)));
    if (fault->mode == sim::FaultMode::kHang) {
      reply.delivery = http::Delivery::kHang;
      reply.hang_for = std::chrono::seconds(fault->hang_s);
    }
    co_return reply;
  }
  // The protocol of docs/tools.md: a key running elsewhere, or an older attempt, is
  // answered now; otherwise the key is this call's until it has run.
  if (std::optional<tool_sim::ToolResponse> refused = app->service->admit(call)) {
    http::Reply reply = reply_of(
        http::make_response(request, static_cast<http::Status>(refused->status), refused->body));
    if (refused->body.find("idempotency_key_in_use") != std::string::npos)
      reply.response.set("Retry-After", "1");
    co_return reply;
  }
  struct Release {
    tool_sim::ToolService* service;
    const tool_sim::ToolCall* call;
    bool armed = true;
    ~Release() {
      if (armed)
        service->release(*call);
    }
  } release{app->service, &call};
  std::chrono::milliseconds delay = app->random->sample(app->latency->get());
  if (fault && fault->mode == sim::FaultMode::kSlow && fault->latency)
    delay += app->random->sample(*fault->latency);
  if (delay.count() > 0) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    timer.expires_after(delay);
    co_await timer.async_wait(asio::use_awaitable);
  }
  release.armed = false;
  const auto response = app->service->call(call);
  http::Reply reply = reply_of(
      http::make_response(request, static_cast<http::Status>(response.status), response.body));
  if (response.replayed)
    reply.response.set("Idempotent-Replayed", "true");
  if (fault) {
    app->service->note_fault(fault->mode);
    reply.response.set("X-Tool-Sim-Fault", std::string(sim::fault_mode_name(fault->mode)));
  }
  if (fault && fault->mode == sim::FaultMode::kCloseMidResponse) {
    // The call executed (and its key is stored); only the answer is lost.
    reply.delivery = http::Delivery::kTruncate;
    reply.truncate_at = reply.response.body().size() / 2;
  }
  if (app->timing) {
    app->timing->record(call.tool, header(request, "traceparent"), received,
                        std::chrono::system_clock::now());
  }
  co_return reply;
}

asio::awaitable<http::Response> handle(App* app, http::Request& request) {
  using bhttp_verb = boost::beast::http::verb;
  const auto target = request.target();
  const std::string_view full_target(target.data(), target.size());
  const std::string_view path = http::target_path(full_target);
  const auto method = request.method();
  const auto method_not_allowed = [&] {
    return http::make_error(request, http::Status::method_not_allowed, "method_not_allowed",
                            "method not allowed for " + std::string(path));
  };

  constexpr std::string_view kToolsPrefix = "/tools/";
  if (path.substr(0, kToolsPrefix.size()) == kToolsPrefix) {
    co_return method_not_allowed();  // POST is served by handle_reply
  }
  if (path == "/admin/faults")
    co_return admin_faults(app, request);
  if (path == "/admin/latency")
    co_return admin_latency(app, request);
  if (path == "/healthz") {
    if (method != bhttp_verb::get)
      co_return method_not_allowed();
    co_return http::make_response(request, http::Status::ok, R"({"status":"ok"})");
  }
  if (path == "/stats") {
    if (method != bhttp_verb::get)
      co_return method_not_allowed();
    co_return http::make_response(request, http::Status::ok, app->service->stats_json());
  }
  if (path == "/records") {
    if (method != bhttp_verb::get)
      co_return method_not_allowed();
    co_return http::make_response(
        request, http::Status::ok,
        app->service->records_json(http::query_param(full_target, "user_id")));
  }
  if (path == "/items") {
    if (method != bhttp_verb::get)
      co_return method_not_allowed();
    const auto user = http::query_param(full_target, "user_id");
    if (!user || user->empty()) {
      co_return http::make_error(request, http::Status::bad_request, "missing_user",
                                 "query parameter user_id is required", "user_id");
    }
    co_return http::make_response(request, http::Status::ok, app->service->items_json(*user));
  }
  if (path == "/admin/reset") {
    if (method != bhttp_verb::post)
      co_return method_not_allowed();
    try {
      reset(*app);
    } catch (const std::exception& e) {
      // The previous state stays in place; the operator fixes the file and retries.
      co_return http::make_error(request, http::Status::internal_server_error, "invalid_seed",
                                 e.what());
    }
    co_return http::make_response(request, http::Status::ok, R"({"reset":true})");
  }
  co_return http::make_error(request, http::Status::not_found, "not_found",
                             "no route for " + std::string(path));
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  try {
    auto parsed = parse_flags(argc, argv);
    if (!parsed) {
      std::cout << kUsage;
      return 0;
    }
    flags = *parsed;
  } catch (const UsageError& e) {
    std::cerr << "agentfleet-tool-sim: " << e.message << "\n\n" << kUsage;
    return 2;
  }

  try {
    tool_sim::ToolServiceOptions options;
    options.utc_offset_minutes = flags.utc_offset_minutes;
    options.max_keys = static_cast<std::size_t>(flags.max_keys);
    options.keyless_tools = flags.keyless_tools;
    options.envelope = flags.envelope;
    tool_sim::ToolService service(options);
    sim::RandomSource random(flags.random_seed);
    sim::FaultSchedule faults(random, {}, "tool");
    if (flags.failure_rate > 0) {
      sim::FaultSpec failure;
      failure.mode = sim::FaultMode::kHttp500;
      failure.probability = flags.failure_rate;
      faults.add(failure, sim::FaultSchedule::Origin::kStartup);
    }
    LatencySetting latency(flags.latency);
    std::optional<sim::TimingLog> timing;
    if (!flags.timing_log.empty())
      timing.emplace(flags.timing_log);
    App app{&service,
            flags.seed,
            flags.latency,
            &random,
            &faults,
            &latency,
            timing ? &*timing : nullptr};
    reset(app);

    asio::io_context io(flags.threads);
    http::ServerOptions server_options;
    server_options.host = flags.host;
    server_options.port = static_cast<std::uint16_t>(flags.port);
    server_options.server_name = "agentfleet-tool-sim";
    http::Server server(
        io.get_executor(), server_options,
        http::ReplyHandler([&app](http::Request& request) { return handle_reply(&app, request); }));
    server.start();

    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec)
        return;
      server.stop();
      io.stop();
    });

    const std::string shown_host =
        flags.host.find(':') != std::string::npos ? "[" + flags.host + "]" : flags.host;
    std::cout << "listening on http://" << shown_host << ":" << server.port() << std::endl;
    if (!flags.port_file.empty())
      write_port_file(flags.port_file, server.port());

    std::vector<std::thread> extra;
    for (int i = 1; i < flags.threads; ++i)
      extra.emplace_back([&io] { io.run(); });
    io.run();
    for (auto& thread : extra)
      thread.join();
    return 0;
  } catch (const tool_sim::SeedError& e) {
    std::cerr << "agentfleet-tool-sim: " << flags.seed << ": " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "agentfleet-tool-sim: " << e.what() << "\n";
    return 1;
  }
}
