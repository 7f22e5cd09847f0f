#include "core/codec/dead_letter.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <charconv>

#include "core/codec/json_text.hpp"

namespace agentfleet::codec {

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
    else if (name == "dlq-origin")
      d.origin = v;
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

namespace {
// TOPIC:PARTITION:OFFSET (a Kafka topic name holds no ':').
bool is_origin(std::string_view text) {
  const auto colon = text.find(':');
  return colon != 0 && colon != std::string_view::npos &&
         parse_partition_offset(text.substr(colon + 1)).has_value();
}
}  // namespace

std::string origin_of(const DeadLetter& letter) {
  if (is_origin(letter.origin))
    return letter.origin;
  std::string source =
      letter.source_topic + ":" + letter.source_partition + ":" + letter.source_offset;
  return is_origin(source) ? source : std::string();
}

std::string message_origin(const MessageHeaders& headers, const std::string& topic,
                           std::int32_t partition, std::int64_t offset) {
  std::string origin;
  for (const auto& [name, value] : headers) {
    if (name == "dlq-origin")
      origin = value;
  }
  if (is_origin(origin))
    return origin;
  return topic + ":" + std::to_string(partition) + ":" + std::to_string(offset);
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
  if (std::string origin = origin_of(letter); !origin.empty())
    m.headers.emplace_back("dlq-origin", std::move(origin));
  return m;
}

std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes)
    return text;
  // Do not end inside a UTF-8 sequence: drop continuation bytes and their lead byte.
  std::size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80)
    --end;
  return text.substr(0, end);
}

std::string dead_letter_json(const DeadLetter& d, std::size_t max_value_bytes) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  auto text = [&w](std::string_view t) {
    const std::string clean = sanitize_text(t);
    w.String(clean.data(), static_cast<rapidjson::SizeType>(clean.size()));
  };
  w.StartObject();
  w.Key("partition");
  w.Int(d.partition);
  w.Key("offset");
  w.Int64(d.offset);
  w.Key("key");
  text(d.key);
  w.Key("value");
  text(utf8_prefix(d.value, max_value_bytes));
  w.Key("value_bytes");
  w.Uint64(std::max(d.value_bytes, d.value.size()));
  w.Key("reason");
  text(d.reason);
  w.Key("source_topic");
  text(d.source_topic);
  w.Key("source_partition");
  text(d.source_partition);
  w.Key("source_offset");
  text(d.source_offset);
  w.Key("replayed_from");
  text(d.replayed_from);
  w.Key("origin");
  text(origin_of(d));
  w.Key("headers");
  w.StartObject();
  for (const auto& [name, value] : d.headers) {
    text(name);
    text(value);
  }
  w.EndObject();
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace agentfleet::codec
