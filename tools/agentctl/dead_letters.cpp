#include "tools/agentctl/dead_letters.hpp"

#include <algorithm>
#include <charconv>

#include "core/codec/json_text.hpp"
#include "tools/agentctl/json_fields.hpp"
#include "tools/agentctl/table.hpp"

namespace agentfleet::agentctl {

namespace {
bool is_dlq_header(const std::string& name) {
  return name.rfind("dlq-", 0) == 0;
}
}  // namespace

DeadLetter read_dead_letter(std::int32_t partition, std::int64_t offset, std::string key,
                            std::string value, MessageHeaders headers) {
  DeadLetter d;
  d.partition = partition;
  d.offset = offset;
  d.key = std::move(key);
  d.value = std::move(value);
  d.headers = std::move(headers);
  // The last one of a name wins: a replayed letter dead-lettered again carries the new ones
  // after the ones it was sent with.
  for (const auto& [name, v] : d.headers) {
    if (name == "dlq-reason")
      d.reason = v;
    else if (name == "dlq-source-topic")
      d.source_topic = v;
    else if (name == "dlq-source-partition")
      d.source_partition = v;
    else if (name == "dlq-source-offset")
      d.source_offset = v;
    else if (name == "dlq-replayed-from")
      d.replayed_from = v;
  }
  return d;
}

std::optional<std::pair<std::int32_t, std::int64_t>> parse_partition_offset(std::string_view text) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos)
    return std::nullopt;
  std::int32_t partition = 0;
  std::int64_t offset = 0;
  const char* p_end = text.data() + colon;
  auto [pe, pec] = std::from_chars(text.data(), p_end, partition);
  const char* o_begin = text.data() + colon + 1;
  const char* o_end = text.data() + text.size();
  auto [oe, oec] = std::from_chars(o_begin, o_end, offset);
  if (colon == 0 || pec != std::errc() || pe != p_end || oec != std::errc() || oe != o_end ||
      o_begin == o_end || partition < 0 || offset < 0) {
    return std::nullopt;
  }
  return std::make_pair(partition, offset);
}

bool DeadLetterFilter::matches(const DeadLetter& letter) const {
  if (!source_topic.empty() && letter.source_topic != source_topic)
    return false;
  if (!reason_contains.empty() && letter.reason.find(reason_contains) == std::string::npos)
    return false;
  if (!key.empty() && letter.key != key)
    return false;
  if (!offsets.empty() &&
      std::find(offsets.begin(), offsets.end(), std::make_pair(letter.partition, letter.offset)) ==
          offsets.end()) {
    return false;
  }
  return true;
}

std::optional<ReplayMessage> replay_of(const DeadLetter& letter) {
  if (letter.source_topic.empty())
    return std::nullopt;
  ReplayMessage m{letter.source_topic, letter.key, letter.value, {}};
  for (const auto& header : letter.headers) {
    if (!is_dlq_header(header.first))
      m.headers.push_back(header);
  }
  m.headers.emplace_back("dlq-replayed-from",
                         std::to_string(letter.partition) + ":" + std::to_string(letter.offset));
  return m;
}

std::string value_prefix(std::string_view value, std::size_t max_bytes) {
  std::string_view shown = value.substr(0, std::min(value.size(), max_bytes));
  const bool cut = shown.size() < value.size();
  if (cut) {
    // Do not end inside a UTF-8 sequence: drop continuation bytes and their lead byte.
    std::size_t end = shown.size();
    while (end > 0 && (static_cast<unsigned char>(value[end]) & 0xc0) == 0x80)
      --end;
    shown = shown.substr(0, end);
  }
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

std::string dead_letter_json(const DeadLetter& d) {
  auto q = [](const std::string& text) { return json::quoted(codec::sanitize_text(text)); };
  std::string out =
      "{\"partition\":" + std::to_string(d.partition) + ",\"offset\":" + std::to_string(d.offset) +
      ",\"key\":" + q(d.key) + ",\"value\":" + q(d.value) + ",\"reason\":" + q(d.reason) +
      ",\"source_topic\":" + q(d.source_topic) + ",\"source_partition\":" + q(d.source_partition) +
      ",\"source_offset\":" + q(d.source_offset) + ",\"replayed_from\":" + q(d.replayed_from) +
      ",\"headers\":{";
  for (std::size_t i = 0; i < d.headers.size(); ++i) {
    if (i)
      out += ",";
    out += q(d.headers[i].first) + ":" + q(d.headers[i].second);
  }
  return out + "}}";
}

std::string format_replay(const DeadLetter& d, const ReplayMessage& m, bool dry_run) {
  std::string replayed_from;
  for (const auto& [name, value] : m.headers) {
    if (name == "dlq-replayed-from")
      replayed_from = value;
  }
  return std::string(dry_run ? "would send " : "sent ") + std::to_string(d.partition) + ":" +
         std::to_string(d.offset) + " -> " + m.topic + " key " +
         single_line(codec::sanitize_text(m.key)) + " (" + std::to_string(m.value.size()) +
         " bytes, " + std::to_string(m.headers.size()) + " headers), dlq-replayed-from " +
         replayed_from;
}

}  // namespace agentfleet::agentctl
