#include "core/react/context_budget.hpp"

#include <algorithm>

#include "core/react/json_string.hpp"

namespace agentfleet::react {

namespace {
// Decodes the UTF-8 sequence at text[i]; sets `length` to the bytes it takes. A byte that
// does not start a well-formed sequence counts as one character of its own.
std::uint32_t decode(std::string_view text, std::size_t i, std::size_t& length) {
  const auto c = static_cast<unsigned char>(text[i]);
  std::size_t n = 1;
  std::uint32_t cp = c;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  }
  if (n == 1 || i + n > text.size()) {
    length = 1;
    return c;
  }
  for (std::size_t k = 1; k < n; ++k) {
    const auto next = static_cast<unsigned char>(text[i + k]);
    if ((next & 0xC0) != 0x80) {
      length = 1;
      return c;
    }
    cp = (cp << 6) | (next & 0x3F);
  }
  length = n;
  return cp;
}

bool is_cjk(std::uint32_t cp) {
  return (cp >= 0x1100 && cp <= 0x11FF)        // Hangul Jamo
         || (cp >= 0x2E80 && cp <= 0x9FFF)     // radicals, CJK punctuation, kana, ideographs
         || (cp >= 0xAC00 && cp <= 0xD7AF)     // Hangul syllables
         || (cp >= 0xF900 && cp <= 0xFAFF)     // compatibility ideographs
         || (cp >= 0xFE30 && cp <= 0xFE4F)     // compatibility forms
         || (cp >= 0xFF00 && cp <= 0xFFEF)     // full-width and half-width forms
         || (cp >= 0x20000 && cp <= 0x3FFFF);  // ideograph extensions B and later
}

// Byte length of the first `max_chars` characters of `text`.
std::size_t prefix_bytes(std::string_view text, std::int64_t max_chars) {
  std::size_t i = 0;
  for (std::int64_t chars = 0; i < text.size() && chars < max_chars; ++chars) {
    std::size_t length = 1;
    decode(text, i, length);
    i += length;
  }
  return i;
}

// The tool messages that may be trimmed, oldest first: every tool message before the last
// assistant message (the ones after it are the latest step's outputs).
std::vector<std::size_t> trimmable(const std::vector<Message>& messages) {
  std::size_t last_assistant = messages.size();
  for (std::size_t i = messages.size(); i-- > 0;) {
    if (messages[i].role == Role::kAssistant) {
      last_assistant = i;
      break;
    }
  }
  std::vector<std::size_t> out;
  if (last_assistant == messages.size())
    return out;
  for (std::size_t i = 0; i < last_assistant; ++i) {
    if (messages[i].role == Role::kTool)
      out.push_back(i);
  }
  return out;
}
}  // namespace

std::int64_t count_chars(std::string_view text) {
  std::int64_t chars = 0;
  for (std::size_t i = 0; i < text.size(); ++chars) {
    std::size_t length = 1;
    decode(text, i, length);
    i += length;
  }
  return chars;
}

std::int64_t estimate_tokens(std::string_view text) {
  std::int64_t cjk = 0;
  std::int64_t other = 0;
  for (std::size_t i = 0; i < text.size();) {
    std::size_t length = 1;
    const std::uint32_t cp = decode(text, i, length);
    i += length;
    if (is_cjk(cp)) {
      ++cjk;
    } else {
      ++other;
    }
  }
  return cjk + (other + 3) / 4;
}

std::int64_t estimate_tokens(const Message& message) {
  std::int64_t tokens = kMessageOverheadTokens + estimate_tokens(message.content);
  for (const ToolCall& call : message.tool_calls) {
    tokens += kMessageOverheadTokens + estimate_tokens(call.id) + estimate_tokens(call.name) +
              estimate_tokens(call.arguments);
  }
  tokens += estimate_tokens(message.tool_call_id) + estimate_tokens(message.name);
  return tokens;
}

std::int64_t estimate_tokens(const std::vector<Message>& messages) {
  std::int64_t tokens = 0;
  for (const Message& message : messages)
    tokens += estimate_tokens(message);
  return tokens;
}

ContextBudget context_budget(std::int64_t context_window_tokens, std::int64_t max_output_tokens,
                             std::int64_t tool_tokens) {
  return ContextBudget{
      std::max<std::int64_t>(0, context_window_tokens - max_output_tokens - tool_tokens)};
}

std::string trim_stub(std::string_view original) {
  return "{\"trimmed\":true,\"original_chars\":" + std::to_string(count_chars(original)) + "}";
}

std::string truncate_for_context(std::string_view content, int max_chars) {
  if (max_chars <= 0)
    return std::string(content);
  const std::size_t head = prefix_bytes(content, max_chars);
  if (head == content.size())
    return std::string(content);
  std::string out =
      "{\"truncated\":true,\"original_chars\":" + std::to_string(count_chars(content)) +
      ",\"head\":";
  append_json_string(out, content.substr(0, head));
  out += "}";
  return out;
}

FittedContext fit_context(const std::vector<Message>& messages, const ContextBudget& budget) {
  FittedContext fitted;
  fitted.messages = messages;
  fitted.estimated_tokens = estimate_tokens(messages);
  if (fitted.estimated_tokens <= budget.max_tokens)
    return fitted;
  for (std::size_t index : trimmable(messages)) {
    Message& message = fitted.messages[index];
    std::string stub = trim_stub(message.content);
    const std::int64_t before = estimate_tokens(message.content);
    const std::int64_t after = estimate_tokens(stub);
    if (after >= before)
      continue;  // already small: a stub would not save anything
    message.content = std::move(stub);
    fitted.estimated_tokens -= before - after;
    ++fitted.trimmed;
    if (fitted.estimated_tokens <= budget.max_tokens)
      return fitted;
  }
  fitted.fits = false;
  return fitted;
}

}  // namespace agentfleet::react
