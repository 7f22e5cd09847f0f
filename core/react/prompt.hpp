#pragma once
// The system prompt: a template with {{current_time}}, {{date}}, {{weekday}}, {{time_zone}}
// and {{locale}} filled in from the task's time zone. Configured as react.system_prompt_file
// (config/system-prompt.zh.md by default) or react.system_prompt; the built-in template is
// the same text as that file (a unit test keeps them equal), used when neither is given,
// so the binaries work without the file. Pure.

#include <string>

#include "core/domain/time_zone.hpp"

namespace agentfleet::react {

const std::string& builtin_system_prompt();

struct PromptValues {
  LocalTime now;
  std::string time_zone;
  std::string locale;
};

std::string render_system_prompt(const std::string& template_text, const PromptValues& values);

}  // namespace agentfleet::react
