#include "core/adapters/log.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "core/codec/task_codec.hpp"
#include "core/config/config.hpp"
#include "core/domain/redaction.hpp"

namespace agentfleet::log {

namespace {
// Registered secrets: replaced as a whole (copy on write), read by every line.
std::mutex secrets_mutex;
std::shared_ptr<const std::vector<std::string>> secrets =
    std::make_shared<const std::vector<std::string>>();

std::shared_ptr<const std::vector<std::string>> current_secrets() {
  std::lock_guard lock(secrets_mutex);
  return secrets;
}

bool is_lower_hex(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}
bool all_zero(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c == '0'; });
}

std::string format(std::string_view ts, std::string_view level, std::string_view component,
                   const TaskContext* task, std::string_view message,
                   std::initializer_list<Field> fields, const std::vector<std::string>& known) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  auto key = [&](std::string_view name) {
    w.Key(name.data(), static_cast<rapidjson::SizeType>(name.size()));
  };
  auto put = [&](std::string_view name, std::string_view value) {
    key(name);
    w.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
  };
  auto put_redacted = [&](std::string_view name, std::string_view value) {
    const std::string clean = redact(value, known);
    put(name, clean);
  };
  w.StartObject();
  put("ts", ts);
  put("level", level);
  put("component", component);
  if (task != nullptr) {
    if (!task->task_id.empty())
      put("task_id", task->task_id);
    if (!task->user_id.empty())
      put_redacted("user_id", task->user_id);
    if (!task->batch_id.empty())
      put_redacted("batch_id", task->batch_id);
    if (task->attempt > 0) {
      key("attempt");
      w.Int(task->attempt);
    }
    if (task->step >= 0) {
      key("step");
      w.Int(task->step);
    }
    if (!task->trace_id.empty())
      put("trace_id", task->trace_id);
  }
  for (const auto& [name, value] : fields)
    put_redacted(name, value);
  put_redacted("msg", message);
  w.EndObject();
  std::string line(buffer.GetString(), buffer.GetSize());
  line.push_back('\n');
  return line;
}

void emit(const std::string& line) {
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace

// sasl.password, ssl.key.password, ssl.keystore.password, sasl.oauthbearer.client.secret,
// ssl.key.pem, ...
bool is_secret_property(std::string_view name) {
  return name.find("password") != std::string_view::npos ||
         name.find("secret") != std::string_view::npos ||
         name.find(".pem") != std::string_view::npos || name == "sasl.oauthbearer.config";
}

std::string_view trace_id_of(std::string_view traceparent) {
  // version "-" trace id (32) "-" parent id (16) "-" flags (2); version ff is invalid, and
  // a later version may append fields after the flags.
  if (traceparent.size() < 55 || traceparent[2] != '-' || traceparent[35] != '-' ||
      traceparent[52] != '-' || (traceparent.size() > 55 && traceparent[55] != '-')) {
    return {};
  }
  const std::string_view version = traceparent.substr(0, 2);
  const std::string_view trace = traceparent.substr(3, 32);
  const std::string_view parent = traceparent.substr(36, 16);
  const std::string_view flags = traceparent.substr(53, 2);
  if (!is_lower_hex(version) || version == "ff" || (version == "00" && traceparent.size() != 55))
    return {};
  if (!is_lower_hex(trace) || all_zero(trace) || !is_lower_hex(parent) || all_zero(parent) ||
      !is_lower_hex(flags)) {
    return {};
  }
  return trace;
}

std::string format_line(std::string_view ts, std::string_view level, std::string_view component,
                        const TaskContext* task, std::string_view message,
                        std::initializer_list<Field> fields) {
  return format(ts, level, component, task, message, fields, *current_secrets());
}

void write(std::string_view level, std::string_view component, std::string_view message,
           std::initializer_list<Field> fields) {
  emit(format_line(codec::format_rfc3339(std::chrono::system_clock::now()), level, component,
                   nullptr, message, fields));
}

void write(std::string_view level, std::string_view component, const TaskContext& task,
           std::string_view message, std::initializer_list<Field> fields) {
  emit(format_line(codec::format_rfc3339(std::chrono::system_clock::now()), level, component, &task,
                   message, fields));
}

void add_secret(std::string secret) {
  if (secret.size() < kMinSecretChars)
    return;
  std::lock_guard lock(secrets_mutex);
  if (std::find(secrets->begin(), secrets->end(), secret) != secrets->end())
    return;
  auto next = std::make_shared<std::vector<std::string>>(*secrets);
  next->push_back(std::move(secret));
  secrets = std::move(next);
}

void protect_config_secrets(const config::Config& config) {
  auto add_found_in = [](const std::string& text) {
    for (std::string& found : credentials_in(text))
      add_secret(std::move(found));
  };
  add_found_in(config.postgres.url);
  // libpq reads a password from the environment too.
  if (const char* password = std::getenv("PGPASSWORD"))
    add_secret(password);
  add_found_in(config.kafka.bootstrap_servers);
  for (const auto* properties : {&config.kafka.properties, &config.kafka.consumer_properties}) {
    for (const auto& [name, value] : *properties) {
      if (is_secret_property(name))
        add_secret(value);
    }
  }
  for (const auto& model : config.models) {
    for (const auto& endpoint : model.endpoints) {
      add_secret(endpoint.api_key);
      add_found_in(endpoint.url);
    }
  }
  // Configured headers are service credentials; a scheme ("Bearer x") is not secret, its
  // credentials are.
  auto add_headers = [](const auto& headers) {
    for (const auto& [name, value] : headers) {
      add_secret(value);
      if (const auto space = value.find(' '); space != std::string::npos)
        add_secret(value.substr(space + 1));
    }
  };
  for (const auto& tool : config.tools) {
    add_found_in(tool.url);
    add_headers(tool.headers);
  }
  // The trace collector's: an API key of a hosted backend, usually.
  add_found_in(config.telemetry.otlp.endpoint);
  add_headers(config.telemetry.otlp.headers);
}

}  // namespace agentfleet::log
