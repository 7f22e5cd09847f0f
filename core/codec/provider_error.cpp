#include "core/codec/provider_error.hpp"

#include <algorithm>
#include <array>
#include <cctype>

#include "core/codec/json_text.hpp"

namespace agentfleet::codec {

namespace {
constexpr std::size_t kMaxMessage = 300;

std::string excerpt(std::string_view text) {
  std::string out = sanitize_text(text.substr(0, std::min(text.size(), kMaxMessage)));
  if (text.size() > kMaxMessage)
    out += "...";
  return out;
}

std::string text_of(const rapidjson::Value& object, const char* name) {
  auto it = object.FindMember(name);
  if (it == object.MemberEnd())
    return {};
  if (it->value.IsString())
    return std::string(it->value.GetString(), it->value.GetStringLength());
  if (it->value.IsInt64())
    return std::to_string(it->value.GetInt64());
  return {};
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool means_no_money(const ProviderError& e) {
  static constexpr std::array<std::string_view, 7> kCodes = {"insufficient_quota",
                                                             "exceeded_current_quota_error",
                                                             "billing_hard_limit_reached",
                                                             "insufficient_balance",
                                                             "arrearage",
                                                             "1113",
                                                             "payment_required"};
  const std::string type = lower(e.type), code = lower(e.code);
  for (std::string_view k : kCodes) {
    if (type == k || code == k)
      return true;
  }
  static constexpr std::array<std::string_view, 6> kPhrases = {"insufficient balance",
                                                               "insufficient_quota",
                                                               "exceeded your current quota",
                                                               "credit balance is too low",
                                                               "account is not in good standing",
                                                               "余额不足"};
  const std::string message = lower(e.message);
  for (std::string_view k : kPhrases) {
    if (message.find(k) != std::string::npos)
      return true;
  }
  return false;
}
}  // namespace

ProviderError parse_provider_error(int http_status, std::string_view body) {
  ProviderError e;
  rapidjson::Document doc;
  if (parse_json(doc, body) && doc.IsObject()) {
    const rapidjson::Value* error = &doc;
    auto it = doc.FindMember("error");
    if (it != doc.MemberEnd() && it->value.IsObject()) {
      error = &it->value;
    } else if (it != doc.MemberEnd() && it->value.IsString()) {
      e.message = excerpt(std::string_view(it->value.GetString(), it->value.GetStringLength()));
    }
    if (e.message.empty())
      e.message = excerpt(text_of(*error, "message"));
    if (e.message.empty())
      e.message = excerpt(text_of(*error, "detail"));
    e.type = excerpt(text_of(*error, "type"));
    e.code = excerpt(text_of(*error, "code"));
  }
  if (e.message.empty())
    e.message = excerpt(body);
  // 402 Payment Required is unambiguous; otherwise only a 4xx with a money-shaped reason
  // (a 429 is usually a rate limit, sometimes an empty account).
  e.quota_exhausted =
      http_status == 402 || (http_status >= 400 && http_status < 500 && means_no_money(e));
  return e;
}

}  // namespace agentfleet::codec
