// agentfleet-worker: runs dispatched tasks. `--config FILE` (default config/agentfleet.yaml
// or $AGENTFLEET_CONFIG); `--check-config` validates and exits.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/adapters/log.hpp"
#include "core/config/config.hpp"
#include "core/domain/build_info.hpp"
#include "core/domain/redaction.hpp"
#include "worker/worker_service.hpp"

int main(int argc, char** argv) {
  std::string path = agentfleet::config::default_config_path();
  bool check_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--config" && i + 1 < argc) {
      path = argv[++i];
    } else if (arg == "--check-config") {
      check_only = true;
    } else if (arg == "--version") {
      std::fputs(agentfleet::version_line("agentfleet-worker").c_str(), stdout);
      return 0;
    } else if (arg == "--help" || arg == "-h") {
      std::printf("usage: agentfleet-worker [--config FILE] [--check-config] [--version]\n");
      return 0;
    } else {
      std::fprintf(stderr, "agentfleet-worker: unknown argument '%s' (see --help)\n", arg.c_str());
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
    return agentfleet::worker::run_worker(config);
  } catch (const std::exception& e) {
    // A running process reports in its log format; a configuration check, to a person.
    if (check_only)
      std::fprintf(stderr, "agentfleet-worker: %s\n",
                   agentfleet::redact_credentials(e.what()).c_str());
    else
      agentfleet::log::error("worker", std::string("cannot run: ") + e.what());
    return 1;
  }
}
