#include "core/domain/build_info.hpp"

// Set for this file only (core/CMakeLists.txt), so a new version rebuilds one file.
#ifndef AGENTFLEET_VERSION
#error "AGENTFLEET_VERSION is set by core/CMakeLists.txt"
#endif

namespace agentfleet {

const BuildInfo& build_info() {
  static const BuildInfo info{AGENTFLEET_VERSION, AGENTFLEET_BUILD_TYPE, AGENTFLEET_COMPILER};
  return info;
}

std::string version_line(std::string_view program) {
  const BuildInfo& build = build_info();
  return std::string(program) + " " + std::string(build.version) + " (" +
         std::string(build.build_type) + ", " + std::string(build.compiler) + ")\n";
}

}  // namespace agentfleet
