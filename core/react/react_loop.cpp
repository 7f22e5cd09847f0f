#include "core/react/react_loop.hpp"

#include <algorithm>

#include "core/react/context_budget.hpp"
#include "core/react/json_string.hpp"
#include "core/react/strategy.hpp"

namespace agentfleet::react {

std::string_view to_string(FailReason reason) {
  switch (reason) {
    case FailReason::kMaxSteps:
      return "max_steps";
    case FailReason::kTruncated:
      return "truncated";
    case FailReason::kContentFilter:
      return "content_filter";
    case FailReason::kEmptyReply:
      return "empty_reply";
    case FailReason::kNoPlan:
      return "no_plan";
    case FailReason::kUnperformedAction:
      return "unperformed_action";
  }
  return "unknown";
}

ErrorCode error_code_of(FailReason reason) {
  switch (reason) {
    case FailReason::kMaxSteps:
      return ErrorCode::kMaxSteps;
    case FailReason::kTruncated:
      return ErrorCode::kTruncated;
    case FailReason::kContentFilter:
      return ErrorCode::kContentFilter;
    case FailReason::kEmptyReply:
      return ErrorCode::kEmptyReply;
    case FailReason::kNoPlan:
      return ErrorCode::kNoPlan;
    case FailReason::kUnperformedAction:
      return ErrorCode::kUnperformedAction;
  }
  return ErrorCode::kInternal;
}

namespace {
// Emoji come with or without the variation selector U+FE0F: models write "⚠" as often as
// "⚠️", and both must match the same marker.
std::string without_variation_selector(std::string_view text) {
  static constexpr std::string_view kVs16 = "\xEF\xB8\x8F";
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (text.substr(i, kVs16.size()) == kVs16) {
      i += kVs16.size();
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

bool contains_any(const std::string& text, const std::vector<std::string>& markers) {
  const std::string plain = without_variation_selector(text);
  return std::any_of(markers.begin(), markers.end(), [&](const std::string& marker) {
    const std::string plain_marker = without_variation_selector(marker);
    return !plain_marker.empty() && plain.find(plain_marker) != std::string::npos;
  });
}
}  // namespace

std::string tool_error_json(std::string_view code, std::string_view message) {
  std::string out = "{\"error\":{\"code\":";
  append_json_string(out, code);
  out += ",\"message\":";
  append_json_string(out, message);
  out += "}}";
  return out;
}

ReactLoop::ReactLoop(Limits limits, ResultMarkers markers, std::set<std::string> allowed_tools)
    : limits_(limits), markers_(std::move(markers)), allowed_tools_(std::move(allowed_tools)) {}

ReactState ReactLoop::start(std::string system_prompt, std::string user_text) const {
  ReactState state;
  state.messages.push_back(Message{Role::kSystem, std::move(system_prompt), {}, {}, {}});
  state.messages.push_back(Message{Role::kUser, std::move(user_text), {}, {}, {}});
  return state;
}

ReactState ReactLoop::start(std::string system_prompt, std::vector<Message> history,
                            std::string user_text) const {
  ReactState state;
  state.messages.reserve(history.size() + 2);
  state.messages.push_back(Message{Role::kSystem, std::move(system_prompt), {}, {}, {}});
  for (Message& m : history)
    state.messages.push_back(std::move(m));
  state.messages.push_back(Message{Role::kUser, std::move(user_text), {}, {}, {}});
  return state;
}

Step ReactLoop::finish_text(const ReactState& state, const std::string& text) const {
  TaskResult result = classify_text(text);
  if (result.type == ResultType::kActionCompleted && state.tools_ok == 0) {
    return Fail{FailReason::kUnperformedAction,
                "the model reported an action that no tool performed: " + text};
  }
  return Finish{std::move(result)};
}

TaskResult ReactLoop::classify_text(const std::string& text) const {
  TaskResult result;
  result.message = text;
  // Order matters: a refusal or a question outranks a success marker in the same text.
  if (contains_any(text, markers_.error)) {
    result.type = ResultType::kError;
  } else if (contains_any(text, markers_.need_clarification)) {
    result.type = ResultType::kNeedClarification;
  } else if (contains_any(text, markers_.action_completed)) {
    result.type = ResultType::kActionCompleted;
  } else {
    result.type = markers_.fallback;
  }
  return result;
}

Step ReactLoop::on_model_reply(ReactState& state, const ModelReply& reply) const {
  ++state.model_calls;
  state.usage += reply.usage;
  Message assistant{Role::kAssistant, reply.content, reply.tool_calls, {}, {}, reply.reasoning};
  state.messages.push_back(std::move(assistant));

  if (!reply.unreadable.empty()) {
    // Text the protocol could not read (react_json) is neither an answer nor an action: the
    // problem goes back as the result of one synthetic call, so the model can try again.
    const std::string id = "unreadable-" + std::to_string(state.model_calls);
    state.messages.back().tool_calls = {ToolCall{id, "", "{}"}};
    if (state.model_calls >= limits_.max_steps) {
      return Fail{FailReason::kMaxSteps, "reached max_steps (" + std::to_string(limits_.max_steps) +
                                             ") before the model finished; its last reply could "
                                             "not be read: " +
                                             reply.unreadable};
    }
    CallTools step;
    step.refused.push_back(
        ToolObservation{id, "", false, tool_error_json("unreadable_reply", reply.unreadable)});
    return step;
  }

  // A finish beside other tool calls would declare a result before those calls ran (and
  // they never would): refuse it, run the others, and let the model finish after seeing them.
  const bool acts_too = std::any_of(reply.tool_calls.begin(), reply.tool_calls.end(),
                                    [](const ToolCall& call) { return call.name != kFinishTool; });
  // action_completed is a claim that a tool did something: none has yet.
  const bool unperformed = reply.finish && reply.finish->problem.empty() &&
                           reply.finish->result.type == ResultType::kActionCompleted &&
                           state.tools_ok == 0;
  if (reply.finish && reply.finish->problem.empty() && !acts_too && !unperformed)
    return Finish{reply.finish->result};

  if (reply.tool_calls.empty()) {
    if (reply.finish_reason == "length") {
      return Fail{FailReason::kTruncated, "the model's output was cut off at its token limit"};
    }
    if (reply.finish_reason == "content_filter") {
      return Fail{FailReason::kContentFilter, "the provider's content filter stopped the answer"};
    }
    if (reply.final_text)
      return finish_text(state, *reply.final_text);
    if (reply.content.empty()) {
      return Fail{FailReason::kEmptyReply, "the model returned neither text nor tool calls"};
    }
    if (state.corrections < limits_.max_corrections && state.model_calls < limits_.max_steps) {
      ++state.corrections;
      state.messages.push_back(Message{Role::kUser, std::string(kCorrection), {}, {}, {}});
      return CallModel{};
    }
    return finish_text(state, reply.content);
  }

  // The model wants tools. If it may not be called again, their results would reach no
  // one, so side effects would happen without a result to show for them: stop instead.
  if (state.model_calls >= limits_.max_steps) {
    return Fail{FailReason::kMaxSteps, "reached max_steps (" + std::to_string(limits_.max_steps) +
                                           ") before the model finished"};
  }

  CallTools step;
  int index = -1;
  for (const ToolCall& call : reply.tool_calls) {
    ++index;
    if (call.name == kFinishTool) {
      // Reachable when the finish arguments were invalid or other calls came with it: say
      // why, let it retry.
      std::string problem = reply.finish ? reply.finish->problem : "finish arguments are invalid";
      if (problem.empty() && unperformed && !acts_too) {
        problem =
            "no tool has done anything in this task yet, so it cannot be action_completed: "
            "call the tool that does it first, or finish with need_clarification or error";
      }
      if (problem.empty())
        problem = "call finish alone, after the results of your other tool calls";
      step.refused.push_back(
          ToolObservation{call.id, call.name, false, tool_error_json("invalid_finish", problem)});
    } else if (!allowed_tools_.count(call.name)) {
      step.refused.push_back(ToolObservation{
          call.id, call.name, false,
          tool_error_json("tool_not_allowed",
                          "tool '" + call.name + "' is not available for this task")});
    } else {
      step.calls.push_back(call);
      step.call_indices.push_back(index);
    }
  }
  return step;
}

Step ReactLoop::on_tool_results(ReactState& state, const CallTools& step,
                                std::vector<ToolObservation> results) const {
  // Answer every call of the assistant message in the order it made them; providers
  // require one tool message per tool_call id.
  const Message& assistant = state.messages.back();
  for (const ToolObservation& result : results)
    state.tools_ok += result.ok ? 1 : 0;
  std::vector<ToolObservation> all = std::move(results);
  all.insert(all.end(), step.refused.begin(), step.refused.end());
  for (const ToolCall& call : assistant.tool_calls) {
    auto it = std::find_if(all.begin(), all.end(),
                           [&](const ToolObservation& o) { return o.call_id == call.id; });
    Message tool{Role::kTool, {}, {}, call.id, call.name};
    if (it != all.end()) {
      tool.content = truncate_for_context(it->content, limits_.tool_result_context_chars);
      all.erase(it);
    } else {
      tool.content = tool_error_json("no_result", "the tool call produced no result");
    }
    state.messages.push_back(std::move(tool));
  }
  state.tool_calls += static_cast<int>(step.calls.size());
  return CallModel{};
}

ReactStrategy::ReactStrategy(Limits limits, ResultMarkers markers,
                             std::set<std::string> allowed_tools, std::string system_prompt,
                             std::string user_text, std::vector<Message> history)
    : loop_(limits, std::move(markers), std::move(allowed_tools)),
      state_(loop_.start(std::move(system_prompt), std::move(history), std::move(user_text))) {}

}  // namespace agentfleet::react
