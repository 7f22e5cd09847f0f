#include "core/domain/time_zone.hpp"

#include <algorithm>
#include <cstdio>

namespace agentfleet {

TimeZone TimeZone::fixed(std::string name, std::chrono::seconds offset) {
  TimeZone zone;
  zone.name_ = std::move(name);
  zone.initial_offset_ = static_cast<std::int32_t>(offset.count());
  return zone;
}

namespace {
std::int64_t read_be(std::string_view data, std::size_t pos, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value = (value << 8) | static_cast<unsigned char>(data[pos + static_cast<std::size_t>(i)]);
  }
  if (bytes == 4)
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(value));
  return static_cast<std::int64_t>(value);
}
}  // namespace

std::optional<TimeZone> TimeZone::from_tzif(std::string name, std::string_view data) {
  // Layout (RFC 8536): header "TZif", version, 15 reserved, six 4-byte counts, then the v1
  // body with 4-byte times; v2+ repeats header and body with 8-byte times. Use the v2 body
  // when present, since 4-byte times end in 2038.
  auto parse_block = [&](std::size_t at, int time_size, std::size_t* end, TimeZone* out) -> bool {
    if (data.size() < at + 44 || data.substr(at, 4) != "TZif")
      return false;
    const auto count = [&](int i) {
      // Counts are unsigned: read as signed, a high bit would wrap the size check below.
      return static_cast<std::size_t>(
          static_cast<std::uint32_t>(read_be(data, at + 20 + static_cast<std::size_t>(i) * 4, 4)));
    };
    const std::size_t isutcnt = count(0), isstdcnt = count(1), leapcnt = count(2),
                      timecnt = count(3), typecnt = count(4), charcnt = count(5);
    std::size_t pos = at + 44;
    const std::size_t need = timecnt * static_cast<std::size_t>(time_size) + timecnt + typecnt * 6 +
                             charcnt + leapcnt * static_cast<std::size_t>(time_size + 4) +
                             isstdcnt + isutcnt;
    if (typecnt == 0 || data.size() < pos + need)
      return false;
    const std::size_t times_at = pos;
    const std::size_t idx_at = times_at + timecnt * static_cast<std::size_t>(time_size);
    const std::size_t types_at = idx_at + timecnt;
    std::vector<std::int32_t> type_offsets(typecnt);
    for (std::size_t i = 0; i < typecnt; ++i) {
      type_offsets[i] = static_cast<std::int32_t>(read_be(data, types_at + i * 6, 4));
    }
    out->transitions_.clear();
    out->offsets_.clear();
    for (std::size_t i = 0; i < timecnt; ++i) {
      const auto type = static_cast<unsigned char>(data[idx_at + i]);
      if (type >= typecnt)
        return false;
      out->transitions_.push_back(
          read_be(data, times_at + i * static_cast<std::size_t>(time_size), time_size));
      out->offsets_.push_back(type_offsets[type]);
    }
    out->initial_offset_ = type_offsets[0];
    *end = pos + need;
    return true;
  };

  TimeZone zone;
  zone.name_ = std::move(name);
  std::size_t end = 0;
  if (!parse_block(0, 4, &end, &zone))
    return std::nullopt;
  if (data[4] >= '2') {
    TimeZone v2;
    v2.name_ = zone.name_;
    std::size_t end2 = 0;
    if (parse_block(end, 8, &end2, &v2))
      return v2;
  }
  return zone;
}

std::chrono::seconds TimeZone::offset_at(std::chrono::system_clock::time_point utc) const {
  const std::int64_t t =
      std::chrono::duration_cast<std::chrono::seconds>(utc.time_since_epoch()).count();
  auto it = std::upper_bound(transitions_.begin(), transitions_.end(), t);
  if (it == transitions_.begin())
    return std::chrono::seconds(initial_offset_);
  return std::chrono::seconds(offsets_[static_cast<std::size_t>(it - transitions_.begin() - 1)]);
}

LocalTime to_local(const TimeZone& zone, std::chrono::system_clock::time_point utc) {
  using namespace std::chrono;
  const seconds offset = zone.offset_at(utc);
  const auto local = time_point_cast<seconds>(utc) + offset;
  const auto day = floor<days>(local);
  const year_month_day ymd{day};
  const hh_mm_ss hms{local - day};
  LocalTime t{};
  t.year = static_cast<int>(ymd.year());
  t.month = static_cast<int>(static_cast<unsigned>(ymd.month()));
  t.day = static_cast<int>(static_cast<unsigned>(ymd.day()));
  t.hour = static_cast<int>(hms.hours().count());
  t.minute = static_cast<int>(hms.minutes().count());
  t.second = static_cast<int>(hms.seconds().count());
  t.weekday = static_cast<int>(weekday{day}.c_encoding());
  t.offset = offset;
  return t;
}

std::chrono::sys_seconds from_local(const TimeZone& zone, std::chrono::sys_seconds wall) {
  // The offset at the wall time read as UTC is within a day of the right one; twice settles
  // it, since offsets change at most a few times a year.
  std::chrono::sys_seconds at = wall - zone.offset_at(wall);
  at = wall - zone.offset_at(at);
  return wall - zone.offset_at(at);
}

std::string format_date(const LocalTime& t) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02d", t.year, t.month, t.day);
  return buf;
}

std::string format_clock(const LocalTime& t) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%02d:%02d", t.hour, t.minute);
  return buf;
}

std::string format_offset(std::chrono::seconds offset) {
  const long total = static_cast<long>(offset.count());
  const long minutes = (total < 0 ? -total : total) / 60;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%c%02ld:%02ld", total < 0 ? '-' : '+', minutes / 60,
                minutes % 60);
  return buf;
}

}  // namespace agentfleet
