#pragma once
// Parsing JSON that comes from outside (model replies, tool bodies, arguments the model
// wrote) and making outside text safe to store. Pure functions, thread-safe.

#include <rapidjson/document.h>

#include <string>
#include <string_view>

namespace agentfleet::codec {

inline constexpr int kMaxJsonDepth = 64;

// Parses `text` into `doc` iteratively (no recursion on the input's nesting), requires
// valid UTF-8, and refuses nesting deeper than kMaxJsonDepth, so a hostile body cannot
// exhaust the stack of whoever later walks or serializes the document. False on any of
// these; `doc` is then unusable.
bool parse_json(rapidjson::Document& doc, std::string_view text);

// Makes text storable anywhere (Postgres text/jsonb, headers of logs): invalid UTF-8
// sequences become U+FFFD and NUL characters are dropped.
std::string sanitize_text(std::string_view text);

}  // namespace agentfleet::codec
