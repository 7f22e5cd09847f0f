#include "tools/tool_sim/tool_service.hpp"

#include "core/codec/json_schema.hpp"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <initializer_list>
#include <utility>

namespace agentfleet::tool_sim {

namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

constexpr std::size_t kMaxLimit = 50;
constexpr std::size_t kDefaultLimit = 20;

void put(Writer& writer, std::string_view text) {
  writer.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
}

void put_key(Writer& writer, std::string_view key) {
  writer.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
}

std::string finish(const rapidjson::StringBuffer& buffer) {
  return std::string(buffer.GetString(), buffer.GetSize());
}

void write_item(Writer& writer, const Item& item) {
  writer.StartObject();
  put_key(writer, "id");
  put(writer, item.id);
  put_key(writer, "item_type");
  put(writer, item_type_name(item.type));
  put_key(writer, "title");
  put(writer, item.title);
  put_key(writer, "date");
  put(writer, format_date(item.date));
  if (item.has_range()) {
    put_key(writer, "start_time");
    put(writer, format_clock_time(*item.start_minute));
    put_key(writer, "end_time");
    put(writer, format_clock_time(*item.end_minute));
  }
  if (item.segment) {
    put_key(writer, "time_segment");
    put(writer, segment_name(*item.segment));
  }
  if (item.description) {
    put_key(writer, "description");
    put(writer, *item.description);
  }
  if (item.status) {
    put_key(writer, "status");
    put(writer, todo_status_name(*item.status));
  }
  if (item.group_id) {
    put_key(writer, "group_id");
    put(writer, *item.group_id);
  }
  put_key(writer, "created_at");
  put(writer, item.created_at);
  put_key(writer, "updated_at");
  put(writer, item.updated_at);
  writer.EndObject();
}

void write_items(Writer& writer, const std::vector<Item>& items) {
  writer.StartArray();
  for (const auto& item : items)
    write_item(writer, item);
  writer.EndArray();
}

std::string error_body(const ToolError& error) {
  rapidjson::StringBuffer buffer;
  Writer writer(buffer);
  writer.StartObject();
  put_key(writer, "error");
  writer.StartObject();
  put_key(writer, "code");
  put(writer, error.code);
  put_key(writer, "message");
  put(writer, error.message);
  if (!error.path.empty()) {
    put_key(writer, "path");
    put(writer, error.path);
  }
  if (!error.conflicts.empty()) {
    put_key(writer, "conflicts");
    write_items(writer, error.conflicts);
  }
  writer.EndObject();
  writer.EndObject();
  return finish(buffer);
}

ToolError invalid(std::string path, std::string message) {
  return ToolError{422, "invalid_arguments", std::move(message), std::move(path), {}};
}

std::string json_pointer(std::string_view key) {
  return "/" + codec::json_pointer_token(key);
}

// Argument shape checks shared by every tool: unknown keys, types, required keys. A JSON
// null counts as "not given", because models often send null for unused optional fields.
class ArgReader {
 public:
  ArgReader(const rapidjson::Value& args, std::string_view tool,
            std::initializer_list<std::string_view> allowed)
      : args_(args), tool_(tool), allowed_(allowed) {}

  std::optional<ToolError> unknown_keys() const {
    for (auto it = args_.MemberBegin(); it != args_.MemberEnd(); ++it) {
      const std::string_view key(it->name.GetString(), it->name.GetStringLength());
      if (std::find(allowed_.begin(), allowed_.end(), key) == allowed_.end()) {
        std::string known;
        for (auto name : allowed_) {
          if (!known.empty())
            known += ", ";
          known += name;
        }
        if (known.empty())
          known = "（无参数）";
        return invalid(json_pointer(key), "未知参数: " + std::string(key) + "（" +
                                              std::string(tool_) + " 的参数: " + known + "）");
      }
    }
    return std::nullopt;
  }

  std::optional<ToolError> optional_string(const char* key, std::optional<std::string>& out) const {
    const auto it = args_.FindMember(key);
    if (it == args_.MemberEnd() || it->value.IsNull())
      return std::nullopt;
    if (!it->value.IsString())
      return invalid(json_pointer(key), std::string(key) + " 应为字符串");
    out.emplace(it->value.GetString(), it->value.GetStringLength());
    return std::nullopt;
  }

  std::optional<ToolError> required_string(const char* key, std::string& out) const {
    std::optional<std::string> value;
    if (auto error = optional_string(key, value))
      return error;
    if (!value)
      return invalid(json_pointer(key), std::string("缺少必填参数 ") + key);
    out = std::move(*value);
    return std::nullopt;
  }

  std::optional<ToolError> limit(std::size_t& out) const {
    const auto it = args_.FindMember("limit");
    if (it == args_.MemberEnd() || it->value.IsNull())
      return std::nullopt;
    const std::string message = "limit 应为 1 到 " + std::to_string(kMaxLimit) + " 之间的整数";
    if (!it->value.IsInt64())
      return invalid("/limit", message);
    const auto value = it->value.GetInt64();
    if (value < 1 || value > static_cast<std::int64_t>(kMaxLimit)) {
      return invalid("/limit", message);
    }
    out = static_cast<std::size_t>(value);
    return std::nullopt;
  }

 private:
  const rapidjson::Value& args_;
  std::string_view tool_;
  std::vector<std::string_view> allowed_;  // a copy: the braced list dies with its statement
};

Outcome<ItemType> required_item_type(const ArgReader& reader) {
  std::string text;
  if (auto error = reader.required_string("item_type", text))
    return std::move(*error);
  if (auto type = parse_item_type(text))
    return *type;
  return invalid("/item_type", "item_type 应为 event（日程）或 todo（待办）: " + text);
}

// create_item's arguments; the seed also accepts `status` (todos created as done, etc.).
Outcome<CreateArgs> parse_create_args(const rapidjson::Value& value, bool allow_status) {
  const ArgReader reader = allow_status
                               ? ArgReader(value, "create_item",
                                           {"item_type", "title", "date", "start_time", "end_time",
                                            "time_segment", "description", "group_id", "status"})
                               : ArgReader(value, "create_item",
                                           {"item_type", "title", "date", "start_time", "end_time",
                                            "time_segment", "description", "group_id"});
  if (auto error = reader.unknown_keys())
    return std::move(*error);
  CreateArgs args;
  auto type = required_item_type(reader);
  if (auto* error = std::get_if<ToolError>(&type))
    return std::move(*error);
  args.type = std::get<ItemType>(type);
  for (auto error :
       {reader.required_string("title", args.title), reader.required_string("date", args.date),
        reader.optional_string("start_time", args.start_time),
        reader.optional_string("end_time", args.end_time),
        reader.optional_string("time_segment", args.time_segment),
        reader.optional_string("description", args.description),
        reader.optional_string("group_id", args.group_id),
        reader.optional_string("status", args.status)}) {
    if (error)
      return std::move(*error);
  }
  return args;
}

// Whitespace- and key-order-insensitive form of a JSON value, so a retry that serializes
// the same arguments differently is not reported as a key conflict.
void write_canonical(Writer& writer, const rapidjson::Value& value) {
  if (value.IsObject()) {
    std::vector<const rapidjson::Value::Member*> members;
    for (auto it = value.MemberBegin(); it != value.MemberEnd(); ++it)
      members.push_back(&*it);
    std::sort(members.begin(), members.end(), [](const auto* a, const auto* b) {
      return std::string_view(a->name.GetString(), a->name.GetStringLength()) <
             std::string_view(b->name.GetString(), b->name.GetStringLength());
    });
    writer.StartObject();
    for (const auto* member : members) {
      writer.Key(member->name.GetString(), member->name.GetStringLength());
      write_canonical(writer, member->value);
    }
    writer.EndObject();
  } else if (value.IsArray()) {
    writer.StartArray();
    for (const auto& element : value.GetArray())
      write_canonical(writer, element);
    writer.EndArray();
  } else {
    value.Accept(writer);
  }
}

std::string fingerprint(std::string_view tool, std::string_view body) {
  std::string out(tool);
  out += '\n';
  rapidjson::Document doc;
  doc.Parse(body.data(), body.size());
  if (doc.HasParseError()) {
    out.append(body);
    return out;
  }
  rapidjson::StringBuffer buffer;
  Writer writer(buffer);
  write_canonical(writer, doc);
  out += finish(buffer);
  return out;
}

bool is_blank(std::string_view text) {
  return text.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

}  // namespace

ItemStore build_store(const Seed& seed, const std::string& now) {
  ItemStore store;
  for (const auto& user : seed.users) {
    if (user.groups)
      store.set_groups(user.user_id, *user.groups);
    for (const auto& item : user.items) {
      rapidjson::Document doc(rapidjson::kObjectType);
      for (const auto& [key, value] : item.fields) {
        doc.AddMember(
            rapidjson::Value(key.c_str(), static_cast<rapidjson::SizeType>(key.size()),
                             doc.GetAllocator()),
            rapidjson::Value(value.c_str(), static_cast<rapidjson::SizeType>(value.size()),
                             doc.GetAllocator()),
            doc.GetAllocator());
      }
      auto args = parse_create_args(doc, true);
      if (auto* error = std::get_if<ToolError>(&args)) {
        throw SeedError("seed: " + item.path + error->path + ": " + error->message);
      }
      auto created = store.create(user.user_id, std::get<CreateArgs>(args), now);
      if (auto* error = std::get_if<ToolError>(&created)) {
        throw SeedError("seed: " + item.path + error->path + ": " + error->message);
      }
    }
  }
  return store;
}

ToolService::ToolService(ToolServiceOptions options) : options_(std::move(options)) {
  if (!options_.clock)
    options_.clock = [] { return std::chrono::system_clock::now(); };
  for (auto name : tool_names())
    by_tool_.emplace(std::string(name), ToolCounters{});
}

const std::vector<std::string_view>& ToolService::tool_names() {
  static const std::vector<std::string_view> kNames = {"search_items",  "create_item",
                                                       "update_item",   "delete_item",
                                                       "complete_todo", "get_event_groups"};
  return kNames;
}

CivilDate ToolService::today() const {
  return local_date(options_.clock(), options_.utc_offset_minutes);
}

std::string ToolService::now_timestamp() const {
  return format_timestamp(options_.clock(), options_.utc_offset_minutes);
}

void ToolService::reset(std::string_view seed_yaml) {
  // Build the new state first so a bad seed leaves the running one intact.
  ItemStore store = build_store(parse_seed(seed_yaml, today()), now_timestamp());
  std::lock_guard lock(mutex_);
  store_ = std::move(store);
  calls_ = executed_ = duplicates_ = key_conflicts_ = side_effects_ = keys_evicted_ = 0;
  injected_ = in_progress_ = stale_attempts_ = keyless_ = 0;
  faults_.clear();
  for (auto& [name, counters] : by_tool_)
    counters = ToolCounters{};
  responses_.clear();
  key_order_.clear();
  running_.clear();
  records_.clear();
}

std::string ToolService::key_of(const ToolCall& call) const {
  if (call.idempotency_key.empty())
    return {};
  const auto& keyless = options_.keyless_tools;
  if (std::find(keyless.begin(), keyless.end(), call.tool) != keyless.end())
    return {};
  std::string key(call.user_id);
  key += '\0';
  key.append(call.idempotency_key);
  return key;
}

ToolResponse ToolService::stale(const ToolCall& call, int seen) {
  ++stale_attempts_;
  return {409,
          error_body({409,
                      "stale_attempt",
                      "attempt " + std::to_string(call.attempt) + " is older than attempt " +
                          std::to_string(seen) + " already seen with this Idempotency-Key",
                      "",
                      {}}),
          false};
}

std::optional<ToolResponse> ToolService::admit(const ToolCall& call) {
  std::lock_guard lock(mutex_);
  const std::string key = key_of(call);
  if (key.empty() || call.user_id.empty())
    return std::nullopt;
  if (auto stored = responses_.find(key); stored != responses_.end()) {
    if (call.attempt > 0 && call.attempt < stored->second.attempt) {
      ++calls_;
      return stale(call, stored->second.attempt);
    }
    return std::nullopt;  // call() answers the stored response
  }
  auto running = running_.find(key);
  if (running == running_.end()) {
    running_.emplace(key, call.attempt);
    return std::nullopt;
  }
  ++calls_;
  if (call.attempt > 0 && call.attempt < running->second)
    return stale(call, running->second);
  running->second = std::max(running->second, call.attempt);
  ++in_progress_;
  return ToolResponse{409,
                      error_body({409,
                                  "idempotency_key_in_use",
                                  "a call with this Idempotency-Key is running; ask again after "
                                  "Retry-After for its answer",
                                  "",
                                  {}}),
                      false};
}

void ToolService::release(const ToolCall& call) {
  std::lock_guard lock(mutex_);
  const std::string key = key_of(call);
  if (!key.empty())
    running_.erase(key);
}

ToolResponse ToolService::call(const ToolCall& call) {
  std::lock_guard lock(mutex_);
  ++calls_;
  const auto tool_counters = by_tool_.find(call.tool);
  const bool known = tool_counters != by_tool_.end();
  if (known)
    ++tool_counters->second.calls;

  if (call.user_id.empty()) {
    if (known)
      ++tool_counters->second.errors;
    return {400,
            error_body({400,
                        "missing_user",
                        "缺少 X-User-Id 请求头：用户身份来自任务，不能通过参数指定",
                        "",
                        {}}),
            false};
  }
  if (!known) {
    std::string names;
    for (auto name : tool_names()) {
      if (!names.empty())
        names += ", ";
      names += name;
    }
    return {404,
            error_body({404,
                        "unknown_tool",
                        "未知工具: " + std::string(call.tool) + "（可用工具: " + names + "）",
                        "",
                        {}}),
            false};
  }
  auto& counters = tool_counters->second;

  std::string key = key_of(call);
  int attempt = call.attempt;
  if (!key.empty()) {
    if (auto running = running_.find(key); running != running_.end()) {
      attempt = std::max(attempt, running->second);
      running_.erase(running);
    }
    const auto stored = responses_.find(key);
    if (stored != responses_.end()) {
      if (call.attempt > 0 && call.attempt < stored->second.attempt)
        return stale(call, stored->second.attempt);
      stored->second.attempt = std::max(stored->second.attempt, attempt);
      ++duplicates_;
      ++counters.duplicates;
      if (stored->second.fingerprint != fingerprint(call.tool, call.body))
        ++key_conflicts_;
      return enveloped({stored->second.status, stored->second.body, true});
    }
  } else if (!call.idempotency_key.empty()) {
    ++keyless_;
  }

  const std::string user_id(call.user_id);
  Executed result = execute(call.tool, user_id, call.body);
  ++executed_;
  ++counters.executed;
  if (result.status != 200)
    ++counters.errors;
  if (result.side_effect)
    ++side_effects_;

  records_.push_back(Record{user_id, std::string(call.tool),
                            call.idempotency_key.empty()
                                ? std::nullopt
                                : std::optional<std::string>(call.idempotency_key),
                            result.status, result.side_effect,
                            format_timestamp(options_.clock(), options_.utc_offset_minutes, true)});
  while (records_.size() > options_.max_records)
    records_.pop_front();

  if (!key.empty()) {
    remember(std::move(key), StoredResponse{fingerprint(call.tool, call.body), result.status,
                                            result.body, attempt});
  }
  return enveloped({result.status, std::move(result.body), false});
}

ToolResponse ToolService::enveloped(ToolResponse response) const {
  if (options_.envelope == Envelope::kData && response.status == 200) {
    response.body = "{\"data\":" + response.body + "}";
  }
  return response;
}

ToolResponse ToolService::refuse(const ToolCall& call, const sim::FaultSpec& fault) {
  std::lock_guard lock(mutex_);
  ++calls_;
  ++injected_;
  ++faults_[std::string(sim::fault_mode_name(fault.mode))];
  if (const auto counters = by_tool_.find(call.tool); counters != by_tool_.end()) {
    ++counters->second.calls;
    ++counters->second.injected;
  }
  const std::string mode(sim::fault_mode_name(fault.mode));
  switch (fault.mode) {
    case sim::FaultMode::kHttp429:
      return {429,
              error_body({429,
                          "injected_fault",
                          "tool-sim 故障注入（" + mode + "）：请求过多，请稍后重试",
                          "",
                          {}}),
              false};
    case sim::FaultMode::kHttp500:
    case sim::FaultMode::kHttp502:
    case sim::FaultMode::kHttp503: {
      const int status = fault.mode == sim::FaultMode::kHttp500   ? 500
                         : fault.mode == sim::FaultMode::kHttp502 ? 502
                                                                  : 503;
      return {status,
              error_body({status,
                          "injected_fault",
                          "tool-sim 故障注入（" + mode + "）：服务暂时不可用，请重试",
                          "",
                          {}}),
              false};
    }
    case sim::FaultMode::kNotJson:
      return {200, "<html><body>tool-sim fault not_json</body></html>", false};
    default:
      return {200, "", false};  // hang: nothing is sent
  }
}

void ToolService::note_fault(sim::FaultMode mode) {
  std::lock_guard lock(mutex_);
  ++faults_[std::string(sim::fault_mode_name(mode))];
}

void ToolService::remember(std::string key, StoredResponse response) {
  key_order_.push_back(key);
  responses_.emplace(std::move(key), std::move(response));
  while (responses_.size() > options_.max_keys && !key_order_.empty()) {
    responses_.erase(key_order_.front());
    key_order_.pop_front();
    ++keys_evicted_;
  }
}

ToolService::Executed ToolService::execute(std::string_view tool, const std::string& user_id,
                                           std::string_view body) {
  const auto fail = [](const ToolError& error) {
    return Executed{error.status, error_body(error), false};
  };

  rapidjson::Document doc;
  if (is_blank(body)) {
    doc.SetObject();
  } else {
    doc.Parse(body.data(), body.size());
    if (doc.HasParseError()) {
      return fail(invalid("", std::string("参数不是合法的 JSON（偏移 ") +
                                  std::to_string(doc.GetErrorOffset()) +
                                  "）: " + rapidjson::GetParseError_En(doc.GetParseError())));
    }
  }
  if (!doc.IsObject())
    return fail(invalid("", "参数应为 JSON 对象"));

  rapidjson::StringBuffer buffer;
  Writer writer(buffer);
  const std::string now = now_timestamp();

  if (tool == "search_items") {
    const ArgReader reader(
        doc, tool, {"item_type", "keyword", "date", "date_from", "date_to", "status", "limit"});
    if (auto error = reader.unknown_keys())
      return fail(*error);
    SearchArgs args;
    args.limit = kDefaultLimit;
    std::optional<std::string> type;
    for (auto error : {reader.optional_string("item_type", type),
                       reader.optional_string("keyword", args.keyword),
                       reader.optional_string("date", args.date),
                       reader.optional_string("date_from", args.date_from),
                       reader.optional_string("date_to", args.date_to),
                       reader.optional_string("status", args.status), reader.limit(args.limit)}) {
      if (error)
        return fail(*error);
    }
    if (type && *type != "any") {
      args.type = parse_item_type(*type);
      if (!args.type) {
        return fail(invalid("/item_type", "item_type 应为 event、todo 或 any: " + *type));
      }
    }
    auto found = store_.search(user_id, args);
    if (auto* error = std::get_if<ToolError>(&found))
      return fail(*error);
    const auto& result = std::get<SearchResult>(found);
    writer.StartObject();
    put_key(writer, "items");
    write_items(writer, result.items);
    put_key(writer, "count");
    writer.Uint64(result.items.size());
    put_key(writer, "total");
    writer.Uint64(result.total);
    writer.EndObject();
    return {200, finish(buffer), false};
  }

  if (tool == "create_item") {
    auto args = parse_create_args(doc, false);
    if (auto* error = std::get_if<ToolError>(&args))
      return fail(*error);
    auto created = store_.create(user_id, std::get<CreateArgs>(args), now);
    if (auto* error = std::get_if<ToolError>(&created))
      return fail(*error);
    writer.StartObject();
    put_key(writer, "item");
    write_item(writer, std::get<Item>(created));
    writer.EndObject();
    return {200, finish(buffer), true};
  }

  if (tool == "update_item") {
    const ArgReader reader(
        doc, tool,
        {"id", "title", "date", "start_time", "end_time", "time_segment", "description", "status"});
    if (auto error = reader.unknown_keys())
      return fail(*error);
    UpdateArgs args;
    for (auto error :
         {reader.required_string("id", args.id), reader.optional_string("title", args.title),
          reader.optional_string("date", args.date),
          reader.optional_string("start_time", args.start_time),
          reader.optional_string("end_time", args.end_time),
          reader.optional_string("time_segment", args.time_segment),
          reader.optional_string("description", args.description),
          reader.optional_string("status", args.status)}) {
      if (error)
        return fail(*error);
    }
    auto updated = store_.update(user_id, args, now);
    if (auto* error = std::get_if<ToolError>(&updated))
      return fail(*error);
    const auto& mutation = std::get<Mutation>(updated);
    writer.StartObject();
    put_key(writer, "item");
    write_item(writer, mutation.item);
    put_key(writer, "previous");
    write_item(writer, mutation.previous);
    writer.EndObject();
    return {200, finish(buffer), mutation.changed};
  }

  if (tool == "delete_item" || tool == "complete_todo") {
    const ArgReader reader(doc, tool, {"id"});
    if (auto error = reader.unknown_keys())
      return fail(*error);
    std::string id;
    if (auto error = reader.required_string("id", id))
      return fail(*error);
    writer.StartObject();
    if (tool == "delete_item") {
      auto removed = store_.remove(user_id, id);
      if (auto* error = std::get_if<ToolError>(&removed))
        return fail(*error);
      put_key(writer, "deleted");
      put(writer, id);
      writer.EndObject();
      return {200, finish(buffer), true};
    }
    auto completed = store_.complete(user_id, id, now);
    if (auto* error = std::get_if<ToolError>(&completed))
      return fail(*error);
    const auto& mutation = std::get<Mutation>(completed);
    put_key(writer, "item");
    write_item(writer, mutation.item);
    writer.EndObject();
    return {200, finish(buffer), mutation.changed};
  }

  // get_event_groups: the only tool left (unknown names never get here).
  const ArgReader reader(doc, tool, {});
  if (auto error = reader.unknown_keys())
    return fail(*error);
  writer.StartObject();
  put_key(writer, "groups");
  writer.StartArray();
  for (const auto& group : store_.groups(user_id)) {
    writer.StartObject();
    put_key(writer, "id");
    put(writer, group.id);
    put_key(writer, "name");
    put(writer, group.name);
    writer.EndObject();
  }
  writer.EndArray();
  writer.EndObject();
  return {200, finish(buffer), false};
}

std::string ToolService::stats_json() const {
  std::lock_guard lock(mutex_);
  rapidjson::StringBuffer buffer;
  Writer writer(buffer);
  writer.StartObject();
  const std::pair<std::string_view, std::uint64_t> totals[] = {{"calls", calls_},
                                                               {"executed", executed_},
                                                               {"duplicates", duplicates_},
                                                               {"key_conflicts", key_conflicts_},
                                                               {"side_effects", side_effects_},
                                                               {"keys_evicted", keys_evicted_},
                                                               {"injected", injected_},
                                                               {"in_progress", in_progress_},
                                                               {"stale_attempts", stale_attempts_},
                                                               {"keyless_calls", keyless_}};
  for (const auto& [name, value] : totals) {
    put_key(writer, name);
    writer.Uint64(value);
  }
  put_key(writer, "faults");
  writer.StartObject();
  for (const auto& [mode, count] : faults_) {
    put_key(writer, mode);
    writer.Uint64(count);
  }
  writer.EndObject();
  put_key(writer, "by_tool");
  writer.StartObject();
  for (auto name : tool_names()) {
    const auto& counters = by_tool_.find(name)->second;
    put_key(writer, name);
    writer.StartObject();
    put_key(writer, "calls");
    writer.Uint64(counters.calls);
    put_key(writer, "executed");
    writer.Uint64(counters.executed);
    put_key(writer, "duplicates");
    writer.Uint64(counters.duplicates);
    put_key(writer, "errors");
    writer.Uint64(counters.errors);
    put_key(writer, "injected");
    writer.Uint64(counters.injected);
    writer.EndObject();
  }
  writer.EndObject();
  writer.EndObject();
  return finish(buffer);
}

std::string ToolService::records_json(const std::optional<std::string>& user_id) const {
  std::lock_guard lock(mutex_);
  rapidjson::StringBuffer buffer;
  Writer writer(buffer);
  writer.StartArray();
  for (const auto& record : records_) {
    if (user_id && record.user_id != *user_id)
      continue;
    writer.StartObject();
    put_key(writer, "user_id");
    put(writer, record.user_id);
    put_key(writer, "tool");
    put(writer, record.tool);
    put_key(writer, "idempotency_key");
    if (record.idempotency_key) {
      put(writer, *record.idempotency_key);
    } else {
      writer.Null();
    }
    put_key(writer, "status");
    writer.Int(record.status);
    put_key(writer, "side_effect");
    writer.Bool(record.side_effect);
    put_key(writer, "at");
    put(writer, record.at);
    writer.EndObject();
  }
  writer.EndArray();
  return finish(buffer);
}

std::string ToolService::items_json(const std::string& user_id) const {
  std::lock_guard lock(mutex_);
  const auto items = store_.items(user_id);
  rapidjson::StringBuffer buffer;
  Writer writer(buffer);
  writer.StartObject();
  put_key(writer, "items");
  write_items(writer, items);
  put_key(writer, "count");
  writer.Uint64(items.size());
  writer.EndObject();
  return finish(buffer);
}

}  // namespace agentfleet::tool_sim
