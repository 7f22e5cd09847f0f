// agentfleet-llm-sim: an OpenAI-compatible chat-completions simulator answering from
// scripted scenarios (see README.md). One io_context on the main thread; the simulator
// itself is pure and lives in agentfleet_llm_sim_lib.

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <variant>

#include "core/adapters/http/server.hpp"
#include "tools/llm_sim/simulator.hpp"

namespace {

namespace asio = boost::asio;
namespace http = agentfleet::http;
namespace llm_sim = agentfleet::llm_sim;

constexpr const char* kUsage =
    "usage: agentfleet-llm-sim --scenarios FILE [options]\n"
    "\n"
    "An OpenAI-compatible chat-completions simulator answering from scripted scenarios.\n"
    "\n"
    "  --scenarios FILE   scenario file (YAML), required\n"
    "  --host HOST        address to listen on (default 127.0.0.1)\n"
    "  --port N           port to listen on; 0 picks a free one (default 0)\n"
    "  --port-file PATH   write the bound port there (atomically) once listening\n"
    "  --latency-ms N     delay before every answer unless a scenario sets latency_ms "
    "(default 0)\n"
    "  --verbose          log one line per request to stderr\n"
    "  --help             show this text\n"
    "\n"
    "Endpoints: POST /v1/chat/completions, GET /stats, GET /healthz\n";

struct Options {
  std::string scenarios;
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string port_file;
  std::int64_t latency_ms = 0;
  bool verbose = false;
};

struct UsageError {
  std::string message;
};

std::int64_t parse_number(const std::string& flag, const std::string& text, std::int64_t max) {
  std::size_t used = 0;
  long long value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < 0 || value > max) {
    throw UsageError{flag + " expects an integer from 0 to " + std::to_string(max) + ", got '" +
                     text + "'"};
  }
  return value;
}

// Returns nullopt when --help was given.
std::optional<Options> parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      return std::nullopt;
    }
    if (flag == "--verbose") {
      options.verbose = true;
      continue;
    }
    if (i + 1 >= argc) {
      throw UsageError{flag + " needs a value"};
    }
    const std::string value = argv[++i];
    if (flag == "--scenarios") {
      options.scenarios = value;
    } else if (flag == "--host") {
      options.host = value;
    } else if (flag == "--port") {
      options.port = static_cast<std::uint16_t>(parse_number(flag, value, 65535));
    } else if (flag == "--port-file") {
      options.port_file = value;
    } else if (flag == "--latency-ms") {
      options.latency_ms = parse_number(flag, value, 600000);
    } else {
      throw UsageError{"unknown option " + flag};
    }
  }
  if (options.scenarios.empty()) {
    throw UsageError{"--scenarios FILE is required"};
  }
  return options;
}

void write_port_file(const std::string& path, std::uint16_t port) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << port << '\n';
    out.flush();
    if (!out) {
      throw std::runtime_error("cannot write " + temporary);
    }
  }
  std::filesystem::rename(temporary, path);
}

// Counters for GET /stats. Guarded by a mutex so the handler stays correct should the
// io_context ever run on several threads.
class Stats {
 public:
  std::uint64_t record(const llm_sim::Completion& completion) {
    std::lock_guard lock(mutex_);
    ++requests_;
    ++by_scenario_[completion.scenario];
    prompt_tokens_ += completion.usage.prompt_tokens;
    completion_tokens_ += completion.usage.completion_tokens;
    cached_tokens_ += completion.usage.cached_tokens;
    return requests_;
  }
  void record_rejected() {
    std::lock_guard lock(mutex_);
    ++rejected_;
  }
  std::uint64_t next_sequence() {
    std::lock_guard lock(mutex_);
    return ++sequence_;
  }
  std::string to_json() {
    std::lock_guard lock(mutex_);
    rapidjson::StringBuffer out;
    rapidjson::Writer<rapidjson::StringBuffer> writer(out);
    writer.StartObject();
    writer.Key("requests");
    writer.Uint64(requests_);
    writer.Key("rejected");
    writer.Uint64(rejected_);
    writer.Key("by_scenario");
    writer.StartObject();
    for (const auto& [name, count] : by_scenario_) {
      writer.Key(name.c_str(), static_cast<rapidjson::SizeType>(name.size()));
      writer.Uint64(count);
    }
    writer.EndObject();
    writer.Key("prompt_tokens");
    writer.Int64(prompt_tokens_);
    writer.Key("completion_tokens");
    writer.Int64(completion_tokens_);
    writer.Key("cached_tokens");
    writer.Int64(cached_tokens_);
    writer.EndObject();
    return std::string(out.GetString(), out.GetSize());
  }

 private:
  std::mutex mutex_;
  std::uint64_t sequence_ = 0;
  std::uint64_t requests_ = 0;
  std::uint64_t rejected_ = 0;
  std::map<std::string, std::uint64_t> by_scenario_;
  std::int64_t prompt_tokens_ = 0;
  std::int64_t completion_tokens_ = 0;
  std::int64_t cached_tokens_ = 0;
};

struct App {
  const llm_sim::Simulator& simulator;
  const Options& options;
  Stats& stats;
};

// OpenAI's error shape: {"error": {"message", "type", "param", "code"}}.
http::Response openai_error(const http::Request& request, http::Status status,
                            const std::string& message, const std::string& type,
                            const std::string& param = {}) {
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> writer(out);
  writer.StartObject();
  writer.Key("error");
  writer.StartObject();
  writer.Key("message");
  writer.String(message.c_str(), static_cast<rapidjson::SizeType>(message.size()));
  writer.Key("type");
  writer.String(type.c_str(), static_cast<rapidjson::SizeType>(type.size()));
  writer.Key("param");
  if (param.empty()) {
    writer.Null();
  } else {
    writer.String(param.c_str(), static_cast<rapidjson::SizeType>(param.size()));
  }
  writer.Key("code");
  writer.Null();
  writer.EndObject();
  writer.EndObject();
  return http::make_response(request, status, std::string(out.GetString(), out.GetSize()));
}

asio::awaitable<http::Response> handle(App& app, http::Request& request) {
  const std::string_view path =
      http::target_path(std::string_view(request.target().data(), request.target().size()));
  const auto method = request.method();
  if (path == "/healthz") {
    co_return http::make_response(request, http::Status::ok, R"({"status":"ok"})");
  }
  if (path == "/stats") {
    if (method != boost::beast::http::verb::get) {
      co_return openai_error(request, http::Status::method_not_allowed, "use GET /stats",
                             "invalid_request_error");
    }
    co_return http::make_response(request, http::Status::ok, app.stats.to_json());
  }
  if (path != "/v1/chat/completions" && path != "/chat/completions") {
    co_return openai_error(
        request, http::Status::not_found,
        "unknown path " + std::string(path) + "; llm-sim serves POST /v1/chat/completions",
        "invalid_request_error");
  }
  if (method != boost::beast::http::verb::post) {
    co_return openai_error(request, http::Status::method_not_allowed,
                           "use POST /v1/chat/completions", "invalid_request_error");
  }

  auto result = app.simulator.complete(request.body(), std::chrono::system_clock::now(),
                                       app.stats.next_sequence());
  if (auto* error = std::get_if<llm_sim::RequestError>(&result)) {
    app.stats.record_rejected();
    if (app.options.verbose) {
      std::cerr << "llm-sim: 400 " << error->message << std::endl;
    }
    co_return openai_error(request, http::Status::bad_request, error->message,
                           "invalid_request_error", error->param);
  }
  auto& completion = std::get<llm_sim::Completion>(result);
  const std::int64_t latency_ms = completion.latency_ms.value_or(app.options.latency_ms);
  if (latency_ms > 0) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    timer.expires_after(std::chrono::milliseconds(latency_ms));
    co_await timer.async_wait(asio::use_awaitable);
  }
  app.stats.record(completion);
  if (app.options.verbose) {
    std::cerr << "llm-sim: " << completion.scenario << " step " << completion.step << ": "
              << completion.summary << " (prompt " << completion.usage.prompt_tokens << ", cached "
              << completion.usage.cached_tokens << ", completion "
              << completion.usage.completion_tokens << ")" << std::endl;
  }
  http::Response response =
      http::make_response(request, http::Status::ok, std::move(completion.body));
  response.set("x-llm-sim-scenario", completion.scenario);
  response.set("x-llm-sim-step", std::to_string(completion.step));
  co_return response;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<Options> parsed;
  try {
    parsed = parse_options(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "agentfleet-llm-sim: " << e.message << "\n\n" << kUsage;
    return 2;
  }
  if (!parsed) {
    std::cout << kUsage;
    return 0;
  }
  const Options& options = *parsed;

  try {
    const llm_sim::Simulator simulator(llm_sim::load_scenario_file(options.scenarios));
    Stats stats;
    App app{simulator, options, stats};

    asio::io_context io;
    http::ServerOptions server_options;
    server_options.host = options.host;
    server_options.port = options.port;
    server_options.server_name = "agentfleet-llm-sim";
    http::Server server(io.get_executor(), server_options,
                        [&app](http::Request& request) { return handle(app, request); });
    server.start();

    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code&, int) {
      server.stop();
      io.stop();
    });

    if (!options.port_file.empty()) {
      write_port_file(options.port_file, server.port());
    }
    std::cout << "listening on http://" << options.host << ":" << server.port() << std::endl;
    std::cerr << "llm-sim: " << simulator.scenarios().scenarios.size() << " scenarios from "
              << options.scenarios << std::endl;

    io.run();
    return 0;
  } catch (const llm_sim::ScenarioError& e) {
    std::cerr << "agentfleet-llm-sim: bad scenario file: " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "agentfleet-llm-sim: " << e.what() << std::endl;
    return 1;
  }
}
