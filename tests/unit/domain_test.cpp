// Plain domain values and the codecs around them: offset commits, time zones from real TZif
// files, task enums, the system prompt, submissions, dispatch/result/progress messages and
// checkpoints.
#include <chrono>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "core/billing/money.hpp"
#include "core/codec/checkpoint_codec.hpp"
#include "core/codec/json_schema.hpp"
#include "core/codec/task_codec.hpp"
#include "core/domain/conversation.hpp"
#include "core/domain/error.hpp"
#include "core/domain/offset_tracker.hpp"
#include "core/domain/task.hpp"
#include "core/domain/time_zone.hpp"
#include "core/react/prompt.hpp"

namespace agentfleet {
namespace {

using codec::SchemaViolation;
using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;
using std::chrono::sys_days;
using std::chrono::system_clock;
using std::chrono::year;

system_clock::time_point utc(int y, int m, int d, int hh = 0, int mm = 0, int ss = 0) {
  return sys_days{year{y} / m / d} + hours(hh) + minutes(mm) + seconds(ss);
}

// ---------------------------------------------------------------------------------------
// OffsetTracker

const OffsetTracker::Partition kP0{"agent.tasks.dispatch", 0};
const OffsetTracker::Partition kP1{"agent.tasks.dispatch", 1};

TEST(OffsetTrackerTest, InOrderCompletionsCommitOnePastEach) {
  OffsetTracker tracker;
  tracker.started(kP0, 0);
  EXPECT_EQ(tracker.finished(kP0, 0), 1);
  tracker.started(kP0, 1);
  EXPECT_EQ(tracker.finished(kP0, 1), 2);
  EXPECT_EQ(tracker.running(), 0u);
}

TEST(OffsetTrackerTest, OutOfOrderCompletionsCommitOnlyUpToTheLowestRunning) {
  OffsetTracker tracker;
  for (std::int64_t offset : {10, 11, 12, 13})
    tracker.started(kP0, offset);
  EXPECT_EQ(tracker.running(), 4u);

  // 12 and 13 finish first: 10 is still running, so nothing past it may be committed.
  const auto after_12 = tracker.finished(kP0, 12);
  if (after_12) {
    EXPECT_LE(*after_12, 10);
  }
  EXPECT_EQ(tracker.finished(kP0, 13), std::nullopt);
  // 10 finishes: 11 is the lowest still running.
  EXPECT_EQ(tracker.finished(kP0, 10), 11);
  // 11 finishes: everything seen is done.
  EXPECT_EQ(tracker.finished(kP0, 11), 14);
  EXPECT_EQ(tracker.running(), 0u);
}

TEST(OffsetTrackerTest, CommitNeverMovesBackward) {
  OffsetTracker tracker;
  tracker.started(kP0, 5);
  tracker.started(kP0, 6);
  EXPECT_EQ(tracker.finished(kP0, 5), 6);
  EXPECT_EQ(tracker.finished(kP0, 6), 7);
  // A redelivered older message (e.g. after a seek) finishes: the commit stays at 7.
  tracker.started(kP0, 3);
  EXPECT_EQ(tracker.finished(kP0, 3), std::nullopt);
  // While an older redelivered offset runs, the commit does not go back to it.
  tracker.started(kP0, 7);
  tracker.started(kP0, 2);
  EXPECT_EQ(tracker.finished(kP0, 7), std::nullopt);
  EXPECT_EQ(tracker.finished(kP0, 2), 8);
}

TEST(OffsetTrackerTest, UnknownOffsetsAndTwiceFinishedAreIgnored) {
  OffsetTracker tracker;
  EXPECT_EQ(tracker.finished(kP0, 1), std::nullopt);
  tracker.started(kP0, 1);
  EXPECT_EQ(tracker.finished(kP0, 99), std::nullopt);
  EXPECT_EQ(tracker.finished(kP0, 1), 2);
  EXPECT_EQ(tracker.finished(kP0, 1), std::nullopt);
}

TEST(OffsetTrackerTest, PartitionsAreIndependent) {
  OffsetTracker tracker;
  tracker.started(kP0, 100);
  tracker.started(kP1, 7);
  tracker.started(kP0, 101);
  EXPECT_EQ(tracker.running(), 3u);
  EXPECT_EQ(tracker.finished(kP1, 7), 8);
  EXPECT_EQ(tracker.finished(kP0, 100), 101);
  const OffsetTracker::Partition other_topic{"agent.tasks.submit", 0};
  EXPECT_EQ(tracker.finished(other_topic, 101), std::nullopt);
  EXPECT_EQ(tracker.finished(kP0, 101), 102);
}

TEST(OffsetTrackerTest, ForgetOnRevokeDropsThePartition) {
  OffsetTracker tracker;
  tracker.started(kP0, 1);
  tracker.started(kP0, 2);
  tracker.started(kP1, 9);
  tracker.forget(kP0);
  EXPECT_EQ(tracker.running(), 1u);
  // A task that finishes after the revoke must not commit for the new owner.
  EXPECT_EQ(tracker.finished(kP0, 1), std::nullopt);
  EXPECT_EQ(tracker.finished(kP0, 2), std::nullopt);
  EXPECT_EQ(tracker.finished(kP1, 9), 10);
  // Reassigned later: it starts afresh.
  tracker.started(kP0, 1);
  EXPECT_EQ(tracker.finished(kP0, 1), 2);
}

// ---------------------------------------------------------------------------------------
// TimeZone

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::optional<TimeZone> load_zone(const std::string& name) {
  const std::string data = read_file("/usr/share/zoneinfo/" + name);
  if (data.empty())
    return std::nullopt;
  return TimeZone::from_tzif(name, data);
}

TEST(TimeZoneTest, FixedZone) {
  const TimeZone zone = TimeZone::fixed("+08", hours(8));
  EXPECT_EQ(zone.name(), "+08");
  EXPECT_EQ(zone.offset_at(utc(1970, 1, 1)), hours(8));
  EXPECT_EQ(zone.offset_at(utc(2026, 7, 1)), hours(8));
}

TEST(TimeZoneTest, ShanghaiFromTzif) {
  const auto zone = load_zone("Asia/Shanghai");
  ASSERT_TRUE(zone.has_value()) << "cannot read /usr/share/zoneinfo/Asia/Shanghai";
  EXPECT_EQ(zone->name(), "Asia/Shanghai");
  EXPECT_EQ(zone->offset_at(utc(2026, 2, 5, 2, 30)), hours(8));
  EXPECT_EQ(zone->offset_at(utc(2026, 7, 1)), hours(8));
  EXPECT_EQ(zone->offset_at(utc(2040, 1, 1)), hours(8));
  // China observed daylight saving time from 1986 to 1991.
  EXPECT_EQ(zone->offset_at(utc(1990, 7, 1)), hours(9));

  const LocalTime t = to_local(*zone, utc(2026, 2, 5, 2, 30, 15));
  EXPECT_EQ(t.year, 2026);
  EXPECT_EQ(t.month, 2);
  EXPECT_EQ(t.day, 5);
  EXPECT_EQ(t.hour, 10);
  EXPECT_EQ(t.minute, 30);
  EXPECT_EQ(t.second, 15);
  EXPECT_EQ(t.weekday, 4);  // Thursday
  EXPECT_EQ(t.offset, hours(8));
  EXPECT_EQ(format_date(t), "2026-02-05");
  EXPECT_EQ(format_clock(t), "10:30");
  EXPECT_EQ(format_offset(t.offset), "+08:00");

  // 16:00 UTC is already the next local day.
  const LocalTime next = to_local(*zone, utc(2026, 2, 28, 16));
  EXPECT_EQ(format_date(next), "2026-03-01");
  EXPECT_EQ(format_clock(next), "00:00");
  EXPECT_EQ(next.weekday, 0);  // Sunday
}

TEST(TimeZoneTest, NewYorkAcrossTheDstChangeOf2026) {
  const auto zone = load_zone("America/New_York");
  ASSERT_TRUE(zone.has_value()) << "cannot read /usr/share/zoneinfo/America/New_York";
  // DST starts 2026-03-08 at 02:00 EST = 07:00 UTC.
  EXPECT_EQ(zone->offset_at(utc(2026, 1, 15)), -hours(5));
  EXPECT_EQ(zone->offset_at(utc(2026, 3, 8, 6, 59, 59)), -hours(5));
  EXPECT_EQ(zone->offset_at(utc(2026, 3, 8, 7)), -hours(4));
  EXPECT_EQ(zone->offset_at(utc(2026, 7, 4)), -hours(4));
  // DST ends 2026-11-01 at 02:00 EDT = 06:00 UTC.
  EXPECT_EQ(zone->offset_at(utc(2026, 11, 1, 5, 59, 59)), -hours(4));
  EXPECT_EQ(zone->offset_at(utc(2026, 11, 1, 6)), -hours(5));

  const LocalTime before = to_local(*zone, utc(2026, 3, 8, 6, 59));
  EXPECT_EQ(format_date(before), "2026-03-08");
  EXPECT_EQ(format_clock(before), "01:59");
  EXPECT_EQ(format_offset(before.offset), "-05:00");
  const LocalTime after = to_local(*zone, utc(2026, 3, 8, 7));
  EXPECT_EQ(format_clock(after), "03:00");
  EXPECT_EQ(format_offset(after.offset), "-04:00");
  EXPECT_EQ(after.weekday, 0);  // Sunday

  // Late evening in New York is the next day in UTC.
  const LocalTime evening = to_local(*zone, utc(2026, 2, 6, 1, 30));
  EXPECT_EQ(format_date(evening), "2026-02-05");
  EXPECT_EQ(format_clock(evening), "20:30");
}

TEST(TimeZoneTest, FormatOffset) {
  EXPECT_EQ(format_offset(seconds(0)), "+00:00");
  EXPECT_EQ(format_offset(hours(8)), "+08:00");
  EXPECT_EQ(format_offset(-hours(5)), "-05:00");
  EXPECT_EQ(format_offset(hours(5) + minutes(45)), "+05:45");
  EXPECT_EQ(format_offset(-(hours(3) + minutes(30))), "-03:30");
}

TEST(TimeZoneTest, NonTzifBytesAreRejected) {
  EXPECT_FALSE(TimeZone::from_tzif("x", "").has_value());
  EXPECT_FALSE(TimeZone::from_tzif("x", "TZif").has_value());
  EXPECT_FALSE(
      TimeZone::from_tzif("x", "not a zone file at all, just some text......").has_value());
  EXPECT_FALSE(TimeZone::from_tzif("x", std::string(200, '\0')).has_value());
  // A real file cut short is not accepted either.
  const std::string data = read_file("/usr/share/zoneinfo/America/New_York");
  ASSERT_GT(data.size(), 100u);
  EXPECT_FALSE(TimeZone::from_tzif("x", data.substr(0, 60)).has_value());
  // Header claims more data than there is (huge counts).
  std::string header = data.substr(0, 44);
  for (std::size_t i = 20; i < 44; ++i)
    header[i] = '\x7f';
  EXPECT_FALSE(TimeZone::from_tzif("x", header + std::string(64, '\0')).has_value());
  // Counts with the high bit set must not wrap the size check into reading past the end.
  std::string negative = data.substr(0, 44);
  for (std::size_t i = 20; i < 44; ++i)
    negative[i] = '\0';
  negative.replace(32, 4, "\xff\xff\xff\xff");          // timecnt = 0xffffffff
  negative.replace(36, 4, std::string("\0\0\0\1", 4));  // typecnt = 1
  EXPECT_FALSE(TimeZone::from_tzif("x", negative + std::string(16, '\0')).has_value());
}

// ---------------------------------------------------------------------------------------
// Task values

TEST(TaskTest, StatusStringsRoundTrip) {
  for (TaskStatus s :
       {TaskStatus::kQueued, TaskStatus::kDispatched, TaskStatus::kRunning, TaskStatus::kSucceeded,
        TaskStatus::kFailed, TaskStatus::kTimedOut, TaskStatus::kCancelled}) {
    EXPECT_EQ(parse_task_status(to_string(s)), s) << to_string(s);
  }
  EXPECT_EQ(to_string(TaskStatus::kTimedOut), "timed_out");
  EXPECT_EQ(parse_task_status("SUCCEEDED"), std::nullopt);
  EXPECT_EQ(parse_task_status(""), std::nullopt);
}

TEST(TaskTest, ExactlyTheFourFinalStatusesAreTerminal) {
  EXPECT_FALSE(is_terminal(TaskStatus::kQueued));
  EXPECT_FALSE(is_terminal(TaskStatus::kDispatched));
  EXPECT_FALSE(is_terminal(TaskStatus::kRunning));
  EXPECT_TRUE(is_terminal(TaskStatus::kSucceeded));
  EXPECT_TRUE(is_terminal(TaskStatus::kFailed));
  EXPECT_TRUE(is_terminal(TaskStatus::kTimedOut));
  EXPECT_TRUE(is_terminal(TaskStatus::kCancelled));
}

TEST(TaskTest, ResultTypeAndPriorityStringsRoundTrip) {
  for (ResultType t :
       {ResultType::kActionCompleted, ResultType::kNeedClarification, ResultType::kError}) {
    EXPECT_EQ(parse_result_type(to_string(t)), t);
  }
  EXPECT_EQ(to_string(ResultType::kNeedClarification), "need_clarification");
  EXPECT_EQ(parse_result_type("done"), std::nullopt);
  for (Priority p : {Priority::kInteractive, Priority::kBatch})
    EXPECT_EQ(parse_priority(to_string(p)), p);
  EXPECT_EQ(parse_priority("urgent"), std::nullopt);
  EXPECT_EQ(to_string(Role::kTool), "tool");
  EXPECT_EQ(to_string(Role::kAssistant), "assistant");
}

TEST(TaskTest, OnlyTransientAndTimeoutErrorsAreRetryable) {
  EXPECT_TRUE((Error{ErrorKind::kTransient, ""}.retryable()));
  EXPECT_TRUE((Error{ErrorKind::kTimeout, ""}.retryable()));
  for (ErrorKind kind : {ErrorKind::kInvalid, ErrorKind::kNotFound, ErrorKind::kConflict,
                         ErrorKind::kLeaseLost, ErrorKind::kCancelled, ErrorKind::kFatal}) {
    EXPECT_FALSE((Error{kind, ""}.retryable())) << to_string(kind);
  }
}

TEST(TaskTest, TokenUsageAdds) {
  TokenUsage total{1, 2, 3, 4};
  total += TokenUsage{10, 20, 30, 40};
  EXPECT_EQ(total.input, 11);
  EXPECT_EQ(total.cached_input, 22);
  EXPECT_EQ(total.output, 33);
  EXPECT_EQ(total.reasoning, 44);
}

// ---------------------------------------------------------------------------------------
// System prompt

react::PromptValues shanghai_values() {
  const auto zone = load_zone("Asia/Shanghai");
  EXPECT_TRUE(zone.has_value());
  const TimeZone z = zone ? *zone : TimeZone::fixed("Asia/Shanghai", hours(8));
  return react::PromptValues{to_local(z, utc(2026, 2, 5, 2, 30)), "Asia/Shanghai", "zh-CN"};
}

TEST(PromptTest, BuiltinTemplateIsFilledWithTheTaskTime) {
  const std::string prompt = react::render_system_prompt("", shanghai_values());
  EXPECT_NE(prompt.find("2026-02-05 10:30 UTC+08:00"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("星期四"), std::string::npos);
  EXPECT_NE(prompt.find("Asia/Shanghai"), std::string::npos);
  EXPECT_NE(prompt.find("今天是 2026-02-05"), std::string::npos);
  EXPECT_NE(prompt.find("zh-CN"), std::string::npos);
  EXPECT_EQ(prompt.find("{{"), std::string::npos) << "unfilled placeholder";
  EXPECT_NE(prompt.find("finish"), std::string::npos);
}

TEST(PromptTest, CustomTemplate) {
  const std::string prompt = react::render_system_prompt(
      "now={{current_time}} date={{date}} day={{weekday}} tz={{time_zone}} "
      "lang={{locale}} again={{date}} {{unknown}}",
      shanghai_values());
  EXPECT_EQ(prompt,
            "now=2026-02-05 10:30 UTC+08:00 date=2026-02-05 day=星期四 tz=Asia/Shanghai "
            "lang=zh-CN again=2026-02-05 {{unknown}}");
}

TEST(PromptTest, UsesTheUsersZone) {
  const auto zone = load_zone("America/New_York");
  ASSERT_TRUE(zone.has_value());
  const react::PromptValues values{to_local(*zone, utc(2026, 3, 9, 1, 5)), "America/New_York",
                                   "en-US"};
  EXPECT_EQ(react::render_system_prompt("{{current_time}} {{weekday}}", values),
            "2026-03-08 21:05 UTC-04:00 星期日");
}

// ---------------------------------------------------------------------------------------
// Submissions

codec::SubmissionDefaults defaults() {
  codec::SubmissionDefaults d;
  d.model = "deepseek-chat";
  return d;
}

codec::Submission submit_ok(const std::string& json,
                            const codec::SubmissionDefaults& d = defaults()) {
  auto parsed = codec::parse_submission(json, d);
  if (auto* violation = std::get_if<SchemaViolation>(&parsed)) {
    ADD_FAILURE() << json << " -> " << violation->path << ": " << violation->message;
    return {};
  }
  return std::get<codec::Submission>(parsed);
}

SchemaViolation submit_bad(const std::string& json,
                           const codec::SubmissionDefaults& d = defaults()) {
  auto parsed = codec::parse_submission(json, d);
  if (!std::holds_alternative<SchemaViolation>(parsed)) {
    ADD_FAILURE() << json << " was accepted";
    return {};
  }
  return std::get<SchemaViolation>(parsed);
}

std::string repeat(const std::string& unit, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i)
    out += unit;
  return out;
}

TEST(SubmissionTest, DefaultsAreApplied) {
  const TaskSpec spec = submit_ok(R"({"user_id":"u1","text":"把周会改到晚上8点"})").spec;
  EXPECT_EQ(spec.user_id, "u1");
  EXPECT_EQ(spec.text, "把周会改到晚上8点");
  EXPECT_EQ(spec.model, "deepseek-chat");
  EXPECT_FALSE(spec.tools.has_value());
  EXPECT_EQ(spec.timeout_s, 30);
  EXPECT_EQ(spec.schedule_timeout_s, 3600);
  EXPECT_EQ(spec.max_steps, 10);
  EXPECT_EQ(spec.priority, Priority::kInteractive);
  EXPECT_EQ(spec.metadata.time_zone, "Asia/Shanghai");
  EXPECT_EQ(spec.metadata.locale, "zh-CN");
  EXPECT_TRUE(spec.idempotency_key.empty());
  EXPECT_TRUE(spec.batch_id.empty());
  EXPECT_TRUE(spec.task_id.empty());
}

TEST(SubmissionTest, GivenFieldsOverrideDefaults) {
  const TaskSpec spec =
      submit_ok(R"({"user_id":"u2","text":"t","model":"qwen","tools":["search_items"],)"
                R"("timeout_s":60,"schedule_timeout_s":120,"max_steps":4,"priority":"batch",)"
                R"("idempotency_key":"k1","batch_id":"b1",)"
                R"("metadata":{"device_id":"d1","time_zone":"America/New_York","locale":"en-US"}})")
          .spec;
  EXPECT_EQ(spec.model, "qwen");
  ASSERT_TRUE(spec.tools.has_value());
  EXPECT_EQ(*spec.tools, (std::vector<std::string>{"search_items"}));
  EXPECT_EQ(spec.timeout_s, 60);
  EXPECT_EQ(spec.schedule_timeout_s, 120);
  EXPECT_EQ(spec.max_steps, 4);
  EXPECT_EQ(spec.priority, Priority::kBatch);
  EXPECT_EQ(spec.idempotency_key, "k1");
  EXPECT_EQ(spec.batch_id, "b1");
  EXPECT_EQ(spec.metadata.device_id, "d1");
  EXPECT_EQ(spec.metadata.time_zone, "America/New_York");
  EXPECT_EQ(spec.metadata.locale, "en-US");
}

TEST(SubmissionTest, EmptyToolListMeansNoTools) {
  const TaskSpec spec = submit_ok(R"({"user_id":"u","text":"t","tools":[]})").spec;
  ASSERT_TRUE(spec.tools.has_value());
  EXPECT_TRUE(spec.tools->empty());
}

TEST(SubmissionTest, ViolationsNameTheJsonPath) {
  EXPECT_EQ(submit_bad(R"({"user_id":"u","text":"t","timeout_s":"30"})").path, "/timeout_s");
  EXPECT_EQ(submit_bad(R"({"user_id":"u","text":"t","timeout_s":0})").path, "/timeout_s");
  EXPECT_EQ(submit_bad(R"({"user_id":"u","text":"t","timeout_s":1.5})").path, "/timeout_s");
  EXPECT_EQ(submit_bad(R"({"user_id":"u","text":"t","max_steps":51})").path, "/max_steps");
  EXPECT_EQ(submit_bad(R"({"user_id":"u","text":"t","priority":"urgent"})").path, "/priority");
  EXPECT_EQ(submit_bad(R"({"user_id":"u","text":"t","tools":["a",3]})").path, "/tools/1");
  EXPECT_EQ(submit_bad(R"({"user_id":"u","text":"t","metadata":{"foo":1}})").path, "/metadata/foo");
  EXPECT_EQ(submit_bad(R"({"user_id":"u","text":"t","metadata":{"time_zone":"../etc"}})").path,
            "/metadata/time_zone");
  EXPECT_EQ(submit_bad(R"({"user_id":"u","text":""})").path, "/text");
  EXPECT_EQ(submit_bad(R"({"user_id":7,"text":"t"})").path, "/user_id");
  const SchemaViolation unknown = submit_bad(R"({"user_id":"u","text":"t","extra":1})");
  EXPECT_EQ(unknown.path, "/extra");
  EXPECT_NE(unknown.message.find("extra"), std::string::npos) << unknown.message;
  const SchemaViolation missing = submit_bad(R"({"text":"t"})");
  EXPECT_TRUE(missing.path.empty() || missing.path == "/user_id") << missing.path;
  EXPECT_NE(missing.message.find("user_id"), std::string::npos) << missing.message;
  for (const char* not_object : {"[]", "\"text\"", "42", "null", "not json", ""}) {
    const SchemaViolation v = submit_bad(not_object);
    EXPECT_TRUE(v.path.empty() || v.path == "/") << not_object << " -> " << v.path;
    EXPECT_FALSE(v.message.empty());
  }
}

TEST(SubmissionTest, TextLengthCountsCodePointsNotBytes) {
  const std::string ok_text = repeat("会", 5000);  // 15,000 bytes
  const TaskSpec spec = submit_ok(R"({"user_id":"u","text":")" + ok_text + R"("})").spec;
  EXPECT_EQ(spec.text, ok_text);
  EXPECT_EQ(codec::count_code_points(ok_text), 5000u);

  const SchemaViolation too_long =
      submit_bad(R"({"user_id":"u","text":")" + repeat("会", 5001) + R"("})");
  EXPECT_EQ(too_long.path, "/text");

  // Four-byte characters count once each too.
  submit_ok(R"({"user_id":"u","text":")" + repeat("😀", 5000) + R"("})");
  EXPECT_EQ(submit_bad(R"({"user_id":"u","text":")" + repeat("a", 5001) + R"("})").path, "/text");
}

TEST(SubmissionTest, ConfiguredTextLimitApplies) {
  codec::SubmissionDefaults d = defaults();
  d.max_text_chars = 10;
  submit_ok(R"({"user_id":"u","text":")" + repeat("字", 10) + R"("})", d);
  const SchemaViolation v =
      submit_bad(R"({"user_id":"u","text":")" + repeat("字", 11) + R"("})", d);
  EXPECT_EQ(v.path, "/text");
  EXPECT_NE(v.message.find("10"), std::string::npos) << v.message;
}

TEST(SubmissionTest, CanonicalFormIgnoresSpellingOfDefaults) {
  const std::string omitted = submit_ok(R"({"user_id":"u","text":"t"})").canonical;
  const std::string explicit_default =
      submit_ok(R"({"text":"t","model":"deepseek-chat","user_id":"u","timeout_s":30,)"
                R"("priority":"interactive","metadata":{"time_zone":"Asia/Shanghai"}})")
          .canonical;
  EXPECT_EQ(omitted, explicit_default);
  // The idempotency key is how a request is found, not part of what it asks.
  EXPECT_EQ(omitted, submit_ok(R"({"user_id":"u","text":"t","idempotency_key":"k"})").canonical);

  EXPECT_NE(omitted, submit_ok(R"({"user_id":"u","text":"t","model":"qwen"})").canonical);
  EXPECT_NE(omitted, submit_ok(R"({"user_id":"u","text":"t2"})").canonical);
  EXPECT_NE(omitted, submit_ok(R"({"user_id":"u","text":"t","timeout_s":31})").canonical);
  EXPECT_NE(omitted, submit_ok(R"({"user_id":"u","text":"t","tools":[]})").canonical);
  EXPECT_NE(omitted, submit_ok(R"({"user_id":"u2","text":"t"})").canonical);

  rapidjson::Document doc;
  doc.Parse(omitted.c_str());
  EXPECT_FALSE(doc.HasParseError()) << omitted;
}

TEST(SubmissionTest, ARetrySubmitsAgainWhatTheStoredTaskAskedOutsideItsBatch) {
  using codec::Submission;
  using codec::submission_from_canonical;
  // Every field a submission can carry comes back from the stored canonical form.
  const Submission first = submit_ok(
      R"({"user_id":"u2","text":"t","model":"qwen","tools":["search_items"],"timeout_s":60,)"
      R"("schedule_timeout_s":120,"max_steps":4,"priority":"batch","idempotency_key":"k1",)"
      R"("batch_id":"b1","strategy":"plan_execute","session_id":"s1","max_tokens":900,)"
      R"("max_cost":"0.5","metadata":{"device_id":"d1","time_zone":"America/New_York",)"
      R"("locale":"en-US"}})");
  const auto again = submission_from_canonical(first.canonical, "retry-key");
  ASSERT_TRUE(again);
  const Submission retry = submit_ok(*again);
  EXPECT_EQ(retry.spec.text, "t");
  EXPECT_EQ(retry.spec.model, "qwen");
  EXPECT_EQ(retry.spec.tools, first.spec.tools);
  EXPECT_EQ(retry.spec.timeout_s, 60);
  EXPECT_EQ(retry.spec.schedule_timeout_s, 120);
  EXPECT_EQ(retry.spec.max_steps, 4);
  EXPECT_EQ(retry.spec.priority, Priority::kBatch);
  EXPECT_EQ(retry.spec.strategy, first.spec.strategy);
  EXPECT_EQ(retry.spec.session_id, "s1");
  EXPECT_EQ(retry.spec.max_tokens, 900);
  EXPECT_EQ(retry.spec.max_cost_micros, first.spec.max_cost_micros);
  EXPECT_EQ(retry.spec.metadata.device_id, "d1");
  EXPECT_EQ(retry.spec.metadata.time_zone, "America/New_York");
  EXPECT_EQ(retry.spec.metadata.locale, "en-US");
  EXPECT_EQ(retry.spec.idempotency_key, "retry-key") << "its own key, not the first's";
  EXPECT_TRUE(retry.spec.batch_id.empty()) << "a retry is a task of its own";
  // Without a batch, the same request: a retry of a retry asks the same.
  const Submission plain = submit_ok(R"({"user_id":"u","text":"t"})");
  EXPECT_EQ(submit_ok(*submission_from_canonical(plain.canonical)).canonical, plain.canonical);
  // A retry's canonical form names what it retries; a retry of the retry asks the same again.
  const std::string retry_form = codec::canonical_with_retry_of(plain.canonical, "t-1");
  EXPECT_NE(retry_form, plain.canonical);
  EXPECT_EQ(retry_form, codec::canonical_with_retry_of(retry_form, "t-1"));
  EXPECT_NE(retry_form, codec::canonical_with_retry_of(plain.canonical, "t-2"));
  EXPECT_EQ(submit_ok(*submission_from_canonical(retry_form)).canonical, plain.canonical);
  EXPECT_FALSE(submission_from_canonical("not json"));
  EXPECT_FALSE(submission_from_canonical(R"({"text":"t"})"));
}

TEST(SubmissionTest, ATasksOwnSpendingLimitsAreReadExactlyAndCheckedAtTheDoor) {
  const codec::Submission given =
      submit_ok(R"({"user_id":"u","text":"t","max_tokens":20000,"max_cost":"0.05"})");
  EXPECT_EQ(given.spec.max_tokens, 20000);
  EXPECT_EQ(given.spec.max_cost_micros, 50'000);
  const codec::Submission none = submit_ok(R"({"user_id":"u","text":"t"})");
  EXPECT_FALSE(none.spec.max_tokens);
  EXPECT_FALSE(none.spec.max_cost_micros);
  EXPECT_EQ(submit_ok(R"({"user_id":"u","text":"t","max_cost":"999999999999.999999"})")
                .spec.max_cost_micros,
            999'999'999'999'999'999);

  // Part of what a request asks: another limit is another request; spellings of one agree.
  EXPECT_NE(given.canonical, none.canonical);
  EXPECT_EQ(
      given.canonical,
      submit_ok(R"({"user_id":"u","text":"t","max_cost":"0.050","max_tokens":20000})").canonical);
  EXPECT_NE(
      given.canonical,
      submit_ok(R"({"user_id":"u","text":"t","max_tokens":20001,"max_cost":"0.05"})").canonical);
  // A submission without them keeps the canonical form it had before they existed.
  EXPECT_EQ(none.canonical.find("max_tokens"), std::string::npos) << none.canonical;
  EXPECT_EQ(none.canonical.find("max_cost"), std::string::npos) << none.canonical;

  for (const char* bad : {R"("max_cost":"0")", R"("max_cost":"0.000000")", R"("max_cost":0.5)",
                          R"("max_cost":"1e3")", R"("max_cost":"-1")", R"("max_cost":"0.0000001")",
                          R"("max_cost":"1234567890123")", R"("max_cost":"")"}) {
    EXPECT_EQ(submit_bad(std::string(R"({"user_id":"u","text":"t",)") + bad + "}").path,
              "/max_cost")
        << bad;
  }
  for (const char* bad : {R"("max_tokens":0)", R"("max_tokens":1000000001)", R"("max_tokens":1.5)",
                          R"("max_tokens":"100")"}) {
    EXPECT_EQ(submit_bad(std::string(R"({"user_id":"u","text":"t",)") + bad + "}").path,
              "/max_tokens")
        << bad;
  }
}

// ---------------------------------------------------------------------------------------
// Dispatch, result and progress messages

constexpr const char* kTaskId = "0b7e8a52-3c1d-4f6e-9a2b-5d4c3b2a1f00";

// The scheduler's statement writes dispatch messages (the fragment dispatch_marked; the
// Postgres test Dispatch.WhatTheSchedulerWritesIsWhatTheWorkerReads reads them with the
// codec). Here: what the worker accepts and refuses.
std::string dispatch_json(const std::string& task_id, const std::string& priority) {
  return R"({"version":1,"task_id":")" + task_id + R"(","user_id":"u1","priority":")" + priority +
         R"(","dispatched_at":"2026-11-22T03:04:05.123Z"})";
}

TEST(DispatchMessageTest, ParsesWhatTheSchedulerWrites) {
  auto parsed = codec::parse_dispatch_message(dispatch_json(kTaskId, "batch"));
  ASSERT_TRUE(std::holds_alternative<codec::DispatchMessage>(parsed));
  const auto& message = std::get<codec::DispatchMessage>(parsed);
  EXPECT_EQ(message.task_id, kTaskId);
  EXPECT_EQ(message.user_id, "u1");
  EXPECT_EQ(message.priority, Priority::kBatch);
  EXPECT_EQ(message.dispatched_at, "2026-11-22T03:04:05.123Z");
}

TEST(DispatchMessageTest, BadTaskIdIsRefused) {
  for (const char* id : {"not-a-uuid", "", "0B7E8A52-3C1D-4F6E-9A2B-5D4C3B2A1F00",
                         "0b7e8a52-3c1d-4f6e-9a2b-5d4c3b2a1f00x"}) {
    auto parsed = codec::parse_dispatch_message(dispatch_json(id, "interactive"));
    ASSERT_TRUE(std::holds_alternative<SchemaViolation>(parsed)) << id;
    EXPECT_EQ(std::get<SchemaViolation>(parsed).path, "/task_id") << id;
  }
  auto garbage = codec::parse_dispatch_message("{\"version\":2}");
  EXPECT_TRUE(std::holds_alternative<SchemaViolation>(garbage));
  auto not_json = codec::parse_dispatch_message("\x01\x02");
  EXPECT_TRUE(std::holds_alternative<SchemaViolation>(not_json));
}

TEST(DispatchNeedsTest, WhatThisVersionRunsIsMetAndAnythingElseIsNamed) {
  EXPECT_TRUE(codec::unmet_needs("").empty()) << "no header: a message of an earlier scheduler";
  // Every strategy the scheduler can write, and a follow-up.
  for (const char* strategy : {"react", "plan_execute", "plan_only"}) {
    EXPECT_TRUE(
        codec::unmet_needs(std::string("strategy:") + strategy + " feature:follow_up").empty())
        << strategy;
  }
  EXPECT_TRUE(codec::unmet_needs("strategy:react feature:spend_limits").empty())
      << "a task with its own max_tokens or max_cost";
  EXPECT_EQ(codec::unmet_needs("strategy:react feature:follow_up feature:sandbox strategy:tree"),
            (std::vector<std::string>{"feature:sandbox", "strategy:tree"}));
  EXPECT_EQ(codec::unmet_needs("  protocol:2  "), std::vector<std::string>{"protocol:2"})
      << "extra spaces are not words";
  EXPECT_EQ(codec::unmet_needs("strategy:React"), std::vector<std::string>{"strategy:React"})
      << "words are matched exactly";
}

TEST(FormatRfc3339Test, PadsAndTruncatesToMilliseconds) {
  EXPECT_EQ(codec::format_rfc3339(utc(1970, 1, 1)), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(codec::format_rfc3339(utc(2026, 2, 5, 23, 59, 59) + std::chrono::microseconds(999)),
            "2026-02-05T23:59:59.000Z");
  EXPECT_EQ(codec::format_rfc3339(utc(2026, 12, 31, 9, 8, 7) + milliseconds(5)),
            "2026-12-31T09:08:07.005Z");
}

TEST(ResultEventTest, SucceededEventMatchesItsSchema) {
  codec::ResultEvent event;
  event.task_id = kTaskId;
  event.user_id = "u1";
  event.batch_id = "b1";
  event.status = TaskStatus::kSucceeded;
  event.result = TaskResult{ResultType::kNeedClarification, "找到两个\"周会\"", {"周一", "周三"}};
  event.attempt = 2;
  event.steps = 3;
  event.tool_calls = 2;
  event.usage = TokenUsage{4200, 3000, 130, 20};
  event.cost = billing::format_micros(1234);
  event.currency = "CNY";
  event.finished_at = codec::format_rfc3339(utc(2026, 2, 5, 2, 31));
  const std::string json = codec::result_event_json(event);

  rapidjson::Document doc;
  const auto violation = codec::validate_json_text(json, "result_event.schema.json", &doc);
  EXPECT_FALSE(violation.has_value()) << json << "\n"
                                      << violation->path << ": " << violation->message;
  EXPECT_STREQ(doc["task_id"].GetString(), kTaskId);
  EXPECT_STREQ(doc["status"].GetString(), "succeeded");
  EXPECT_STREQ(doc["result"]["type"].GetString(), "need_clarification");
  EXPECT_STREQ(doc["result"]["message"].GetString(), "找到两个\"周会\"");
  EXPECT_EQ(doc["result"]["options"].Size(), 2u);
  EXPECT_STREQ(doc["cost"].GetString(), "0.001234");
  EXPECT_EQ(doc["usage"]["input_tokens"].GetInt64(), 4200);
  EXPECT_EQ(doc["usage"]["cached_input_tokens"].GetInt64(), 3000);
  EXPECT_EQ(doc["usage"]["output_tokens"].GetInt64(), 130);
  EXPECT_STREQ(doc["batch_id"].GetString(), "b1");
}

TEST(ResultEventTest, TimedOutEventWithoutResultMatchesItsSchema) {
  codec::ResultEvent event;
  event.task_id = kTaskId;
  event.user_id = "u1";
  event.status = TaskStatus::kTimedOut;
  event.error = "deadline of 30 s passed";
  event.cost = billing::format_micros(0);
  event.currency = "CNY";
  event.finished_at = codec::format_rfc3339(utc(2026, 2, 5));
  const std::string json = codec::result_event_json(event);
  rapidjson::Document doc;
  const auto violation = codec::validate_json_text(json, "result_event.schema.json", &doc);
  EXPECT_FALSE(violation.has_value()) << json << "\n"
                                      << violation->path << ": " << violation->message;
  EXPECT_FALSE(doc.HasMember("result"));
  EXPECT_FALSE(doc.HasMember("batch_id"));
  EXPECT_STREQ(doc["status"].GetString(), "timed_out");
  EXPECT_STREQ(doc["error"].GetString(), "deadline of 30 s passed");
}

TEST(ProgressEventTest, EventsMatchTheirSchema) {
  for (const char* name : {"action", "execution", "delta", "done", "error"}) {
    codec::ProgressEvent event;
    event.task_id = kTaskId;
    event.user_id = "u1";
    event.seq = 4;
    event.attempt = 1;
    event.event = name;
    event.step = 2;
    event.tool = std::string(name) == "action" ? "search_items" : "";
    event.data_json = R"({"arguments":{"keyword":"周会"},"n":1})";
    event.at = codec::format_rfc3339(utc(2026, 2, 5, 2, 30));
    const std::string json = codec::progress_event_json(event);
    rapidjson::Document doc;
    const auto violation = codec::validate_json_text(json, "progress_event.schema.json", &doc);
    EXPECT_FALSE(violation.has_value()) << json << "\n"
                                        << violation->path << ": " << violation->message;
    EXPECT_STREQ(doc["event"].GetString(), name);
    EXPECT_EQ(doc["seq"].GetInt(), 4);
    EXPECT_STREQ(doc["data"]["arguments"]["keyword"].GetString(), "周会");
    EXPECT_EQ(doc.HasMember("tool"), std::string(name) == "action");
  }
  codec::ProgressEvent defaults_only;
  defaults_only.task_id = kTaskId;
  defaults_only.user_id = "u1";
  defaults_only.event = "done";
  defaults_only.at = "2026-02-05T02:30:00.000Z";
  EXPECT_FALSE(codec::validate_json_text(codec::progress_event_json(defaults_only),
                                         "progress_event.schema.json")
                   .has_value());
}

// ---------------------------------------------------------------------------------------
// Checkpoints

TEST(CheckpointCodecTest, ModelReplyRoundTrip) {
  ModelReply reply;
  reply.content = "先搜索\n\"周会\"";
  reply.reasoning = "用户要改时间";
  reply.finish_reason = "tool_calls";
  reply.provider_model = "deepseek-chat-v3";
  reply.tool_calls = {
      ToolCall{"call_0", "search_items", R"({"keyword":"周会"})"},
      ToolCall{"call_1", "finish",
               R"({"type":"need_clarification","message":"哪一个？","options":["A","B"]})"},
  };
  reply.usage = TokenUsage{5000, 4000, 300, 120};

  auto back = codec::parse_model_reply_json(codec::model_reply_json(reply));
  ASSERT_TRUE(back.ok());
  const ModelReply& r = back.value();
  EXPECT_EQ(r.content, reply.content);
  EXPECT_EQ(r.reasoning, reply.reasoning);
  EXPECT_EQ(r.finish_reason, reply.finish_reason);
  EXPECT_EQ(r.provider_model, reply.provider_model);
  ASSERT_EQ(r.tool_calls.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(r.tool_calls[i].id, reply.tool_calls[i].id);
    EXPECT_EQ(r.tool_calls[i].name, reply.tool_calls[i].name);
    EXPECT_EQ(r.tool_calls[i].arguments, reply.tool_calls[i].arguments);
  }
  EXPECT_EQ(r.usage.input, 5000);
  EXPECT_EQ(r.usage.cached_input, 4000);
  EXPECT_EQ(r.usage.output, 300);
  EXPECT_EQ(r.usage.reasoning, 120);
  // The finish declaration is recovered from the checkpointed call.
  ASSERT_TRUE(r.finish.has_value());
  EXPECT_TRUE(r.finish->problem.empty());
  EXPECT_EQ(r.finish->result.type, ResultType::kNeedClarification);
  EXPECT_EQ(r.finish->result.options, (std::vector<std::string>{"A", "B"}));
}

TEST(CheckpointCodecTest, EmptyReplyRoundTrip) {
  auto back = codec::parse_model_reply_json(codec::model_reply_json(ModelReply{}));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back.value().content.empty());
  EXPECT_TRUE(back.value().tool_calls.empty());
  EXPECT_FALSE(back.value().finish.has_value());
  EXPECT_EQ(back.value().usage.input, 0);
}

TEST(CheckpointCodecTest, ObservationsRoundTrip) {
  const std::vector<ToolObservation> observations = {
      ToolObservation{"call_0", "search_items", true, R"({"items":[{"title":"周会"}]})"},
      ToolObservation{"call_1", "delete_item", false,
                      R"({"error":{"code":"tool_not_allowed","message":"no"}})"},
  };
  auto back = codec::parse_observations_json(codec::observations_json(observations));
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back.value().size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back.value()[i].call_id, observations[i].call_id);
    EXPECT_EQ(back.value()[i].tool, observations[i].tool);
    EXPECT_EQ(back.value()[i].ok, observations[i].ok);
    EXPECT_EQ(back.value()[i].content, observations[i].content);
  }
  auto empty = codec::parse_observations_json(codec::observations_json({}));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty.value().empty());
}

TEST(CheckpointCodecTest, CorruptCheckpointsAreInvalidNotCrashes) {
  for (const char* bad : {"", "nope", "[]", "42"}) {
    auto reply = codec::parse_model_reply_json(bad);
    ASSERT_FALSE(reply.ok()) << bad;
    EXPECT_EQ(reply.error().kind, ErrorKind::kInvalid);
  }
  for (const char* bad : {"", "nope", "{}", "42"}) {
    auto observations = codec::parse_observations_json(bad);
    ASSERT_FALSE(observations.ok()) << bad;
    EXPECT_EQ(observations.error().kind, ErrorKind::kInvalid);
  }
}

TEST(CheckpointCodecTest, MalformedEntriesInsideACheckpointAreInvalidNotCrashes) {
  // A row written by another version or damaged in storage must not take the worker down.
  auto reply = codec::parse_model_reply_json(
      R"({"content":"x","tool_calls":[1,{"id":"c","name":"search_items","arguments":"{}"}]})");
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.error().kind, ErrorKind::kInvalid);
  auto observations = codec::parse_observations_json(R"([{"call_id":"c","ok":true},null])");
  ASSERT_FALSE(observations.ok());
  EXPECT_EQ(observations.error().kind, ErrorKind::kInvalid);
  // A usage of the wrong type is ignored, as a missing one would be.
  auto odd_usage = codec::parse_model_reply_json(R"({"content":"x","usage":7})");
  ASSERT_TRUE(odd_usage.ok());
  EXPECT_EQ(odd_usage.value().usage.input, 0);
}

}  // namespace
}  // namespace agentfleet

namespace agentfleet {
namespace {

TEST(OffsetTrackerAbandoned, AGivenUpMessageHoldsCommitsBehindItSoItIsReadAgain) {
  OffsetTracker tracker;
  const OffsetTracker::Partition p{"agent.tasks.dispatch", 0};
  tracker.started(p, 10);
  tracker.started(p, 11);
  tracker.started(p, 12);
  tracker.forget_offset(p, 11);  // e.g. its dead letter could not be published
  EXPECT_EQ(tracker.running(), 2u);
  EXPECT_EQ(tracker.finished(p, 10), std::optional<std::int64_t>(11));
  EXPECT_EQ(tracker.finished(p, 12), std::nullopt) << "never commits past offset 11";
  EXPECT_EQ(tracker.running(), 0u);
}

}  // namespace
}  // namespace agentfleet
