#include "dispatcher/task_id_prefix.hpp"

#include <algorithm>
#include <cctype>

namespace agentfleet::dispatcher {

std::optional<TaskIdRange> task_id_range(std::string_view prefix) {
  static constexpr std::string_view kShape = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
  if (prefix.size() < kMinTaskIdPrefix || prefix.size() >= kShape.size())
    return std::nullopt;
  TaskIdRange range;
  for (std::size_t i = 0; i < kShape.size(); ++i) {
    if (i < prefix.size()) {
      const char c = prefix[i];
      if (kShape[i] == '-' ? c != '-' : !std::isxdigit(static_cast<unsigned char>(c)))
        return std::nullopt;
      const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      range.first += lower;
      range.last += lower;
    } else {
      range.first += kShape[i] == '-' ? '-' : '0';
      range.last += kShape[i] == '-' ? '-' : 'f';
    }
  }
  return range;
}

bool too_short_task_id_prefix(std::string_view text) {
  return !text.empty() && text.size() < kMinTaskIdPrefix &&
         std::all_of(text.begin(), text.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}

}  // namespace agentfleet::dispatcher
