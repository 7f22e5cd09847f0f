// config_fuzz: the configuration loader on untrusted YAML (see README.md):
// config::load_config_text(text, "fuzz.yaml", lookup) — YAML parsing (yaml-cpp), `${VAR}` /
// `${VAR:-default}` filled into each value, YAML -> JSON, validation against
// schemas/config.schema.json, then the plain structs and their cross-checks. The lookup is a
// fixed table (no real environment). The loader signals bad input only by throwing
// config::ConfigError; anything else thrown, a crash, a leak or UB is a finding.
//
// Files: the loader reads `react.system_prompt_file` (relative to the folder of the source
// name, here the working directory). Inputs that would open anything but a missing or small
// regular file below the working directory (an absolute path, "..", a device, a FIFO, a big
// file) are skipped, so a run neither blocks on /dev/stdin nor reads /dev/zero forever;
// run_fuzzers.sh runs the fuzzer in an empty temporary folder.
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "core/config/config.hpp"

namespace {

namespace config = agentfleet::config;

std::optional<std::string> fake_environment(const std::string& name) {
  if (name == "FUZZ_TEXT")
    return "text with: a colon, # a hash and {braces}";
  if (name == "FUZZ_NUMBER")
    return "8";
  if (name == "FUZZ_BOOL")
    return "true";
  if (name == "FUZZ_EMPTY")
    return "";
  if (name == "AGENTFLEET_PG_URL")
    return "postgresql://agentfleet:secret@127.0.0.1:5432/agentfleet";
  if (name == "LLM_API_KEY")
    return "sk-fuzz-key";
  if (name == "SECRET")
    return "p#a: *x\"y\\z {[,]} - item";
  return std::nullopt;
}

bool safe_prompt_file(const std::string& value) {
  std::string text;
  try {
    text = config::interpolate(value, fake_environment);
  } catch (const config::ConfigError&) {
    return true;  // the loader refuses the value before it opens anything
  }
  const std::filesystem::path path(text);
  if (path.is_absolute())
    return false;
  for (const auto& part : path) {
    if (part == "..")
      return false;
  }
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found)
    return true;
  if (ec || status.type() != std::filesystem::file_type::regular)
    return false;
  const auto bytes = std::filesystem::file_size(path, ec);
  return !ec && bytes <= 1024 * 1024;
}

// Whether every react.system_prompt_file the loader could read names a harmless file.
bool reads_only_harmless_files(const std::string& text) {
  // The key can only come from the text itself, spelled out or through an escape.
  if (text.find("prompt") == std::string::npos && text.find('\\') == std::string::npos)
    return true;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception&) {
    return true;  // the loader refuses it as invalid YAML
  }
  if (!root.IsMap())
    return true;
  for (const auto& section : root) {
    if (!section.first.IsScalar() || section.first.Scalar() != "react" || !section.second.IsMap())
      continue;
    for (const auto& entry : section.second) {
      if (entry.first.IsScalar() && entry.first.Scalar() == "system_prompt_file" &&
          entry.second.IsScalar() && !safe_prompt_file(entry.second.Scalar()))
        return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (!reads_only_harmless_files(text))
    return 0;
  try {
    const config::Config loaded = config::load_config_text(text, "fuzz.yaml", fake_environment);
    // A loaded configuration is usable: what the binaries look up first is there.
    (void)loaded.find_model(loaded.task_defaults.model);
    (void)loaded.tool_permission_for(loaded.task_defaults.tier, "");
  } catch (const config::ConfigError&) {
  }
  return 0;
}
