#include "core/react/plan_execute.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/react/context_budget.hpp"
#include "core/react/json_string.hpp"

namespace agentfleet::react {

std::optional<std::string> check_plan(const Plan& plan, const std::set<std::string>& tools,
                                      std::vector<std::size_t>* order) {
  const auto& steps = plan.steps;
  if (steps.empty())
    return std::string("the plan has no steps");
  if (steps.size() > static_cast<std::size_t>(kMaxPlanSteps)) {
    return "the plan has " + std::to_string(steps.size()) + " steps; at most " +
           std::to_string(kMaxPlanSteps) + " are allowed";
  }
  std::map<int, std::size_t> index_of;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const PlanStep& step = steps[i];
    const std::string name = "step " + std::to_string(step.number);
    if (step.number < 1)
      return "step_number " + std::to_string(step.number) + " must be 1 or more";
    if (!index_of.emplace(step.number, i).second)
      return "step_number " + std::to_string(step.number) + " appears twice";
    if (step.description.empty())
      return name + " has no description";
    if (!step.tool.empty() && !tools.count(step.tool))
      return name + " uses tool '" + step.tool + "', which is not available";
  }
  for (const PlanStep& step : steps) {
    for (int dependency : step.dependencies) {
      if (dependency == step.number)
        return "step " + std::to_string(step.number) + " depends on itself";
      if (!index_of.count(dependency)) {
        return "step " + std::to_string(step.number) + " depends on step " +
               std::to_string(dependency) + ", which the plan does not have";
      }
    }
  }
  // Kahn's algorithm over step numbers; among ready steps the lowest number runs first.
  std::map<int, int> waiting;                  // step number -> dependencies not yet run
  std::map<int, std::vector<int>> dependents;  // step number -> steps that need it
  for (const PlanStep& step : steps) {
    std::set<int> distinct(step.dependencies.begin(), step.dependencies.end());
    waiting[step.number] = static_cast<int>(distinct.size());
    for (int dependency : distinct)
      dependents[dependency].push_back(step.number);
  }
  std::set<int> ready;
  for (const auto& [number, count] : waiting) {
    if (count == 0)
      ready.insert(number);
  }
  std::vector<std::size_t> sequence;
  while (!ready.empty()) {
    const int number = *ready.begin();
    ready.erase(ready.begin());
    sequence.push_back(index_of[number]);
    for (int dependent : dependents[number]) {
      if (--waiting[dependent] == 0)
        ready.insert(dependent);
    }
  }
  if (sequence.size() != steps.size()) {
    std::string cycle;
    for (const auto& [number, count] : waiting) {
      if (count > 0)
        cycle += (cycle.empty() ? "" : ", ") + std::to_string(number);
    }
    return "the dependencies form a cycle (steps " + cycle + ")";
  }
  if (order != nullptr)
    *order = std::move(sequence);
  return std::nullopt;
}

double confidence(const Critique& critique, const CriticWeights& weights) {
  auto clamp = [](double v) { return v < 0 ? 0.0 : (v > 1 ? 1.0 : v); };
  const double total = weights.accuracy + weights.completeness + weights.relevance + weights.logic;
  if (total <= 0)
    return 0;
  return (clamp(critique.accuracy) * weights.accuracy +
          clamp(critique.completeness) * weights.completeness +
          clamp(critique.relevance) * weights.relevance + clamp(critique.logic) * weights.logic) /
         total;
}

std::string_view to_string(ReflectionSchedule schedule) {
  switch (schedule) {
    case ReflectionSchedule::kEveryStep:
      return "every_step";
    case ReflectionSchedule::kEveryThirdStep:
      return "every_third_step";
    case ReflectionSchedule::kAtEnd:
      return "at_end";
  }
  return "at_end";
}

std::optional<ReflectionSchedule> parse_reflection_schedule(std::string_view text) {
  for (auto s : {ReflectionSchedule::kEveryStep, ReflectionSchedule::kEveryThirdStep,
                 ReflectionSchedule::kAtEnd}) {
    if (to_string(s) == text)
      return s;
  }
  return std::nullopt;
}

bool reflects_after(ReflectionSchedule schedule, int executed, int total) {
  if (executed <= 0 || total <= 0 || executed > total)
    return false;
  switch (schedule) {
    case ReflectionSchedule::kEveryStep:
      return true;
    case ReflectionSchedule::kEveryThirdStep:
      return executed % 3 == 0 || executed == total;
    case ReflectionSchedule::kAtEnd:
      return executed == total;
  }
  return false;
}

std::string_view to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kReplan:
      return "replan";
    case Verdict::kOutOfChances:
      return "out_of_chances";
  }
  return "pass";
}

Verdict judge(const Critique& critique, const PlanPolicy& policy, int corrections_so_far) {
  if (!critique.replan_requested && confidence(critique, policy.weights) >= policy.pass_confidence)
    return Verdict::kPass;
  return corrections_so_far < policy.max_corrections ? Verdict::kReplan : Verdict::kOutOfChances;
}

namespace {
constexpr std::string_view kTimeLine =
    "当前时间：{{current_time}}（{{weekday}}，时区 {{time_zone}}）。今天是 {{date}}。\n";

constexpr std::string_view kPlannerPrompt =
    R"(你是任务规划器：把用户的一句话指令分解为可执行的步骤计划，由执行器按依赖顺序逐步执行。

规则：
1. 只输出一个 JSON 数组，不要其他文字。每个元素：
   {"step_number": 1, "description": "步骤描述", "tool": "工具名或 null", "input": {参数}, "expected_output": "预期输出", "estimated_time": 秒数, "dependencies": [依赖的步骤编号]}
2. 最多 50 步；步骤具体、可执行；tool 只能是下面列出的工具，或为 null（由模型根据依赖步骤的结果直接完成）。
3. 不依赖其他步骤的工具步骤按 input 原样调用，input 必须符合该工具的参数；依赖其他步骤的工具步骤由执行器根据依赖步骤的结果填写参数（例如搜索到的 id）。
4. 修改、删除或完成之前，先安排 search_items 搜索步骤，并在后续步骤的 dependencies 中写明。
5. 能推断的就推断，不得向用户提问："明天" 是今天加一天，"晚上8点" 是 20:00，会议默认 1 小时。
6. 使用用户的语言（{{locale}}）。
)";

constexpr std::string_view kExecutorPrompt =
    R"(你是计划执行器：完成计划中的一个步骤。只做这一步，不要做计划中的其他步骤。
给出了工具时，根据依赖步骤的结果填写参数并调用它；没有工具时，直接用文字给出这一步的结果。
使用用户的语言（{{locale}}）。
)";

constexpr std::string_view kCriticPrompt =
    R"(你是结果评审者：根据用户指令、计划和已执行步骤的结果，评估执行质量。

只输出一个 JSON 对象，不要其他文字：
{"accuracy": 0到1, "completeness": 0到1, "relevance": 0到1, "logic": 0到1, "need_replan": true或false, "feedback": "评估结论", "suggestions": ["改进建议"]}
accuracy：结果是否正确；completeness：指令的要求是否已完成（或将由计划中剩余的步骤完成）；relevance：是否切题；logic：步骤与结论是否连贯。计划本身有误、需要重新规划时 need_replan 为 true。
)";

constexpr std::string_view kSynthesizerPrompt =
    R"(你是结果综合者：根据用户指令和各步骤的结果，调用 finish 给出最终结果。

规则：
1. 必须调用 finish，结果只能是以下三种之一：
   - action_completed：操作已执行，message 说明做了什么（时间、标题等细节）。
   - need_clarification：找到多个无法区分的匹配项时使用；在 options 中列出最多 5 个选项，并在 message 中说明下次如何明确指定。
   - error：无法完成，message 说明原因。
2. 只依据步骤结果陈述，不要编造未执行的操作。不得向用户提问。
3. 使用用户的语言（{{locale}}）。
)";

std::string role_system_prompt(std::string_view body, std::string_view role, int round, int step,
                               const PromptValues& values) {
  std::string text(body);
  text += "\n";
  text += kTimeLine;
  text += std::string(kRoleLine) + std::string(role) + "\n";
  text += std::string(kRoundLine) + std::to_string(round) + "\n";
  if (step > 0)
    text += std::string(kStepLine) + std::to_string(step) + "\n";
  return render_system_prompt(text, values);
}

Limits classifier_limits() {
  return Limits{1, 0};
}
}  // namespace

PlanExecute::PlanExecute(PlanExecuteLimits limits, PlanPolicy policy, ResultMarkers markers,
                         std::vector<ports::ToolSchema> tools, PlanParsers parsers,
                         PromptValues prompt, std::string task_text,
                         const std::vector<Message>& history)
    : limits_(limits),
      policy_(policy),
      classifier_(classifier_limits(), std::move(markers), {}),
      tools_(std::move(tools)),
      parsers_(std::move(parsers)),
      prompt_(std::move(prompt)),
      task_text_(std::move(task_text)) {
  for (const auto& tool : tools_)
    tool_names_.insert(tool.name);
  for (const Message& m : history) {
    if (m.role == Role::kUser) {
      history_text_ += "用户：" + m.content + "\n";
    } else if (m.role == Role::kAssistant && !m.content.empty()) {
      history_text_ += "助手：" + m.content + "\n";
    } else if (m.role == Role::kTool) {
      history_text_ += "工具 " + m.name + " 的结果：" +
                       truncate_for_context(m.content, limits_.tool_result_context_chars) + "\n";
    }
  }
  if (!history_text_.empty())
    history_text_ = "先前的对话（本任务接着它）：\n" + history_text_;
}

Step PlanExecute::start() {
  if (limits_.plan_only)
    return plan_call({});
  if (limits_.max_model_calls < 2) {
    return Fail{FailReason::kMaxSteps,
                "plan_execute needs max_steps of 2 or more (a planner and a synthesizer call)"};
  }
  return plan_call({});
}

NextCall PlanExecute::request() const {
  NextCall call{&messages_, ToolOffer::kNone, {}, {}};
  switch (phase_) {
    case Phase::kPlan:
      call.role = "planner";
      break;
    case Phase::kExecute: {
      call.role = "executor";
      const PlanStep& step = plan_.steps[order_[next_]];
      if (!step.tool.empty()) {
        call.tools = ToolOffer::kStepTool;
        call.tool = step.tool;
      }
      break;
    }
    case Phase::kCritique:
      call.role = "critic";
      break;
    case Phase::kSynthesize:
    case Phase::kDone:
      call.role = "synthesizer";
      call.tools = ToolOffer::kFinishOnly;
      break;
  }
  return call;
}

int PlanExecute::model_steps_left() const {
  int count = 0;
  for (std::size_t i = next_; i < order_.size(); ++i) {
    const PlanStep& step = plan_.steps[order_[i]];
    if (step.tool.empty() || !step.dependencies.empty())
      ++count;
  }
  return count;
}

std::string PlanExecute::tools_text() const {
  std::string text;
  for (const auto& tool : tools_) {
    text += "- " + tool.name + "：" + tool.description + "\n  参数：" + tool.parameters + "\n";
  }
  return text.empty() ? "（无）\n" : text;
}

std::string PlanExecute::plan_json() const {
  std::string out = "[";
  for (std::size_t i = 0; i < plan_.steps.size(); ++i) {
    const PlanStep& step = plan_.steps[i];
    if (i)
      out += ",";
    out += "{\"step_number\":" + std::to_string(step.number) + ",\"description\":";
    append_json_string(out, step.description);
    out += ",\"tool\":";
    if (step.tool.empty()) {
      out += "null";
    } else {
      append_json_string(out, step.tool);
    }
    out += ",\"input\":" + (step.input.empty() ? std::string("{}") : step.input);
    out += ",\"expected_output\":";
    append_json_string(out, step.expected_output);
    char estimated[32];
    std::snprintf(estimated, sizeof(estimated), "%.6g", step.estimated_time_s);
    out += ",\"estimated_time\":" + std::string(estimated);
    out += ",\"dependencies\":[";
    for (std::size_t d = 0; d < step.dependencies.size(); ++d)
      out += (d ? "," : "") + std::to_string(step.dependencies[d]);
    out += "]}";
  }
  return out + "]";
}

std::string PlanExecute::results_json(const std::vector<int>* only) const {
  std::string out = "[";
  bool first = true;
  for (const StepResult& result : results_) {
    if (only && std::find(only->begin(), only->end(), result.number) == only->end())
      continue;
    if (!first)
      out += ",";
    first = false;
    out += "{\"step_number\":" + std::to_string(result.number) +
           ",\"ok\":" + (result.ok ? "true" : "false") + ",\"result\":";
    append_json_string(out, result.text);
    out += "}";
  }
  return out + "]";
}

void PlanExecute::build_messages() {
  messages_.clear();
  std::string material;
  switch (phase_) {
    case Phase::kPlan: {
      std::string system = role_system_prompt(kPlannerPrompt, "planner", round_, 0, prompt_);
      system += "\n可用工具：\n" + tools_text();
      messages_.push_back(Message{Role::kSystem, std::move(system), {}, {}, {}});
      material = history_text_;
      if (!planner_note_.empty())
        material += planner_note_;
      break;
    }
    case Phase::kExecute: {
      const PlanStep& step = plan_.steps[order_[next_]];
      messages_.push_back(
          Message{Role::kSystem,
                  role_system_prompt(kExecutorPrompt, "executor", round_, step.number, prompt_),
                  {},
                  {},
                  {}});
      material = "当前步骤 " + std::to_string(step.number) + "：" + step.description + "\n";
      if (!step.tool.empty())
        material += "工具：" + step.tool + "\n计划中的参数：" + step.input + "\n";
      else if (step.input != "{}" && !step.input.empty())
        material += "输入：" + step.input + "\n";
      if (!step.expected_output.empty())
        material += "预期输出：" + step.expected_output + "\n";
      material += "依赖步骤的结果：" + results_json(&step.dependencies);
      break;
    }
    case Phase::kCritique:
      messages_.push_back(Message{Role::kSystem,
                                  role_system_prompt(kCriticPrompt, "critic", round_, 0, prompt_),
                                  {},
                                  {},
                                  {}});
      material =
          earlier_rounds_ + "计划：" + plan_json() + "\n已执行步骤的结果：" + results_json(nullptr);
      break;
    case Phase::kSynthesize:
    case Phase::kDone:
      messages_.push_back(
          Message{Role::kSystem,
                  role_system_prompt(kSynthesizerPrompt, "synthesizer", round_, 0, prompt_),
                  {},
                  {},
                  {}});
      material = history_text_ + earlier_rounds_ + "计划：" + plan_json() + "\n各步骤的结果：" +
                 results_json(nullptr);
      if (!planner_note_.empty())
        material += "\n" + planner_note_;
      break;
  }
  messages_.push_back(Message{Role::kUser, task_text_, {}, {}, {}});
  if (!material.empty())
    messages_.push_back(Message{Role::kUser, std::move(material), {}, {}, {}});
}

Step PlanExecute::plan_call(std::string note) {
  phase_ = Phase::kPlan;
  planner_note_ = std::move(note);
  build_messages();
  return CallModel{};
}

Step PlanExecute::next_plan_step() {
  if (next_ >= order_.size())
    return synthesize();
  const PlanStep& step = plan_.steps[order_[next_]];
  phase_ = Phase::kExecute;
  if (!step.tool.empty() && step.dependencies.empty()) {
    CallTools call;
    call.calls.push_back(
        ToolCall{"plan-" + std::to_string(round_) + "-" + std::to_string(step.number), step.tool,
                 step.input.empty() ? "{}" : step.input});
    call.call_indices.push_back(0);
    call.own_checkpoint = true;
    return call;
  }
  // An executor call, and one left for the synthesizer. Without room for both, what has
  // been done so far is written up (its side effects happened) and the rest is not run.
  if (calls_left() < 2) {
    if (calls_left() < 1) {
      return Fail{FailReason::kMaxSteps,
                  "reached max_steps (" + std::to_string(limits_.max_model_calls) +
                      ") before the plan's step " + std::to_string(step.number) + " could run"};
    }
    planner_note_ = "模型调用次数已用尽（max_steps " + std::to_string(limits_.max_model_calls) +
                    "），计划从第 " + std::to_string(step.number) +
                    " 步起未执行；只根据已执行步骤的结果给出结果。";
    return synthesize();
  }
  build_messages();
  return CallModel{};
}

Step PlanExecute::after_step() {
  const int executed = static_cast<int>(next_);
  const int total = static_cast<int>(order_.size());
  // A critique needs a call of its own, and must leave the remaining executor calls and
  // the synthesizer theirs.
  if (reflects_after(policy_.reflection, executed, total) &&
      calls_left() >= 2 + model_steps_left()) {
    phase_ = Phase::kCritique;
    build_messages();
    return CallModel{};
  }
  return next_plan_step();
}

Step PlanExecute::synthesize() {
  if (calls_left() < 1) {
    return Fail{FailReason::kMaxSteps, "reached max_steps (" +
                                           std::to_string(limits_.max_model_calls) +
                                           ") before the result could be written"};
  }
  phase_ = Phase::kSynthesize;
  build_messages();
  return CallModel{};
}

Step PlanExecute::on_model_reply(const ModelReply& reply) {
  ++model_calls_;
  if (reply.finish_reason == "length" && phase_ != Phase::kSynthesize) {
    return Fail{FailReason::kTruncated, "the model's output was cut off at its token limit"};
  }
  if (reply.finish_reason == "content_filter") {
    return Fail{FailReason::kContentFilter, "the provider's content filter stopped the answer"};
  }
  const std::string& text = reply.final_text ? *reply.final_text : reply.content;
  switch (phase_) {
    case Phase::kPlan: {
      std::optional<std::string> problem;
      Plan plan;
      std::vector<std::size_t> order;
      auto parsed = parsers_.plan(text);
      if (!parsed.ok()) {
        problem = parsed.error().message;
      } else {
        plan = std::move(parsed.value());
        problem = check_plan(plan, tool_names_, &order);
      }
      if (problem) {
        // Another plan (one correction) if the budget leaves room for it and a synthesis.
        if (corrections_ < policy_.max_corrections && calls_left() >= (limits_.plan_only ? 1 : 2)) {
          ++corrections_;
          ++round_;
          return plan_call("上一个计划无法使用：" + *problem + "。请按格式重新输出完整的计划。");
        }
        return Fail{FailReason::kNoPlan, "the planner gave no usable plan: " + *problem};
      }
      plan_ = std::move(plan);
      order_ = std::move(order);
      next_ = 0;
      results_.clear();
      planner_note_.clear();
      if (limits_.plan_only) {
        phase_ = Phase::kDone;
        return Finish{TaskResult{ResultType::kActionCompleted, plan_json(), {}}};
      }
      return next_plan_step();
    }
    case Phase::kExecute: {
      const PlanStep& step = plan_.steps[order_[next_]];
      if (!step.tool.empty()) {
        // The executor filled in the step's tool call; anything else it called is refused.
        auto it = std::find_if(reply.tool_calls.begin(), reply.tool_calls.end(),
                               [&](const ToolCall& c) { return c.name == step.tool; });
        if (it != reply.tool_calls.end()) {
          CallTools call;
          call.calls.push_back(*it);
          call.call_indices.push_back(static_cast<int>(it - reply.tool_calls.begin()));
          return call;
        }
      }
      // A tool step answered in text did not run its tool: not a success.
      StepResult result{step.number, step.tool.empty() && !text.empty(),
                        text.empty()
                            ? tool_error_json("empty_reply", "the executor returned no answer")
                            : truncate_for_context(text, limits_.tool_result_context_chars)};
      results_.push_back(std::move(result));
      ++next_;
      return after_step();
    }
    case Phase::kCritique: {
      auto critique = parsers_.critique(text);
      if (critique.ok() && calls_left() >= 2) {
        const Verdict verdict = judge(critique.value(), policy_, corrections_);
        if (verdict == Verdict::kReplan) {
          // The critic and the synthesizer keep seeing what earlier rounds did: their side
          // effects happened.
          earlier_rounds_ += "第 " + std::to_string(round_) + " 轮计划已执行的步骤及结果：" +
                             results_json(nullptr) + "\n";
          ++corrections_;
          ++round_;
          std::string note = "上一轮计划：" + plan_json() + "\n上一轮结果：" +
                             results_json(nullptr) + "\n评审意见：" + critique.value().feedback;
          for (const auto& s : critique.value().suggestions)
            note += "\n- " + s;
          note += "\n请输出新的完整计划；已经成功完成的操作不要重复。";
          return plan_call(std::move(note));
        }
      }
      // Passed, out of corrections, or no readable verdict: go on with what there is.
      return next_plan_step();
    }
    case Phase::kSynthesize:
    case Phase::kDone: {
      if (reply.finish && reply.finish->problem.empty())
        return finish_synthesis(reply.finish->result);
      if (reply.finish && calls_left() >= 1) {
        planner_note_ =
            "上次 finish 的参数无效：" + reply.finish->problem + "。请重新调用 finish。";
        build_messages();
        return CallModel{};
      }
      if (reply.finish_reason == "length")
        return Fail{FailReason::kTruncated, "the model's output was cut off at its token limit"};
      if (text.empty())
        return Fail{FailReason::kEmptyReply, "the synthesizer returned neither text nor finish"};
      return finish_synthesis(classifier_.classify_text(text));
    }
  }
  return Fail{FailReason::kEmptyReply, "unexpected reply"};
}

Step PlanExecute::finish_synthesis(TaskResult result) {
  if (result.type == ResultType::kActionCompleted && tools_ok_ == 0) {
    // action_completed is a claim that a tool did something: none did. Ask once for the
    // result the steps support; a second such claim fails the task rather than report it.
    if (!unperformed_refused_ && calls_left() >= 1) {
      unperformed_refused_ = true;
      planner_note_ =
          "没有任何工具成功执行过操作，结果不能是 action_completed。请根据各步骤的实际结果，"
          "用 need_clarification 或 error 调用 finish。";
      build_messages();
      return CallModel{};
    }
    return Fail{FailReason::kUnperformedAction,
                "the synthesizer reported an action that no tool performed: " + result.message};
  }
  phase_ = Phase::kDone;
  return Finish{std::move(result)};
}

Step PlanExecute::on_tool_results(const CallTools& step, std::vector<ToolObservation> results) {
  const PlanStep& current = plan_.steps[order_[next_]];
  for (const ToolObservation& observation : results)
    tools_ok_ += observation.ok ? 1 : 0;
  std::vector<ToolObservation> all = std::move(results);
  all.insert(all.end(), step.refused.begin(), step.refused.end());
  StepResult result{current.number, false,
                    tool_error_json("no_result", "the tool call produced no result")};
  if (!all.empty()) {
    result.ok = all.front().ok;
    result.text = truncate_for_context(all.front().content, limits_.tool_result_context_chars);
  }
  results_.push_back(std::move(result));
  tool_calls_ += static_cast<int>(step.calls.size());
  ++next_;
  return after_step();
}

}  // namespace agentfleet::react
