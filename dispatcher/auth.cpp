#include "dispatcher/auth.hpp"

#include <openssl/evp.h>

#include <algorithm>

namespace agentfleet::dispatcher {

std::string sha256_hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(length * 2);
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xf]);
  }
  return out;
}

bool Caller::may_act_for(const std::string& user_id) const {
  return admin || any_user || std::find(users.begin(), users.end(), user_id) != users.end();
}

Authenticator::Authenticator(const config::AuthConfig& config) : config_(config) {
  for (const config::ApiKey& key : config_.api_keys)
    by_hash_.emplace(key.sha256, &key);
  for (const config::ApiKey& key : config_.gateway_keys)
    gateways_by_hash_.emplace(key.sha256, &key);
}

std::variant<Caller, AuthFailure> Authenticator::authenticate(const http::Request& request) const {
  if (config_.mode == "none")
    return Caller{"anonymous", true, true, {}};
  if (config_.mode == "gateway") {
    // Two of a header that says who is calling would be read differently by the gateway,
    // a proxy and this server: refused, never a guess.
    for (const std::string& name :
         {config_.gateway_key_header, config_.user_header, config_.admin_header}) {
      if (request.count(name) > 1)
        return AuthFailure{"the request carries more than one " + name + " header"};
    }
    const auto secret = request[config_.gateway_key_header];
    if (secret.empty() ||
        !gateways_by_hash_.contains(sha256_hex(std::string_view(secret.data(), secret.size())))) {
      return AuthFailure{"the request did not come through the gateway (no valid " +
                         config_.gateway_key_header + ")"};
    }
    const auto user = request[config_.user_header];
    const bool admin = request[config_.admin_header] == "true";
    if (user.empty() && !admin) {
      return AuthFailure{"the gateway sent no " + config_.user_header + " header"};
    }
    Caller caller;
    caller.name = "gateway:" + std::string(user);
    caller.admin = admin;
    if (!user.empty())
      caller.users.emplace_back(user);
    return caller;
  }
  if (request.count(boost::beast::http::field::authorization) > 1 || request.count("X-API-Key") > 1)
    return AuthFailure{"the request carries more than one key"};
  std::string_view key;
  const auto authorization = request[boost::beast::http::field::authorization];
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() > kBearer.size() &&
      std::equal(kBearer.begin(), kBearer.end(), authorization.begin(), [](char a, char b) {
        return std::tolower(static_cast<unsigned char>(a)) ==
               std::tolower(static_cast<unsigned char>(b));
      })) {
    key = std::string_view(authorization.data(), authorization.size()).substr(kBearer.size());
  } else if (const auto header = request["X-API-Key"]; !header.empty()) {
    key = std::string_view(header.data(), header.size());
  }
  if (key.empty())
    return AuthFailure{"an API key is required: Authorization: Bearer <key>"};
  const auto found = by_hash_.find(sha256_hex(key));
  if (found == by_hash_.end())
    return AuthFailure{"the API key is not valid"};
  const config::ApiKey& k = *found->second;
  Caller caller;
  caller.name = k.name;
  caller.admin = k.admin;
  for (const auto& user : k.users) {
    if (user == "*")
      caller.any_user = true;
    else
      caller.users.push_back(user);
  }
  return caller;
}

}  // namespace agentfleet::dispatcher
