#pragma once
// How long a response asks the client to wait before trying again, read from its headers:
// `retry-after-ms` (milliseconds; OpenAI and Azure send it) wins over `Retry-After`, which
// is delay-seconds (a decimal is tolerated) or an HTTP-date. Pure functions.
//
// Thread-safety: free functions without state.

#include <chrono>
#include <optional>
#include <string_view>

namespace agentfleet::limits {

// A longer wait is past any task's deadline, and an absurd value must not overflow.
inline constexpr std::chrono::milliseconds kMaxRetryAfter = std::chrono::hours(1);

// nullopt when both headers are absent or unreadable. Capped at kMaxRetryAfter; an
// HTTP-date in the past (relative to `now`, the wall clock) is zero.
std::optional<std::chrono::milliseconds> parse_retry_after(
    std::string_view retry_after_ms, std::string_view retry_after,
    std::chrono::system_clock::time_point now);

// RFC 9110 HTTP-date: IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") and the two obsolete
// forms (RFC 850 "Sunday, 06-Nov-94 08:49:37 GMT", asctime "Sun Nov  6 08:49:37 1994").
std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view text);

}  // namespace agentfleet::limits
