#include "tools/llm_sim/timing_log.hpp"

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <stdexcept>

namespace agentfleet::sim {

TimingLog::TimingLog(const std::string& path) : file_(std::fopen(path.c_str(), "a")) {
  if (!file_)
    throw std::runtime_error("--timing-log " + path + ": " + std::strerror(errno));
}

std::string_view TimingLog::trace_id_of(std::string_view traceparent) {
  constexpr std::size_t kIdStart = 3, kIdLength = 32;
  if (traceparent.size() < kIdStart + kIdLength + 1 || traceparent[2] != '-' ||
      traceparent[kIdStart + kIdLength] != '-')
    return "-";
  const std::string_view id = traceparent.substr(kIdStart, kIdLength);
  for (char c : id) {
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    if (!hex)
      return "-";
  }
  return id;
}

void TimingLog::record(std::string_view kind, std::string_view traceparent, TimePoint received,
                       TimePoint answered) {
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  const auto us = [](TimePoint t) {
    return static_cast<std::int64_t>(duration_cast<microseconds>(t.time_since_epoch()).count());
  };
  const std::string_view id = trace_id_of(traceparent);
  std::lock_guard lock(mu_);
  std::fprintf(file_.get(), "%.*s %.*s %" PRId64 " %" PRId64 "\n", static_cast<int>(kind.size()),
               kind.data(), static_cast<int>(id.size()), id.data(), us(received), us(answered));
  std::fflush(file_.get());
}

}  // namespace agentfleet::sim
