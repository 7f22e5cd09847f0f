#pragma once
// Keeps credentials out of text that leaves the process through logs: passwords in URLs
// (`postgresql://user:PASSWORD@host/db`) and in `key=value` pairs (`password=...` in a
// libpq connection string, `sasl.password=...`, `?api_key=...`), quoted JSON members
// (`"token": "..."`), bearer tokens (`Bearer ...`), and any secret known by value (from
// the configuration) wherever it appears. Each credential becomes `[redacted]`; the rest
// of the text is kept, so a redacted message still says what went wrong.
//
// Pure functions of their arguments; thread-safe.

#include <string>
#include <string_view>
#include <vector>

namespace agentfleet {

inline constexpr std::string_view kRedacted = "[redacted]";

// `text` with every credential the patterns above recognise replaced by kRedacted.
std::string redact_credentials(std::string_view text);

// The credentials redact_credentials would replace in `text` (percent-decoded as well
// when that differs), e.g. the password of a connection URL: secrets to register by value.
std::vector<std::string> credentials_in(std::string_view text);

// `text` with every occurrence of each secret replaced by kRedacted (overlapping ones as
// one). Secrets shorter than kMinSecretChars are ignored: replacing them would shred
// ordinary text.
inline constexpr std::size_t kMinSecretChars = 4;
std::string redact_known(std::string_view text, const std::vector<std::string>& secrets);

// Both: the patterns of redact_credentials and the known secrets, in one pass.
std::string redact(std::string_view text, const std::vector<std::string>& known_secrets);

}  // namespace agentfleet
