#include "core/domain/redaction.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace agentfleet {

namespace {
struct Span {
  std::size_t begin = 0;
  std::size_t end = 0;
};

char lower(char c) {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
// Part of a key name: `password_file` and `tokens` are other keys than `password`, `token`.
bool is_key_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}
bool matches_at(std::string_view text, std::size_t pos, std::string_view word) {
  if (pos + word.size() > text.size())
    return false;
  for (std::size_t i = 0; i < word.size(); ++i) {
    if (lower(text[pos + i]) != word[i])
      return false;
  }
  return true;
}

// scheme://user:PASSWORD@host: the password of every URL's userinfo.
void url_passwords(std::string_view text, std::vector<Span>& spans) {
  for (std::size_t pos = text.find("://"); pos != std::string_view::npos;
       pos = text.find("://", pos + 3)) {
    const std::size_t start = pos + 3;
    std::size_t end = start;
    while (end < text.size() && !is_space(text[end]) &&
           std::string_view("/?#\"'<>").find(text[end]) == std::string_view::npos) {
      ++end;
    }
    const std::string_view authority = text.substr(start, end - start);
    const std::size_t at = authority.rfind('@');
    if (at == std::string_view::npos)
      continue;
    const std::size_t colon = authority.substr(0, at).find(':');
    if (colon == std::string_view::npos || colon + 1 == at)
      continue;  // only a user name
    spans.push_back(Span{start + colon + 1, start + at});
  }
}

// `password=VALUE`, `sasl.password = 'VALUE'`, `?api_key=VALUE&`, `"token": "VALUE"`. A bare
// `key: value` is not taken (it reads like prose or a JSON pointer in an error message);
// a quoted key before `:` is (JSON).
void keyword_values(std::string_view text, std::vector<Span>& spans) {
  static constexpr std::array<std::string_view, 7> kKeys = {
      "password", "passwd", "secret", "api_key", "apikey", "api-key", "token"};
  for (std::size_t i = 0; i < text.size(); ++i) {
    for (std::string_view key : kKeys) {
      if (!matches_at(text, i, key))
        continue;
      std::size_t k = i + key.size();
      if (k < text.size() && is_key_char(text[k]))
        continue;
      bool quoted = false;
      if (k < text.size() && (text[k] == '"' || text[k] == '\'')) {
        quoted = true;
        ++k;
      }
      while (k < text.size() && (text[k] == ' ' || text[k] == '\t'))
        ++k;
      if (k >= text.size() || !(text[k] == '=' || (text[k] == ':' && quoted)))
        continue;
      ++k;
      while (k < text.size() && (text[k] == ' ' || text[k] == '\t'))
        ++k;
      if (k >= text.size() || text.substr(k, kRedacted.size()) == kRedacted)
        continue;
      Span value;
      if (text[k] == '"' || text[k] == '\'') {
        const char quote = text[k];
        value.begin = k + 1;
        std::size_t e = value.begin;
        while (e < text.size() && text[e] != quote)
          e += (text[e] == '\\' && e + 1 < text.size()) ? 2 : 1;
        value.end = std::min(e, text.size());
      } else {
        value.begin = k;
        std::size_t e = k;
        while (e < text.size() && !is_space(text[e]) &&
               std::string_view("&,;\"'})]").find(text[e]) == std::string_view::npos) {
          ++e;
        }
        value.end = e;
      }
      if (value.end > value.begin)
        spans.push_back(value);
    }
  }
}

// `Bearer TOKEN` (an Authorization header's credentials).
void bearer_tokens(std::string_view text, std::vector<Span>& spans) {
  constexpr std::string_view kBearer = "bearer";
  for (std::size_t i = 0; i + kBearer.size() < text.size(); ++i) {
    if (!matches_at(text, i, kBearer) || (i > 0 && is_key_char(text[i - 1])))
      continue;
    std::size_t k = i + kBearer.size();
    if (text[k] != ' ' && text[k] != '\t')
      continue;
    while (k < text.size() && (text[k] == ' ' || text[k] == '\t'))
      ++k;
    std::size_t e = k;
    while (e < text.size() &&
           (std::isalnum(static_cast<unsigned char>(text[e])) ||
            std::string_view("-._~+/=").find(text[e]) != std::string_view::npos)) {
      ++e;
    }
    if (e > k)
      spans.push_back(Span{k, e});
  }
}

void known_values(std::string_view text, const std::vector<std::string>& secrets,
                  std::vector<Span>& spans) {
  for (const std::string& secret : secrets) {
    if (secret.size() < kMinSecretChars)
      continue;
    for (std::size_t pos = text.find(secret); pos != std::string_view::npos;
         pos = text.find(secret, pos + 1)) {
      spans.push_back(Span{pos, pos + secret.size()});
    }
  }
}

std::vector<Span> merged(std::vector<Span> spans) {
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  std::vector<Span> out;
  for (const Span& s : spans) {
    if (!out.empty() && s.begin <= out.back().end)
      out.back().end = std::max(out.back().end, s.end);
    else
      out.push_back(s);
  }
  return out;
}

std::string replaced(std::string_view text, const std::vector<Span>& spans) {
  if (spans.empty())
    return std::string(text);
  std::string out;
  out.reserve(text.size());
  std::size_t at = 0;
  for (const Span& s : spans) {
    out.append(text.substr(at, s.begin - at));
    out.append(kRedacted);
    at = s.end;
  }
  out.append(text.substr(at));
  return out;
}

std::vector<Span> pattern_spans(std::string_view text) {
  std::vector<Span> spans;
  url_passwords(text, spans);
  keyword_values(text, spans);
  bearer_tokens(text, spans);
  return spans;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  c = lower(c);
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  return -1;
}

std::string percent_decoded(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      const int hi = hex_value(text[i + 1]);
      const int lo = hex_value(text[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}
}  // namespace

std::string redact_credentials(std::string_view text) {
  return replaced(text, merged(pattern_spans(text)));
}

std::vector<std::string> credentials_in(std::string_view text) {
  std::vector<std::string> found;
  auto add = [&](std::string value) {
    if (!value.empty() && std::find(found.begin(), found.end(), value) == found.end())
      found.push_back(std::move(value));
  };
  for (const Span& s : merged(pattern_spans(text))) {
    const std::string_view value = text.substr(s.begin, s.end - s.begin);
    add(std::string(value));
    add(percent_decoded(value));
  }
  return found;
}

std::string redact_known(std::string_view text, const std::vector<std::string>& secrets) {
  std::vector<Span> spans;
  known_values(text, secrets, spans);
  return replaced(text, merged(std::move(spans)));
}

std::string redact(std::string_view text, const std::vector<std::string>& known_secrets) {
  std::vector<Span> spans = pattern_spans(text);
  known_values(text, known_secrets, spans);
  return replaced(text, merged(std::move(spans)));
}

}  // namespace agentfleet
