// agentfleet-dispatcher: `serve` (default) runs the API, scheduler and relay; `migrate`
// applies the database migrations; `--check-config` validates the configuration.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/adapters/log.hpp"
#include "core/adapters/pg/migrations.hpp"
#include "core/config/config.hpp"
#include "core/domain/build_info.hpp"
#include "core/domain/redaction.hpp"
#include "dispatcher/dispatcher_service.hpp"

namespace agentfleet::embedded {
// The web console's files, built from ui/ by tools/build-console (dispatcher/CMakeLists.txt);
// none when the build has AGENTFLEET_CONSOLE off.
const std::vector<std::pair<std::string_view, std::string_view>>& console();
}  // namespace agentfleet::embedded

int main(int argc, char** argv) {
  std::string path = agentfleet::config::default_config_path();
  std::string command = "serve";
  bool check_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--config" && i + 1 < argc) {
      path = argv[++i];
    } else if (arg == "--check-config") {
      check_only = true;
    } else if (arg == "serve" || arg == "migrate") {
      command = arg;
    } else if (arg == "--version") {
      std::fputs(agentfleet::version_line("agentfleet-dispatcher").c_str(), stdout);
      return 0;
    } else if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: agentfleet-dispatcher [--config FILE] [--check-config] [--version] "
          "[serve|migrate]\n"
          "  serve    run the HTTP API, the scheduler and the outbox relay (default)\n"
          "  migrate  apply the database migrations and exit\n");
      return 0;
    } else {
      std::fprintf(stderr, "agentfleet-dispatcher: unknown argument '%s' (see --help)\n",
                   arg.c_str());
      return 2;
    }
  }
  try {
    const auto config = agentfleet::config::load_config_file(path);
    if (check_only) {
      std::printf("%s: ok\n", path.c_str());
      return 0;
    }
    agentfleet::log::protect_config_secrets(config);
    if (command == "migrate") {
      const auto report = agentfleet::pg::migrate(config.postgres.url);
      for (const auto& name : report.applied)
        std::printf("applied %s\n", name.c_str());
      std::printf("migrations: %zu applied, %zu already present\n", report.applied.size(),
                  report.already.size());
      return 0;
    }
    return agentfleet::dispatcher::run_dispatcher(config, agentfleet::embedded::console());
  } catch (const std::exception& e) {
    // A running process reports in its log format; a configuration check, to a person.
    if (check_only)
      std::fprintf(stderr, "agentfleet-dispatcher: %s\n",
                   agentfleet::redact_credentials(e.what()).c_str());
    else
      agentfleet::log::error("dispatcher", std::string("cannot run: ") + e.what());
    return 1;
  }
}
