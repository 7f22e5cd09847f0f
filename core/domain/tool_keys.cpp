#include "core/domain/tool_keys.hpp"

namespace agentfleet {

std::string direct_call_key(std::string_view user_id, std::string_view key) {
  std::string out = "direct:";
  out.reserve(out.size() + user_id.size() + key.size() + 1);
  for (const char c : user_id) {
    if (c == '%')
      out += "%25";
    else if (c == ':')
      out += "%3A";
    else
      out += c;
  }
  out += ':';
  out += key;
  return out;
}

}  // namespace agentfleet
