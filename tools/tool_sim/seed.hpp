#pragma once
// The tool-sim seed file: YAML naming, per user, the event groups and the items present
// at start (and after POST /admin/reset). Format (see README.md):
//
//   users:
//     u1:
//       groups: [{id: g-work, name: 工作}]        # optional; default 工作/个人
//       items:
//         - {item_type: event, title: 团队会议, date: "{{year}}-02-08",
//            start_time: "14:00", end_time: "15:00"}
//
// Item fields are create_item's arguments (plus `status` for todos), every value a scalar.
// `{{year}}`, `{{today}}`, `{{tomorrow}}` and `{{yesterday}}` are replaced from `today`, the
// caller's local date. This parser only checks the shape; the items go through create_item's
// validation in ToolService::load_seed. Pure function, safe from any thread.

#include "tools/tool_sim/item_store.hpp"
#include "tools/tool_sim/time_model.hpp"

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace agentfleet::tool_sim {

// what() is "seed: <JSON pointer>: <problem>", e.g.
// "seed: /users/u2/items/0/date: 日期不存在: 2026-02-30".
class SeedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SeedItem {
  std::string path;                                         // "/users/u1/items/0"
  std::vector<std::pair<std::string, std::string>> fields;  // in file order, placeholders done
};

struct SeedUser {
  std::string user_id;
  std::optional<std::vector<Group>> groups;
  std::vector<SeedItem> items;
};

struct Seed {
  std::vector<SeedUser> users;  // in file order, so item ids are deterministic
};

// Throws SeedError on malformed YAML, an unexpected key or shape, or an unknown placeholder.
Seed parse_seed(std::string_view yaml, const CivilDate& today);

// Replaces the placeholders in one value; throws SeedError(path) on an unknown one.
std::string expand_placeholders(std::string_view text, const CivilDate& today,
                                const std::string& path);

}  // namespace agentfleet::tool_sim
