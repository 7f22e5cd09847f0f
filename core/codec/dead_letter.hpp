#pragma once
// Dead letters as the dead-letter topic holds them, and the message a replay sends. A dead
// letter (kafka::dead_letter) is the original message (key, value, headers) plus the
// headers dlq-reason, dlq-source-topic, dlq-source-partition and dlq-source-offset; a
// replay sends key, value and the original headers to the source topic, without the dlq-*
// headers, with dlq-replayed-from: PARTITION:OFFSET (of the dead letter) and dlq-origin:
// TOPIC:PARTITION:OFFSET (where the message was first read, kept through a replay that
// fails again) added. The submit ingest keys a submission without an idempotency key by its
// origin, so a letter replayed twice makes one task. Read by `agentctl dlq` and by the
// dispatcher's /v1/dead-letters. Pure, thread-safe.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace agentfleet::codec {

using MessageHeaders = std::vector<std::pair<std::string, std::string>>;

struct DeadLetter {
  std::int32_t partition = 0;
  std::int64_t offset = 0;
  std::string key;
  std::string value;
  // The value's size as read, when `value` holds only its start (0: `value` is whole).
  std::size_t value_bytes = 0;
  MessageHeaders headers;
  // From the headers (empty when missing).
  std::string reason;
  std::string source_topic;
  std::string source_partition;
  std::string source_offset;
  std::string replayed_from;  // this letter is a replay that failed again
  std::string origin;         // dlq-origin: on a replay that failed again, where it was first read
};

// Where a letter's message was first read, TOPIC:PARTITION:OFFSET: its dlq-origin when it is
// a replay that failed again, else its source; empty when the letter does not say.
std::string origin_of(const DeadLetter& letter);

// The origin a submission read at `topic`/`partition`/`offset` with `headers` is keyed by:
// its dlq-origin header when it is a replay carrying a well-formed one (the last of that
// name), else where it was read.
std::string message_origin(const MessageHeaders& headers, const std::string& topic,
                           std::int32_t partition, std::int64_t offset);

DeadLetter read_dead_letter(std::int32_t partition, std::int64_t offset, std::string key,
                            std::string value, MessageHeaders headers);

// "P:O" -> (partition, offset); nullopt when malformed.
std::optional<std::pair<std::int32_t, std::int64_t>> parse_partition_offset(std::string_view text);

struct DeadLetterFilter {
  std::string source_topic;                                    // exact; empty: any
  std::string reason_contains;                                 // empty: any
  std::string key;                                             // exact; empty: any
  std::vector<std::pair<std::int32_t, std::int64_t>> offsets;  // empty: any
  bool matches(const DeadLetter& letter) const;
};

struct ReplayMessage {
  std::string topic;
  std::string key;
  std::string value;
  MessageHeaders headers;
};

// The message a replay sends; nullopt when the letter does not say where it came from.
std::optional<ReplayMessage> replay_of(const DeadLetter& letter);

// {"partition","offset","key","value","value_bytes","reason","source_topic",
//  "source_partition","source_offset","replayed_from","origin","headers":{...}} on one line. Text
//  is
// made storable (codec::sanitize_text). `value` holds at most `max_value_bytes` of the
// value, cut on a character boundary; `value_bytes` is the whole value's size (the
// letter's value_bytes when it was cut before).
std::string dead_letter_json(const DeadLetter& letter,
                             std::size_t max_value_bytes = std::numeric_limits<std::size_t>::max());

// The first `max_bytes` or fewer bytes of `text` that end on a UTF-8 character boundary.
std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes);

}  // namespace agentfleet::codec
