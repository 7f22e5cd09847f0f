#pragma once
// Who is calling the API, from configuration (auth): an API key (`Authorization: Bearer
// <key>` or `X-API-Key: <key>`) matched by its SHA-256 against the configured hashes, or
// the user headers of a gateway, believed only from a request that carries one of the
// gateways' secrets (`gateway_key_header`, matched by SHA-256), or nobody checks (mode
// none). A request with two of a header that names the caller is refused. Keys never appear
// in logs or errors; only the key's configured name does.
//
// Immutable after construction; thread-safe.

#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/adapters/http/server.hpp"
#include "core/config/config.hpp"

namespace agentfleet::dispatcher {

struct Caller {
  std::string name;  // the key's name, "gateway:<user>", or "anonymous" (mode none)
  bool admin = false;
  bool any_user = false;
  std::vector<std::string> users;

  // May this caller submit, read, cancel and stream tasks of `user_id`, and read its usage?
  bool may_act_for(const std::string& user_id) const;
};

// Why a request is not authenticated (the API answers 401 with it).
struct AuthFailure {
  std::string message;
};

class Authenticator {
 public:
  explicit Authenticator(const config::AuthConfig& config);
  std::variant<Caller, AuthFailure> authenticate(const http::Request& request) const;

 private:
  const config::AuthConfig& config_;
  std::unordered_map<std::string, const config::ApiKey*> by_hash_;
  std::unordered_map<std::string, const config::ApiKey*> gateways_by_hash_;
};

// Lower-case hex SHA-256 of `text`.
std::string sha256_hex(std::string_view text);

}  // namespace agentfleet::dispatcher
