#pragma once
// TimingLog: the simulators' --timing-log PATH, for tools/bench. One line per answered
// request, written when the answer is ready to send:
//
//   <kind> <trace id> <received, µs since the Unix epoch> <answered, µs since the epoch>
//
// kind is `model` (llm-sim) or the tool's name (tool-sim); the trace id is the 32 hex digits
// of the request's W3C traceparent header, or `-` without one. The worker forwards the task's
// traceparent (tasks.traceparent) on every model and tool call, so the benchmark can tell
// how long the worker took between one answer and its next request. The clock is the
// system clock, the same one Postgres and the broker stamp with on this machine.
//
// Thread-safety: record() takes a mutex; each line is flushed, so a killed simulator loses
// nothing it wrote.

#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace agentfleet::sim {

class TimingLog {
 public:
  using TimePoint = std::chrono::system_clock::time_point;

  // Opens PATH for appending; throws std::runtime_error naming it when that fails.
  explicit TimingLog(const std::string& path);

  void record(std::string_view kind, std::string_view traceparent, TimePoint received,
              TimePoint answered);

  // The 32-hex trace id of a traceparent ("00-<trace id>-<span id>-<flags>"), or "-".
  static std::string_view trace_id_of(std::string_view traceparent);

 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::mutex mu_;
  std::unique_ptr<std::FILE, Close> file_;
};

}  // namespace agentfleet::sim
