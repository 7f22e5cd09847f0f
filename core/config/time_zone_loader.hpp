#pragma once
// Loads IANA time zones from the system's zoneinfo (TZif files) once each and caches
// them. Unknown or malformed names fall back to UTC and say so. Thread-safe.

#include <string>

#include "core/domain/time_zone.hpp"

namespace agentfleet::config {

struct LoadedZone {
  TimeZone zone;
  bool found = true;
};

LoadedZone load_time_zone(const std::string& name,
                          const std::string& zoneinfo_dir = "/usr/share/zoneinfo");

}  // namespace agentfleet::config
