// tool-sim's logic without sockets: the time model, the business rules of the six tools,
// per-user isolation, idempotency and the seed. "Now" is fixed at 2026-02-05 10:00 +08:00.

#include "tests/source_dir.hpp"

#include "tools/tool_sim/item_store.hpp"
#include "tools/tool_sim/seed.hpp"
#include "tools/tool_sim/time_model.hpp"
#include "tools/tool_sim/tool_service.hpp"

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace agentfleet::tool_sim {
namespace {

using namespace std::chrono_literals;

// 2026-02-05T10:00:00+08:00
std::chrono::system_clock::time_point fixed_now() {
  return std::chrono::sys_days{std::chrono::year{2026} / 2 / 5} + 2h;
}

ToolServiceOptions fixed_options() {
  ToolServiceOptions options;
  options.clock = fixed_now;
  return options;
}

struct Reply {
  int status = 0;
  rapidjson::Document json;
  std::string body;
  bool replayed = false;
};

Reply call(ToolService& service, std::string_view user, std::string_view tool,
           std::string_view body, std::string_view key = {}) {
  ToolResponse response = service.call({tool, user, key, body});
  Reply reply;
  reply.status = response.status;
  reply.body = response.body;
  reply.replayed = response.replayed;
  reply.json.Parse(reply.body.c_str());
  EXPECT_FALSE(reply.json.HasParseError()) << reply.body;
  return reply;
}

std::string str(const rapidjson::Value& value, const char* key) {
  const auto it = value.FindMember(key);
  if (it == value.MemberEnd() || !it->value.IsString())
    return "<absent>";
  return it->value.GetString();
}

std::string error_code(const Reply& reply) {
  return str(reply.json["error"], "code");
}
std::string error_path(const Reply& reply) {
  return str(reply.json["error"], "path");
}
std::string error_message(const Reply& reply) {
  return str(reply.json["error"], "message");
}

std::string create_event(ToolService& service, std::string_view user, std::string_view date,
                         std::string_view start, std::string_view end,
                         std::string_view title = "会议") {
  const std::string body = R"({"item_type":"event","title":")" + std::string(title) +
                           R"(","date":")" + std::string(date) + R"(","start_time":")" +
                           std::string(start) + R"(","end_time":")" + std::string(end) + R"("})";
  Reply reply = call(service, user, "create_item", body);
  EXPECT_EQ(reply.status, 200) << reply.body;
  return reply.status == 200 ? str(reply.json["item"], "id") : "";
}

std::vector<std::string> ids(const Reply& reply) {
  std::vector<std::string> out;
  for (const auto& item : reply.json["items"].GetArray())
    out.push_back(str(item, "id"));
  return out;
}

rapidjson::Document stats(const ToolService& service) {
  rapidjson::Document doc;
  doc.Parse(service.stats_json().c_str());
  return doc;
}

// --- time model ---------------------------------------------------------------------------

TEST(ToolSimTimeModel, SegmentBoundaries) {
  const std::pair<TimeSegment, std::pair<const char*, const char*>> expected[] = {
      {TimeSegment::kAllDay, {"00:00", "23:59"}},  {TimeSegment::kEarlyMorning, {"00:00", "05:59"}},
      {TimeSegment::kMorning, {"06:00", "08:59"}}, {TimeSegment::kForenoon, {"09:00", "11:59"}},
      {TimeSegment::kNoon, {"12:00", "13:59"}},    {TimeSegment::kAfternoon, {"14:00", "17:59"}},
      {TimeSegment::kEvening, {"18:00", "23:59"}},
  };
  for (const auto& [segment, range] : expected) {
    EXPECT_EQ(format_clock_time(segment_range(segment).first), range.first)
        << segment_name(segment);
    EXPECT_EQ(format_clock_time(segment_range(segment).last), range.second)
        << segment_name(segment);
    EXPECT_EQ(parse_segment(segment_name(segment)), segment);
  }
  EXPECT_FALSE(parse_segment("night").has_value());
  // Consecutive segments (after all_day and early_morning) leave no gap and do not overlap.
  EXPECT_EQ(segment_range(TimeSegment::kEarlyMorning).last + 1,
            segment_range(TimeSegment::kMorning).first);
  EXPECT_EQ(segment_range(TimeSegment::kMorning).last + 1,
            segment_range(TimeSegment::kForenoon).first);
  EXPECT_EQ(segment_range(TimeSegment::kForenoon).last + 1,
            segment_range(TimeSegment::kNoon).first);
  EXPECT_EQ(segment_range(TimeSegment::kNoon).last + 1,
            segment_range(TimeSegment::kAfternoon).first);
  EXPECT_EQ(segment_range(TimeSegment::kAfternoon).last + 1,
            segment_range(TimeSegment::kEvening).first);
}

TEST(ToolSimTimeModel, ClockTimes) {
  EXPECT_EQ(parse_clock_time("00:00"), 0);
  EXPECT_EQ(parse_clock_time("23:59"), 23 * 60 + 59);
  EXPECT_EQ(parse_clock_time("14:30"), 14 * 60 + 30);
  for (const char* bad : {"24:00", "9:00", "12:60", "12-00", "", "1200", "ab:cd", "+1:00"}) {
    EXPECT_FALSE(parse_clock_time(bad).has_value()) << bad;
  }
}

TEST(ToolSimTimeModel, Dates) {
  EXPECT_EQ(parse_date("2026-02-28").date, (CivilDate{2026, 2, 28}));
  EXPECT_EQ(parse_date("2028-02-29").date, (CivilDate{2028, 2, 29}));
  EXPECT_EQ(parse_date("2026-02-30").problem, DateProblem::kNoSuchDate);
  EXPECT_EQ(parse_date("2027-02-29").problem, DateProblem::kNoSuchDate);
  EXPECT_EQ(parse_date("2026-13-01").problem, DateProblem::kNoSuchDate);
  EXPECT_EQ(parse_date("2026-2-3").problem, DateProblem::kBadFormat);
  EXPECT_EQ(parse_date("2026/02/03").problem, DateProblem::kBadFormat);
  EXPECT_EQ(format_date(add_days(CivilDate{2026, 2, 28}, 1)), "2026-03-01");
  EXPECT_EQ(format_date(add_days(CivilDate{2026, 1, 1}, -1)), "2025-12-31");
}

TEST(ToolSimTimeModel, FixedUtcOffset) {
  EXPECT_EQ(parse_utc_offset("+08:00"), 480);
  EXPECT_EQ(parse_utc_offset("-05:30"), -330);
  EXPECT_EQ(parse_utc_offset("+0800"), 480);
  EXPECT_EQ(parse_utc_offset("Z"), 0);
  EXPECT_FALSE(parse_utc_offset("08:00").has_value());
  EXPECT_FALSE(parse_utc_offset("+15:00").has_value());
  // 2026-02-05 20:30 UTC is already Feb 6 in +08:00 but still Feb 5 in -05:00.
  const auto instant = std::chrono::sys_days{std::chrono::year{2026} / 2 / 5} + 20h + 30min;
  EXPECT_EQ(local_date(instant, 480), (CivilDate{2026, 2, 6}));
  EXPECT_EQ(local_date(instant, -300), (CivilDate{2026, 2, 5}));
  EXPECT_EQ(format_timestamp(instant, 480), "2026-02-06T04:30:00+08:00");
  EXPECT_EQ(format_timestamp(instant, -330, true), "2026-02-05T15:00:00.000-05:30");
}

// --- create / update rules ----------------------------------------------------------------

TEST(ToolSimRules, TouchingRangesDoNotConflictOverlappingDo) {
  ToolService service(fixed_options());
  create_event(service, "u1", "2026-02-08", "14:00", "15:00", "团队会议");
  create_event(service, "u1", "2026-02-08", "15:00", "16:00", "复盘");  // touches: fine
  create_event(service, "u1", "2026-02-08", "13:00", "14:00", "午餐");  // touches: fine

  Reply overlap = call(service, "u1", "create_item",
                       R"({"item_type":"event","title":"面试","date":"2026-02-08",)"
                       R"("start_time":"14:30","end_time":"15:30"})");
  EXPECT_EQ(overlap.status, 409);
  EXPECT_EQ(error_code(overlap), "conflict");
  EXPECT_NE(error_message(overlap).find("与「团队会议」(14:00-15:00)"), std::string::npos)
      << error_message(overlap);
  EXPECT_NE(error_message(overlap).find("「复盘」(15:00-16:00)"), std::string::npos);
  EXPECT_EQ(overlap.json["error"]["conflicts"].Size(), 2u);

  // Containing and contained ranges conflict too.
  EXPECT_EQ(call(service, "u1", "create_item",
                 R"({"item_type":"event","title":"x","date":"2026-02-08",)"
                 R"("start_time":"14:15","end_time":"14:45"})")
                .status,
            409);
  // Not a conflict: another date, another user, a todo, a segment.
  create_event(service, "u1", "2026-02-09", "14:30", "15:30");
  create_event(service, "u2", "2026-02-08", "14:30", "15:30");
  EXPECT_EQ(call(service, "u1", "create_item",
                 R"({"item_type":"todo","title":"准备材料","date":"2026-02-08",)"
                 R"("start_time":"14:30","end_time":"15:30"})")
                .status,
            200);
  EXPECT_EQ(call(service, "u1", "create_item",
                 R"({"item_type":"event","title":"下午茶","date":"2026-02-08",)"
                 R"("time_segment":"afternoon"})")
                .status,
            200);
}

TEST(ToolSimRules, UpdateExcludesTheItemItself) {
  ToolService service(fixed_options());
  const std::string meeting = create_event(service, "u1", "2026-02-08", "14:00", "15:00");
  const std::string review = create_event(service, "u1", "2026-02-08", "16:00", "17:00", "评审");

  Reply moved = call(service, "u1", "update_item",
                     R"({"id":")" + meeting + R"(","start_time":"14:30","end_time":"15:30"})");
  ASSERT_EQ(moved.status, 200) << moved.body;
  EXPECT_EQ(str(moved.json["item"], "start_time"), "14:30");
  EXPECT_EQ(str(moved.json["previous"], "start_time"), "14:00");

  Reply clash =
      call(service, "u1", "update_item", R"({"id":")" + meeting + R"(","end_time":"16:30"})");
  EXPECT_EQ(clash.status, 409);
  EXPECT_NE(error_message(clash).find("「评审」(16:00-17:00)"), std::string::npos);
  ASSERT_EQ(clash.json["error"]["conflicts"].Size(), 1u);
  EXPECT_EQ(str(clash.json["error"]["conflicts"][0], "id"), review);

  // Moving to another date does not conflict with the same hours.
  EXPECT_EQ(call(service, "u1", "update_item",
                 R"({"id":")" + meeting + R"(","date":"2026-02-09","end_time":"16:30"})")
                .status,
            200);
}

TEST(ToolSimRules, PerUserIsolation) {
  ToolService service(fixed_options());
  const std::string id = create_event(service, "u1", "2026-02-08", "14:00", "15:00", "私事");
  Reply todo = call(service, "u1", "create_item",
                    R"({"item_type":"todo","title":"报告","date":"2026-02-08"})");
  const std::string todo_id = str(todo.json["item"], "id");

  for (const auto& [tool, body] : std::vector<std::pair<std::string, std::string>>{
           {"update_item", R"({"id":")" + id + R"(","title":"被改了"})"},
           {"delete_item", R"({"id":")" + id + R"("})"},
           {"complete_todo", R"({"id":")" + todo_id + R"("})"}}) {
    Reply reply = call(service, "u2", tool, body);
    EXPECT_EQ(reply.status, 404) << tool;
    EXPECT_EQ(error_code(reply), "not_found") << tool;
  }
  Reply search = call(service, "u2", "search_items", "{}");
  EXPECT_EQ(search.json["count"].GetInt(), 0);
  // u1 still has both, unchanged.
  Reply mine = call(service, "u1", "search_items", R"({"keyword":"私事"})");
  ASSERT_EQ(mine.json["count"].GetInt(), 1);
  EXPECT_EQ(str(mine.json["items"][0], "title"), "私事");
  // Identity is never an argument.
  Reply smuggled = call(service, "u2", "search_items", R"({"user_id":"u1"})");
  EXPECT_EQ(smuggled.status, 422);
  EXPECT_EQ(error_path(smuggled), "/user_id");
}

TEST(ToolSimRules, DateValidation) {
  ToolService service(fixed_options());
  Reply feb30 =
      call(service, "u1", "create_item", R"({"item_type":"todo","title":"x","date":"2026-02-30"})");
  EXPECT_EQ(feb30.status, 422);
  EXPECT_EQ(error_code(feb30), "invalid_arguments");
  EXPECT_EQ(error_path(feb30), "/date");
  EXPECT_EQ(error_message(feb30), "日期不存在: 2026-02-30");

  Reply not_leap =
      call(service, "u1", "create_item", R"({"item_type":"todo","title":"x","date":"2027-02-29"})");
  EXPECT_EQ(not_leap.status, 422);
  EXPECT_EQ(error_message(not_leap), "日期不存在: 2027-02-29");
  EXPECT_EQ(
      call(service, "u1", "create_item", R"({"item_type":"todo","title":"x","date":"2028-02-29"})")
          .status,
      200);
  Reply shape =
      call(service, "u1", "create_item", R"({"item_type":"todo","title":"x","date":"明天"})");
  EXPECT_EQ(shape.status, 422);
  EXPECT_EQ(error_path(shape), "/date");
  Reply bad_time = call(service, "u1", "create_item",
                        R"({"item_type":"event","title":"x","date":"2026-02-08",)"
                        R"("start_time":"25:00","end_time":"26:00"})");
  EXPECT_EQ(bad_time.status, 422);
  EXPECT_EQ(error_path(bad_time), "/start_time");
}

TEST(ToolSimRules, ExactRangeAndSegmentAreExclusive) {
  ToolService service(fixed_options());
  Reply both = call(service, "u1", "create_item",
                    R"({"item_type":"event","title":"x","date":"2026-02-08",)"
                    R"("start_time":"14:00","end_time":"15:00","time_segment":"afternoon"})");
  EXPECT_EQ(both.status, 422);
  EXPECT_EQ(error_path(both), "/time_segment");

  Reply no_end =
      call(service, "u1", "create_item",
           R"({"item_type":"event","title":"x","date":"2026-02-08","start_time":"16:00"})");
  EXPECT_EQ(no_end.status, 422);
  EXPECT_EQ(error_path(no_end), "/end_time");
  EXPECT_NE(error_message(no_end).find("缺少结束时间"), std::string::npos);

  Reply no_start =
      call(service, "u1", "create_item",
           R"({"item_type":"event","title":"x","date":"2026-02-08","end_time":"16:00"})");
  EXPECT_EQ(no_start.status, 422);
  EXPECT_EQ(error_path(no_start), "/start_time");

  Reply backwards = call(service, "u1", "create_item",
                         R"({"item_type":"event","title":"x","date":"2026-02-08",)"
                         R"("start_time":"15:00","end_time":"15:00"})");
  EXPECT_EQ(backwards.status, 422);
  EXPECT_EQ(error_path(backwards), "/end_time");

  Reply neither = call(service, "u1", "create_item",
                       R"({"item_type":"event","title":"x","date":"2026-02-08"})");
  ASSERT_EQ(neither.status, 200);
  EXPECT_EQ(str(neither.json["item"], "time_segment"), "all_day");
  EXPECT_EQ(str(neither.json["item"], "start_time"), "<absent>");
  const std::string id = str(neither.json["item"], "id");

  // Times clear the segment, a segment clears the times.
  Reply timed = call(service, "u1", "update_item",
                     R"({"id":")" + id + R"(","start_time":"09:00","end_time":"10:00"})");
  ASSERT_EQ(timed.status, 200) << timed.body;
  EXPECT_EQ(str(timed.json["item"], "time_segment"), "<absent>");
  EXPECT_EQ(str(timed.json["item"], "end_time"), "10:00");
  Reply segmented =
      call(service, "u1", "update_item", R"({"id":")" + id + R"(","time_segment":"evening"})");
  ASSERT_EQ(segmented.status, 200);
  EXPECT_EQ(str(segmented.json["item"], "time_segment"), "evening");
  EXPECT_EQ(str(segmented.json["item"], "start_time"), "<absent>");
  // Half a range on an item that has a segment has nothing to pair with.
  Reply half = call(service, "u1", "update_item", R"({"id":")" + id + R"(","start_time":"19:00"})");
  EXPECT_EQ(half.status, 422);
  EXPECT_EQ(error_path(half), "/end_time");
  Reply mixed = call(service, "u1", "update_item",
                     R"({"id":")" + id + R"(","start_time":"19:00","time_segment":"noon"})");
  EXPECT_EQ(mixed.status, 422);
  EXPECT_EQ(error_path(mixed), "/time_segment");
}

TEST(ToolSimRules, ArgumentShape) {
  ToolService service(fixed_options());
  Reply unknown = call(service, "u1", "create_item",
                       R"({"item_type":"todo","title":"x","date":"2026-02-08","priority":"high"})");
  EXPECT_EQ(unknown.status, 422);
  EXPECT_EQ(error_code(unknown), "invalid_arguments");
  EXPECT_EQ(error_path(unknown), "/priority");

  Reply groups_extra = call(service, "u1", "get_event_groups", R"({"x":1})");
  EXPECT_EQ(groups_extra.status, 422);
  EXPECT_EQ(error_path(groups_extra), "/x");

  Reply missing = call(service, "u1", "create_item", R"({"item_type":"todo","date":"2026-02-08"})");
  EXPECT_EQ(missing.status, 422);
  EXPECT_EQ(error_path(missing), "/title");

  Reply wrong_type =
      call(service, "u1", "create_item", R"({"item_type":"todo","title":5,"date":"2026-02-08"})");
  EXPECT_EQ(wrong_type.status, 422);
  EXPECT_EQ(error_path(wrong_type), "/title");

  Reply bad_kind = call(service, "u1", "create_item",
                        R"({"item_type":"meeting","title":"x","date":"2026-02-08"})");
  EXPECT_EQ(bad_kind.status, 422);
  EXPECT_EQ(error_path(bad_kind), "/item_type");

  // null means "not given".
  EXPECT_EQ(call(service, "u1", "create_item",
                 R"({"item_type":"todo","title":"x","date":"2026-02-08","start_time":null,)"
                 R"("end_time":null,"description":null})")
                .status,
            200);

  EXPECT_EQ(call(service, "u1", "search_items", "not json").status, 422);
  EXPECT_EQ(call(service, "u1", "search_items", "[1]").status, 422);
  EXPECT_EQ(call(service, "u1", "search_items", R"({"limit":0})").status, 422);
  EXPECT_EQ(call(service, "u1", "search_items", R"({"limit":51})").status, 422);
  EXPECT_EQ(call(service, "u1", "search_items", R"({"limit":"5"})").status, 422);
  EXPECT_EQ(call(service, "u1", "search_items", "").status, 200);  // empty body is {}

  Reply group = call(service, "u1", "create_item",
                     R"({"item_type":"todo","title":"x","date":"2026-02-08","group_id":"g-nope"})");
  EXPECT_EQ(group.status, 422);
  EXPECT_EQ(error_path(group), "/group_id");
}

TEST(ToolSimRules, MissingUserAndUnknownTool) {
  ToolService service(fixed_options());
  Reply anonymous = call(service, "", "search_items", "{}");
  EXPECT_EQ(anonymous.status, 400);
  EXPECT_EQ(error_code(anonymous), "missing_user");
  Reply unknown = call(service, "u1", "drop_database", "{}");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(error_code(unknown), "unknown_tool");
  const auto doc = stats(service);
  EXPECT_EQ(doc["calls"].GetInt(), 2);
  EXPECT_EQ(doc["executed"].GetInt(), 0);
  EXPECT_EQ(doc["by_tool"]["search_items"]["errors"].GetInt(), 1);
}

TEST(ToolSimRules, CompleteTodo) {
  ToolService service(fixed_options());
  const std::string event = create_event(service, "u1", "2026-02-08", "14:00", "15:00", "团队会议");
  Reply on_event = call(service, "u1", "complete_todo", R"({"id":")" + event + R"("})");
  EXPECT_EQ(on_event.status, 422);
  EXPECT_EQ(error_path(on_event), "/id");
  EXPECT_NE(error_message(on_event).find("团队会议"), std::string::npos);

  Reply todo = call(service, "u1", "create_item",
                    R"({"item_type":"todo","title":"提交月度报告","date":"2026-02-05"})");
  ASSERT_EQ(todo.status, 200);
  EXPECT_EQ(str(todo.json["item"], "status"), "todo");
  const std::string id = str(todo.json["item"], "id");
  Reply done = call(service, "u1", "complete_todo", R"({"id":")" + id + R"("})");
  ASSERT_EQ(done.status, 200);
  EXPECT_EQ(str(done.json["item"], "status"), "done");
  Reply again = call(service, "u1", "complete_todo", R"({"id":")" + id + R"("})");
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(str(again.json["item"], "status"), "done");
  // create_item(event) + create_item(todo) + the first completion; not the second.
  EXPECT_EQ(stats(service)["side_effects"].GetInt(), 3);

  Reply event_status =
      call(service, "u1", "update_item", R"({"id":")" + event + R"(","status":"done"})");
  EXPECT_EQ(event_status.status, 422);
  EXPECT_EQ(error_path(event_status), "/status");
}

TEST(ToolSimRules, DeleteAndGroups) {
  ToolService service(fixed_options());
  const std::string id = create_event(service, "u1", "2026-02-08", "14:00", "15:00");
  Reply deleted = call(service, "u1", "delete_item", R"({"id":")" + id + R"("})");
  ASSERT_EQ(deleted.status, 200);
  EXPECT_EQ(str(deleted.json, "deleted"), id);
  EXPECT_EQ(call(service, "u1", "delete_item", R"({"id":")" + id + R"("})").status, 404);

  Reply groups = call(service, "nobody", "get_event_groups", "{}");
  ASSERT_EQ(groups.status, 200);
  ASSERT_EQ(groups.json["groups"].Size(), 2u);
  EXPECT_EQ(str(groups.json["groups"][0], "name"), "工作");
  EXPECT_EQ(str(groups.json["groups"][1], "name"), "个人");
}

// --- search -------------------------------------------------------------------------------

TEST(ToolSimSearch, OrderingAndFilters) {
  ToolService service(fixed_options());
  const auto create = [&](const std::string& body) {
    Reply reply = call(service, "u1", "create_item", body);
    EXPECT_EQ(reply.status, 200) << reply.body;
    return str(reply.json["item"], "id");
  };
  const std::string late = create(R"({"item_type":"event","title":"晚饭","date":"2026-02-08",)"
                                  R"("time_segment":"evening"})");
  const std::string review = create(R"({"item_type":"event","title":"评审","date":"2026-02-08",)"
                                    R"("start_time":"16:00","end_time":"17:00"})");
  const std::string next_day = create(
      R"({"item_type":"todo","title":"写报告","date":"2026-02-09","description":"季度总结"})");
  const std::string all_day =
      create(R"({"item_type":"todo","title":"交房租","date":"2026-02-08"})");
  const std::string morning = create(R"({"item_type":"event","title":"晨会","date":"2026-02-08",)"
                                     R"("start_time":"09:00","end_time":"09:30"})");
  const std::string before = create(R"({"item_type":"todo","title":"报销","date":"2026-02-01",)"
                                    R"("time_segment":"afternoon"})");

  Reply everything = call(service, "u1", "search_items", "{}");
  EXPECT_EQ(ids(everything),
            (std::vector<std::string>{before, all_day, morning, review, late, next_day}));
  EXPECT_EQ(everything.json["count"].GetInt(), 6);

  Reply events =
      call(service, "u1", "search_items", R"({"item_type":"event","date":"2026-02-08"})");
  EXPECT_EQ(ids(events), (std::vector<std::string>{morning, review, late}));

  Reply keyword = call(service, "u1", "search_items", R"({"keyword":"报"})");
  EXPECT_EQ(ids(keyword), (std::vector<std::string>{before, next_day}));
  Reply in_description = call(service, "u1", "search_items", R"({"keyword":"季度"})");
  EXPECT_EQ(ids(in_description), (std::vector<std::string>{next_day}));

  Reply range = call(service, "u1", "search_items",
                     R"({"date_from":"2026-02-02","date_to":"2026-02-08","item_type":"todo"})");
  EXPECT_EQ(ids(range), (std::vector<std::string>{all_day}));

  call(service, "u1", "complete_todo", R"({"id":")" + before + R"("})");
  Reply open = call(service, "u1", "search_items", R"({"status":"todo"})");
  EXPECT_EQ(ids(open), (std::vector<std::string>{all_day, next_day}));
  Reply done = call(service, "u1", "search_items", R"({"status":"done"})");
  EXPECT_EQ(ids(done), (std::vector<std::string>{before}));
  EXPECT_EQ(call(service, "u1", "search_items", R"({"status":"finished"})").status, 422);

  Reply limited = call(service, "u1", "search_items", R"({"limit":2})");
  EXPECT_EQ(ids(limited), (std::vector<std::string>{before, all_day}));
  EXPECT_EQ(limited.json["count"].GetInt(), 2);
  EXPECT_EQ(limited.json["total"].GetInt(), 6);

  EXPECT_EQ(
      call(service, "u1", "search_items", R"({"date_from":"2026-02-09","date_to":"2026-02-08"})")
          .status,
      422);
  EXPECT_EQ(call(service, "u1", "search_items", R"({"date":"2026-02-30"})").status, 422);
}

// --- idempotency --------------------------------------------------------------------------

TEST(ToolSimIdempotency, ReplayReturnsStoredResponseWithoutExecuting) {
  ToolService service(fixed_options());
  const std::string body =
      R"({"item_type":"todo","title":"买牛奶","date":"2026-02-05","time_segment":"evening"})";
  Reply first = call(service, "u1", "create_item", body, "task-1:0:0");
  Reply second = call(service, "u1", "create_item", body, "task-1:0:0");
  ASSERT_EQ(first.status, 200);
  EXPECT_FALSE(first.replayed);
  EXPECT_TRUE(second.replayed);
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.body, first.body);

  Reply items = call(service, "u1", "search_items", R"({"keyword":"买牛奶"})");
  EXPECT_EQ(items.json["count"].GetInt(), 1);

  // Same arguments serialized differently: still a plain duplicate.
  Reply reordered = call(service, "u1", "create_item",
                         R"({ "date":"2026-02-05", "time_segment":"evening", "title":"买牛奶",)"
                         R"( "item_type":"todo" })",
                         "task-1:0:0");
  EXPECT_EQ(reordered.body, first.body);
  // Different arguments under the same key: the stored response, counted as a key conflict.
  Reply changed =
      call(service, "u1", "create_item",
           R"({"item_type":"todo","title":"买面包","date":"2026-02-05"})", "task-1:0:0");
  EXPECT_EQ(changed.body, first.body);
  EXPECT_EQ(call(service, "u1", "search_items", R"({"keyword":"买面包"})").json["count"].GetInt(),
            0);

  // Keys are per user: u2's identical key executes.
  Reply other_user = call(service, "u2", "create_item", body, "task-1:0:0");
  EXPECT_FALSE(other_user.replayed);
  EXPECT_NE(str(other_user.json["item"], "id"), str(first.json["item"], "id"));

  const auto doc = stats(service);
  EXPECT_EQ(doc["calls"].GetInt(), 7);
  EXPECT_EQ(doc["executed"].GetInt(), 4);  // 2 creates + 2 searches
  EXPECT_EQ(doc["duplicates"].GetInt(), 3);
  EXPECT_EQ(doc["key_conflicts"].GetInt(), 1);
  EXPECT_EQ(doc["side_effects"].GetInt(), 2);
  EXPECT_EQ(doc["by_tool"]["create_item"]["calls"].GetInt(), 5);
  EXPECT_EQ(doc["by_tool"]["create_item"]["executed"].GetInt(), 2);
  EXPECT_EQ(doc["by_tool"]["create_item"]["duplicates"].GetInt(), 3);

  rapidjson::Document records;
  records.Parse(service.records_json(std::string("u1")).c_str());
  ASSERT_EQ(records.Size(), 3u);  // the replays are not executions
  EXPECT_EQ(str(records[0], "tool"), "create_item");
  EXPECT_EQ(str(records[0], "idempotency_key"), "task-1:0:0");
  EXPECT_EQ(str(records[0], "at"), "2026-02-05T10:00:00.000+08:00");
  EXPECT_TRUE(records[0]["side_effect"].GetBool());
  EXPECT_TRUE(records[1]["idempotency_key"].IsNull());
  records.Parse(service.records_json(std::nullopt).c_str());
  EXPECT_EQ(records.Size(), 4u);
}

TEST(ToolSimIdempotency, ErrorsAreStoredToo) {
  ToolService service(fixed_options());
  create_event(service, "u1", "2026-02-08", "14:00", "15:00");
  const std::string clash =
      R"({"item_type":"event","title":"x","date":"2026-02-08","start_time":"14:30","end_time":"15:30"})";
  Reply first = call(service, "u1", "create_item", clash, "k");
  EXPECT_EQ(first.status, 409);
  Reply replay = call(service, "u1", "create_item", clash, "k");
  EXPECT_EQ(replay.status, 409);
  EXPECT_TRUE(replay.replayed);
  EXPECT_EQ(replay.body, first.body);
}

TEST(ToolSimIdempotency, OldestKeysAreEvicted) {
  ToolServiceOptions options = fixed_options();
  options.max_keys = 2;
  ToolService service(options);
  call(service, "u1", "search_items", "{}", "a");
  call(service, "u1", "search_items", "{}", "b");
  call(service, "u1", "search_items", "{}", "c");
  EXPECT_TRUE(call(service, "u1", "search_items", "{}", "c").replayed);
  EXPECT_FALSE(call(service, "u1", "search_items", "{}", "a").replayed);
  EXPECT_EQ(stats(service)["keys_evicted"].GetInt(), 2);
}

TEST(ToolSimIdempotency, AKeyRunningElsewhereIsAnsweredInUseThenItsOutcome) {
  // The protocol of docs/tools.md: the first call reserves its key on arrival; a second
  // with the same key while it runs is told to ask again; asked again, it gets the outcome.
  ToolService service(fixed_options());
  const std::string body =
      R"({"item_type":"todo","title":"买牛奶","date":"2026-02-05","time_segment":"evening"})";
  const ToolCall first{"create_item", "u1", "t1:1:0", body, 1};
  EXPECT_FALSE(service.admit(first).has_value()) << "reserved for the first call";
  const ToolCall again{"create_item", "u1", "t1:1:0", body, 2};
  const std::optional<ToolResponse> busy = service.admit(again);
  ASSERT_TRUE(busy.has_value());
  EXPECT_EQ(busy->status, 409);
  EXPECT_NE(busy->body.find("idempotency_key_in_use"), std::string::npos);
  const ToolResponse done = service.call(first);
  EXPECT_EQ(done.status, 200);
  EXPECT_FALSE(service.admit(again).has_value()) << "stored now: call() answers it";
  const ToolResponse replay = service.call(again);
  EXPECT_TRUE(replay.replayed);
  EXPECT_EQ(replay.body, done.body);
  const auto doc = stats(service);
  EXPECT_EQ(doc["in_progress"].GetInt(), 1);
  EXPECT_EQ(doc["side_effects"].GetInt(), 1);
  // Another user's key of the same text is theirs alone.
  EXPECT_FALSE(service.admit({"create_item", "u2", "t1:1:0", body, 1}).has_value());
}

TEST(ToolSimIdempotency, AnOlderAttemptThanTheKeyHasSeenIsRefused) {
  // A worker that lost its task to a later attempt sends late: refused, whether the later
  // attempt's call is running or done, and nothing executes.
  ToolService service(fixed_options());
  const std::string body =
      R"({"item_type":"todo","title":"买牛奶","date":"2026-02-05","time_segment":"evening"})";
  EXPECT_FALSE(service.admit({"create_item", "u1", "t1:1:0", body, 3}).has_value());
  std::optional<ToolResponse> stale = service.admit({"create_item", "u1", "t1:1:0", body, 2});
  ASSERT_TRUE(stale.has_value());
  EXPECT_EQ(stale->status, 409);
  EXPECT_NE(stale->body.find("stale_attempt"), std::string::npos);
  EXPECT_EQ(service.call({"create_item", "u1", "t1:1:0", body, 3}).status, 200);
  EXPECT_EQ(service.call({"create_item", "u1", "t1:1:0", body, 1}).status, 409);
  stale = service.admit({"create_item", "u1", "t1:1:0", body, 1});
  ASSERT_TRUE(stale.has_value());
  EXPECT_NE(stale->body.find("stale_attempt"), std::string::npos);
  // The same or a later attempt gets the stored answer; a call without the header is
  // never stale.
  EXPECT_TRUE(service.call({"create_item", "u1", "t1:1:0", body, 4}).replayed);
  EXPECT_TRUE(service.call({"create_item", "u1", "t1:1:0", body, 0}).replayed);
  EXPECT_EQ(service.call({"create_item", "u1", "t1:1:0", body, 3}).status, 409)
      << "attempt 4 was seen";
  const auto doc = stats(service);
  EXPECT_EQ(doc["stale_attempts"].GetInt(), 4);
  EXPECT_EQ(doc["side_effects"].GetInt(), 1);
}

TEST(ToolSimIdempotency, AKeylessToolExecutesEveryCall) {
  // As a service without idempotency support: a call sent twice acts twice, and /records
  // shows its key twice (what the chaos checker looks for).
  ToolServiceOptions options = fixed_options();
  options.keyless_tools = {"create_item"};
  ToolService service(options);
  const std::string body =
      R"({"item_type":"todo","title":"买牛奶","date":"2026-02-05","time_segment":"evening"})";
  EXPECT_FALSE(service.admit({"create_item", "u1", "k", body, 1}).has_value());
  EXPECT_FALSE(service.admit({"create_item", "u1", "k", body, 1}).has_value());
  EXPECT_FALSE(service.call({"create_item", "u1", "k", body, 1}).replayed);
  EXPECT_FALSE(service.call({"create_item", "u1", "k", body, 1}).replayed);
  EXPECT_EQ(stats(service)["side_effects"].GetInt(), 2);
  EXPECT_EQ(stats(service)["keyless_calls"].GetInt(), 2);
  rapidjson::Document records;
  records.Parse(service.records_json(std::string("u1")).c_str());
  ASSERT_EQ(records.Size(), 2u);
  EXPECT_EQ(str(records[1], "idempotency_key"), "k");
  EXPECT_TRUE(call(service, "u1", "search_items", "{}", "s").status == 200);
  EXPECT_TRUE(call(service, "u1", "search_items", "{}", "s").replayed) << "other tools keep keys";
}

// --- seed ---------------------------------------------------------------------------------

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// --- faults and envelope -----------------------------------------------------------------

TEST(ToolSimFaults, ARefusedCallHasNoSideEffectAndItsRetryExecutes) {
  ToolService service(fixed_options());
  const std::string body =
      R"({"item_type":"todo","title":"买牛奶","date":"2026-02-05","time_segment":"evening"})";
  sim::FaultSpec fault;
  fault.mode = sim::FaultMode::kHttp500;
  const ToolResponse refused = service.refuse({"create_item", "u1", "task-1:0:0", body}, fault);
  EXPECT_EQ(refused.status, 500);
  rapidjson::Document error;
  error.Parse(refused.body.c_str());
  EXPECT_STREQ(error["error"]["code"].GetString(), "injected_fault");
  EXPECT_EQ(call(service, "u1", "search_items", R"({"keyword":"买牛奶"})").json["count"].GetInt(),
            0);

  // No idempotency record was kept: the retry with the same key executes once.
  Reply retry = call(service, "u1", "create_item", body, "task-1:0:0");
  EXPECT_EQ(retry.status, 200);
  EXPECT_FALSE(retry.replayed);
  EXPECT_TRUE(call(service, "u1", "create_item", body, "task-1:0:0").replayed);

  fault.mode = sim::FaultMode::kHttp429;
  EXPECT_EQ(service.refuse({"search_items", "u1", "", "{}"}, fault).status, 429);
  fault.mode = sim::FaultMode::kNotJson;
  const ToolResponse not_json = service.refuse({"search_items", "u1", "", "{}"}, fault);
  EXPECT_EQ(not_json.status, 200);
  rapidjson::Document parsed;
  parsed.Parse(not_json.body.c_str());
  EXPECT_TRUE(parsed.HasParseError());
  service.note_fault(sim::FaultMode::kCloseMidResponse);

  rapidjson::Document stats;
  stats.Parse(service.stats_json().c_str());
  EXPECT_EQ(stats["injected"].GetInt(), 3);
  EXPECT_EQ(stats["side_effects"].GetInt(), 1);
  EXPECT_EQ(stats["duplicates"].GetInt(), 1);
  EXPECT_EQ(stats["faults"]["http_500"].GetInt(), 1);
  EXPECT_EQ(stats["faults"]["close_mid_response"].GetInt(), 1);
  EXPECT_EQ(stats["by_tool"]["create_item"]["injected"].GetInt(), 1);
  EXPECT_EQ(stats["by_tool"]["create_item"]["calls"].GetInt(), 3);
}

TEST(ToolSimEnvelope, DataWrapsSuccessfulResultsOnlyReplaysIncluded) {
  ToolServiceOptions options = fixed_options();
  options.envelope = Envelope::kData;
  ToolService service(options);
  const std::string body =
      R"({"item_type":"todo","title":"x","date":"2026-02-05","time_segment":"evening"})";
  Reply created = call(service, "u1", "create_item", body, "k1");
  ASSERT_EQ(created.status, 200);
  EXPECT_TRUE(created.json["data"]["item"].IsObject());
  Reply replay = call(service, "u1", "create_item", body, "k1");
  EXPECT_TRUE(replay.replayed);
  EXPECT_EQ(replay.body, created.body);
  Reply missing = call(service, "u1", "delete_item", R"({"id":"evt-999"})");
  EXPECT_EQ(missing.status, 404);
  EXPECT_TRUE(missing.json["error"].IsObject());
  EXPECT_FALSE(missing.json.HasMember("data"));

  ToolService bare(fixed_options());
  EXPECT_TRUE(call(bare, "u1", "create_item", body).json["item"].IsObject());
}

TEST(ToolSimSeed, DemoSeedLoads) {
  const std::string yaml =
      read_text(std::string(AGENTFLEET_SOURCE_DIR) + "/config/tool-sim-seed.yaml");
  ASSERT_FALSE(yaml.empty());
  ToolService service(fixed_options());
  service.reset(yaml);

  Reply u1_feb8 =
      call(service, "u1", "search_items", R"({"item_type":"event","date":"2026-02-08"})");
  ASSERT_EQ(u1_feb8.json["count"].GetInt(), 1);
  EXPECT_EQ(str(u1_feb8.json["items"][0], "title"), "团队会议");
  EXPECT_EQ(str(u1_feb8.json["items"][0], "start_time"), "14:00");
  EXPECT_EQ(str(u1_feb8.json["items"][0], "created_at"), "2026-02-05T10:00:00+08:00");

  Reply u2_feb8 =
      call(service, "u2", "search_items", R"({"item_type":"event","date":"2026-02-08"})");
  ASSERT_EQ(u2_feb8.json["count"].GetInt(), 3);
  EXPECT_EQ(str(u2_feb8.json["items"][0], "title"), "晨会");
  EXPECT_EQ(str(u2_feb8.json["items"][2], "title"), "项目评审");

  Reply report = call(service, "u1", "search_items", R"({"item_type":"todo","keyword":"报告"})");
  ASSERT_EQ(report.json["count"].GetInt(), 1);
  EXPECT_EQ(str(report.json["items"][0], "date"), "2026-02-05");  // {{today}}
  EXPECT_EQ(str(report.json["items"][0], "id"), "todo-2");        // ids follow file order

  Reply groups = call(service, "u1", "get_event_groups", "{}");
  ASSERT_EQ(groups.json["groups"].Size(), 1u);
  EXPECT_EQ(str(groups.json["groups"][0], "id"), "g-work");
  EXPECT_EQ(call(service, "u2", "get_event_groups", "{}").json["groups"].Size(), 2u);

  // Reset restores the seed and the same ids.
  call(service, "u1", "delete_item", R"({"id":"evt-1"})");
  service.reset(yaml);
  Reply restored = call(service, "u1", "search_items", R"({"date":"2026-02-08"})");
  EXPECT_EQ(str(restored.json["items"][0], "id"), "evt-1");
  EXPECT_EQ(stats(service)["calls"].GetInt(), 1);
}

TEST(ToolSimSeed, PlaceholdersFollowTheClock) {
  const Seed seed = parse_seed(
      "users:\n  a:\n    items:\n      - {item_type: todo, title: t, date: \"{{tomorrow}}\"}\n"
      "      - {item_type: todo, title: y, date: \"{{yesterday}}\", status: done}\n",
      CivilDate{2026, 2, 28});
  ASSERT_EQ(seed.users.size(), 1u);
  ASSERT_EQ(seed.users[0].items.size(), 2u);
  EXPECT_EQ(seed.users[0].items[0].fields[2].second, "2026-03-01");
  ItemStore store = build_store(seed, "now");
  const auto items = store.items("a");
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].status, TodoStatus::kDone);
}

TEST(ToolSimSeed, BadSeedNamesThePath) {
  ToolService service(fixed_options());
  const auto message = [&](const std::string& yaml) -> std::string {
    try {
      service.reset(yaml);
    } catch (const SeedError& e) {
      return e.what();
    }
    return "<no error>";
  };
  EXPECT_EQ(message("users:\n  u1:\n    items:\n"
                    "      - {item_type: event, title: a, date: \"{{year}}-02-30\"}\n"),
            "seed: /users/u1/items/0/date: 日期不存在: 2026-02-30");
  EXPECT_EQ(
      message("users:\n  u1:\n    items:\n"
              "      - {item_type: event, title: a, date: \"2026-02-08\", start_time: \"14:00\"}\n")
          .rfind("seed: /users/u1/items/0/end_time: 缺少结束时间", 0),
      0u);
  EXPECT_NE(
      message("users:\n  u1:\n    items:\n"
              "      - {item_type: event, title: a, date: \"2026-02-08\", start_time: \"14:00\", "
              "end_time: \"15:00\"}\n"
              "      - {item_type: event, title: b, date: \"2026-02-08\", start_time: \"14:30\", "
              "end_time: \"15:30\"}\n")
          .find("seed: /users/u1/items/1: 与「a」(14:00-15:00) 时间冲突"),
      std::string::npos);
  EXPECT_EQ(
      message("users:\n  u1:\n    items:\n      - {item_type: todo, title: a, date: \"{{now}}\"}\n")
          .rfind("seed: /users/u1/items/0/date: unknown placeholder", 0),
      0u);
  EXPECT_EQ(message("users:\n  u1:\n    colour: red\n").rfind("seed: /users/u1/colour", 0), 0u);
  EXPECT_EQ(message("users: [\n").rfind("seed: /: invalid YAML", 0), 0u);
  // A failed reset leaves the previous state in place.
  service.reset(
      "users:\n  u1:\n    items:\n      - {item_type: todo, title: keep, date: \"2026-02-08\"}\n");
  message("users:\n  u1:\n    items:\n      - {item_type: todo, title: a, date: x}\n");
  EXPECT_EQ(call(service, "u1", "search_items", "{}").json["count"].GetInt(), 1);
}

}  // namespace
}  // namespace agentfleet::tool_sim
