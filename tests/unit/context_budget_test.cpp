// The context budget: the token estimate, the trimmed view of a conversation sent to the
// model, and per-result truncation.
#include "core/react/context_budget.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace agentfleet::react {
namespace {

TEST(ContextBudgetTest, CjkCountsOneTokenPerCharacterOtherTextFourCharactersPerToken) {
  EXPECT_EQ(estimate_tokens(""), 0);
  EXPECT_EQ(estimate_tokens("abcd"), 1);
  EXPECT_EQ(estimate_tokens("abcde"), 2);  // rounded up
  EXPECT_EQ(estimate_tokens("周会"), 2);
  EXPECT_EQ(estimate_tokens("把周会改到晚上8点"), 8 + 1);
  EXPECT_EQ(estimate_tokens("，。"), 2);      // CJK punctuation
  EXPECT_EQ(estimate_tokens("カタカナ"), 4);  // kana
  EXPECT_EQ(estimate_tokens("한국어"), 3);    // Hangul
  EXPECT_EQ(estimate_tokens("é"), 1);         // one code point, not two bytes
  EXPECT_EQ(estimate_tokens("\xff\xfe"), 1);  // stray bytes count as characters
  EXPECT_EQ(count_chars("周会ab"), 4);
  EXPECT_EQ(count_chars("\xe5\x91"), 2);  // a cut sequence: two stray bytes

  const Message message{Role::kAssistant, "abcd", {ToolCall{"c1", "search", "{}"}}, {}, {}};
  EXPECT_EQ(estimate_tokens(message),
            kMessageOverheadTokens + 1 + kMessageOverheadTokens + 1 + 2 + 1);
  EXPECT_EQ(estimate_tokens(std::vector<Message>{message, message}), 2 * estimate_tokens(message));
}

TEST(ContextBudgetTest, BudgetIsTheWindowLessOutputAndTools) {
  EXPECT_EQ(context_budget(32000, 1024, 800).max_tokens, 32000 - 1024 - 800);
  EXPECT_EQ(context_budget(1000, 1024, 800).max_tokens, 0);
}

Message tool(const std::string& id, const std::string& content) {
  return Message{Role::kTool, content, {}, id, "search_items"};
}
Message assistant(const std::string& id) {
  return Message{Role::kAssistant, "", {ToolCall{id, "search_items", "{}"}}, {}, {}};
}

// system, user, then three steps of one call each with a 2,000-character result.
std::vector<Message> three_steps() {
  return {
      Message{Role::kSystem, std::string(3000, 's'), {}, {}, {}},
      Message{Role::kUser, "把周会改到晚上8点", {}, {}, {}},
      assistant("c1"),
      tool("c1", std::string(2000, 'a')),
      assistant("c2"),
      tool("c2", std::string(2000, 'b')),
      assistant("c3"),
      tool("c3", std::string(2000, 'c')),
  };
}

TEST(ContextBudgetTest, UnderBudgetNothingChanges) {
  const auto messages = three_steps();
  const FittedContext fitted = fit_context(messages, ContextBudget{100000});
  EXPECT_TRUE(fitted.fits);
  EXPECT_EQ(fitted.trimmed, 0);
  EXPECT_EQ(fitted.estimated_tokens, estimate_tokens(messages));
  ASSERT_EQ(fitted.messages.size(), messages.size());
  for (std::size_t i = 0; i < messages.size(); ++i)
    EXPECT_EQ(fitted.messages[i].content, messages[i].content);
}

TEST(ContextBudgetTest, OldestToolOutputsAreTrimmedFirstUntilItFits) {
  const auto messages = three_steps();
  const std::int64_t full = estimate_tokens(messages);
  // Room for everything but about one result.
  const ContextBudget budget{full - 400};
  const FittedContext fitted = fit_context(messages, budget);

  EXPECT_TRUE(fitted.fits);
  EXPECT_EQ(fitted.trimmed, 1);
  EXPECT_LE(fitted.estimated_tokens, budget.max_tokens);
  EXPECT_EQ(fitted.estimated_tokens, estimate_tokens(fitted.messages));
  EXPECT_EQ(fitted.messages[3].content, R"({"trimmed":true,"original_chars":2000})");
  EXPECT_EQ(fitted.messages[3].tool_call_id, "c1");  // still answers its call
  EXPECT_EQ(fitted.messages[5].content, messages[5].content);
  EXPECT_EQ(fitted.messages[7].content, messages[7].content);
  // The input is not touched: the state (and what is checkpointed) keeps everything.
  EXPECT_EQ(messages[3].content, std::string(2000, 'a'));
}

TEST(ContextBudgetTest, SystemUserAndTheLatestStepAreNeverTrimmed) {
  auto messages = three_steps();
  const FittedContext fitted = fit_context(messages, ContextBudget{10});
  EXPECT_FALSE(fitted.fits);
  EXPECT_EQ(fitted.trimmed, 2);
  EXPECT_EQ(fitted.messages[0].content, messages[0].content);
  EXPECT_EQ(fitted.messages[1].content, messages[1].content);
  EXPECT_EQ(fitted.messages[3].content, trim_stub(messages[3].content));
  EXPECT_EQ(fitted.messages[5].content, trim_stub(messages[5].content));
  EXPECT_EQ(fitted.messages[7].content, messages[7].content);  // the latest step's output
  EXPECT_EQ(fitted.estimated_tokens, estimate_tokens(fitted.messages));

  // Once the model answered after the last results, those are old too.
  messages.push_back(assistant("c4"));
  const FittedContext later = fit_context(messages, ContextBudget{10});
  EXPECT_EQ(later.messages[7].content, trim_stub(messages[7].content));
}

TEST(ContextBudgetTest, AllOutputsOfTheLatestStepAreKept) {
  std::vector<Message> messages = {
      Message{Role::kSystem, "sys", {}, {}, {}},
      Message{Role::kUser, "u", {}, {}, {}},
      Message{Role::kAssistant,
              "",
              {ToolCall{"a", "search_items", "{}"}, ToolCall{"b", "search_items", "{}"}},
              {},
              {}},
      tool("a", std::string(4000, 'x')),
      tool("b", std::string(4000, 'y')),
  };
  const FittedContext fitted = fit_context(messages, ContextBudget{100});
  EXPECT_FALSE(fitted.fits);
  EXPECT_EQ(fitted.trimmed, 0);
  EXPECT_EQ(fitted.messages[3].content, messages[3].content);
  EXPECT_EQ(fitted.messages[4].content, messages[4].content);
}

TEST(ContextBudgetTest, SmallOutputsAreNotReplacedByALargerStub) {
  std::vector<Message> messages = three_steps();
  messages[3].content = "{}";
  const FittedContext fitted = fit_context(messages, ContextBudget{estimate_tokens(messages) - 1});
  EXPECT_EQ(fitted.messages[3].content, "{}");
  EXPECT_EQ(fitted.messages[5].content, trim_stub(messages[5].content));
}

TEST(ContextBudgetTest, TrimmingIsDeterministic) {
  const auto messages = three_steps();
  const ContextBudget budget{estimate_tokens(messages) - 700};
  const FittedContext a = fit_context(messages, budget);
  const FittedContext b = fit_context(messages, budget);
  ASSERT_EQ(a.messages.size(), b.messages.size());
  for (std::size_t i = 0; i < a.messages.size(); ++i)
    EXPECT_EQ(a.messages[i].content, b.messages[i].content);
  EXPECT_EQ(a.trimmed, 2);
  EXPECT_EQ(a.trimmed, b.trimmed);
  EXPECT_EQ(trim_stub("周会ab"), R"({"trimmed":true,"original_chars":4})");
}

TEST(ContextBudgetTest, TruncationKeepsAHeadAndSaysSo) {
  EXPECT_EQ(truncate_for_context("short", 10), "short");
  EXPECT_EQ(truncate_for_context("exactly10!", 10), "exactly10!");
  EXPECT_EQ(truncate_for_context(std::string(50, 'a'), 0), std::string(50, 'a'));
  EXPECT_EQ(truncate_for_context(R"({"title":"周会周会周会"})", 12),
            R"({"truncated":true,"original_chars":18,"head":"{\"title\":\"周会"})");
}

}  // namespace
}  // namespace agentfleet::react
