#pragma once
// agentctl's command line and settings: the table of commands and their options (which
// the help texts are made from), parsing argv into an Invocation, and resolving where
// the dispatcher, the API key and Kafka are: flags > environment > config file > defaults.
// Pure: the environment and the config file's text are passed in. Parse failures throw
// UsageError (exit 2), naming the flag or key; no message ever contains the API key.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentfleet::agentctl {

struct OptionSpec {
  std::string name;        // "--user"
  std::string value_name;  // "U"; empty for a switch
  std::string help;
  bool repeatable = false;
};

struct CommandSpec {
  std::string name;      // "submit", "batch submit"
  std::string synopsis;  // the positional arguments: "[TEXT]", "ID", "FILE.jsonl"
  std::string summary;   // one line for `agentctl --help`
  std::string details;   // more lines for `agentctl NAME --help`
  std::size_t min_args = 0;
  std::size_t max_args = 0;
  std::vector<OptionSpec> options;
};

// Every command, in the order of `agentctl --help`.
const std::vector<CommandSpec>& command_specs();
// Options every command takes (before or after its name).
const std::vector<OptionSpec>& global_options();

struct GlobalFlags {
  std::optional<std::string> url;
  std::optional<std::string> api_key;
  std::optional<std::string> kafka_bootstrap;
  std::optional<std::string> config;
  std::optional<int> request_timeout_s;
  bool json = false;
};

// A parsed command line.
struct Invocation {
  const CommandSpec* command = nullptr;  // null: no command given
  std::string group;                     // "batch" when `agentctl batch --help` was asked
  bool help = false;
  bool version = false;  // --version: print agentctl's build and exit
  GlobalFlags globals;
  std::vector<std::string> args;
  std::map<std::string, std::vector<std::string>> options;  // by name ("--user")

  bool has(const std::string& name) const { return options.count(name) > 0; }
  // The last value given, or `fallback`.
  std::string value(const std::string& name, const std::string& fallback = {}) const;
  std::vector<std::string> values(const std::string& name) const;
  // An integer option in [lo, hi] (UsageError otherwise), or `fallback` when absent.
  std::int64_t integer(const std::string& name, std::int64_t fallback, std::int64_t lo,
                       std::int64_t hi) const;
  std::optional<std::int64_t> integer(const std::string& name, std::int64_t lo,
                                      std::int64_t hi) const;
  // The option is required: its value, or UsageError.
  std::string required(const std::string& name) const;
};

// argv without the program name. A command's own options come first when a name is
// both (`submit --timeout-s` is the task's timeout; before the command name, or on a
// command without one, `--timeout-s` is the HTTP deadline). `--name=value` and
// `--name value` both work; `--` ends the options.
Invocation parse_command_line(const std::vector<std::string>& argv);

std::string general_help();
// "agentctl 0.1.0 (RelWithDebInfo, GNU 12.2.0)".
std::string version_text();
std::string group_help(std::string_view group);
std::string command_help(const CommandSpec& command);

// The candidate closest to `word` by edit distance (insertions, deletions, substitutions
// and swaps of neighbours), when it is close enough to be a typo of it: at most one edit
// for a word of up to four characters, two up to eight, three beyond. Empty otherwise.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

// The completion script for `shell` (bash or zsh; UsageError otherwise), made from the
// command table: commands, groups and their commands, each command's options and the global
// ones, and the values of --status, --priority, --tool-permission; files for --config and
// `batch submit`.
std::string completion_script(std::string_view shell);

// An integer in [lo, hi] from text, or UsageError naming `what`.
std::int64_t parse_integer(std::string_view text, std::int64_t lo, std::int64_t hi,
                           std::string_view what);

// ---- settings ---------------------------------------------------------------------------

struct Topics {
  std::string submit = "agent.tasks.submit";
  std::string results = "agent.tasks.results";
  std::string events = "agent.tasks.events";
  std::string dlq = "agent.tasks.dlq";
};

// What a config file may say (every key optional).
struct FileSettings {
  std::optional<std::string> url;
  std::optional<std::string> api_key;
  std::optional<std::string> kafka_bootstrap;
  std::optional<int> timeout_s;
  std::map<std::string, std::string> topics;            // submit, results, events, dlq
  std::map<std::string, std::string> kafka_properties;  // passed to librdkafka as they are
};

struct Settings {
  std::string url = "http://127.0.0.1:8080";
  std::string api_key;
  std::string kafka_bootstrap = "127.0.0.1:9092";
  std::chrono::seconds request_timeout{30};
  Topics topics;
  std::map<std::string, std::string> kafka_properties;
  bool json = false;
  // Where the URL came from ("--url", "AGENTFLEET_URL", "config FILE", "default"), for
  // error messages that say which dispatcher could not be reached.
  std::string url_source = "default";
  std::string api_key_source;  // empty: no key
};

// A variable of the environment, or nullopt when unset or empty.
using Environment = std::function<std::optional<std::string>(const std::string&)>;

struct ConfigFileChoice {
  std::string path;
  bool required = false;  // named by --config or $AGENTCTL_CONFIG: it must exist
};
// --config, else $AGENTCTL_CONFIG, else ~/.config/agentctl/config.yaml (when $HOME is set).
std::optional<ConfigFileChoice> choose_config_file(const GlobalFlags& flags,
                                                   const Environment& env);

// The YAML text of a config file; UsageError naming the file and the key that is unknown
// or of the wrong type.
FileSettings parse_config_file(std::string_view text, const std::string& file_name);

// Flags, then AGENTFLEET_URL / AGENTFLEET_API_KEY / AGENTFLEET_KAFKA_BOOTSTRAP, then the
// file, then the defaults. `file_name` is what `url_source` says for a file value.
Settings resolve_settings(const GlobalFlags& flags, const Environment& env,
                          const FileSettings& file, const std::string& file_name);

// "a=b&c=d" with each value percent-encoded (RFC 3986 unreserved characters kept).
std::string query_string(const std::vector<std::pair<std::string, std::string>>& params);
// One path segment percent-encoded ("/" included).
std::string path_segment(std::string_view text);

}  // namespace agentfleet::agentctl
