#include "tools/agentctl/dead_letters.hpp"

#include "core/codec/json_text.hpp"
#include "tools/agentctl/json_fields.hpp"
#include "tools/agentctl/table.hpp"

namespace agentfleet::agentctl {

std::string value_prefix(std::string_view value, std::size_t max_bytes) {
  const std::string_view shown = codec::utf8_prefix(value, max_bytes);
  const bool cut = shown.size() < value.size();
  return single_line(codec::sanitize_text(shown)) + (cut ? "…" : "");
}

std::string dead_letters_header() {
  return "OFFSET      SOURCE                            KEY               REASON / VALUE\n";
}

std::string format_dead_letter(const DeadLetter& d) {
  const std::string where = std::to_string(d.partition) + ":" + std::to_string(d.offset);
  std::string source = d.source_topic.empty()
                           ? std::string("?")
                           : d.source_topic + "/" + d.source_partition + "/" + d.source_offset;
  std::string line = pad_to_width(where, 10) + "  " + pad_to_width(single_line(source), 32) + "  " +
                     pad_to_width(single_line(codec::sanitize_text(d.key)), 16) + "  " +
                     single_line(d.reason.empty() ? std::string("(no reason)") : d.reason);
  if (!d.replayed_from.empty())
    line += " (replay of " + d.replayed_from + ")";
  line += "\n" + std::string(64, ' ') + value_prefix(d.value, 120) + "\n";
  return line;
}

std::string format_replay(const DeadLetter& d, const ReplayMessage& m, bool dry_run) {
  std::string replayed_from;
  std::string origin;
  for (const auto& [name, value] : m.headers) {
    if (name == "dlq-replayed-from")
      replayed_from = value;
    else if (name == "dlq-origin")
      origin = value;
  }
  return std::string(dry_run ? "would send " : "sent ") + std::to_string(d.partition) + ":" +
         std::to_string(d.offset) + " -> " + m.topic + " key " +
         single_line(codec::sanitize_text(m.key)) + " (" + std::to_string(m.value.size()) +
         " bytes, " + std::to_string(m.headers.size()) + " headers), dlq-replayed-from " +
         replayed_from + (origin.empty() ? "" : ", dlq-origin " + single_line(origin));
}

}  // namespace agentfleet::agentctl
