#pragma once
// Tool calls a model wrote as text. An open model served without a tool-call parser (vLLM,
// llama.cpp or Ollama without one configured) answers a function-calling request with its
// calls in `content`, in the format its chat template taught it; read as plain text, such
// an answer would end the task with a result no tool produced. The formats, each read only
// when a model's configuration names it (models[].text_tool_calls; when it names none, every
// format marked "default" is read):
//
// name         | written by (its parser in vLLM / llama.cpp)       | default
// -------------+---------------------------------------------------+---------------------------
// hermes       | Qwen 2/2.5, Hermes, Granite 3.1 (vLLM hermes)     | yes
//              |   <tool_call>{"name": .., "arguments": {..}}</tool_call>, one or more
// llama        | Llama 3.1-3.3 (vLLM llama3_json, llama.cpp)       | yes
//              |   <function=NAME>{..}</function>; <|python_tag|>{"name": .., "parameters": {..}}
// mistral      | Mistral, Mixtral (vLLM mistral, llama.cpp)        | yes
//              |   [TOOL_CALLS] [{"name": .., "arguments": {..}}, ..]
// json         | any model told to answer with a call              | yes: only the whole answer
//              |   the whole answer (or a fence that is all of it) {"name": .., "arguments" or
//              |   "parameters": {..}}, or an array of them
// granite      | IBM Granite 3.0 (vLLM granite)                    | yes
//              |   <|tool_call|>[{"name": .., "arguments": {..}}, ..]
// jamba        | AI21 Jamba (vLLM jamba), MiniMax (vLLM minimax)   | yes
//              |   <tool_calls>[{"name": .., "arguments": {..}}, ..]</tool_calls>, or one object
//              |   a line between the same tags (MiniMax)
// internlm     | InternLM 2/2.5 (vLLM internlm)                    | yes
//              |   <|action_start|><|plugin|>{"name": .., "parameters": {..}}<|action_end|>
// qwen3_coder  | Qwen3-Coder (vLLM qwen3_coder, qwen3_xml)         | yes
//              |   <tool_call><function=NAME><parameter=KEY>VALUE</parameter>..</function>
//              |   </tool_call>
// glm45        | GLM-4.5 (vLLM glm45)                              | yes
//              |   <tool_call>NAME <arg_key>KEY</arg_key><arg_value>VALUE</arg_value>..
//              |   </tool_call>
// deepseek     | DeepSeek V3, R1 (vLLM deepseek_v3), V3.1 (deepseek_v31) | yes
//              |   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function
//              |   <｜tool▁sep｜>NAME ```json {..} ```<｜tool▁call▁end｜>..
//              |   <｜tool▁calls▁end｜>; V3.1 writes <｜tool▁call▁begin｜>NAME
//              |   <｜tool▁sep｜>{..}<｜tool▁call▁end｜> (bars full-width, ▁ not _)
// functionary  | Functionary v3.2 (llama.cpp)                      | yes
//              |   >>>NAME and a line {..}, one or more; >>>all and a line opens text
// command_r    | Command R7B (llama.cpp)                           | yes
//              |   <|START_ACTION|>[{"tool_name": .., "parameters": {..}}]<|END_ACTION|>
// nemotron     | Nemotron (llama.cpp)                              | yes
//              |   <TOOLCALL>[{"name": .., "arguments": {..}}]</TOOLCALL>
// firefunction | FireFunction v2 (llama.cpp), Phi-4-mini (vLLM phi4_mini_json) | yes
//              |   functools[{"name": .., "arguments": {..}}, ..]
// fenced       | instruction-tuned models without a format of their own | yes
//              |   prose, then a ```json, ```tool_call or ``` block holding exactly
//              |   {"name": .., "arguments" or "parameters": {..}} or an array of them; the
//              |   prose is the text, any other JSON in a fence stays text
// pythonic     | Llama 3.2, Llama 4 (vLLM pythonic, llama4_pythonic) | no: a bracketed list of
//              |   the whole answer [get_weather(city="SF", days=3), ..] | calls could be an answer
//              |   with Python literals as values, also between <|python_start|> and <|python_end|>
//
// Values of the XML formats (qwen3_coder, glm45) are JSON when they read as JSON, else the
// string less one newline either side. A last call whose closing tag was cut off is read
// when its JSON (or its </function>) is whole; text that merely mentions a tag, or a fence
// holding other JSON, stays text. When several formats are read, the first in the order
// above that finds calls wins.
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

enum class TextCallFormat {
  kHermes,
  kLlama,
  kMistral,
  kJson,
  kGranite,
  kJamba,
  kInternlm,
  kQwen3Coder,
  kGlm45,
  kDeepseek,
  kFunctionary,
  kCommandR,
  kNemotron,
  kFirefunction,
  kPythonic,
  kFenced,
};

// The names in the table above; nullopt for any other name.
std::optional<TextCallFormat> parse_text_call_format(std::string_view name);
std::string_view to_string(TextCallFormat format);
// Every format.
std::set<TextCallFormat> all_text_call_formats();
// What a model reads when its configuration names none: every format but pythonic.
std::set<TextCallFormat> default_text_call_formats();

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
