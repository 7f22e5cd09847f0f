// A task's spans from its API document, and their OTLP/HTTP JSON encoding.

#include "core/codec/otlp_trace.hpp"

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <algorithm>
#include <string>

namespace agentfleet::codec {
namespace {

constexpr const char* kTaskId = "885c1bac-fd96-4250-bba5-aade9a931de6";
constexpr const char* kTraceId = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr const char* kCallerSpan = "00f067aa0ba902b7";

std::string caller_traceparent() {
  return std::string("00-") + kTraceId + "-" + kCallerSpan + "-01";
}

// A task of two attempts: the first left one model step (its tool call cut short), the second
// ran step 1 (a model call and a failed tool call) and step 2 (the answer).
std::string task_json(const std::string& batch_id = "") {
  return std::string(R"({
    "task_id": ")") +
         kTaskId + R"(", "user_id": "u1", "status": "succeeded", "model": "sim-model",
    "priority": "interactive", "strategy": null, "attempt": 2, "steps": 3, "tool_calls": 2,
    "batch_id": )" +
         (batch_id.empty() ? std::string("null") : "\"" + batch_id + "\"") + R"(,
    "usage": {"input_tokens": 5000, "output_tokens": 60, "cached_input_tokens": 1800},
    "cost": "0.004200", "currency": "CNY",
    "result": {"type": "action_completed", "message": "已将「团队会议」改到 20:00-21:00", "options": []},
    "error": null, "error_code": null,
    "created_at": "2026-11-28T21:06:32.000000+00:00",
    "dispatched_at": "2026-11-28T21:06:32.250+00:00",
    "started_at": "2026-11-28T21:06:40.000+00:00",
    "finished_at": "2026-11-28T21:06:41.000Z",
    "trace": [
      {"step": 0, "attempt": 1, "role": null, "at": "2026-11-28T21:06:32.400+00:00",
       "model_latency_ms": 100,
       "usage": {"input_tokens": 1832, "output_tokens": 17, "cached_input_tokens": 0,
                 "reasoning_tokens": 0}, "usage_estimated": true,
       "tool_calls": [{"call_id": "call_0_0", "tool": "search_items", "status": "outcome_unknown",
                       "arguments": "{\"date\":\"2026-02-08\"}", "result": "", "http_status": 0,
                       "latency_ms": 30, "at": "2026-11-28T21:06:32.410Z"}]},
      {"step": 1, "attempt": 2, "role": null, "at": "2026-11-28T21:06:40.200+00:00",
       "model_latency_ms": 150,
       "usage": {"input_tokens": 1900, "output_tokens": 20, "cached_input_tokens": 1800,
                 "reasoning_tokens": 4}, "usage_estimated": false,
       "tool_calls": [{"call_id": "call_1_0", "tool": "update_item", "status": "error",
                       "arguments": "{\"id\":\"evt-1\"}", "result": "{\"error\":\"conflict\"}",
                       "http_status": 409, "latency_ms": 20, "at": "2026-11-28T21:06:40.210Z"},
                      {"call_id": "call_1_1", "tool": "delete_all", "status": "refused",
                       "result": "{\"error\":{\"code\":\"permission_denied\"}}"}]},
      {"step": 2, "attempt": 2, "role": null, "at": "2026-11-28T21:06:40.900+00:00",
       "model_latency_ms": 300,
       "usage": {"input_tokens": 1268, "output_tokens": 23, "cached_input_tokens": 0},
       "tool_calls": []}
    ]})";
}

std::int64_t ns(const std::string& rfc3339) {
  return parse_rfc3339_ns(rfc3339).value();
}

const Span& named(const std::vector<Span>& spans, const std::string& name, int nth = 0) {
  for (const Span& s : spans) {
    if (s.name == name && nth-- == 0)
      return s;
  }
  ADD_FAILURE() << "no span " << name;
  static const Span none;
  return none;
}

template <typename T>
T value(const Span& span, const std::string& key) {
  const SpanValue* v = span.attribute(key);
  EXPECT_NE(v, nullptr) << span.name << " has no " << key;
  if (v == nullptr || !std::holds_alternative<T>(*v))
    return T{};
  return std::get<T>(*v);
}

std::map<int, StepCost> costs() {
  return {{0, {"sim-model", "0.001200", "CNY"}},
          {1, {"sim-model-large", "0.002000", "CNY"}},
          {2, {"sim-model", "0.001000", "CNY"}}};
}

TEST(OtlpTrace, ParsesRfc3339TimesAsTheDatabaseAndTheWorkerWriteThem) {
  EXPECT_EQ(parse_rfc3339_ns("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(parse_rfc3339_ns("1970-01-01T00:00:01.5Z"), 1'500'000'000);
  EXPECT_EQ(parse_rfc3339_ns("2026-11-28T21:06:32.352694+00:00"),
            std::int64_t{1795899992} * 1'000'000'000 + 352'694'000);
  // An offset is the same instant as UTC.
  EXPECT_EQ(parse_rfc3339_ns("2026-11-29T05:06:32.352694+08:00"),
            parse_rfc3339_ns("2026-11-28T21:06:32.352694Z"));
  EXPECT_EQ(parse_rfc3339_ns("2024-02-29T00:00:00Z"), std::int64_t{1709164800} * 1'000'000'000);
  for (const char* bad : {"", "2026-11-28", "2026-11-28T21:06:32", "2026-13-01T00:00:00Z",
                          "2026-02-30T00:00:00Z", "2026-11-28T25:00:00Z", "2026-11-28T21:06:32.Z",
                          "2026-11-28T21:06:32Zjunk", "2026-11-28T21:06:32+0800"}) {
    EXPECT_FALSE(parse_rfc3339_ns(bad).has_value()) << bad;
  }
}

TEST(OtlpTrace, EveryStepAttemptAndTheQueueIsASpanOfTheCallersTrace) {
  auto spans = task_spans(task_json(), caller_traceparent(), costs());
  ASSERT_TRUE(spans.ok()) << spans.error().message;
  const auto& all = spans.value();
  // task, queue, 2 attempts, 3 model calls, 3 tool calls (the refused one too).
  ASSERT_EQ(all.size(), 10u);
  for (const Span& s : all) {
    EXPECT_EQ(s.trace_id, kTraceId) << s.name;
    EXPECT_EQ(s.span_id.size(), 16u) << s.name;
    EXPECT_LE(s.start_ns, s.end_ns) << s.name;
  }
  std::vector<std::string> ids;
  for (const Span& s : all)
    ids.push_back(s.span_id);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << "span ids repeat";

  const Span& root = named(all, "task");
  EXPECT_EQ(root.span_id, task_span_id(kTaskId));
  EXPECT_EQ(root.parent_span_id, kCallerSpan);  // joined to the caller's span
  EXPECT_EQ(root.start_ns, ns("2026-11-28T21:06:32Z"));
  EXPECT_EQ(root.end_ns, ns("2026-11-28T21:06:41Z"));
  EXPECT_EQ(root.status, SpanStatus::kUnset);
  EXPECT_EQ(value<std::string>(root, "agentfleet.task.id"), kTaskId);
  EXPECT_EQ(value<std::string>(root, "agentfleet.user.id"), "u1");
  EXPECT_EQ(value<std::string>(root, "agentfleet.result.type"), "action_completed");
  EXPECT_EQ(value<std::int64_t>(root, "agentfleet.task.attempts"), 2);
  EXPECT_EQ(value<std::int64_t>(root, "gen_ai.usage.input_tokens"), 5000);
  EXPECT_EQ(value<std::int64_t>(root, "gen_ai.usage.output_tokens"), 60);
  EXPECT_DOUBLE_EQ(value<double>(root, "agentfleet.cost"), 0.0042);
  EXPECT_EQ(value<std::string>(root, "agentfleet.currency"), "CNY");

  const Span& queue = named(all, "queue");
  EXPECT_EQ(queue.parent_span_id, root.span_id);
  EXPECT_EQ(queue.start_ns, ns("2026-11-28T21:06:32Z"));
  EXPECT_EQ(queue.end_ns, ns("2026-11-28T21:06:32.250Z"));

  // The first attempt spans its step; the last runs from its start to the end.
  const Span& first = named(all, "attempt", 0);
  const Span& second = named(all, "attempt", 1);
  EXPECT_EQ(value<std::int64_t>(first, "agentfleet.attempt"), 1);
  EXPECT_EQ(first.parent_span_id, root.span_id);
  EXPECT_EQ(first.start_ns, ns("2026-11-28T21:06:32.300Z"));  // at - model latency
  EXPECT_EQ(first.end_ns, ns("2026-11-28T21:06:32.440Z"));    // the tool call's end
  EXPECT_EQ(first.status, SpanStatus::kError);
  EXPECT_EQ(value<std::int64_t>(second, "agentfleet.attempt"), 2);
  EXPECT_EQ(second.start_ns, ns("2026-11-28T21:06:40Z"));
  EXPECT_EQ(second.end_ns, ns("2026-11-28T21:06:41Z"));
  EXPECT_EQ(second.status, SpanStatus::kUnset);

  // Model calls: under their attempt, the model billed, tokens and cost.
  const Span& chat0 = named(all, "chat sim-model", 0);
  EXPECT_EQ(chat0.parent_span_id, first.span_id);
  EXPECT_EQ(chat0.kind, SpanKind::kClient);
  EXPECT_EQ(chat0.start_ns, ns("2026-11-28T21:06:32.300Z"));
  EXPECT_EQ(chat0.end_ns, ns("2026-11-28T21:06:32.400Z"));
  EXPECT_EQ(value<std::int64_t>(chat0, "gen_ai.usage.input_tokens"), 1832);
  EXPECT_EQ(value<std::int64_t>(chat0, "agentfleet.step"), 0);
  EXPECT_DOUBLE_EQ(value<double>(chat0, "agentfleet.cost"), 0.0012);
  EXPECT_TRUE(value<bool>(chat0, "agentfleet.usage.estimated")) << "the provider sent no usage";
  const Span& chat1 = named(all, "chat sim-model-large");
  EXPECT_EQ(chat1.parent_span_id, second.span_id);
  EXPECT_EQ(value<std::int64_t>(chat1, "agentfleet.usage.cached_input_tokens"), 1800);
  EXPECT_EQ(value<std::int64_t>(chat1, "agentfleet.usage.reasoning_tokens"), 4);
  EXPECT_FALSE(value<bool>(chat1, "agentfleet.usage.estimated"));
  EXPECT_EQ(value<std::string>(chat1, "gen_ai.request.model"), "sim-model-large");

  // Tool calls: arguments, result, status; a failure is an error span.
  const Span& search = named(all, "execute_tool search_items");
  EXPECT_EQ(search.parent_span_id, first.span_id);
  EXPECT_EQ(search.status, SpanStatus::kError);
  EXPECT_EQ(search.status_message, "outcome_unknown");
  const Span& update = named(all, "execute_tool update_item");
  EXPECT_EQ(update.parent_span_id, second.span_id);
  EXPECT_EQ(update.start_ns, ns("2026-11-28T21:06:40.210Z"));
  EXPECT_EQ(update.end_ns, ns("2026-11-28T21:06:40.230Z"));
  EXPECT_EQ(value<std::string>(update, "gen_ai.tool.call.id"), "call_1_0");
  EXPECT_EQ(value<std::string>(update, "agentfleet.tool.arguments"), R"({"id":"evt-1"})");
  EXPECT_EQ(value<std::string>(update, "agentfleet.tool.result"), R"({"error":"conflict"})");
  EXPECT_EQ(value<std::int64_t>(update, "http.response.status_code"), 409);
  EXPECT_EQ(update.status, SpanStatus::kError);
  const Span& refused = named(all, "execute_tool delete_all");
  EXPECT_EQ(refused.start_ns, refused.end_ns);  // it never left
  EXPECT_EQ(refused.start_ns, ns("2026-11-28T21:06:40.200Z"));
  EXPECT_EQ(refused.status_message, "refused");
}

// A task recovered onto another worker: started_at keeps the first claim, dispatched_at
// moved to the second dispatch. The wait ends at the first claim, and the second attempt
// starts at its dispatch, after the first attempt's steps, not over them.
TEST(OtlpTrace, ASecondAttemptStartsAtItsDispatchAfterTheFirstAndTheWaitAtTheFirstClaim) {
  std::string doc = task_json();
  auto replace = [&doc](const std::string& from, const std::string& to) {
    const auto at = doc.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    doc.replace(at, from.size(), to);
  };
  replace(R"("dispatched_at": "2026-11-28T21:06:32.250+00:00")",
          R"("dispatched_at": "2026-11-28T21:06:39.500+00:00")");
  replace(R"("started_at": "2026-11-28T21:06:40.000+00:00")",
          R"("started_at": "2026-11-28T21:06:32.280+00:00")");
  auto spans = task_spans(doc, caller_traceparent(), costs());
  ASSERT_TRUE(spans.ok()) << spans.error().message;
  const auto& all = spans.value();
  const Span& queue = named(all, "queue");
  EXPECT_EQ(queue.end_ns, ns("2026-11-28T21:06:32.280Z")) << "the first claim ends the wait";
  const Span& first = named(all, "attempt", 0);
  const Span& second = named(all, "attempt", 1);
  EXPECT_EQ(first.start_ns, ns("2026-11-28T21:06:32.300Z"));
  EXPECT_EQ(first.end_ns, ns("2026-11-28T21:06:32.440Z"));
  EXPECT_EQ(second.start_ns, ns("2026-11-28T21:06:39.500Z")) << "its own dispatch";
  EXPECT_EQ(second.end_ns, ns("2026-11-28T21:06:41Z"));
  EXPECT_GE(second.start_ns, first.end_ns) << "the attempts do not overlap";

  // Without a later dispatch time, the end of the first attempt's steps bounds the second.
  replace(R"("dispatched_at": "2026-11-28T21:06:39.500+00:00")", R"("dispatched_at": null)");
  auto no_dispatch = task_spans(doc, caller_traceparent(), costs());
  ASSERT_TRUE(no_dispatch.ok());
  EXPECT_EQ(named(no_dispatch.value(), "attempt", 1).start_ns, ns("2026-11-28T21:06:32.440Z"));
  EXPECT_EQ(named(no_dispatch.value(), "queue").end_ns, ns("2026-11-28T21:06:32.280Z"));
}

TEST(OtlpTrace, ATraceTheDispatcherStartedHasNoParentAndIdsAreStable) {
  const std::string made_up = std::string("00-") + kTraceId + "-" + task_span_id(kTaskId) + "-01";
  auto spans = task_spans(task_json(), made_up, {});
  ASSERT_TRUE(spans.ok());
  EXPECT_EQ(named(spans.value(), "task").parent_span_id, "");
  // A batch's tasks share the trace the dispatcher started for the batch: each is a root.
  const std::string batch = std::string("00-") + kTraceId + "-" + batch_span_id("b-7") + "-01";
  auto batched = task_spans(task_json("b-7"), batch, {});
  ASSERT_TRUE(batched.ok());
  EXPECT_EQ(named(batched.value(), "task").parent_span_id, "");
  EXPECT_EQ(named(batched.value(), "task").span_id, task_span_id(kTaskId));
  // Exported twice, the spans keep their ids; without bills, no cost on the calls.
  auto again = task_spans(task_json(), made_up, {});
  ASSERT_TRUE(again.ok());
  for (std::size_t i = 0; i < spans.value().size(); ++i)
    EXPECT_EQ(spans.value()[i].span_id, again.value()[i].span_id);
  EXPECT_EQ(named(spans.value(), "chat sim-model").attribute("agentfleet.cost"), nullptr);
  EXPECT_NE(task_span_id(kTaskId), batch_span_id(kTaskId));
}

TEST(OtlpTrace, AFailedTaskIsAnErrorWithItsReasonAndLongValuesAreCut) {
  std::string json = task_json();
  json.replace(json.find(R"("status": "succeeded")"), 21, R"("status": "failed")");
  json.replace(json.find(R"("error": null, "error_code": null)"), 33,
               R"("error": "the model endpoints failed", "error_code": "model_unavailable")");
  TaskSpansOptions options;
  options.max_attribute_chars = 5;
  auto spans = task_spans(json, caller_traceparent(), {}, options);
  ASSERT_TRUE(spans.ok());
  const Span& root = named(spans.value(), "task");
  EXPECT_EQ(root.status, SpanStatus::kError);
  EXPECT_EQ(root.status_message, "the m…");
  EXPECT_EQ(value<std::string>(root, "error.type"), "model_unavailable");
  // Cut on characters, not bytes.
  EXPECT_EQ(value<std::string>(root, "agentfleet.result.message"), "已将「团队…");
}

TEST(OtlpTrace, ATaskNotYetRunHasItsRootAndNothingElse) {
  const std::string json = std::string(R"({"task_id": ")") + kTaskId +
                           R"(", "status": "cancelled", "created_at": "2026-11-28T21:06:32Z",
      "finished_at": "2026-11-28T21:06:33Z", "dispatched_at": null, "started_at": null,
      "attempt": 0, "trace": []})";
  auto spans = task_spans(json, caller_traceparent(), {});
  ASSERT_TRUE(spans.ok());
  ASSERT_EQ(spans.value().size(), 1u);
  EXPECT_EQ(spans.value()[0].end_ns - spans.value()[0].start_ns, 1'000'000'000);
}

TEST(OtlpTrace, RefusesWhatItCannotRead) {
  EXPECT_FALSE(task_spans(task_json(), "", {}).ok());
  EXPECT_FALSE(
      task_spans(task_json(), "00-" + std::string(32, '0') + "-00f067aa0ba902b7-01", {}).ok());
  EXPECT_FALSE(
      task_spans(task_json(), "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", {}).ok());
  EXPECT_FALSE(task_spans("not json", caller_traceparent(), {}).ok());
  EXPECT_FALSE(task_spans(R"({"task_id": "x"})", caller_traceparent(), {}).ok());
}

TEST(OtlpTrace, TheRequestIsOtlpJson) {
  auto spans = task_spans(task_json(), caller_traceparent(), costs());
  ASSERT_TRUE(spans.ok());
  const std::string body =
      otlp_trace_request(spans.value(), {{"service.name", std::string("agentfleet")}}, "0.1.0");
  rapidjson::Document doc;
  ASSERT_FALSE(doc.Parse(body.c_str()).HasParseError());
  const auto& rs = doc["resourceSpans"][0];
  EXPECT_STREQ(rs["resource"]["attributes"][0]["key"].GetString(), "service.name");
  EXPECT_STREQ(rs["resource"]["attributes"][0]["value"]["stringValue"].GetString(), "agentfleet");
  const auto& scope = rs["scopeSpans"][0];
  EXPECT_STREQ(scope["scope"]["name"].GetString(), "agentfleet");
  EXPECT_STREQ(scope["scope"]["version"].GetString(), "0.1.0");
  const auto& out = scope["spans"];
  ASSERT_EQ(out.Size(), spans.value().size());
  const auto& root = out[0];
  EXPECT_STREQ(root["traceId"].GetString(), kTraceId);
  EXPECT_STREQ(root["parentSpanId"].GetString(), kCallerSpan);
  EXPECT_STREQ(root["name"].GetString(), "task");
  EXPECT_EQ(root["kind"].GetInt(), 5);
  // Times and 64-bit integers are decimal strings (OTLP's JSON mapping).
  EXPECT_STREQ(root["startTimeUnixNano"].GetString(),
               std::to_string(ns("2026-11-28T21:06:32Z")).c_str());
  bool tokens = false;
  for (const auto& a : root["attributes"].GetArray()) {
    if (std::string(a["key"].GetString()) == "gen_ai.usage.input_tokens") {
      EXPECT_STREQ(a["value"]["intValue"].GetString(), "5000");
      tokens = true;
    }
  }
  EXPECT_TRUE(tokens);
  for (const auto& s : out.GetArray()) {
    if (std::string(s["name"].GetString()) == "execute_tool update_item") {
      EXPECT_EQ(s["status"]["code"].GetInt(), 2);
      EXPECT_STREQ(s["status"]["message"].GetString(), "error");
    }
  }
  EXPECT_FALSE(root["status"].HasMember("code"));  // unset
}

}  // namespace
}  // namespace agentfleet::codec
