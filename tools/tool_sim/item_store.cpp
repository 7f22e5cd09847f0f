#include "tools/tool_sim/item_store.hpp"

#include <algorithm>
#include <array>
#include <tuple>
#include <utility>

namespace agentfleet::tool_sim {

namespace {

constexpr std::array<std::pair<TodoStatus, std::string_view>, 5> kStatuses = {{
    {TodoStatus::kTodo, "todo"},
    {TodoStatus::kInProgress, "in_progress"},
    {TodoStatus::kDone, "done"},
    {TodoStatus::kPostponed, "postponed"},
    {TodoStatus::kCancelled, "cancelled"},
}};

ToolError invalid(std::string path, std::string message) {
  return ToolError{422, "invalid_arguments", std::move(message), std::move(path), {}};
}

ToolError not_found(const std::string& id) {
  return ToolError{
      404, "not_found", "找不到 id 为「" + id + "」的事项（请先用 search_items 查询）", "/id", {}};
}

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos)
    return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

Outcome<CivilDate> validate_date(const std::string& text, const std::string& path) {
  const DateParse parsed = parse_date(text);
  if (parsed.date)
    return *parsed.date;
  if (parsed.problem == DateProblem::kNoSuchDate)
    return invalid(path, "日期不存在: " + text);
  return invalid(path, "日期格式应为 YYYY-MM-DD: " + text);
}

Outcome<int> validate_time(const std::string& text, const std::string& path) {
  if (auto minutes = parse_clock_time(text))
    return *minutes;
  return invalid(path, "时间格式应为 HH:MM（00:00-23:59）: " + text);
}

std::optional<ToolError> validate_title(const std::string& title, const std::string& path) {
  if (trim(title).empty())
    return invalid(path, "标题不能为空");
  if (title.size() > 500)
    return invalid(path, "标题过长（最多 500 字节）");
  return std::nullopt;
}

Outcome<TodoStatus> validate_status(const std::string& text, const std::string& path) {
  if (auto status = parse_todo_status(text))
    return *status;
  return invalid(path,
                 "未知状态: " + text + "，可选: todo, in_progress, done, postponed, cancelled");
}

// The time fields as given by a call; `current` is the item being updated (nullptr on create).
// Exact range and segment are exclusive; a range needs both ends and end > start; neither
// given on create means all_day.
std::optional<ToolError> apply_time(const std::optional<std::string>& start_time,
                                    const std::optional<std::string>& end_time,
                                    const std::optional<std::string>& time_segment, Item& item,
                                    bool creating) {
  if (time_segment && (start_time || end_time)) {
    return invalid("/time_segment",
                   "start_time/end_time 与 time_segment 只能二选一（具体时间段或模糊时间段）");
  }
  if (time_segment) {
    const auto segment = parse_segment(*time_segment);
    if (!segment) {
      return invalid("/time_segment",
                     "未知时间段: " + *time_segment + "，可选: " + std::string(segment_names()));
    }
    item.segment = *segment;
    item.start_minute.reset();
    item.end_minute.reset();
    return std::nullopt;
  }
  if (!start_time && !end_time) {
    if (creating)
      item.segment = TimeSegment::kAllDay;
    return std::nullopt;
  }
  std::optional<int> start = item.start_minute;
  std::optional<int> end = item.end_minute;
  if (start_time) {
    auto parsed = validate_time(*start_time, "/start_time");
    if (auto* error = std::get_if<ToolError>(&parsed))
      return std::move(*error);
    start = std::get<int>(parsed);
  }
  if (end_time) {
    auto parsed = validate_time(*end_time, "/end_time");
    if (auto* error = std::get_if<ToolError>(&parsed))
      return std::move(*error);
    end = std::get<int>(parsed);
  }
  if (!end)
    return invalid("/end_time", "缺少结束时间（start_time 需要与 end_time 一起提供）");
  if (!start)
    return invalid("/start_time", "缺少开始时间（end_time 需要与 start_time 一起提供）");
  if (*end <= *start) {
    return invalid("/end_time", "结束时间 " + format_clock_time(*end) + " 必须晚于开始时间 " +
                                    format_clock_time(*start));
  }
  item.start_minute = start;
  item.end_minute = end;
  item.segment.reset();
  return std::nullopt;
}

std::optional<ToolError> validate_group(const std::vector<Group>& groups, const std::string& id) {
  for (const auto& group : groups) {
    if (group.id == id)
      return std::nullopt;
  }
  std::string known;
  for (const auto& group : groups) {
    if (!known.empty())
      known += ", ";
    known += group.id + "(" + group.name + ")";
  }
  return invalid("/group_id", "分组不存在: " + id + "，可用分组: " + known);
}

bool display_before(const Item& a, const Item& b) {
  return std::tuple(a.date, a.sort_minute(), a.seq) < std::tuple(b.date, b.sort_minute(), b.seq);
}

}  // namespace

std::string_view item_type_name(ItemType type) {
  return type == ItemType::kEvent ? "event" : "todo";
}

std::optional<ItemType> parse_item_type(std::string_view name) {
  if (name == "event")
    return ItemType::kEvent;
  if (name == "todo")
    return ItemType::kTodo;
  return std::nullopt;
}

std::string_view todo_status_name(TodoStatus status) {
  return kStatuses[static_cast<std::size_t>(status)].second;
}

std::optional<TodoStatus> parse_todo_status(std::string_view name) {
  for (const auto& [status, text] : kStatuses) {
    if (text == name)
      return status;
  }
  return std::nullopt;
}

const std::vector<Group>& default_groups() {
  static const std::vector<Group> kDefaultGroups = {{"g-work", "工作"}, {"g-personal", "个人"}};
  return kDefaultGroups;
}

int Item::sort_minute() const {
  if (start_minute)
    return *start_minute;
  return segment_range(segment.value_or(TimeSegment::kAllDay)).first;
}

bool Item::same_content(const Item& other) const {
  return std::tie(id, type, title, date, start_minute, end_minute, segment, description, status,
                  group_id) == std::tie(other.id, other.type, other.title, other.date,
                                        other.start_minute, other.end_minute, other.segment,
                                        other.description, other.status, other.group_id);
}

void ItemStore::set_groups(const std::string& user_id, std::vector<Group> groups) {
  users_[user_id].groups = std::move(groups);
}

std::vector<Group> ItemStore::groups(const std::string& user_id) const {
  const auto it = users_.find(user_id);
  if (it == users_.end() || !it->second.groups)
    return default_groups();
  return *it->second.groups;
}

Item* ItemStore::find(const std::string& user_id, const std::string& id) {
  const auto it = users_.find(user_id);
  if (it == users_.end())
    return nullptr;
  for (auto& item : it->second.items) {
    if (item.id == id)
      return &item;
  }
  return nullptr;
}

std::optional<ToolError> ItemStore::check_conflicts(const std::string& user_id,
                                                    const Item& candidate) const {
  if (candidate.type != ItemType::kEvent || !candidate.has_range())
    return std::nullopt;
  const auto it = users_.find(user_id);
  if (it == users_.end())
    return std::nullopt;
  std::vector<Item> in_the_way;
  for (const auto& existing : it->second.items) {
    if (existing.id == candidate.id || existing.type != ItemType::kEvent || !existing.has_range() ||
        existing.date != candidate.date) {
      continue;
    }
    if (*existing.start_minute<*candidate.end_minute&& * existing.end_minute> *
        candidate.start_minute) {
      in_the_way.push_back(existing);
    }
  }
  if (in_the_way.empty())
    return std::nullopt;
  std::sort(in_the_way.begin(), in_the_way.end(), display_before);
  std::string names;
  for (const auto& existing : in_the_way) {
    if (!names.empty())
      names += "、";
    names += "「" + existing.title + "」(" + format_clock_time(*existing.start_minute) + "-" +
             format_clock_time(*existing.end_minute) + ")";
  }
  return ToolError{409, "conflict",
                   "与" + names + " 时间冲突（" + format_date(candidate.date) + " " +
                       format_clock_time(*candidate.start_minute) + "-" +
                       format_clock_time(*candidate.end_minute) + "）",
                   "", std::move(in_the_way)};
}

Outcome<Item> ItemStore::create(const std::string& user_id, const CreateArgs& args,
                                const std::string& now) {
  Item item;
  item.type = args.type;
  if (auto error = validate_title(args.title, "/title"))
    return std::move(*error);
  item.title = args.title;
  auto date = validate_date(args.date, "/date");
  if (auto* error = std::get_if<ToolError>(&date))
    return std::move(*error);
  item.date = std::get<CivilDate>(date);
  if (auto error = apply_time(args.start_time, args.end_time, args.time_segment, item, true)) {
    return std::move(*error);
  }
  item.description = args.description;
  if (args.group_id) {
    if (auto error = validate_group(groups(user_id), *args.group_id))
      return std::move(*error);
    item.group_id = args.group_id;
  }
  if (args.type == ItemType::kTodo) {
    item.status = TodoStatus::kTodo;
    if (args.status) {
      auto status = validate_status(*args.status, "/status");
      if (auto* error = std::get_if<ToolError>(&status))
        return std::move(*error);
      item.status = std::get<TodoStatus>(status);
    }
  } else if (args.status) {
    return invalid("/status", "日程没有状态，只有待办 (todo) 有状态");
  }
  if (auto error = check_conflicts(user_id, item))
    return std::move(*error);

  item.seq = next_seq_++;
  item.id =
      std::string(args.type == ItemType::kEvent ? "evt-" : "todo-") + std::to_string(item.seq);
  item.created_at = now;
  item.updated_at = now;
  users_[user_id].items.push_back(item);
  return item;
}

Outcome<Mutation> ItemStore::update(const std::string& user_id, const UpdateArgs& args,
                                    const std::string& now) {
  Item* stored = find(user_id, args.id);
  if (stored == nullptr)
    return not_found(args.id);
  Item item = *stored;
  if (args.title) {
    if (auto error = validate_title(*args.title, "/title"))
      return std::move(*error);
    item.title = *args.title;
  }
  if (args.date) {
    auto date = validate_date(*args.date, "/date");
    if (auto* error = std::get_if<ToolError>(&date))
      return std::move(*error);
    item.date = std::get<CivilDate>(date);
  }
  if (auto error = apply_time(args.start_time, args.end_time, args.time_segment, item, false)) {
    return std::move(*error);
  }
  if (args.description) {
    // An empty description clears it.
    item.description = args.description->empty() ? std::nullopt : args.description;
  }
  if (args.status) {
    if (item.type != ItemType::kTodo) {
      return invalid("/status", "「" + item.title + "」是日程，没有状态；只有待办 (todo) 有状态");
    }
    auto status = validate_status(*args.status, "/status");
    if (auto* error = std::get_if<ToolError>(&status))
      return std::move(*error);
    item.status = std::get<TodoStatus>(status);
  }
  if (auto error = check_conflicts(user_id, item))
    return std::move(*error);

  Mutation result{item, *stored, !item.same_content(*stored)};
  if (result.changed) {
    result.item.updated_at = now;
    *stored = result.item;
  }
  return result;
}

Outcome<Item> ItemStore::remove(const std::string& user_id, const std::string& id) {
  const auto it = users_.find(user_id);
  if (it == users_.end())
    return not_found(id);
  auto& items = it->second.items;
  const auto found =
      std::find_if(items.begin(), items.end(), [&](const Item& item) { return item.id == id; });
  if (found == items.end())
    return not_found(id);
  Item removed = std::move(*found);
  items.erase(found);
  return removed;
}

Outcome<Mutation> ItemStore::complete(const std::string& user_id, const std::string& id,
                                      const std::string& now) {
  Item* stored = find(user_id, id);
  if (stored == nullptr)
    return not_found(id);
  if (stored->type != ItemType::kTodo) {
    return invalid("/id", "「" + stored->title + "」是日程 (event)，不是待办，不能完成");
  }
  Mutation result{*stored, *stored, stored->status != TodoStatus::kDone};
  if (result.changed) {
    result.item.status = TodoStatus::kDone;
    result.item.updated_at = now;
    *stored = result.item;
  }
  return result;
}

Outcome<SearchResult> ItemStore::search(const std::string& user_id, const SearchArgs& args) const {
  std::optional<CivilDate> on;
  std::optional<CivilDate> from;
  std::optional<CivilDate> to;
  const std::pair<const std::optional<std::string>*, std::optional<CivilDate>*> dates[] = {
      {&args.date, &on}, {&args.date_from, &from}, {&args.date_to, &to}};
  const char* const paths[] = {"/date", "/date_from", "/date_to"};
  for (std::size_t i = 0; i < 3; ++i) {
    if (!*dates[i].first)
      continue;
    auto date = validate_date(**dates[i].first, paths[i]);
    if (auto* error = std::get_if<ToolError>(&date))
      return std::move(*error);
    *dates[i].second = std::get<CivilDate>(date);
  }
  if (from && to && *from > *to) {
    return invalid("/date_to", "date_to (" + format_date(*to) + ") 早于 date_from (" +
                                   format_date(*from) + ")");
  }
  std::optional<TodoStatus> status;
  if (args.status) {
    auto parsed = validate_status(*args.status, "/status");
    if (auto* error = std::get_if<ToolError>(&parsed))
      return std::move(*error);
    status = std::get<TodoStatus>(parsed);
  }

  SearchResult result;
  for (const auto& item : items(user_id)) {
    if (args.type && item.type != *args.type)
      continue;
    if (on && item.date != *on)
      continue;
    if (from && item.date < *from)
      continue;
    if (to && item.date > *to)
      continue;
    if (status && item.status != status)
      continue;
    if (args.keyword && !args.keyword->empty() &&
        item.title.find(*args.keyword) == std::string::npos &&
        (!item.description || item.description->find(*args.keyword) == std::string::npos)) {
      continue;
    }
    ++result.total;
    if (result.items.size() < args.limit)
      result.items.push_back(item);
  }
  return result;
}

std::vector<Item> ItemStore::items(const std::string& user_id) const {
  const auto it = users_.find(user_id);
  if (it == users_.end())
    return {};
  std::vector<Item> sorted = it->second.items;
  std::sort(sorted.begin(), sorted.end(), display_before);
  return sorted;
}

std::size_t ItemStore::item_count() const {
  std::size_t count = 0;
  for (const auto& [user, data] : users_)
    count += data.items.size();
  return count;
}

}  // namespace agentfleet::tool_sim
