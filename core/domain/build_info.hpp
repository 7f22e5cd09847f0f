#pragma once
// What this build of agentfleet is: the project's version (CMakeLists.txt `project()`,
// also the chart's appVersion), the build type and the compiler. Shown by `agentctl
// --version`, `agentfleet-dispatcher --version`, `agentfleet-worker --version`, and exported
// by every process as the metric agentfleet_build_info.

#include <string>
#include <string_view>

namespace agentfleet {

struct BuildInfo {
  std::string_view version;     // "0.1.0"
  std::string_view build_type;  // "RelWithDebInfo", "Debug", ...
  std::string_view compiler;    // "GNU 12.2.0"
};

const BuildInfo& build_info();

// "PROGRAM 0.1.0 (RelWithDebInfo, GNU 12.2.0)\n": what --version prints.
std::string version_line(std::string_view program);

}  // namespace agentfleet
