#pragma once
// The plan_execute strategy: a planner call writes a plan of at most 50 steps, run in
// dependency order. A tool step without dependencies is one tool call with the plan's
// input (its own checkpoint); a tool step with dependencies is an executor model call
// offered only that tool, which fills in the arguments from the results it depends on
// (an id a search found), then the call; a step without a tool is one executor model call
// that answers it from the results it depends on. A critic call
// scores the results on a schedule and may ask for a new plan (at most
// `max_corrections` times); a synthesizer call declares the result through `finish`.
//
// Like ReactLoop it is a pure state machine (no I/O, no clock, no JSON parser): the runner
// performs the steps, and the model's JSON answers are read by parsers it injects
// (codec/plan_codec.hpp). Every model call counts against `max_model_calls` (the task's
// max_steps); the machine keeps one call for the synthesizer and skips a critique or a
// replan that would take it. Thread-compatible: one instance per run.

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/domain/error.hpp"
#include "core/ports/model_client.hpp"
#include "core/react/prompt.hpp"
#include "core/react/strategy.hpp"

namespace agentfleet::react {

inline constexpr int kMaxPlanSteps = 50;

struct PlanStep {
  int number = 0;  // step_number, unique within the plan
  std::string description;
  std::string tool;          // empty: the executor model answers the step
  std::string input = "{}";  // the tool's arguments (JSON object text), or the step's input
  std::string expected_output;
  double estimated_time_s = 5.0;
  std::vector<int> dependencies;  // step numbers whose results this step needs
};

struct Plan {
  std::vector<PlanStep> steps;  // as the planner listed them
};

// What JSON cannot check: 1..kMaxPlanSteps steps, unique positive step numbers, a
// description for each, tools among `tools`, dependencies that name other steps of the
// plan and form no cycle. Returns the first problem, or nothing; on success `order` (when
// given) is an execution order: dependencies first, otherwise by step number.
std::optional<std::string> check_plan(const Plan& plan, const std::set<std::string>& tools,
                                      std::vector<std::size_t>* order = nullptr);

// The critic's scores, each 0..1, and what it asks for.
struct Critique {
  double accuracy = 0;
  double completeness = 0;
  double relevance = 0;
  double logic = 0;
  bool replan_requested = false;  // need_replan: the plan itself is wrong
  std::string feedback;
  std::vector<std::string> suggestions;
};

struct CriticWeights {
  double accuracy = 0.4;
  double completeness = 0.3;
  double relevance = 0.2;
  double logic = 0.1;
};

// Weighted score, 0..1 (scores outside 0..1 are clamped; weights are normalised).
double confidence(const Critique& critique, const CriticWeights& weights);

enum class ReflectionSchedule { kEveryStep, kEveryThirdStep, kAtEnd };
std::string_view to_string(ReflectionSchedule schedule);
std::optional<ReflectionSchedule> parse_reflection_schedule(std::string_view text);
// Whether the critic runs after `executed` of `total` plan steps (1-based count).
bool reflects_after(ReflectionSchedule schedule, int executed, int total);

struct PlanPolicy {
  ReflectionSchedule reflection = ReflectionSchedule::kAtEnd;
  double pass_confidence = 0.7;
  int max_corrections = 3;  // new plans after the first (a refused plan counts too)
  CriticWeights weights;
};

enum class Verdict {
  kPass,         // confidence at or above the threshold and no replan asked for
  kReplan,       // below it (or a replan asked for) with corrections left
  kOutOfChances  // below it with no correction left: go on with what there is
};
std::string_view to_string(Verdict verdict);
Verdict judge(const Critique& critique, const PlanPolicy& policy, int corrections_so_far);

// Readers of the model's JSON answers, injected by the runner (codec/plan_codec.hpp).
struct PlanParsers {
  std::function<Result<Plan>(std::string_view text)> plan;
  std::function<Result<Critique>(std::string_view text)> critique;
};

// Machine-readable lines of every plan_execute request's system message, for a model
// simulator and for logs: "Agent-Role: planner|executor|critic|synthesizer",
// "Plan-Round: N" (1 for the first plan) and "Plan-Step: N" (executor: the step number).
inline constexpr std::string_view kRoleLine = "Agent-Role: ";
inline constexpr std::string_view kRoundLine = "Plan-Round: ";
inline constexpr std::string_view kStepLine = "Plan-Step: ";

struct PlanExecuteLimits {
  int max_model_calls = 10;              // the task's max_steps
  int tool_result_context_chars = 4000;  // as Limits::tool_result_context_chars
  // The planner alone (POST /v1/plan): the first usable plan finishes the run, as JSON in
  // the result's message (plan_json).
  bool plan_only = false;
};

class PlanExecute final : public Strategy {
 public:
  // `tools`: the tools the planner may use (name, description, argument schema), already
  // within the task's allow-list and the user's permission level.
  // `history`: a follow-up's earlier conversation, shown to the planner and the
  // synthesizer as text (tool results cut to tool_result_context_chars).
  PlanExecute(PlanExecuteLimits limits, PlanPolicy policy, ResultMarkers markers,
              std::vector<ports::ToolSchema> tools, PlanParsers parsers, PromptValues prompt,
              std::string task_text, const std::vector<Message>& history = {});

  Step start() override;
  NextCall request() const override;
  Step on_model_reply(const ModelReply& reply) override;
  Step on_tool_results(const CallTools& step, std::vector<ToolObservation> results) override;
  int tool_calls() const override { return tool_calls_; }

  // For tests and logs.
  int round() const { return round_; }
  int corrections() const { return corrections_; }
  int model_calls() const { return model_calls_; }
  const Plan& plan() const { return plan_; }
  // The plan as the prompts show it: [{step_number, description, tool, input,
  // expected_output, estimated_time, dependencies}].
  std::string plan_json() const;

 private:
  enum class Phase { kPlan, kExecute, kCritique, kSynthesize, kDone };
  struct StepResult {
    int number = 0;
    bool ok = false;
    std::string text;  // a tool's JSON result or the executor's answer (context-truncated)
  };

  int calls_left() const { return limits_.max_model_calls - model_calls_; }
  int model_steps_left() const;
  Step plan_call(std::string problem_or_feedback);
  Step next_plan_step();
  Step after_step();
  Step synthesize();
  // The synthesizer's result, unless it reports an action that no tool performed.
  Step finish_synthesis(TaskResult result);
  void build_messages();
  std::string results_json(const std::vector<int>* only) const;
  std::string tools_text() const;

  PlanExecuteLimits limits_;
  PlanPolicy policy_;
  ReactLoop classifier_;  // classifies a synthesizer's plain-text answer by the markers
  std::vector<ports::ToolSchema> tools_;
  std::set<std::string> tool_names_;
  PlanParsers parsers_;
  PromptValues prompt_;
  std::string task_text_;
  std::string history_text_;    // "先前的对话：..." or empty
  std::string earlier_rounds_;  // what the rounds before a replan ran, for critic and synthesis

  Phase phase_ = Phase::kPlan;
  int round_ = 1;
  int corrections_ = 0;
  int model_calls_ = 0;
  int tool_calls_ = 0;
  int tools_ok_ = 0;                  // tool calls that ran and succeeded, in every round
  bool unperformed_refused_ = false;  // the synthesizer was told once that nothing was done
  Plan plan_;
  std::vector<std::size_t> order_;
  std::size_t next_ = 0;  // position in order_ of the next step to run
  std::vector<StepResult> results_;
  std::string planner_note_;       // why a new plan is asked for (refused plan, critic feedback)
  std::vector<Message> messages_;  // what the pending model call sends
};

}  // namespace agentfleet::react
