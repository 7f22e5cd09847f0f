#pragma once
// The calendar/todo items of every user, in memory, and the business rules of the demo
// tools: the time model (exact range XOR segment), date and time validation, the event
// conflict rule, per-user isolation (an id owned by another user is simply not found).
//
// Arguments arrive already shape-checked (types, required keys, no unknown keys: that is
// the JSON layer's job, see tool_service.hpp); their contents (dates, times, segments,
// statuses) are checked here, so the seed and the tools share one set of rules. Failures
// are values (ToolError) carrying the HTTP status, an error code, a message a model can
// read (Chinese, like the product's users) and the JSON pointer of the offending argument.
//
// Not thread-safe: the owner (ToolService) serializes access.

#include "tools/tool_sim/time_model.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace agentfleet::tool_sim {

enum class ItemType { kEvent, kTodo };
enum class TodoStatus { kTodo, kInProgress, kDone, kPostponed, kCancelled };

std::string_view item_type_name(ItemType type);
std::optional<ItemType> parse_item_type(std::string_view name);
std::string_view todo_status_name(TodoStatus status);
std::optional<TodoStatus> parse_todo_status(std::string_view name);

struct Group {
  std::string id;
  std::string name;
};

struct Item {
  std::string id;         // "evt-1", "todo-2": unique across all users
  std::uint64_t seq = 0;  // creation order, the last sort key
  ItemType type = ItemType::kEvent;
  std::string title;
  CivilDate date;
  std::optional<int> start_minute;  // set together with end_minute, exclusive with segment
  std::optional<int> end_minute;
  std::optional<TimeSegment> segment;
  std::optional<std::string> description;
  std::optional<TodoStatus> status;  // todos only
  std::optional<std::string> group_id;
  std::string created_at;
  std::string updated_at;

  // Minute the item starts at: start_time, or its segment's first minute.
  int sort_minute() const;
  bool has_range() const { return start_minute.has_value() && end_minute.has_value(); }
  // Equal in everything a user can change (ignores updated_at).
  bool same_content(const Item& other) const;
};

struct ToolError {
  int status = 422;
  std::string code;             // invalid_arguments, not_found, conflict, ...
  std::string message;          // readable by a model
  std::string path;             // JSON pointer into the arguments, "" when none
  std::vector<Item> conflicts;  // for code "conflict": the events in the way
};

template <class T>
using Outcome = std::variant<T, ToolError>;

// Contents are validated by the store; absent optionals were not given.
struct CreateArgs {
  ItemType type = ItemType::kEvent;
  std::string title;
  std::string date;
  std::optional<std::string> start_time;
  std::optional<std::string> end_time;
  std::optional<std::string> time_segment;
  std::optional<std::string> description;
  std::optional<std::string> group_id;
  std::optional<std::string> status;  // the seed may set it; create_item does not accept it
};

struct UpdateArgs {
  std::string id;
  std::optional<std::string> title;
  std::optional<std::string> date;
  std::optional<std::string> start_time;
  std::optional<std::string> end_time;
  std::optional<std::string> time_segment;
  std::optional<std::string> description;
  std::optional<std::string> status;
};

struct SearchArgs {
  std::optional<ItemType> type;  // nullopt = any
  std::optional<std::string> keyword;
  std::optional<std::string> date;
  std::optional<std::string> date_from;
  std::optional<std::string> date_to;
  std::optional<std::string> status;
  std::size_t limit = 20;
};

struct SearchResult {
  std::vector<Item> items;  // at most `limit`, in display order
  std::size_t total = 0;    // matches before the limit
};

// The outcome of update_item / complete_todo.
struct Mutation {
  Item item;             // after
  Item previous;         // before
  bool changed = false;  // false: nothing differed, so nothing was written
};

class ItemStore {
 public:
  // Groups offered by get_event_groups; users without their own get kDefaultGroups.
  void set_groups(const std::string& user_id, std::vector<Group> groups);
  std::vector<Group> groups(const std::string& user_id) const;

  // `now` is the timestamp written to created_at / updated_at.
  Outcome<Item> create(const std::string& user_id, const CreateArgs& args, const std::string& now);
  Outcome<Mutation> update(const std::string& user_id, const UpdateArgs& args,
                           const std::string& now);
  Outcome<Item> remove(const std::string& user_id, const std::string& id);
  Outcome<Mutation> complete(const std::string& user_id, const std::string& id,
                             const std::string& now);
  Outcome<SearchResult> search(const std::string& user_id, const SearchArgs& args) const;

  // All of a user's items in display order (date, start minute, creation order).
  std::vector<Item> items(const std::string& user_id) const;
  std::size_t item_count() const;

 private:
  struct UserData {
    std::optional<std::vector<Group>> groups;
    std::vector<Item> items;  // creation order
  };

  Item* find(const std::string& user_id, const std::string& id);
  std::optional<ToolError> check_conflicts(const std::string& user_id, const Item& candidate) const;

  std::map<std::string, UserData> users_;
  std::uint64_t next_seq_ = 1;
};

// 工作 (g-work) and 个人 (g-personal).
const std::vector<Group>& default_groups();

}  // namespace agentfleet::tool_sim
