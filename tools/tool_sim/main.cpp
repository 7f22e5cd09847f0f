// agentfleet-tool-sim: the demo calendar/todo tool service over HTTP. Flags and HTTP wiring
// only; the behaviour lives in ToolService (tool_service.hpp). See README.md.

#include "core/adapters/http/server.hpp"
#include "tools/tool_sim/seed.hpp"
#include "tools/tool_sim/time_model.hpp"
#include "tools/tool_sim/tool_service.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace http = agentfleet::http;
namespace tool_sim = agentfleet::tool_sim;

constexpr std::string_view kUsage = R"(usage: agentfleet-tool-sim [flags]

The demo calendar/todo tool service (search_items, create_item, update_item, delete_item,
complete_todo, get_event_groups) that agentfleet workers call over HTTP.

  --host HOST          address to listen on (default 127.0.0.1)
  --port N             port; 0 picks a free one (default 0)
  --port-file PATH     write the bound port to PATH (atomically: temp file + rename)
  --seed FILE          YAML seed of users, groups and items (default: no items)
  --latency-ms N       fixed delay added to every tool call (default 0)
  --utc-offset +HH:MM  fixed offset for "today" and timestamps (default +08:00)
  --threads N          io_context threads (default 1)
  --max-keys N         idempotency keys kept before the oldest are forgotten (default 1000000)
  --help               this text

Always prints "listening on http://HOST:PORT" on stdout once ready. SIGINT/SIGTERM exit 0.
)";

struct Flags {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string port_file;
  std::string seed;
  int latency_ms = 0;
  int utc_offset_minutes = 8 * 60;
  int threads = 1;
  long long max_keys = 1000000;
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
    } else if (flag == "--latency-ms") {
      flags.latency_ms = static_cast<int>(parse_number(flag, value(), 0, 600000));
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

struct App {
  tool_sim::ToolService* service = nullptr;
  std::string seed_path;
  int latency_ms = 0;
};

// Re-reads the seed file, so edits are picked up without a restart.
void reset(App& app) {
  app.service->reset(app.seed_path.empty() ? std::string() : read_file(app.seed_path));
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
    if (method != bhttp_verb::post)
      co_return method_not_allowed();
    if (app->latency_ms > 0) {
      asio::steady_timer timer(co_await asio::this_coro::executor);
      timer.expires_after(std::chrono::milliseconds(app->latency_ms));
      co_await timer.async_wait(asio::use_awaitable);
    }
    const auto response =
        app->service->call({path.substr(kToolsPrefix.size()), header(request, "X-User-Id"),
                            header(request, "Idempotency-Key"), request.body()});
    auto out =
        http::make_response(request, static_cast<http::Status>(response.status), response.body);
    if (response.replayed)
      out.set("Idempotent-Replayed", "true");
    co_return out;
  }
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
    tool_sim::ToolService service(options);
    App app{&service, flags.seed, flags.latency_ms};
    reset(app);

    asio::io_context io(flags.threads);
    http::ServerOptions server_options;
    server_options.host = flags.host;
    server_options.port = static_cast<std::uint16_t>(flags.port);
    server_options.server_name = "agentfleet-tool-sim";
    http::Server server(io.get_executor(), server_options,
                        [&app](http::Request& request) { return handle(&app, request); });
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
