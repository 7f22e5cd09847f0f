#pragma once
// The one owner of a process's Prometheus metrics: a registry that the typed metric sets
// (WorkerMetrics, DispatcherMetrics) register their families in, rendered as the text
// exposition format for GET /metrics. The standard process_* metrics (resident memory,
// CPU seconds, open file descriptors, start time) are read from /proc/self at each render.
//
// This folder is the only code that includes prometheus-cpp; its headers name no
// prometheus type beyond the forward declaration below, so callers stay clean.
//
// Lifecycle: create one per process before the metric sets, keep it alive until the last
// of them is gone. Thread-safety: render() and every metric update may run on any thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace prometheus {
class Registry;
}

namespace agentfleet::metrics {

// The content type of render()'s output (the text exposition format, version 0.0.4).
inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

struct RegistryOptions {
  // Export process_* from /proc/self. Unit tests turn it off for deterministic output.
  bool process_metrics = true;
};

class MetricsRegistry {
 public:
  explicit MetricsRegistry(RegistryOptions options = {});
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Every registered family in the text exposition format.
  std::string render();

  // Runs `hook` at the start of every render(), to set gauges that are cheap to read at
  // scrape time (pool use, say). Add hooks before serving; they must not block.
  void add_render_hook(std::function<void()> hook);

  // For the metric sets of this folder only.
  prometheus::Registry& prometheus_registry() { return *registry_; }

 private:
  struct ProcessFamilies;
  void sample_process();

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<ProcessFamilies> process_;
  std::vector<std::function<void()>> hooks_;
  std::mutex render_mutex_;
};

// ---- /proc parsing (pure; unit-tested) --------------------------------------------

struct ProcessStat {
  std::uint64_t utime_ticks = 0;
  std::uint64_t stime_ticks = 0;
  std::uint64_t start_ticks = 0;  // after boot
  std::uint64_t virtual_bytes = 0;
  std::int64_t resident_pages = 0;
};
// /proc/self/stat; nullopt when it does not have the expected shape. The command name
// (field 2) may itself contain spaces and parentheses.
std::optional<ProcessStat> parse_proc_stat(std::string_view text);
// The `btime` line of /proc/stat: boot time in seconds since the epoch.
std::optional<std::int64_t> parse_boot_time(std::string_view proc_stat);

}  // namespace agentfleet::metrics
