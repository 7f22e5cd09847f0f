#pragma once
// Dead letters as `dlq list` shows them and `dlq replay` sends them back. A dead letter
// (kafka::dead_letter) is the original message (key, value, headers) plus the headers
// dlq-reason, dlq-source-topic, dlq-source-partition and dlq-source-offset; a replay sends
// key, value and the original headers to the source topic, without the dlq-* headers,
// with dlq-replayed-from: PARTITION:OFFSET (of the dead letter) added. Pure, thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace agentfleet::agentctl {

using MessageHeaders = std::vector<std::pair<std::string, std::string>>;

struct DeadLetter {
  std::int32_t partition = 0;
  std::int64_t offset = 0;
  std::string key;
  std::string value;
  MessageHeaders headers;
  // From the headers (empty when missing).
  std::string reason;
  std::string source_topic;
  std::string source_partition;
  std::string source_offset;
  std::string replayed_from;  // this letter is a replay that failed again
};

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

// One line for `dlq list`: "P:O  reason  topic/partition/offset  key  value…" (fixed widths
// but the reason and the value).
std::string dead_letters_header();
std::string format_dead_letter(const DeadLetter& letter);
// {"partition","offset","key","value","reason","source_topic","source_partition",
//  "source_offset","replayed_from","headers":{...}} on one line.
std::string dead_letter_json(const DeadLetter& letter);

// What a replay did (or would do, `dry_run`): "sent 0:12 -> agent.tasks.submit key u1 (57
// bytes), dlq-replayed-from 0:12".
std::string format_replay(const DeadLetter& letter, const ReplayMessage& message, bool dry_run);

// The first `max_bytes` of a value, cut on a character boundary, control characters as
// spaces, "…" when cut.
std::string value_prefix(std::string_view value, std::size_t max_bytes);

}  // namespace agentfleet::agentctl
