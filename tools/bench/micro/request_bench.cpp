// What the worker spends building the model requests of one task, before and after the
// conversation is kept encoded (codec::ConversationEncoder): the standard task's three
// function-calling requests (system prompt, the user's text, two tool exchanges) over the
// demo tools. Built only where Debian's libbenchmark-dev is installed:
//
//   build/release/tools/bench/micro/agentfleet-request-bench --benchmark_repetitions=3
//
// BM_StandardTaskBuiltWhole: each call fits a copy (react::fit_context) and encodes it
// whole (codec::build_chat_request), as the worker did before 2026-11-26.
// BM_StandardTaskEncodedOnce: each call syncs the run's encoder and splices the request
// (codec::assemble_chat_request), as the worker does now.

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "core/codec/openai_codec.hpp"
#include "core/react/context_budget.hpp"
#include "core/react/prompt.hpp"

namespace {

using namespace agentfleet;

// The conversation the task's call `calls` (1, 2 or 3) sends.
std::vector<Message> conversation(int calls) {
  std::vector<Message> m;
  m.push_back(Message{Role::kSystem, react::builtin_system_prompt(), {}, {}, {}});
  m.push_back(
      Message{Role::kUser, "明天下午三点和张三开会讨论季度预算，提前十五分钟提醒我", {}, {}, {}});
  for (int i = 1; i < calls; ++i) {
    const std::string id = "call_" + std::to_string(i);
    m.push_back(
        Message{Role::kAssistant,
                "",
                {ToolCall{id, "search_items", R"({"query":"季度预算会议","date":"2026-11-27"})"}},
                {},
                {}});
    m.push_back(Message{
        Role::kTool,
        R"({"items":[{"id":"it_123456","title":"季度预算会议","start":"2026-11-27T15:00:00+08:00","end":"2026-11-27T16:00:00+08:00","kind":"event"}],"count":1})",
        {},
        id,
        "search_items"});
  }
  return m;
}

std::vector<ports::ToolSchema> tools() {
  std::vector<ports::ToolSchema> t;
  for (const char* name : {"search_items", "create_event", "update_item", "delete_item",
                           "create_todo", "complete_todo"}) {
    t.push_back(ports::ToolSchema{
        name, "在日程和待办中搜索匹配的条目，返回 id、标题、时间",
        R"({"type":"object","properties":{"query":{"type":"string","description":"关键词"},"date":{"type":"string","format":"date"},"time_segment":{"type":"string","enum":["morning","afternoon","evening"]}},"required":["query"],"additionalProperties":false})"});
  }
  t.push_back(codec::finish_tool_schema());
  return t;
}

void BM_StandardTaskBuiltWhole(benchmark::State& state) {
  const std::vector<std::vector<Message>> calls{conversation(1), conversation(2), conversation(3)};
  const std::vector<ports::ToolSchema> schemas = tools();
  codec::ChatRequestOptions options;
  options.provider_model = "sim";
  const react::ContextBudget budget{100'000};
  for (auto _ : state) {
    for (const auto& messages : calls) {
      react::FittedContext fitted = react::fit_context(messages, budget);
      std::string body = codec::build_chat_request(options, fitted.messages, schemas);
      benchmark::DoNotOptimize(body);
    }
  }
}

void BM_StandardTaskEncodedOnce(benchmark::State& state) {
  const std::vector<std::vector<Message>> calls{conversation(1), conversation(2), conversation(3)};
  const std::string tools_json = codec::encode_tools(tools());  // once per tool set
  codec::ChatRequestOptions options;
  options.provider_model = "sim";
  for (auto _ : state) {
    codec::ConversationEncoder encoder;  // one per run
    for (const auto& messages : calls) {
      encoder.sync(1, messages);
      std::string messages_json = encoder.json();  // the call's own copy
      std::string body = codec::assemble_chat_request(options, messages_json, tools_json);
      benchmark::DoNotOptimize(body);
    }
  }
}

}  // namespace

BENCHMARK(BM_StandardTaskBuiltWhole);
BENCHMARK(BM_StandardTaskEncodedOnce);
BENCHMARK_MAIN();
