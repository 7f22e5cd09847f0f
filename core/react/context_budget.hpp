#pragma once
// The context budget: how many tokens a conversation is estimated to take, and the view of
// it that is sent to the model when it would not fit the model's context window. Pure
// functions, standard library only, thread-safe.
//
// Token estimate (no tokenizer, deliberately cheap and deterministic): every CJK
// character (CJK ideographs and their extensions, kana, Hangul, CJK and full-width
// punctuation) counts as 1 token; all other characters (Unicode code points) count as
// 1/4 token, rounded up per text; each message adds kMessageOverheadTokens for its role
// and framing, each tool call its name and arguments. Real tokenizers give roughly
// 0.6-1.5 tokens per Chinese character and 3-5 characters per token for English and JSON,
// so the estimate is close enough to keep a request inside the window with the margin
// the model's max_output_tokens already leaves.
//
// Trimming works on a copy: ReactState (and therefore what is checkpointed: replies and
// observations) always keeps the full conversation; only the request sees stubs.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/domain/conversation.hpp"

namespace agentfleet::react {

inline constexpr std::int64_t kMessageOverheadTokens = 4;

std::int64_t estimate_tokens(std::string_view text);
std::int64_t estimate_tokens(const Message& message);
std::int64_t estimate_tokens(const std::vector<Message>& messages);

// Number of Unicode code points in UTF-8 text (a stray byte counts as one).
std::int64_t count_chars(std::string_view text);

// Tokens the messages of one call may take.
struct ContextBudget {
  std::int64_t max_tokens = 0;
};

// context_window_tokens - max_output_tokens - tool_tokens (the tool schemas as the request
// renders them; codec::estimate_tool_tokens), never below 0.
ContextBudget context_budget(std::int64_t context_window_tokens, std::int64_t max_output_tokens,
                             std::int64_t tool_tokens);

struct FittedContext {
  std::vector<Message> messages;      // what to send
  std::int64_t estimated_tokens = 0;  // estimate of `messages`
  int trimmed = 0;                    // tool outputs replaced by a stub
  bool fits = true;                   // false: over budget even with everything trimmable trimmed
};

// Fits a conversation to the budget. When it is over, tool outputs are replaced by
// trim_stub(...) one at a time, oldest first, until it fits; never the system prompt, the
// user's text, an assistant message, or the tool outputs of the latest step (those after
// the last assistant message). Deterministic: the same messages and budget give the same
// view. When even that is not enough the view is returned with fits = false (the provider
// then decides; the runner may log it).
FittedContext fit_context(const std::vector<Message>& messages, const ContextBudget& budget);

// What a trimmed tool output becomes: {"trimmed":true,"original_chars":N}.
std::string trim_stub(std::string_view original);

// A tool result as the conversation keeps it: unchanged when it has at most `max_chars`
// characters (or max_chars <= 0), otherwise
// {"truncated":true,"original_chars":N,"head":"<the first max_chars characters>"}.
std::string truncate_for_context(std::string_view content, int max_chars);

}  // namespace agentfleet::react
