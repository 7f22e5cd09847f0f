#pragma once
// JSON-lines logs on stderr, one object per line:
//   {"ts","level","component",["task_id","user_id","batch_id","attempt","step","trace_id"],
//    <fields>,"msg"}
// The task fields come from a TaskContext (lines about one task); each is left out when
// unknown; attempt and step are JSON numbers, everything else a string. The shape is
// documented in docs/logs.md.
//
// Secrets: every message and field value is redacted before it is written — the patterns
// of core/domain/redaction.hpp (URL passwords, `password=...`, bearer tokens) and every
// secret registered by value (add_secret; protect_config_secrets registers the
// configuration's). Callers still must not pass secrets on purpose.
//
// Thread-safety: every function may be called from any thread (librdkafka's threads
// included). A line is written with a single fwrite, so lines never interleave.

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace agentfleet::config {
struct Config;
}

namespace agentfleet::log {

using Field = std::pair<std::string_view, std::string_view>;

// What a line about one task carries. Views: the context must outlive the call only.
struct TaskContext {
  std::string_view task_id;
  std::string_view user_id;
  std::string_view batch_id;  // empty: left out
  int attempt = 0;            // 0: not claimed yet, left out
  int step = -1;              // the ReAct step at the time of the line; negative: left out
  std::string_view trace_id;  // 32 hex digits (trace_id_of); empty: left out
};

// The trace id (32 lower-case hex digits) of a W3C traceparent
// "00-<trace id>-<parent id>-<flags>"; empty when it is not a valid one.
std::string_view trace_id_of(std::string_view traceparent);

// The line (with its newline) write() would print at `ts`; for tests.
std::string format_line(std::string_view ts, std::string_view level, std::string_view component,
                        const TaskContext* task, std::string_view message,
                        std::initializer_list<Field> fields);

void write(std::string_view level, std::string_view component, std::string_view message,
           std::initializer_list<Field> fields = {});
void write(std::string_view level, std::string_view component, const TaskContext& task,
           std::string_view message, std::initializer_list<Field> fields = {});

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
inline void info(std::string_view component, const TaskContext& task, std::string_view message,
                 std::initializer_list<Field> fields = {}) {
  write("info", component, task, message, fields);
}
inline void warn(std::string_view component, const TaskContext& task, std::string_view message,
                 std::initializer_list<Field> fields = {}) {
  write("warn", component, task, message, fields);
}
inline void error(std::string_view component, const TaskContext& task, std::string_view message,
                  std::initializer_list<Field> fields = {}) {
  write("error", component, task, message, fields);
}

// Registers a secret to be redacted wherever it appears in a line (ignored when shorter
// than kMinSecretChars of core/domain/redaction.hpp).
void add_secret(std::string secret);

// Whether a Kafka property (librdkafka's name) holds a credential: a password, a secret,
// a PEM key or certificate, the OAUTHBEARER configuration. Its value is to be registered.
bool is_secret_property(std::string_view name);

// Registers the configuration's secrets: the Postgres URL's password, every model
// endpoint's api_key, tool header values (service credentials) and the passwords in URLs,
// and the Kafka properties that hold passwords, secrets or keys. Call once, at start-up.
void protect_config_secrets(const config::Config& config);

}  // namespace agentfleet::log
