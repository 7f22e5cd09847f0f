#pragma once
// Tool calls a model wrote as text. An open model served without a tool-call parser (vLLM,
// llama.cpp or Ollama without one configured) answers a function-calling request with its
// calls in `content`, in the format its chat template taught it; read as plain text, such
// an answer would end the task with a result no tool produced. The formats read:
//
//   hermes   <tool_call>{"name": "...", "arguments": {...}}</tool_call>, one or more (Qwen 2
//            and 2.5, Hermes, many fine-tunes); a last call whose closing tag was cut off
//            is read when its JSON is whole
//   llama    <function=NAME>{...}</function> and <|python_tag|>{"name": "...",
//            "parameters": {...}} (Llama 3.1 to 3.3)
//   mistral  [TOOL_CALLS] [{"name": "...", "arguments": {...}}, ...] (Mistral, Mixtral)
//   json     the whole answer (or a ```json fenced block that is all of it) is one object
//            {"name": "...", "arguments" or "parameters": {...}}, or an array of them
//
// Arguments are re-written as canonical JSON (what is sent back to the model on the next
// turn, and what the tool receives); arguments that are not a JSON object are kept as
// text, which the tool-call check then refuses with a reason the model reads. Call ids are
// `text_call_<n>` in the order of the calls: a replayed checkpoint reads the same.
// Pure functions, thread-safe.

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/domain/conversation.hpp"
#include "core/domain/error.hpp"

namespace agentfleet::codec {

enum class TextCallFormat { kHermes, kLlama, kMistral, kJson };

// "hermes", "llama", "mistral", "json"; nullopt for any other name.
std::optional<TextCallFormat> parse_text_call_format(std::string_view name);
std::string_view to_string(TextCallFormat format);
// Every format, in the order above (what a model reads when its configuration names none).
std::set<TextCallFormat> all_text_call_formats();

struct TextCalls {
  std::vector<ToolCall> calls;
  std::string text;  // what the answer says besides the calls, trimmed
};

// The calls written in `content` in one of `formats`; nullopt when it holds none (text that
// merely mentions a tag or a JSON object is left as text).
std::optional<TextCalls> read_text_tool_calls(std::string_view content,
                                              const std::set<TextCallFormat>& formats);

// A reply that carries no native tool calls but writes some in its text gets them as its
// tool calls (with `finish` parsed as the provider's would be) and keeps the rest of the
// text as its content. Any other reply is returned as it is.
ModelReply with_text_tool_calls(ModelReply reply, const std::set<TextCallFormat>& formats);

}  // namespace agentfleet::codec
