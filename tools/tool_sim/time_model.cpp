#include "tools/tool_sim/time_model.hpp"

#include <array>
#include <cstdio>

namespace agentfleet::tool_sim {

namespace chrono = std::chrono;

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Digits only, no sign or spaces (std::from_chars would accept neither, but also gives
// no help with the fixed widths we want).
std::optional<int> parse_digits(std::string_view text) {
  if (text.empty())
    return std::nullopt;
  int value = 0;
  for (char c : text) {
    if (!is_digit(c))
      return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

struct SegmentInfo {
  TimeSegment segment;
  std::string_view name;
  std::string_view label;
  MinuteRange range;
};

constexpr std::array<SegmentInfo, 7> kSegments = {{
    {TimeSegment::kAllDay, "all_day", "全天", {0, 23 * 60 + 59}},
    {TimeSegment::kEarlyMorning, "early_morning", "凌晨", {0, 5 * 60 + 59}},
    {TimeSegment::kMorning, "morning", "早上", {6 * 60, 8 * 60 + 59}},
    {TimeSegment::kForenoon, "forenoon", "上午", {9 * 60, 11 * 60 + 59}},
    {TimeSegment::kNoon, "noon", "中午", {12 * 60, 13 * 60 + 59}},
    {TimeSegment::kAfternoon, "afternoon", "下午", {14 * 60, 17 * 60 + 59}},
    {TimeSegment::kEvening, "evening", "晚上", {18 * 60, 23 * 60 + 59}},
}};

const SegmentInfo& info(TimeSegment segment) {
  return kSegments[static_cast<std::size_t>(segment)];
}

CivilDate from_ymd(const chrono::year_month_day& ymd) {
  return {static_cast<int>(ymd.year()), static_cast<int>(static_cast<unsigned>(ymd.month())),
          static_cast<int>(static_cast<unsigned>(ymd.day()))};
}

chrono::year_month_day to_ymd(const CivilDate& date) {
  return chrono::year{date.year} / chrono::month{static_cast<unsigned>(date.month)} /
         chrono::day{static_cast<unsigned>(date.day)};
}

}  // namespace

DateParse parse_date(std::string_view text) {
  DateParse result;
  if (text.size() != 10 || text[4] != '-' || text[7] != '-')
    return result;
  auto year = parse_digits(text.substr(0, 4));
  auto month = parse_digits(text.substr(5, 2));
  auto day = parse_digits(text.substr(8, 2));
  if (!year || !month || !day || *year < 1000)
    return result;
  const CivilDate candidate{*year, *month, *day};
  if (!to_ymd(candidate).ok()) {
    result.problem = DateProblem::kNoSuchDate;
    return result;
  }
  result.date = candidate;
  return result;
}

std::string format_date(const CivilDate& date) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%04d-%02d-%02d", date.year, date.month, date.day);
  return buffer;
}

CivilDate add_days(const CivilDate& date, int days) {
  return from_ymd(chrono::year_month_day{chrono::sys_days{to_ymd(date)} + chrono::days{days}});
}

std::optional<int> parse_clock_time(std::string_view text) {
  if (text.size() != 5 || text[2] != ':')
    return std::nullopt;
  auto hours = parse_digits(text.substr(0, 2));
  auto minutes = parse_digits(text.substr(3, 2));
  if (!hours || !minutes || *hours > 23 || *minutes > 59)
    return std::nullopt;
  return *hours * 60 + *minutes;
}

std::string format_clock_time(int minutes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%02d:%02d", (minutes / 60) % 100, minutes % 60);
  return buffer;
}

MinuteRange segment_range(TimeSegment segment) {
  return info(segment).range;
}

std::optional<TimeSegment> parse_segment(std::string_view name) {
  for (const auto& entry : kSegments) {
    if (entry.name == name)
      return entry.segment;
  }
  return std::nullopt;
}

std::string_view segment_name(TimeSegment segment) {
  return info(segment).name;
}
std::string_view segment_label(TimeSegment segment) {
  return info(segment).label;
}

std::string_view segment_names() {
  return "all_day, early_morning, morning, forenoon, noon, afternoon, evening";
}

std::optional<int> parse_utc_offset(std::string_view text) {
  if (text == "Z" || text == "z")
    return 0;
  if (text.size() < 3 || (text[0] != '+' && text[0] != '-'))
    return std::nullopt;
  const int sign = text[0] == '-' ? -1 : 1;
  std::string_view rest = text.substr(1);
  std::optional<int> hours;
  std::optional<int> minutes = 0;
  if (rest.size() == 2) {
    hours = parse_digits(rest);
  } else if (rest.size() == 4) {
    hours = parse_digits(rest.substr(0, 2));
    minutes = parse_digits(rest.substr(2, 2));
  } else if (rest.size() == 5 && rest[2] == ':') {
    hours = parse_digits(rest.substr(0, 2));
    minutes = parse_digits(rest.substr(3, 2));
  }
  if (!hours || !minutes || *minutes > 59)
    return std::nullopt;
  const int total = *hours * 60 + *minutes;
  if (total > 14 * 60)
    return std::nullopt;
  return sign * total;
}

std::string format_utc_offset(int minutes) {
  const char sign = minutes < 0 ? '-' : '+';
  const int magnitude = minutes < 0 ? -minutes : minutes;
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%c%02d:%02d", sign, magnitude / 60, magnitude % 60);
  return buffer;
}

CivilDate local_date(chrono::system_clock::time_point instant, int utc_offset_minutes) {
  const auto local = instant + chrono::minutes{utc_offset_minutes};
  return from_ymd(chrono::year_month_day{chrono::floor<chrono::days>(local)});
}

std::string format_timestamp(chrono::system_clock::time_point instant, int utc_offset_minutes,
                             bool with_millis) {
  const auto local = instant + chrono::minutes{utc_offset_minutes};
  const auto day = chrono::floor<chrono::days>(local);
  const CivilDate date = from_ymd(chrono::year_month_day{day});
  const auto since_midnight = chrono::floor<chrono::milliseconds>(local - day).count();
  const long long seconds = since_midnight / 1000;
  char buffer[128];
  if (with_millis) {
    std::snprintf(buffer, sizeof buffer, "%sT%02lld:%02lld:%02lld.%03lld%s",
                  format_date(date).c_str(), seconds / 3600, (seconds / 60) % 60, seconds % 60,
                  static_cast<long long>(since_midnight % 1000),
                  format_utc_offset(utc_offset_minutes).c_str());
  } else {
    std::snprintf(buffer, sizeof buffer, "%sT%02lld:%02lld:%02lld%s", format_date(date).c_str(),
                  seconds / 3600, (seconds / 60) % 60, seconds % 60,
                  format_utc_offset(utc_offset_minutes).c_str());
  }
  return buffer;
}

}  // namespace agentfleet::tool_sim
