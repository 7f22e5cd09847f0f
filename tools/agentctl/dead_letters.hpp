#pragma once
// Dead letters as `dlq list` shows them and `dlq replay` tells what it sent. What a dead
// letter is and what a replay sends is core/codec/dead_letter.hpp. Pure, thread-safe.

#include <cstddef>
#include <string>
#include <string_view>

#include "core/codec/dead_letter.hpp"

namespace agentfleet::agentctl {

using codec::dead_letter_json;
using codec::DeadLetter;
using codec::DeadLetterFilter;
using codec::MessageHeaders;
using codec::parse_partition_offset;
using codec::read_dead_letter;
using codec::replay_of;
using codec::ReplayMessage;

// One line for `dlq list`: "P:O  reason  topic/partition/offset  key  value…" (fixed widths
// but the reason and the value).
std::string dead_letters_header();
std::string format_dead_letter(const DeadLetter& letter);
// What a replay did (or would do, `dry_run`): "sent 0:12 -> agent.tasks.submit key u1 (57
// bytes), dlq-replayed-from 0:12".
std::string format_replay(const DeadLetter& letter, const ReplayMessage& message, bool dry_run);

// The first `max_bytes` of a value, cut on a character boundary, control characters as
// spaces, "…" when cut.
std::string value_prefix(std::string_view value, std::size_t max_bytes);

}  // namespace agentfleet::agentctl
