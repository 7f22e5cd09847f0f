#pragma once
// The RapidJSON writer the codec writes with, and the two calls every writer of it repeats:
// a string from a string_view, and a key with its string value.

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <string_view>

namespace agentfleet::codec {

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

inline void write_string(JsonWriter& w, std::string_view s) {
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
}

inline void key_string(JsonWriter& w, const char* key, std::string_view value) {
  w.Key(key);
  write_string(w, value);
}

}  // namespace agentfleet::codec
