#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/adapters/log.hpp"
#include "core/domain/redaction.hpp"
#include "tools/agentctl/commands.hpp"
#include "tools/agentctl/outcomes.hpp"

namespace agentfleet::agentctl {

namespace {
// This run's credentials, kept out of every line on stderr. Set once, before any thread
// of agentctl's starts; read only afterwards.
std::vector<std::string>& run_secrets() {
  static std::vector<std::string> secrets;
  return secrets;
}

void protect_secrets(const Settings& s) {
  auto add = [](std::string secret) {
    log::add_secret(secret);  // librdkafka's lines go through the logger
    run_secrets().push_back(std::move(secret));
  };
  add(s.api_key);
  // The whole userinfo as well: the HTTP client's messages may name the URL's host with it.
  add(std::string(url_credentials(s.url)));
  for (const auto* text : {&s.url, &s.kafka_bootstrap}) {
    for (std::string& found : credentials_in(*text))
      add(std::move(found));
  }
  for (const auto& [name, value] : s.kafka_properties) {
    if (log::is_secret_property(name))
      add(value);
  }
}
}  // namespace

Settings load_settings(const GlobalFlags& flags) {
  const Environment env = [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr || *value == '\0')
      return std::nullopt;
    return std::string(value);
  };
  FileSettings file;
  std::string file_name;
  if (auto choice = choose_config_file(flags, env)) {
    std::ifstream in(choice->path);
    if (in) {
      std::ostringstream text;
      text << in.rdbuf();
      file = parse_config_file(text.str(), choice->path);
      file_name = choice->path;
    } else if (choice->required) {
      throw UsageError("cannot read the config file " + choice->path);
    }
  }
  Settings settings = resolve_settings(flags, env, file, file_name);
  protect_secrets(settings);
  return settings;
}

void print(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

void note(const std::string& text) {
  const std::string line = redact(text, run_secrets());
  std::fprintf(stderr, "agentctl: %s\n", line.c_str());
  std::fflush(stderr);
}

std::string new_uuid() {
  std::random_device random;
  std::uniform_int_distribution<unsigned> nibble(0, 15);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (int i = 0; i < 32; ++i)
    hex.push_back(kHex[nibble(random)]);
  hex[12] = '4';                           // version 4
  hex[16] = kHex[8 + nibble(random) % 4];  // RFC 4122 variant
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20);
}

int cmd_completion(Context& ctx) {
  print(completion_script(ctx.inv.args[0]));
  return kExitOk;
}

CommandFunction command_function(const std::string& name) {
  static const std::map<std::string, CommandFunction> functions = {
      {"submit", cmd_submit},
      {"status", cmd_status},
      {"wait", cmd_wait},
      {"cancel", cmd_cancel},
      {"retry", cmd_retry},
      {"plan", cmd_plan},
      {"list", cmd_list},
      {"tail", cmd_tail},
      {"batch submit", cmd_batch_submit},
      {"batch list", cmd_batch_list},
      {"batch status", cmd_batch_status},
      {"batch results", cmd_batch_results},
      {"batch cancel", cmd_batch_cancel},
      {"batch retry", cmd_batch_retry},
      {"usage", cmd_usage},
      {"limits get", cmd_limits_get},
      {"limits set", cmd_limits_set},
      {"dlq list", cmd_dlq_list},
      {"dlq replay", cmd_dlq_replay},
      {"stats", cmd_stats},
      {"tools", cmd_tools},
      {"completion", cmd_completion},
  };
  auto it = functions.find(name);
  return it == functions.end() ? CommandFunction{} : it->second;
}

}  // namespace agentfleet::agentctl
