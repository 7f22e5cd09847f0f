#include "tools/tool_sim/seed.hpp"

#include "core/codec/json_schema.hpp"

#include <yaml-cpp/yaml.h>

namespace agentfleet::tool_sim {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw SeedError("seed: " + (path.empty() ? std::string("/") : path) + ": " + problem);
}

std::string scalar(const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar())
    fail(path, "expected a scalar value");
  return node.Scalar();
}

std::vector<Group> parse_groups(const YAML::Node& node, const std::string& path) {
  if (!node.IsSequence())
    fail(path, "expected a list of {id, name}");
  std::vector<Group> groups;
  for (std::size_t i = 0; i < node.size(); ++i) {
    const std::string at = path + "/" + std::to_string(i);
    const YAML::Node entry = node[i];
    if (!entry.IsMap())
      fail(at, "expected {id, name}");
    Group group;
    for (const auto& field : entry) {
      const std::string key = field.first.as<std::string>();
      if (key == "id") {
        group.id = scalar(field.second, at + "/id");
      } else if (key == "name") {
        group.name = scalar(field.second, at + "/name");
      } else {
        fail(at + "/" + codec::json_pointer_token(key), "unknown key '" + key + "'");
      }
    }
    if (group.id.empty())
      fail(at + "/id", "missing group id");
    if (group.name.empty())
      fail(at + "/name", "missing group name");
    groups.push_back(std::move(group));
  }
  return groups;
}

}  // namespace

std::string expand_placeholders(std::string_view text, const CivilDate& today,
                                const std::string& path) {
  std::string out;
  std::size_t position = 0;
  while (position < text.size()) {
    const auto open = text.find("{{", position);
    if (open == std::string_view::npos)
      break;
    const auto close = text.find("}}", open + 2);
    if (close == std::string_view::npos)
      fail(path, "unterminated placeholder in '" + std::string(text) + "'");
    out.append(text.substr(position, open - position));
    const std::string_view name = text.substr(open + 2, close - open - 2);
    if (name == "year") {
      out += std::to_string(today.year);
    } else if (name == "today") {
      out += format_date(today);
    } else if (name == "tomorrow") {
      out += format_date(add_days(today, 1));
    } else if (name == "yesterday") {
      out += format_date(add_days(today, -1));
    } else {
      fail(path, "unknown placeholder {{" + std::string(name) +
                     "}} (known: {{year}}, {{today}}, {{tomorrow}}, {{yesterday}})");
    }
    position = close + 2;
  }
  out.append(text.substr(std::min(position, text.size())));
  return out;
}

Seed parse_seed(std::string_view yaml, const CivilDate& today) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    fail("", std::string("invalid YAML: ") + e.what());
  }
  Seed seed;
  if (!root || root.IsNull())
    return seed;
  if (!root.IsMap())
    fail("", "expected a mapping with key 'users'");
  for (const auto& top : root) {
    const std::string key = top.first.as<std::string>();
    if (key != "users")
      fail("/" + codec::json_pointer_token(key), "unknown key '" + key + "'");
  }
  const YAML::Node users = root["users"];
  if (!users || users.IsNull())
    return seed;
  if (!users.IsMap())
    fail("/users", "expected a mapping of user id to {groups, items}");
  for (const auto& user_entry : users) {
    SeedUser user;
    user.user_id = user_entry.first.as<std::string>();
    const std::string user_path = "/users/" + codec::json_pointer_token(user.user_id);
    if (user.user_id.empty())
      fail(user_path, "empty user id");
    const YAML::Node body = user_entry.second;
    if (body.IsNull()) {
      seed.users.push_back(std::move(user));
      continue;
    }
    if (!body.IsMap())
      fail(user_path, "expected {groups, items}");
    for (const auto& field : body) {
      const std::string key = field.first.as<std::string>();
      const std::string path = user_path + "/" + codec::json_pointer_token(key);
      if (key == "groups") {
        user.groups = parse_groups(field.second, path);
      } else if (key == "items") {
        if (field.second.IsNull())
          continue;
        if (!field.second.IsSequence())
          fail(path, "expected a list of items");
        for (std::size_t i = 0; i < field.second.size(); ++i) {
          SeedItem item;
          item.path = path + "/" + std::to_string(i);
          const YAML::Node entry = field.second[i];
          if (!entry.IsMap())
            fail(item.path, "expected an item mapping");
          for (const auto& item_field : entry) {
            const std::string name = item_field.first.as<std::string>();
            const std::string at = item.path + "/" + codec::json_pointer_token(name);
            item.fields.emplace_back(name,
                                     expand_placeholders(scalar(item_field.second, at), today, at));
          }
          user.items.push_back(std::move(item));
        }
      } else {
        fail(path, "unknown key '" + key + "' (expected groups, items)");
      }
    }
    seed.users.push_back(std::move(user));
  }
  return seed;
}

}  // namespace agentfleet::tool_sim
