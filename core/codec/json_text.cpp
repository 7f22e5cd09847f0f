#include "core/codec/json_text.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cstdint>

namespace agentfleet::codec {

namespace {
// Deepest nesting of arrays and objects in JSON text, counted outside strings, stopping
// early once past `limit`. Invalid JSON is the parser's to reject.
int nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit)
        return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// Length of the valid UTF-8 sequence at `p` (1-4), or 0 when it is not one; its code point
// in `code_point`.
std::size_t utf8_sequence(const unsigned char* p, std::size_t left, char32_t& code_point) {
  const unsigned char c = p[0];
  code_point = c;
  if (c < 0x80)
    return 1;
  std::size_t n = 0;
  std::uint32_t cp = 0;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (left < n)
    return 0;
  for (std::size_t i = 1; i < n; ++i) {
    if ((p[i] & 0xC0) != 0x80)
      return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
  static constexpr std::uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  code_point = cp;
  return n;
}
}  // namespace

std::optional<std::size_t> lone_surrogate_escape(std::string_view json) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  bool in_string = false;
  bool after_high = false;  // the string's last character was a \uD800-\uDBFF escape
  for (std::size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (!in_string) {
      in_string = c == '"';
      after_high = false;
      continue;
    }
    if (c == '"') {
      in_string = false;
    } else if (c != '\\') {
      after_high = false;
    } else if (i + 5 < json.size() && json[i + 1] == 'u' && hex(json[i + 2]) >= 0 &&
               hex(json[i + 3]) >= 0 && hex(json[i + 4]) >= 0 && hex(json[i + 5]) >= 0) {
      const int code = ((hex(json[i + 2]) * 16 + hex(json[i + 3])) * 16 + hex(json[i + 4])) * 16 +
                       hex(json[i + 5]);
      if (code >= 0xDC00 && code <= 0xDFFF && !after_high)
        return i;
      after_high = code >= 0xD800 && code <= 0xDBFF;
      i += 5;
    } else {
      after_high = false;
      ++i;  // the escaped character, a quote included
    }
  }
  return std::nullopt;
}

bool parse_json(rapidjson::Document& doc, std::string_view text) {
  if (nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth)
    return false;
  if (lone_surrogate_escape(text))
    return false;
  doc.Parse<rapidjson::kParseIterativeFlag | rapidjson::kParseValidateEncodingFlag>(text.data(),
                                                                                    text.size());
  return !doc.HasParseError();
}

std::string_view unfenced(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r\n";
  auto trim = [&](std::string_view t) {
    const auto first = t.find_first_not_of(kSpace);
    if (first == std::string_view::npos)
      return std::string_view{};
    return t.substr(first, t.find_last_not_of(kSpace) - first + 1);
  };
  std::string_view body = trim(text);
  if (body.size() >= 6 && body.substr(0, 3) == "```" && body.substr(body.size() - 3) == "```") {
    body = body.substr(3, body.size() - 6);
    const auto line_end = body.find('\n');
    if (line_end != std::string_view::npos &&
        trim(body.substr(0, line_end)).find_first_of("{[") == std::string_view::npos)
      body = body.substr(line_end + 1);  // the fence's language tag
    body = trim(body);
  }
  return body;
}

std::string canonical_arguments(std::string_view text) {
  const std::string_view body = unfenced(text);
  if (body.empty())
    return "{}";
  rapidjson::Document doc;
  if (!parse_json(doc, body) || !doc.IsObject())
    return std::string(text);
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  doc.Accept(writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::string sanitize_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t i = 0;
  while (i < text.size()) {
    char32_t code_point = 0;
    const std::size_t n = utf8_sequence(p + i, text.size() - i, code_point);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      if (!(n == 1 && p[i] == 0))
        out.append(text.data() + i, n);
      i += n;
    }
  }
  return out;
}

Utf8Sequence utf8_sequence_at(std::string_view text, std::size_t i) {
  Utf8Sequence out;
  if (i >= text.size())
    return out;
  out.length = utf8_sequence(reinterpret_cast<const unsigned char*>(text.data()) + i,
                             text.size() - i, out.code_point);
  return out;
}

}  // namespace agentfleet::codec
