#include "core/adapters/metrics/metrics_registry.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/domain/build_info.hpp"

namespace agentfleet::metrics {

namespace {
std::string read_file(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

template <typename T>
bool parse_number(std::string_view text, T& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}
}  // namespace

std::optional<ProcessStat> parse_proc_stat(std::string_view text) {
  // "pid (comm) state ppid ..."; comm may hold ") ", so fields count from the last ')'.
  const auto close = text.rfind(')');
  if (close == std::string_view::npos)
    return std::nullopt;
  std::vector<std::string_view> fields;  // fields[0] is field 3 (state)
  std::string_view rest = text.substr(close + 1);
  while (!rest.empty()) {
    const auto start = rest.find_first_not_of(" \n");
    if (start == std::string_view::npos)
      break;
    rest.remove_prefix(start);
    const auto end = rest.find_first_of(" \n");
    fields.push_back(rest.substr(0, end));
    if (end == std::string_view::npos)
      break;
    rest.remove_prefix(end);
  }
  // proc(5) numbers fields from 1: utime 14, stime 15, starttime 22, vsize 23, rss 24.
  auto field = [&](int number) { return fields[static_cast<std::size_t>(number - 3)]; };
  if (fields.size() < 22)
    return std::nullopt;
  ProcessStat stat;
  if (!parse_number(field(14), stat.utime_ticks) || !parse_number(field(15), stat.stime_ticks) ||
      !parse_number(field(22), stat.start_ticks) || !parse_number(field(23), stat.virtual_bytes) ||
      !parse_number(field(24), stat.resident_pages)) {
    return std::nullopt;
  }
  return stat;
}

std::optional<std::int64_t> parse_boot_time(std::string_view proc_stat) {
  std::size_t pos = 0;
  while (pos < proc_stat.size()) {
    auto end = proc_stat.find('\n', pos);
    if (end == std::string_view::npos)
      end = proc_stat.size();
    std::string_view line = proc_stat.substr(pos, end - pos);
    if (line.rfind("btime ", 0) == 0) {
      std::int64_t value = 0;
      if (parse_number(line.substr(6), value))
        return value;
      return std::nullopt;
    }
    pos = end + 1;
  }
  return std::nullopt;
}

struct MetricsRegistry::ProcessFamilies {
  explicit ProcessFamilies(prometheus::Registry& registry)
      : resident(prometheus::BuildGauge()
                     .Name("process_resident_memory_bytes")
                     .Help("Resident memory size in bytes.")
                     .Register(registry)
                     .Add({})),
        virtual_memory(prometheus::BuildGauge()
                           .Name("process_virtual_memory_bytes")
                           .Help("Virtual memory size in bytes.")
                           .Register(registry)
                           .Add({})),
        cpu(prometheus::BuildCounter()
                .Name("process_cpu_seconds_total")
                .Help("Total user and system CPU time spent in seconds.")
                .Register(registry)
                .Add({})),
        open_fds(prometheus::BuildGauge()
                     .Name("process_open_fds")
                     .Help("Number of open file descriptors.")
                     .Register(registry)
                     .Add({})),
        start_time(prometheus::BuildGauge()
                       .Name("process_start_time_seconds")
                       .Help("Start time of the process since the Unix epoch in seconds.")
                       .Register(registry)
                       .Add({})) {}

  prometheus::Gauge& resident;
  prometheus::Gauge& virtual_memory;
  prometheus::Counter& cpu;
  prometheus::Gauge& open_fds;
  prometheus::Gauge& start_time;
};

MetricsRegistry::MetricsRegistry(RegistryOptions options)
    : registry_(std::make_shared<prometheus::Registry>()) {
  if (options.process_metrics) {
    process_ = std::make_unique<ProcessFamilies>(*registry_);
    // What this process is, as the usual *_build_info gauge: always 1, the build in labels.
    const BuildInfo& build = build_info();
    prometheus::BuildGauge()
        .Name("agentfleet_build_info")
        .Help("The build of this process (always 1): version, build type and compiler.")
        .Register(*registry_)
        .Add({{"version", std::string(build.version)},
              {"build_type", std::string(build.build_type)},
              {"compiler", std::string(build.compiler)}})
        .Set(1);
  }
}

MetricsRegistry::~MetricsRegistry() = default;

void MetricsRegistry::sample_process() {
  const auto stat = parse_proc_stat(read_file("/proc/self/stat"));
  if (!stat)
    return;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  process_->resident.Set(static_cast<double>(stat->resident_pages) * page);
  process_->virtual_memory.Set(static_cast<double>(stat->virtual_bytes));
  // A counter only grows: add what was spent since the last render.
  const double cpu = static_cast<double>(stat->utime_ticks + stat->stime_ticks) / ticks;
  if (cpu > process_->cpu.Value())
    process_->cpu.Increment(cpu - process_->cpu.Value());
  if (const auto boot = parse_boot_time(read_file("/proc/stat"))) {
    process_->start_time.Set(static_cast<double>(*boot) +
                             static_cast<double>(stat->start_ticks) / ticks);
  }
  std::error_code ec;
  double fds = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    ++fds;
  }
  if (!ec)
    process_->open_fds.Set(fds - 1);  // not counting the directory handle of this listing
}

void MetricsRegistry::add_render_hook(std::function<void()> hook) {
  std::lock_guard lock(render_mutex_);
  hooks_.push_back(std::move(hook));
}

std::string MetricsRegistry::render() {
  std::lock_guard lock(render_mutex_);
  for (const auto& hook : hooks_)
    hook();
  if (process_)
    sample_process();
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace agentfleet::metrics
