#include "core/config/time_zone_loader.hpp"

#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

namespace agentfleet::config {

namespace {
bool safe_name(const std::string& name) {
  if (name.empty() || name.size() > 64 || name.front() == '/')
    return false;
  if (name.find("..") != std::string::npos)
    return false;
  for (char c : name) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '/' || c == '_' || c == '-' || c == '+';
    if (!ok)
      return false;
  }
  return true;
}
}  // namespace

LoadedZone load_time_zone(const std::string& name, const std::string& zoneinfo_dir) {
  static std::mutex mutex;
  static std::map<std::string, LoadedZone> cache;
  std::lock_guard lock(mutex);
  const std::string key = zoneinfo_dir + "|" + name;
  if (auto it = cache.find(key); it != cache.end())
    return it->second;
  LoadedZone loaded{TimeZone::fixed("UTC", std::chrono::seconds(0)), false};
  if (name == "UTC" || name == "Etc/UTC") {
    loaded.found = true;
  } else if (safe_name(name)) {
    std::ifstream file(zoneinfo_dir + "/" + name, std::ios::binary);
    if (file) {
      std::ostringstream bytes;
      bytes << file.rdbuf();
      if (auto zone = TimeZone::from_tzif(name, bytes.str()))
        loaded = LoadedZone{*zone, true};
    }
  }
  // Only zones that exist are kept: names come from users, and the set of real zones is
  // small, so the cache stays bounded.
  if (loaded.found)
    cache.emplace(key, loaded);
  return loaded;
}

}  // namespace agentfleet::config
