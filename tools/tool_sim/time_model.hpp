#pragma once
// The calendar's time model: civil dates, "HH:MM" clock times, the seven named time
// segments, and the wall clock seen at a fixed UTC offset. Plain values and pure functions;
// nothing here reads the system clock (callers pass the instant), so everything is
// deterministic in tests and safe to call from any thread.

#include <chrono>
#include <compare>
#include <optional>
#include <string>
#include <string_view>

namespace agentfleet::tool_sim {

// A proleptic Gregorian date; only constructed through parse_date/local_date, so it exists.
struct CivilDate {
  int year = 1970;
  int month = 1;
  int day = 1;
  auto operator<=>(const CivilDate&) const = default;
};

enum class DateProblem { kBadFormat, kNoSuchDate };

// "YYYY-MM-DD" (years 1000..9999). kBadFormat when the shape is wrong, kNoSuchDate for
// e.g. 2026-02-30 or 2027-02-29.
struct DateParse {
  std::optional<CivilDate> date;
  DateProblem problem = DateProblem::kBadFormat;
};
DateParse parse_date(std::string_view text);
std::string format_date(const CivilDate& date);
CivilDate add_days(const CivilDate& date, int days);

// Minutes since midnight for "HH:MM" (00:00..23:59, two digits each); nullopt otherwise.
std::optional<int> parse_clock_time(std::string_view text);
std::string format_clock_time(int minutes);

enum class TimeSegment {
  kAllDay,
  kEarlyMorning,
  kMorning,
  kForenoon,
  kNoon,
  kAfternoon,
  kEvening,
};

// Inclusive minute ranges: all_day 00:00-23:59, early_morning 00:00-05:59, morning
// 06:00-08:59, forenoon 09:00-11:59, noon 12:00-13:59, afternoon 14:00-17:59,
// evening 18:00-23:59.
struct MinuteRange {
  int first = 0;
  int last = 0;
};
MinuteRange segment_range(TimeSegment segment);
std::optional<TimeSegment> parse_segment(std::string_view name);
std::string_view segment_name(TimeSegment segment);
std::string_view segment_label(TimeSegment segment);  // 全天, 凌晨, 早上, ...
// The segment names joined for messages: "all_day, early_morning, ...".
std::string_view segment_names();

// "+08:00", "-05:30", "+0800", "Z" -> minutes east of UTC (-14:00..+14:00); nullopt otherwise.
std::optional<int> parse_utc_offset(std::string_view text);
std::string format_utc_offset(int minutes);  // "+08:00"

// The local calendar date of `instant` at a fixed offset.
CivilDate local_date(std::chrono::system_clock::time_point instant, int utc_offset_minutes);
// "2026-02-05T10:00:00+08:00"; with_millis adds ".123" before the offset.
std::string format_timestamp(std::chrono::system_clock::time_point instant, int utc_offset_minutes,
                             bool with_millis = false);

}  // namespace agentfleet::tool_sim
