#pragma once
// Safe reads of API answers whose shape is not guaranteed (RapidJSON asserts on a member
// of a non-object): a missing member or one of another type reads as empty, -1 or null.

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstdint>
#include <string>

namespace agentfleet::agentctl::json {

inline const rapidjson::Value& at(const rapidjson::Value& v, const char* name) {
  static const rapidjson::Value kNull;
  if (!v.IsObject())
    return kNull;
  auto it = v.FindMember(name);
  return it != v.MemberEnd() ? it->value : kNull;
}

inline std::string str(const rapidjson::Value& v, const char* name) {
  const auto& m = at(v, name);
  return m.IsString() ? std::string(m.GetString(), m.GetStringLength()) : std::string();
}

// An integer member, or `fallback`.
inline std::int64_t num(const rapidjson::Value& v, const char* name, std::int64_t fallback = -1) {
  const auto& m = at(v, name);
  return m.IsInt64() ? m.GetInt64() : fallback;
}

inline bool flag(const rapidjson::Value& v, const char* name) {
  const auto& m = at(v, name);
  return m.IsBool() && m.GetBool();
}

// Compact JSON text of a value.
inline std::string text_of(const rapidjson::Value& v) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  v.Accept(w);
  return std::string(buffer.GetString(), buffer.GetSize());
}

// A string as a JSON string literal.
inline std::string quoted(const std::string& text) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace agentfleet::agentctl::json
