#pragma once
// Parsing JSON that comes from outside (model replies, tool bodies, arguments the model
// wrote) and making outside text safe to store. Pure functions, thread-safe.

#include <rapidjson/document.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace agentfleet::codec {

inline constexpr int kMaxJsonDepth = 64;

// Parses `text` into `doc` iteratively (no recursion on the input's nesting), requires
// valid UTF-8 (lone surrogate escapes included), and refuses nesting deeper than kMaxJsonDepth, so
// a hostile body cannot exhaust the stack of whoever later walks or serializes the document. False
// on any of these; `doc` is then unusable.
bool parse_json(rapidjson::Document& doc, std::string_view text);

// The offset of the first `\uDC00`-`\uDFFF` escape in a JSON string that does not follow a
// `\uD800`-`\uDBFF` escape: a lone low surrogate, no character at all. RapidJSON 1.1
// refuses a lone high surrogate but turns a lone low one into bytes that are not UTF-8
// (which Postgres then refuses), so every parse of outside JSON checks for it first.
std::optional<std::size_t> lone_surrogate_escape(std::string_view json);

// `text` without blanks around it and, when a fenced block (```json ... ``` or ``` ... ```)
// is all of it, without the fence and its language tag.
std::string_view unfenced(std::string_view text);

// Tool-call arguments as they are sent to the tool and back to the model: an object (also
// one inside a fence or blanks, as models write them) written compactly; blank text "{}";
// anything else kept as it is, for the tool-call check to refuse with a reason the model
// reads. A repaired argument string is thus never echoed verbatim.
std::string canonical_arguments(std::string_view text);

// Makes text storable anywhere (Postgres text/jsonb, headers of logs): invalid UTF-8
// sequences become U+FFFD and NUL characters are dropped.
std::string sanitize_text(std::string_view text);

// The UTF-8 sequence starting at `text[i]`: its length in bytes (1-4) and its code point.
// Length 0 when no well-formed sequence starts there (a stray byte, an overlong form, a
// surrogate, a sequence cut short, `i` past the end); `code_point` is then the byte.
struct Utf8Sequence {
  std::size_t length = 0;
  char32_t code_point = 0;
};
Utf8Sequence utf8_sequence_at(std::string_view text, std::size_t i);

}  // namespace agentfleet::codec
