#pragma once
// A time zone as the UTC offsets it used over time, parsed from TZif data (the files under
// /usr/share/zoneinfo). Pure: parsing takes bytes; reading the file is the caller's job
// (see config::load_time_zone). Immutable after construction; safe to share.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentfleet {

class TimeZone {
 public:
  // A zone with one fixed offset (e.g. UTC, or "+08:00").
  static TimeZone fixed(std::string name, std::chrono::seconds offset);
  // Parses TZif version 1-3 data; nullopt when it is not TZif.
  static std::optional<TimeZone> from_tzif(std::string name, std::string_view data);

  const std::string& name() const { return name_; }
  std::chrono::seconds offset_at(std::chrono::system_clock::time_point utc) const;

 private:
  std::string name_;
  std::vector<std::int64_t> transitions_;  // unix seconds, ascending
  std::vector<std::int32_t> offsets_;      // offset in force from transitions_[i]
  std::int32_t initial_offset_ = 0;
};

// Local calendar time of `utc` in `zone`, for prompts and price windows.
struct LocalTime {
  int year, month, day, hour, minute, second, weekday;  // weekday 0 = Sunday
  std::chrono::seconds offset;
};
LocalTime to_local(const TimeZone& zone, std::chrono::system_clock::time_point utc);
// The instant at which the wall clock of `zone` reads `wall` (a local date and time, written
// as if it were UTC). A time the clock skips (a gap of summer time) or reads twice (the hour
// set back) resolves with the offset in force before the change.
std::chrono::sys_seconds from_local(const TimeZone& zone, std::chrono::sys_seconds wall);
// "2026-02-05 10:30 (星期四) UTC+08:00"-style text is built by the prompt; this gives
// "YYYY-MM-DD" and "HH:MM" pieces.
std::string format_date(const LocalTime& t);
std::string format_clock(const LocalTime& t);
std::string format_offset(std::chrono::seconds offset);  // "+08:00"

}  // namespace agentfleet
