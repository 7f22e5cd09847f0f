#include "core/codec/plan_codec.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cmath>

#include "core/codec/json_text.hpp"

namespace agentfleet::codec {

namespace {
Error invalid(std::string message) {
  return Error{ErrorKind::kInvalid, std::move(message)};
}

std::string to_json(const rapidjson::Value& value) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  value.Accept(writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

// The JSON value in a model's text: the whole text, else the part between the first
// `open` and the last `close` (a fence or words around it).
bool parse_embedded(rapidjson::Document& doc, std::string_view text, char open, char close) {
  if (parse_json(doc, text))
    return true;
  const auto first = text.find(open);
  const auto last = text.rfind(close);
  if (first == std::string_view::npos || last == std::string_view::npos || last <= first)
    return false;
  return parse_json(doc, text.substr(first, last - first + 1));
}

const rapidjson::Value* member(const rapidjson::Value& object, const char* name) {
  auto it = object.FindMember(name);
  return it == object.MemberEnd() ? nullptr : &it->value;
}

bool integral(const rapidjson::Value& v) {
  if (v.IsInt())
    return true;
  return v.IsDouble() && std::floor(v.GetDouble()) == v.GetDouble() &&
         std::abs(v.GetDouble()) < 1e9;
}

int as_int(const rapidjson::Value& v) {
  return v.IsInt() ? v.GetInt() : static_cast<int>(v.GetDouble());
}
}  // namespace

Result<react::Plan> parse_plan(std::string_view text) {
  rapidjson::Document doc;
  const bool array_first = [&] {
    const auto a = text.find('[');
    const auto o = text.find('{');
    return a != std::string_view::npos && (o == std::string_view::npos || a < o);
  }();
  if (!(array_first ? parse_embedded(doc, text, '[', ']') || parse_embedded(doc, text, '{', '}')
                    : parse_embedded(doc, text, '{', '}') || parse_embedded(doc, text, '[', ']'))) {
    return invalid("the plan is not JSON");
  }
  const rapidjson::Value* steps = &doc;
  if (doc.IsObject()) {
    steps = member(doc, "steps");
    if (steps == nullptr)
      steps = member(doc, "plan");
    if (steps == nullptr)
      return invalid("the plan object has no \"steps\" array");
  }
  if (!steps->IsArray())
    return invalid("the plan must be a JSON array of steps");
  if (steps->Size() > static_cast<rapidjson::SizeType>(react::kMaxPlanSteps)) {
    return invalid("the plan has " + std::to_string(steps->Size()) + " steps; at most " +
                   std::to_string(react::kMaxPlanSteps) + " are allowed");
  }
  react::Plan plan;
  for (rapidjson::SizeType i = 0; i < steps->Size(); ++i) {
    const rapidjson::Value& s = (*steps)[i];
    const std::string at = "plan step " + std::to_string(i + 1);
    if (!s.IsObject())
      return invalid(at + " is not an object");
    react::PlanStep step;
    step.number = static_cast<int>(i) + 1;
    if (const auto* v = member(s, "step_number"); v && !v->IsNull()) {
      if (!integral(*v))
        return invalid(at + ": step_number must be an integer");
      step.number = as_int(*v);
    }
    const auto* description = member(s, "description");
    if (description == nullptr || !description->IsString())
      return invalid(at + ": description must be a string");
    step.description = description->GetString();
    if (const auto* v = member(s, "tool"); v && !v->IsNull()) {
      if (!v->IsString())
        return invalid(at + ": tool must be a string or null");
      std::string tool = v->GetString();
      if (tool != "none" && tool != "null")
        step.tool = std::move(tool);
    }
    if (const auto* v = member(s, "input"); v && !v->IsNull()) {
      if (!v->IsObject())
        return invalid(at + ": input must be an object");
      step.input = to_json(*v);
    }
    if (const auto* v = member(s, "expected_output"); v && !v->IsNull()) {
      if (!v->IsString())
        return invalid(at + ": expected_output must be a string");
      step.expected_output = v->GetString();
    }
    if (const auto* v = member(s, "estimated_time"); v && !v->IsNull()) {
      if (!v->IsNumber() || v->GetDouble() < 0 || !std::isfinite(v->GetDouble()))
        return invalid(at + ": estimated_time must be a number of seconds, 0 or more");
      step.estimated_time_s = v->GetDouble();
    }
    if (const auto* v = member(s, "dependencies"); v && !v->IsNull()) {
      if (!v->IsArray())
        return invalid(at + ": dependencies must be an array of step numbers");
      for (const auto& d : v->GetArray()) {
        if (!integral(d))
          return invalid(at + ": dependencies must be an array of step numbers");
        step.dependencies.push_back(as_int(d));
      }
    }
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

Result<react::Critique> parse_critique(std::string_view text) {
  rapidjson::Document doc;
  if (!parse_embedded(doc, text, '{', '}') || !doc.IsObject())
    return invalid("the critique is not a JSON object");
  react::Critique critique;
  struct Score {
    const char* name;
    double* out;
  };
  for (const Score& score :
       {Score{"accuracy", &critique.accuracy}, Score{"completeness", &critique.completeness},
        Score{"relevance", &critique.relevance}, Score{"logic", &critique.logic}}) {
    const auto* v = member(doc, score.name);
    if (v == nullptr)
      v = member(doc, (std::string(score.name) + "_score").c_str());
    if (v == nullptr || !v->IsNumber())
      return invalid(std::string("the critique has no number '") + score.name + "'");
    const double value = v->GetDouble();
    if (!(value >= 0 && value <= 1)) {
      return invalid(std::string("the critique's '") + score.name + "' must be within 0..1, not " +
                     std::to_string(value));
    }
    *score.out = value;
  }
  if (const auto* v = member(doc, "need_replan"); v && v->IsBool())
    critique.replan_requested = v->GetBool();
  for (const char* name : {"feedback", "assessment"}) {
    if (const auto* v = member(doc, name); v && v->IsString()) {
      critique.feedback = v->GetString();
      break;
    }
  }
  if (const auto* v = member(doc, "suggestions")) {
    if (v->IsString()) {
      critique.suggestions.emplace_back(v->GetString());
    } else if (v->IsArray()) {
      for (const auto& s : v->GetArray()) {
        if (s.IsString())
          critique.suggestions.emplace_back(s.GetString());
      }
    }
  }
  return critique;
}

std::string plan_response_json(const react::Plan& plan) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  double total = 0;
  w.StartObject();
  w.Key("steps");
  w.StartArray();
  for (const auto& step : plan.steps) {
    w.StartObject();
    w.Key("step_number");
    w.Int(step.number);
    w.Key("description");
    w.String(step.description.c_str(), static_cast<rapidjson::SizeType>(step.description.size()));
    w.Key("tool");
    if (step.tool.empty()) {
      w.Null();
    } else {
      w.String(step.tool.c_str(), static_cast<rapidjson::SizeType>(step.tool.size()));
    }
    w.Key("input");
    w.RawValue(step.input.c_str(), step.input.size(), rapidjson::kObjectType);
    w.Key("expected_output");
    w.String(step.expected_output.c_str(),
             static_cast<rapidjson::SizeType>(step.expected_output.size()));
    w.Key("estimated_time_s");
    w.Double(step.estimated_time_s);
    w.Key("dependencies");
    w.StartArray();
    for (int d : step.dependencies)
      w.Int(d);
    w.EndArray();
    w.EndObject();
    total += step.estimated_time_s;
  }
  w.EndArray();
  w.Key("total_steps");
  w.Int(static_cast<int>(plan.steps.size()));
  w.Key("estimated_total_time_s");
  w.Double(total);
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

react::PlanParsers plan_parsers() {
  return react::PlanParsers{[](std::string_view text) { return parse_plan(text); },
                            [](std::string_view text) { return parse_critique(text); }};
}

}  // namespace agentfleet::codec
