#include "tools/agentctl/outcomes.hpp"

#include <rapidjson/document.h>

#include <algorithm>
#include <charconv>

#include "core/codec/json_text.hpp"
#include "core/domain/redaction.hpp"
#include "tools/agentctl/json_fields.hpp"
#include "tools/agentctl/table.hpp"

namespace agentfleet::agentctl {

std::string exit_code_help() {
  return "exit codes:\n"
         "  0  success\n"
         "  1  the task or batch ended, but not succeeded (failed, timed_out, cancelled)\n"
         "  2  usage error: bad flags, arguments or configuration\n"
         "  3  not found (404): no such task, batch or dead letter\n"
         "  4  refused (401, 403): missing or bad API key, or not allowed for this key\n"
         "  5  rejected input (400, 405, 409, 413, 422 and other 4xx): the API said why\n"
         "  6  rate limited or queue full (429)\n"
         "  7  unreachable, timed out, server error (5xx), or a wait that gave up\n";
}

int exit_code_for_http_status(int status) {
  if (status >= 200 && status < 300)
    return kExitOk;
  if (status == 404)
    return kExitNotFound;
  if (status == 401 || status == 403)
    return kExitRefused;
  if (status == 429)
    return kExitThrottled;
  if (status >= 400 && status < 500)
    return kExitRejected;
  return kExitUnavailable;
}

int exit_code_for_task_status(std::string_view status) {
  if (status == "succeeded")
    return kExitOk;
  if (status == "failed" || status == "timed_out" || status == "cancelled")
    return kExitNotSucceeded;
  return kExitUnavailable;
}

std::string describe_http_failure(std::string_view method, std::string_view path, int status,
                                  std::string_view body) {
  std::string out = std::string(method) + " " + std::string(path) + ": " + std::to_string(status);
  rapidjson::Document doc;
  if (codec::parse_json(doc, body) && doc.IsObject() && doc.HasMember("error") &&
      doc["error"].IsObject()) {
    const auto& error = doc["error"];
    const std::string code = json::str(error, "code");
    const std::string message = json::str(error, "message");
    const std::string at = json::str(error, "path");
    if (!code.empty())
      out += " " + single_line(code);
    if (!message.empty())
      out += ": " + single_line(message);
    if (!at.empty())
      out += " (at " + single_line(at) + ")";
    return out;
  }
  if (!body.empty()) {
    std::string_view shown = body.substr(0, std::min<std::size_t>(body.size(), 200));
    out += ": " + single_line(shown);
  }
  return out;
}

std::string_view url_credentials(std::string_view url) {
  const std::size_t scheme_end = url.find("://");
  const std::size_t start = scheme_end == std::string_view::npos ? 0 : scheme_end + 3;
  const std::size_t authority_end = url.find_first_of("/?#", start);
  const std::string_view authority =
      url.substr(start, authority_end == std::string_view::npos ? std::string_view::npos
                                                                : authority_end - start);
  const std::size_t at = authority.rfind('@');
  return at == std::string_view::npos ? std::string_view() : authority.substr(0, at);
}

std::string url_without_credentials(std::string_view url) {
  const std::string_view credentials = url_credentials(url);
  if (credentials.empty())
    return std::string(url);
  const std::size_t start = static_cast<std::size_t>(credentials.data() - url.data());
  return std::string(url.substr(0, start)) + std::string(kRedacted) +
         std::string(url.substr(start + credentials.size()));
}

std::optional<std::chrono::milliseconds> retry_delay(int retry, int max_retries,
                                                     bool connect_failure, int status,
                                                     std::string_view retry_after) {
  if (retry >= max_retries || !(connect_failure || status == 503))
    return std::nullopt;
  std::chrono::milliseconds delay{std::min(2000, 250 << std::min(retry, 4))};
  int seconds = 0;
  auto [end, ec] =
      std::from_chars(retry_after.data(), retry_after.data() + retry_after.size(), seconds);
  if (!connect_failure && ec == std::errc() && end == retry_after.data() + retry_after.size() &&
      seconds >= 0) {
    delay = std::chrono::milliseconds(std::min(seconds, 5) * 1000);
  }
  return delay;
}

}  // namespace agentfleet::agentctl
