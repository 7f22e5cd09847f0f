#pragma once
// JSON-lines logs on stderr: {"ts","level","component",<fields>,"msg"}. One line per call,
// written with a single fwrite so lines from different threads do not interleave.
// Callers must never pass secrets (API keys, passwords, connection strings).

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace agentfleet::log {

using Field = std::pair<std::string_view, std::string_view>;

void write(std::string_view level, std::string_view component, std::string_view message,
           std::initializer_list<Field> fields = {});

inline void info(std::string_view component, std::string_view message,
                 std::initializer_list<Field> fields = {}) {
  write("info", component, message, fields);
}
inline void warn(std::string_view component, std::string_view message,
                 std::initializer_list<Field> fields = {}) {
  write("warn", component, message, fields);
}
inline void error(std::string_view component, std::string_view message,
                  std::initializer_list<Field> fields = {}) {
  write("error", component, message, fields);
}

}  // namespace agentfleet::log
