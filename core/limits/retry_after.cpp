#include "core/limits/retry_after.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

namespace agentfleet::limits {

using std::chrono::milliseconds;

namespace {
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

std::optional<double> parse_non_negative(std::string_view text) {
  text = trim(text);
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      !std::isfinite(value) || value < 0)
    return std::nullopt;
  return value;
}

milliseconds capped_ms(double ms) {
  return milliseconds(
      static_cast<milliseconds::rep>(std::min(ms, static_cast<double>(kMaxRetryAfter.count()))));
}

std::optional<int> parse_digits(std::string_view s) {
  int value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || value < 0)
    return std::nullopt;
  return value;
}

std::optional<int> month_of(std::string_view name) {
  static constexpr std::array<std::string_view, 12> kMonths = {
      "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  for (std::size_t i = 0; i < kMonths.size(); ++i) {
    if (name == kMonths[i])
      return static_cast<int>(i) + 1;
  }
  return std::nullopt;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
long long days_from_civil(long long y, unsigned m, unsigned d) {
  y -= m <= 2;
  const long long era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<long long>(doe) - 719468;
}
}  // namespace

std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view text) {
  std::vector<std::string_view> tokens;
  std::size_t i = 0;
  text = trim(text);
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == ',' || text[i] == '-'))
      ++i;
    const std::size_t start = i;
    while (i < text.size() && text[i] != ' ' && text[i] != ',' && text[i] != '-')
      ++i;
    if (i > start)
      tokens.push_back(text.substr(start, i - start));
  }
  std::optional<int> day, month, year;
  std::string_view clock;
  if (tokens.size() == 5 && month_of(tokens[1])) {  // asctime: Sun Nov  6 08:49:37 1994
    month = month_of(tokens[1]);
    day = parse_digits(tokens[2]);
    clock = tokens[3];
    year = parse_digits(tokens[4]);
  } else if (tokens.size() == 6 && (tokens[5] == "GMT" || tokens[5] == "UTC")) {
    day = parse_digits(tokens[1]);
    month = month_of(tokens[2]);
    year = parse_digits(tokens[3]);
    clock = tokens[4];
    if (year && tokens[3].size() == 2)  // RFC 850's two-digit year
      *year += *year < 70 ? 2000 : 1900;
  } else {
    return std::nullopt;
  }
  if (!day || !month || !year || clock.size() != 8 || clock[2] != ':' || clock[5] != ':')
    return std::nullopt;
  auto hh = parse_digits(clock.substr(0, 2));
  auto mm = parse_digits(clock.substr(3, 2));
  auto ss = parse_digits(clock.substr(6, 2));
  if (!hh || !mm || !ss || *hh > 23 || *mm > 59 || *ss > 60 || *day < 1 || *day > 31 ||
      *year < 1970)
    return std::nullopt;
  const long long days =
      days_from_civil(*year, static_cast<unsigned>(*month), static_cast<unsigned>(*day));
  const long long seconds = days * 86400 + *hh * 3600LL + *mm * 60LL + *ss;
  return std::chrono::system_clock::time_point(std::chrono::seconds(seconds));
}

std::optional<milliseconds> parse_retry_after(std::string_view retry_after_ms,
                                              std::string_view retry_after,
                                              std::chrono::system_clock::time_point now) {
  if (auto ms = parse_non_negative(retry_after_ms))
    return capped_ms(*ms);
  if (auto s = parse_non_negative(retry_after))
    return capped_ms(*s * 1000);
  if (auto date = parse_http_date(retry_after)) {
    if (*date <= now)
      return milliseconds(0);
    const auto wait = *date - now;
    if (wait >= kMaxRetryAfter)
      return kMaxRetryAfter;
    // Rounded up: waiting a fraction less than asked would come back too early.
    return std::chrono::ceil<milliseconds>(wait);
  }
  return std::nullopt;
}

}  // namespace agentfleet::limits
