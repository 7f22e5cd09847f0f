#pragma once
// The system prompt: a template (configurable; a built-in one by default) with
// {{current_time}}, {{date}}, {{weekday}}, {{time_zone}} and {{locale}} filled in from the
// task's time zone. Pure.

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
