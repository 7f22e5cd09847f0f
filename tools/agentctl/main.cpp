// agentctl: the command line of agentfleet for users and operators. Submits tasks and
// batches and follows them, reads the bill, changes limits, follows the results topic and
// replays dead letters. See tools/agentctl/README.md; `agentctl --help` lists the commands
// and the exit codes.
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tools/agentctl/commands.hpp"
#include "tools/agentctl/outcomes.hpp"

using namespace agentfleet::agentctl;

int main(int argc, char** argv) {
  try {
    const Invocation inv = parse_command_line(std::vector<std::string>(argv + 1, argv + argc));
    if (inv.version) {
      print(version_text());
      return kExitOk;
    }
    if (inv.help || !inv.command) {
      print(inv.command         ? command_help(*inv.command)
            : inv.group.empty() ? general_help()
                                : group_help(inv.group));
      return kExitOk;
    }
    const Settings settings = load_settings(inv.globals);
    const ApiClient api(settings);
    Context ctx{inv, settings, api, isatty(STDOUT_FILENO) == 1};
    return command_function(inv.command->name)(ctx);
  } catch (const UsageError& e) {
    note(e.what());
    return kExitUsage;
  } catch (const CommandFailure& e) {
    note(e.what());
    return e.code;
  } catch (const std::exception& e) {
    note(e.what());
    return kExitUnavailable;
  }
}
