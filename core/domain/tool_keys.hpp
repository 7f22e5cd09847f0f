#pragma once
// The idempotency keys tools see (docs/tools.md). A task's call is keyed
// "<task_id>:<step>:<call index>" by the worker; a direct call (POST /v1/tools/{name}:call)
// is keyed here, in a namespace of its own and of its user, so that no two users' keys, and
// no direct call and task call, can be the same string.
//
// Pure; no I/O.

#include <string>
#include <string_view>

namespace agentfleet {

// "direct:<user>:<key>", where <user> is `user_id` with '%' written %25 and ':' written %3A:
// the user part holds no ':', so the first ':' after "direct:" ends it, and users "a:b" with
// key "c" and "a" with key "b:c" get different keys. An id without '%' or ':' is written as
// it is.
std::string direct_call_key(std::string_view user_id, std::string_view key);

}  // namespace agentfleet
